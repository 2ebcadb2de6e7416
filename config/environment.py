"""Every environment variable Clicklab reads, declared once: name, type, default and meaning.

``read(name)`` is the one way the web app, its workers and its command-line tools read the environment: the
value is parsed by environs (typed; a malformed value stops the start naming the variable, the value and what
to write instead), an unset or empty variable gives the declared default. ``config/settings.py`` reads every
setting through it, as do ``config/runner.py`` (``make prod``), ``config/gunicorn.py`` and ``manage.py demo``.
The table of settings in docs/operations.md is generated from ``VARIABLES`` (``manage.py settings_table --write``), and
tests/config/test_environment.py checks that the table is that output, and that every variable any module reads
is declared here.

The two Django-free libraries, ``segmenters`` and ``benchmark``, are installed without the web app (pyproject),
so they cannot import this module: the variables they read are declared here too (``scope="library"``) and the
test holds their reads to these declarations.

Django, gunicorn and systemd set a few variables for themselves (``PROCESS_VARIABLES``): they are read, never
configured, and are not part of the table.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import environs
from django.core.exceptions import ImproperlyConfigured


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()

#: Types a variable may have, as docs/operations.md names them.
KINDS = ("str", "bool", "int", "float", "list", "path", "choice", "secret")


@dataclass(frozen=True)
class Variable:
    """One environment variable. ``default`` is what an unset or empty variable means (None: nothing, the
    feature is off); ``default_text`` says it in that table when the default is computed at start (a path under
    CLICKLAB_VAR_DIR, a value that depends on DEBUG). ``minimum`` bounds numbers; ``choices`` a choice."""

    name: str
    kind: str
    default: Any
    meaning: str
    group: str
    default_text: str = ""
    minimum: float | None = None
    choices: tuple[str, ...] = ()
    scope: str = "app"  # "app": read through read(); "library": read by segmenters/benchmark themselves

    def default_for_table(self) -> str:
        if self.default_text:
            return self.default_text
        if self.kind == "secret":
            return "(none)"
        if self.default is None or self.default == "" or self.default == []:
            return "(unset)"
        if isinstance(self.default, bool):
            return "`true`" if self.default else "`false`"
        if isinstance(self.default, list):
            return "`" + ",".join(self.default) + "`"
        return f"`{self.default}`"


_GiB = 1024**3

VARIABLES: tuple[Variable, ...] = (
    # --- core ---------------------------------------------------------------------------------------
    Variable(
        "DATABASE_URL",
        "str",
        "",
        "PostgreSQL, e.g. `postgres://user:pass@db:5432/clicklab`; unset: the "
        "embedded default (SQLite under `CLICKLAB_VAR_DIR`)",
        "core",
    ),
    Variable(
        "CELERY_BROKER_URL",
        "str",
        "",
        "Redis, e.g. `redis://redis:6379/0`; unset: kombu's file-system "
        "broker under `CLICKLAB_BROKER_DIR` (embedded)",
        "core",
    ),
    Variable(
        "SECRET_KEY",
        "secret",
        "",
        "at least 50 random characters; signs annotator tokens, completion "
        "codes and sessions. Required in production; embedded: generated once into "
        "`CLICKLAB_VAR_DIR/secret_key`",
        "core",
        default_text="generated (embedded)",
    ),
    Variable(
        "SECRET_KEY_FALLBACKS",
        "list",
        [],
        "comma-separated former secret keys: tokens, links and "
        "completion codes signed with them stay valid (rotation: set the new `SECRET_KEY`, move the old "
        "one here, drop it once the old links may be refused, e.g. after `ANNOTATOR_TOKEN_MAX_AGE_S` and "
        "the platforms' review period)",
        "core",
    ),
    Variable(
        "DEBUG",
        "bool",
        False,
        "Django's debug mode",
        "core",
        default_text="`true` when embedded (no `DATABASE_URL`), else `false`",
    ),
    Variable(
        "ALLOWED_HOSTS",
        "list",
        [],
        "comma-separated host names the site answers to",
        "core",
        default_text="`127.0.0.1,localhost` when embedded or `DEBUG`, else none",
    ),
    Variable(
        "CSRF_TRUSTED_ORIGINS",
        "list",
        [],
        "comma-separated origins (`https://clicks.example.org`) trusted for researcher-area form posts",
        "core",
    ),
    Variable(
        "PUBLIC_BASE_URL",
        "str",
        "http://127.0.0.1:8000",
        "the public https URL crowd platforms link to (no trailing slash)",
        "core",
    ),
    Variable(
        "LOG_FORMAT",
        "choice",
        "text",
        "`json` (one JSON object a line, for production) or `text` "
        "(readable). Every line carries its `extra` fields (`session_id`, `study_id`, ...); secrets and "
        "annotator tokens are replaced by `[redacted]` / `[token]` (`config/logging_filters.py`)",
        "core",
        choices=("json", "text"),
    ),
    Variable("LOG_LEVEL", "str", "INFO", "the level of the app's, the workers' and gunicorn's logs", "core"),
    # --- files --------------------------------------------------------------------------------------
    Variable(
        "CLICKLAB_VAR_DIR",
        "path",
        None,
        "where the embedded database, broker, secret key, media and static files live by default",
        "files",
        default_text="`var/` in the project",
    ),
    Variable(
        "CLICKLAB_SQLITE_PATH",
        "path",
        None,
        "the embedded SQLite database",
        "files",
        default_text="`CLICKLAB_VAR_DIR/clicklab.sqlite3`",
    ),
    Variable(
        "CLICKLAB_MEDIA_ROOT",
        "path",
        None,
        "uploaded and derived files (images, ground-truth masks, "
        "stimuli); served only through login-checked or session-scoped views",
        "files",
        default_text="`CLICKLAB_VAR_DIR/media`",
    ),
    Variable(
        "CLICKLAB_STATIC_ROOT",
        "path",
        None,
        "where `collectstatic` writes (served by WhiteNoise)",
        "files",
        default_text="`CLICKLAB_VAR_DIR/staticfiles`",
    ),
    Variable(
        "CLICKLAB_CHECKPOINT_DIR",
        "path",
        None,
        "segmenter checkpoint files (also read by the `segmenters` library itself)",
        "files",
        default_text="`CLICKLAB_VAR_DIR/checkpoints`",
    ),
    Variable(
        "CLICKLAB_BROKER_DIR",
        "path",
        None,
        "the file-system broker's folders (embedded)",
        "files",
        default_text="`CLICKLAB_VAR_DIR/broker`",
    ),
    # --- datasets -----------------------------------------------------------------------------------
    Variable(
        "CLICKLAB_IMPORT_ROOT",
        "path",
        None,
        "the folder whose dataset folders researchers may import "
        "from the browser (unset: archive uploads only; paths outside it are refused). Set it for the web "
        "process and the `default` workers alike",
        "datasets",
    ),
    Variable(
        "CLICKLAB_DATASET_UPLOAD_MAX_BYTES",
        "int",
        2 * _GiB,
        "largest dataset archive upload (a proxy in "
        "front needs a body limit at least this: nginx `client_max_body_size`)",
        "datasets",
        default_text="2 GiB",
        minimum=1,
    ),
    Variable(
        "CLICKLAB_DATASET_ARCHIVE_MAX_BYTES",
        "int",
        8 * _GiB,
        "largest archive once uncompressed",
        "datasets",
        default_text="8 GiB",
        minimum=1,
    ),
    Variable(
        "CLICKLAB_DATASET_ARCHIVE_MAX_MEMBERS",
        "int",
        200_000,
        "most files in an archive",
        "datasets",
        minimum=1,
    ),
    # --- security -----------------------------------------------------------------------------------
    Variable(
        "BEHIND_TLS_PROXY",
        "bool",
        False,
        "`true` when a reverse proxy terminates TLS and sets "
        "`X-Forwarded-Proto: https` (and strips it from clients): requests it forwards count as https, "
        "so `SECURE_SSL_REDIRECT` does not answer them with a redirect to themselves. Only behind such "
        "a proxy: otherwise any client could claim https",
        "security",
    ),
    Variable(
        "SECURE_SSL_REDIRECT",
        "bool",
        True,
        "production (`DEBUG` off): plain-http requests are redirected to https",
        "security",
    ),
    Variable(
        "SECURE_HSTS_SECONDS",
        "int",
        31536000,
        "production: the `Strict-Transport-Security` max-age",
        "security",
    ),
    Variable(
        "SECURE_HSTS_INCLUDE_SUBDOMAINS", "bool", True, "production: HSTS for subdomains too", "security"
    ),
    Variable("SECURE_HSTS_PRELOAD", "bool", True, "production: HSTS `preload`", "security"),
    Variable(
        "CLICKLAB_LOGIN_FAILURE_LIMIT",
        "int",
        10,
        "wrong passwords for one account from one address before the researcher and admin logins lock that "
        "pair out (django-axes); `manage.py axes_reset` lifts every lock",
        "security",
        minimum=1,
    ),
    Variable(
        "CLICKLAB_LOGIN_COOLOFF_S",
        "int",
        900,
        "how long such a lock-out lasts, seconds: the right password is refused until then",
        "security",
        minimum=1,
    ),
    # --- annotators and segmenters --------------------------------------------------------------------
    Variable(
        "ANNOTATOR_TOKEN_MAX_AGE_S",
        "int",
        7 * 24 * 3600,
        "how long an annotator's session link stays valid, seconds",
        "annotators",
    ),
    Variable(
        "CLICKLAB_SEGMENTER_CHECKPOINTS",
        "str",
        "",
        "the model, variant and checkpoint files studies may "
        "choose for next-round builds, e.g. `sam:vit_b=sam_vit_b_01ec64.pth,simpleclick:vit_base="
        "/models/cocolvis_vit_base.pth` (or a JSON object; paths relative to `CLICKLAB_CHECKPOINT_DIR`); "
        "see segmenters/README.md",
        "annotators",
    ),
    Variable(
        "CLICKLAB_NEXT_ROUND_SEGMENTERS",
        "list",
        ["embedded"],
        "the site default segmenters of next-round builds for studies that choose none (comma-separated)",
        "annotators",
    ),
    # --- crowd platforms --------------------------------------------------------------------------------
    Variable("TOLOKA_TOKEN", "secret", "", "Toloka's OAuth token (never logged)", "platforms"),
    Variable("TOLOKA_API_URL", "str", "https://toloka.dev", "Toloka's API", "platforms"),
    Variable("TOLOKA_RETRIES", "int", 3, "retries of a Toloka call (5xx, 408/429, timeouts)", "platforms"),
    Variable("TOLOKA_TIMEOUT_S", "float", 10.0, "timeout of a Toloka call", "platforms"),
    Variable(
        "TOLOKA_ENTRY_TIMEOUT_S",
        "float",
        5.0,
        "timeout of the one Toloka call the entry page makes while the worker waits",
        "platforms",
    ),
    Variable("AWS_ACCESS_KEY_ID", "secret", "", "MTurk credentials (never logged)", "platforms"),
    Variable("AWS_SECRET_ACCESS_KEY", "secret", "", "MTurk credentials (never logged)", "platforms"),
    Variable("MTURK_SANDBOX", "bool", True, "MTurk's sandbox rather than the live marketplace", "platforms"),
    Variable("MTURK_ENDPOINT_URL", "str", "", "another MTurk endpoint (a test double)", "platforms"),
    Variable("MTURK_REGION", "str", "us-east-1", "MTurk's AWS region", "platforms"),
    Variable(
        "MTURK_FRAME_ANCESTORS",
        "list",
        ["https://www.mturk.com", "https://workersandbox.mturk.com"],
        "hosts allowed to frame the MTurk entry, exit and player pages (CSP `frame-ancestors`)",
        "platforms",
    ),
    Variable(
        "MTURK_SUBMIT_ORIGINS",
        "list",
        ["https://www.mturk.com", "https://workersandbox.mturk.com"],
        "hosts the player may post MTurk's externalSubmit to",
        "platforms",
    ),
    Variable(
        "PROLIFIC_COMPLETE_URL",
        "str",
        "https://app.prolific.com/submissions/complete",
        "where a "
        "Prolific worker is sent with the completion code (Prolific needs no token: studies are set up "
        "in Prolific's own interface with the entry URL the study page gives)",
        "platforms",
    ),
    Variable(
        "PLATFORM_SYNC_INTERVAL_S",
        "float",
        60.0,
        "how often open campaigns are synchronised with their platform (beat)",
        "platforms",
    ),
    # --- background work ----------------------------------------------------------------------------
    Variable(
        "CLICKLAB_EXPIRE_SESSIONS_EVERY_S",
        "float",
        60.0,
        "how often abandoned sessions give their targets back (beat)",
        "background",
    ),
    Variable(
        "CLICKLAB_RELEASE_STALE_EVERY_S",
        "float",
        30.0,
        "how often running batches not heard from for their study's grace period give their unclicked images back (beat)",
        "background",
    ),
    Variable(
        "CLICKLAB_LEAVE_GRACE_S",
        "float",
        10.0,
        "a batch whose player said it was going away (the tab closed) and was not heard from since gives its unclicked images back this long after (at the next release run), instead of after the study's grace period; a reload is heard from sooner",
        "background",
    ),
    Variable(
        "CLICKLAB_RELEASE_ON_DEMAND",
        "bool",
        True,
        "when a worker would be told the remaining images are in other workers' batches, the batches not heard from for the study's grace period give their images back at once (unclicked ones released, abandoned ones expired) instead of at the next release run and one grace period later",
        "background",
    ),
    Variable(
        "CLICKLAB_WAIT_RECHECK_S",
        "float",
        30.0,
        "a worker told that the remaining images are being worked on: how often the page asks again by itself (at most the study's grace period plus the release interval)",
        "background",
        minimum=1,
    ),
    Variable(
        "CLICKLAB_RETURN_AFTER_S",
        "float",
        30.0,
        "a player page loaded again after this long without a sign of life is a worker coming back: the trial it showed is replayed unflagged",
        "background",
    ),
    Variable(
        "CLICKLAB_REQUEUE_VALIDATIONS_EVERY_S",
        "float",
        300.0,
        "how often validations still pending are sent again (a lost message; a duplicate is a no-op)",
        "background",
    ),
    Variable(
        "CLICKLAB_REQUEUE_BUILDS_EVERY_S", "float", 600.0, "the same for next-round builds", "background"
    ),
    Variable(
        "CLICKLAB_REQUEUE_CORRECTIVE_EVERY_S",
        "float",
        600.0,
        "the same for corrective mask updates",
        "background",
    ),
    Variable(
        "CLICKLAB_OUTBOX_RELAY_EVERY_S",
        "float",
        60.0,
        "how often task intents the broker refused are sent again",
        "background",
    ),
    Variable(
        "CLICKLAB_OUTBOX_RELAY_GRACE_S",
        "float",
        5.0,
        "intents younger than this are left to the after-commit send",
        "background",
    ),
    Variable(
        "CLICKLAB_OUTBOX_RELAY_IN_WORKER",
        "bool",
        True,
        "each Celery worker runs the relay in a thread",
        "background",
    ),
    Variable(
        "CLICKLAB_OUTBOX_KEEP_SENT_S",
        "float",
        7 * 24 * 3600.0,
        "how long sent intents are kept",
        "background",
    ),
    Variable(
        "CLICKLAB_BROKER_VISIBILITY_TIMEOUT_S",
        "int",
        3600,
        "Redis: a message unacknowledged this long "
        "(its worker died) is delivered again; must exceed the longest task",
        "background",
    ),
    Variable(
        "CLICKLAB_BROKER_POLL_S",
        "float",
        0.2,
        "file-system broker: how often a worker looks for messages",
        "background",
    ),
    Variable(
        "CLICKLAB_DB_CONNECT_WAIT_S",
        "float",
        5.0,
        "PostgreSQL: how long a new connection the server "
        "refuses for the moment (a restart) is tried again, every 100 ms, before the request gets a 503 "
        "(0 turns the wait off)",
        "background",
    ),
    # --- evaluation server ----------------------------------------------------------------------------
    Variable(
        "CLICKLAB_EVAL_RUN_TTL_S",
        "int",
        24 * 3600,
        "a run expires this long after it was created",
        "evaluation",
    ),
    Variable("CLICKLAB_EVAL_MAX_ACTIVE_RUNS", "int", 3, "unfinished, unexpired runs per user", "evaluation"),
    Variable(
        "CLICKLAB_EVAL_MAX_UPLOAD_BYTES",
        "int",
        2_500_000,
        "request body of a submission (at most Django's `DATA_UPLOAD_MAX_MEMORY_SIZE`)",
        "evaluation",
    ),
    Variable(
        "CLICKLAB_EVAL_INLINE_MAX_PIXELS",
        "int",
        4_000_000,
        "larger samples are scored by a Celery worker",
        "evaluation",
    ),
    Variable(
        "CLICKLAB_EVAL_RATE_LIMIT",
        "str",
        "6000/min",
        "requests per key (or per user without a key)",
        "evaluation",
    ),
    Variable(
        "CLICKLAB_EVAL_KEY_CACHE_S",
        "int",
        5,
        "a process remembers a valid key this long (a revocation elsewhere takes this long)",
        "evaluation",
    ),
    Variable("CLICKLAB_EVAL_MAX_CLICKS", "int", 100, "clicks per sample", "evaluation"),
    Variable(
        "CLICKLAB_EVAL_MAX_GROUPS", "int", 20, 'clicking groups of a `clicker="group"` run', "evaluation"
    ),
    Variable(
        "CLICKLAB_EVAL_GROUP_INLINE_MAX_PIXELS",
        "int",
        4_000_000,
        "clicking-group runs compute "
        "clickability maps in a Celery worker for samples larger than this (0: all)",
        "evaluation",
    ),
    # --- make prod and make demo ----------------------------------------------------------------------
    Variable("HOST_BIND", "str", "127.0.0.1", "`make prod`: the address gunicorn binds", "runner"),
    Variable("PORT", "int", 8000, "`make prod`: the port gunicorn binds", "runner"),
    Variable("WEB_CONCURRENCY", "int", 3, "`make prod`: gunicorn workers", "runner", minimum=1),
    Variable("WEB_THREADS", "int", 4, "`make prod`: threads per gunicorn worker", "runner", minimum=1),
    Variable(
        "WORKER_CONCURRENCY",
        "int",
        2,
        "`make prod`: processes of the `default` Celery worker",
        "runner",
        minimum=1,
    ),
    Variable(
        "DEMO_PASSWORD",
        "secret",
        "",
        "`make demo`: the demo researcher's password",
        "runner",
        default_text="random, printed",
    ),
    # --- the libraries (read by segmenters / benchmark themselves) ---------------------------------------
    Variable(
        "CLICKLAB_BENCHMARK_CACHE_BYTES",
        "int",
        256 * 1024 * 1024,
        "the benchmark's embedding cache budget",
        "libraries",
        default_text="256 MiB",
        scope="library",
    ),
    Variable(
        "CLICKLAB_EVAL_HOST",
        "str",
        "",
        "`benchmark publish`: the evaluation server's URL",
        "libraries",
        scope="library",
    ),
    Variable(
        "CLICKLAB_EVAL_KEY",
        "secret",
        "",
        "`benchmark publish`: your evaluation key (`ek_...`)",
        "libraries",
        scope="library",
    ),
)

#: Set by Django, gunicorn or systemd for the processes they start; read, never configured.
PROCESS_VARIABLES = {
    "DJANGO_SETTINGS_MODULE": "Django's settings module (manage.py, wsgi.py and the Celery app set it)",
    "GUNICORN_PID": "set by gunicorn in a new master during a binary upgrade",
    "LISTEN_FDS": "set by systemd when it passes listening sockets",
}

BY_NAME: dict[str, Variable] = {variable.name: variable for variable in VARIABLES}

GROUP_TITLES = {
    "core": "Core",
    "files": "Files",
    "datasets": "Dataset imports",
    "security": "Security",
    "annotators": "Annotators and segmenters",
    "platforms": "Crowd platforms",
    "background": "Background work",
    "evaluation": "Evaluation server",
    "runner": "`make prod` and `make demo`",
    "libraries": "The benchmark library",
}

_env = environs.Env()


def read(name: str, default: Any = UNSET) -> Any:
    """The declared variable ``name``, parsed to its type; ``default`` (else the declared default) when it is
    unset or empty. A name not declared in ``VARIABLES`` is a programming error (KeyError)."""
    variable = BY_NAME[name]
    fallback = variable.default if default is UNSET else default
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return fallback
    value = raw.strip()
    if variable.kind in ("str", "secret"):
        return value
    if variable.kind == "choice":
        lowered = value.lower()
        if lowered not in variable.choices:
            raise ImproperlyConfigured(
                f"environment variable {name}={lowered!r}: use {' or '.join(variable.choices)}."
            )
        return lowered
    if variable.kind == "bool":
        try:
            return _env.bool(name)
        except environs.EnvValidationError:
            raise ImproperlyConfigured(f"environment variable {name}={raw!r}: use true or false.") from None
    if variable.kind == "list":
        items: list[str] = _env.list(name)
        return [item.strip() for item in items if item.strip()]
    if variable.kind == "path":
        return _env.path(name)
    return _number(variable, raw, fallback)


def _number(variable: Variable, raw: str, fallback: Any) -> int | float:
    name = variable.name
    whole = variable.kind == "int"
    try:
        number = _env.int(name) if whole else _env.float(name)
    except environs.EnvValidationError:
        try:
            float(raw)
        except ValueError:
            what = "a whole number" if whole else "a number"
            raise ImproperlyConfigured(
                f"environment variable {name}={raw!r} is not {what}: set it to e.g. {fallback!r}, or unset it "
                f"for the default ({fallback!r})."
            ) from None
        if whole and math.isfinite(float(raw)):
            raise ImproperlyConfigured(
                f"environment variable {name}={raw!r} is not a whole number: set it to e.g. {fallback!r}."
            ) from None
        raise ImproperlyConfigured(f"environment variable {name}={raw!r} must be a finite number.") from None
    minimum = 0 if variable.minimum is None else variable.minimum
    minimum = minimum if whole else float(minimum)
    if number < minimum:
        raise ImproperlyConfigured(f"environment variable {name}={raw!r} must be at least {minimum!r}.")
    return number


def settings_table() -> str:
    """docs/operations.md's table of settings (Markdown), one row a variable, in the registry's order by group."""
    lines = []
    for group, title in GROUP_TITLES.items():
        rows = [variable for variable in VARIABLES if variable.group == group]
        if not rows:
            continue
        lines += ["", f"**{title}**", "", "| variable | type | default | meaning |", "|---|---|---|---|"]
        for variable in rows:
            kind = "secret (never logged)" if variable.kind == "secret" else variable.kind
            if variable.kind == "choice":
                kind = " / ".join(f"`{choice}`" for choice in variable.choices)
            meaning = variable.meaning.replace("|", "\\|")
            lines.append(f"| `{variable.name}` | {kind} | {variable.default_for_table()} | {meaning} |")
    return "\n".join(lines).strip() + "\n"
