"""One settings module for every environment, driven by environment variables.

Embedded default (no environment): SQLite under ``var/`` and a Celery broker on the local file system,
with a real worker process (``make demo`` starts one). Production: ``DATABASE_URL`` (PostgreSQL) and
``CELERY_BROKER_URL`` (Redis), ``SECRET_KEY``, ``ALLOWED_HOSTS``; ``DEBUG`` is off unless asked for.
Secrets are read from the environment only and never logged (see ``config.logging_filters``).
"""

from __future__ import annotations

import math
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from kombu import Queue

from config.log_format import logging_config
from tasks import names as task_names

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"environment variable {name}={value!r}: use true or false.")


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _env_number(name: str, default: float, kind: type, minimum: float | None):
    """The environment variable ``name`` as a ``kind`` (int or float) >= ``minimum``, or ``default`` when it is
    unset or empty; anything else stops the start with the variable, the value and what to write instead."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    what = "a whole number" if kind is int else "a number"
    try:
        number = kind(value)
    except ValueError:
        raise ImproperlyConfigured(
            f"environment variable {name}={value!r} is not {what}: set it to e.g. {default!r}, or unset it for "
            f"the default ({default!r})."
        ) from None
    if not math.isfinite(number):
        raise ImproperlyConfigured(f"environment variable {name}={value!r} must be a finite number.")
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"environment variable {name}={value!r} must be at least {minimum!r}.")
    return number


def env_int(name: str, default: int, *, minimum: int | None = 0) -> int:
    return _env_number(name, default, int, minimum)


def env_float(name: str, default: float, *, minimum: float | None = 0.0) -> float:
    return _env_number(name, default, float, minimum)


VAR_DIR = Path(os.environ.get("CLICKLAB_VAR_DIR", BASE_DIR / "var"))
DATABASE_URL = os.environ.get("DATABASE_URL", "")
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
EMBEDDED = not DATABASE_URL

DEBUG = env_bool("DEBUG", default=EMBEDDED)


def _secret_key() -> str:
    key = os.environ.get("SECRET_KEY", "")
    if key:
        return key
    if not EMBEDDED and not DEBUG and "pytest" not in sys.modules:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set: production (DATABASE_URL set, DEBUG off) needs a SECRET_KEY environment "
            "variable of at least 50 random characters."
        )
    # Embedded default: one random key per installation, kept under var/ (never in the repository).
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(64))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost" if DEBUG or EMBEDDED else "")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "collector",
    "annotation_ui",
    "evaluation",
    "exports",
    "drf_spectacular",  # the researcher API's OpenAPI schema
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # a request whose database connection broke (a PostgreSQL restart) runs once more when that is safe: a GET,
    # the annotator API's idempotent POSTs (config/unavailable.py). Wraps the fast path below
    "config.unavailable.DatabaseRetryMiddleware",
    # a stored click or a recorded presentation (the busiest endpoints' common case) answered without the
    # layers below and DRF; anything else continues down (annotation_ui/fast_click.py). After Security: SSL
    # redirect, host check, security headers
    "annotation_ui.fast_click.ClickFastPathMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # the annotator API's 404s (bad token, no such trial) as its JSON errors, not HTML pages
    "annotation_ui.errors.AnnotatorApiJsonErrorsMiddleware",
    # a database restart mid-request, not run again above (or failing again): 503 + Retry-After (retried by
    # the player), not a 500
    "config.unavailable.DatabaseUnavailableMiddleware",
    # Framed platforms (MTurk): their entry, exit and player pages may be framed by MTURK_FRAME_ANCESTORS
    # only; every other page keeps X-Frame-Options DENY. Listed last so it sees the response first.
    "collector.platforms.framing.FramedPlatformMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# dj_database_url's TypedDict or the literal below (whose NAME is a Path, which Django takes for SQLite)
DATABASES: dict[str, Mapping[str, Any]]
if DATABASE_URL:
    _database: dict[str, Any] = dict(
        dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
    )
    if _database["ENGINE"] == "django.db.backends.postgresql":
        # the stock backend with a health check that needs no round trip (config/postgresql/base.py)
        _database["ENGINE"] = "config.postgresql"
    DATABASES = {"default": _database}
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": Path(os.environ.get("CLICKLAB_SQLITE_PATH", VAR_DIR / "clicklab.sqlite3")),
            # IMMEDIATE transactions take the write lock at BEGIN, so concurrent writers queue instead of
            # failing with "database is locked" on lock upgrade; WAL lets readers run beside a writer.
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            "TEST": {"NAME": VAR_DIR / "test_clicklab.sqlite3"},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("ru", "Russian")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("CLICKLAB_STATIC_ROOT", VAR_DIR / "staticfiles"))
# Nothing serves MEDIA_ROOT directly (ground-truth masks live there): MEDIA_URL is the login-checked view of
# collector/researcher/media.py; annotators get stimuli through their session's views (check clicklab.E001/2).
MEDIA_URL = "/researcher/files/"
MEDIA_ROOT = Path(os.environ.get("CLICKLAB_MEDIA_ROOT", VAR_DIR / "media"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "config.static_storage.ModuleAwareStaticFilesStorage"
        )
    },
}
# Datasets are imported by ``manage.py import_dataset`` or from the researcher area's import page
# (collector.services.dataset_imports): an uploaded zip/tar archive, or a folder under CLICKLAB_IMPORT_ROOT
# (unset: no folder can be chosen; paths outside it are refused). Uploads are streamed to a temporary file
# and refused beyond DATASET_UPLOAD_MAX_BYTES; an archive beyond DATASET_ARCHIVE_MAX_BYTES once uncompressed,
# or with more than DATASET_ARCHIVE_MAX_MEMBERS members, is refused (benchmark.archives). The pixel limit
# for images is Pillow's (checked in benchmark.datasets.verify_image_file).
FILE_UPLOAD_PERMISSIONS = 0o640


def _import_root() -> Path | None:
    text = os.environ.get("CLICKLAB_IMPORT_ROOT", "").strip()
    if not text:
        return None
    root = Path(text).expanduser().resolve()
    if not root.is_dir():
        raise ImproperlyConfigured(
            f"environment variable CLICKLAB_IMPORT_ROOT={text!r} is not a folder: point it at the folder whose "
            "dataset folders researchers may import, or unset it (archive uploads only)."
        )
    return root


DATASET_IMPORT_ROOT = _import_root()
DATASET_UPLOAD_MAX_BYTES = env_int("CLICKLAB_DATASET_UPLOAD_MAX_BYTES", 2 * 1024**3, minimum=1)
DATASET_ARCHIVE_MAX_BYTES = env_int("CLICKLAB_DATASET_ARCHIVE_MAX_BYTES", 8 * 1024**3, minimum=1)
DATASET_ARCHIVE_MAX_MEMBERS = env_int("CLICKLAB_DATASET_ARCHIVE_MAX_MEMBERS", 200_000, minimum=1)

LOGIN_URL = "/admin/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # DRF's three, the JSON one turning a body nested too deep for the decoder into a 400
    "DEFAULT_PARSER_CLASSES": [
        "collector.api.parsers.ResearcherJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "config.api_errors.exception_handler",  # one error envelope (docs/architecture.md)
}

# --- security (production) ------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# annotation_ui.fast_click: stored clicks and recorded presentations answered before the other middleware and
# DRF (off: every request takes the DRF view; the answers are the same)
CLICK_FAST_PATH = env_bool("CLICK_FAST_PATH", True)
# PostgreSQL (config.postgresql): a new connection refused for the moment (a restart) is tried again for up
# to this many seconds before the request gets its 503.
DB_CONNECT_WAIT_S = env_float("CLICKLAB_DB_CONNECT_WAIT_S", 5.0)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    if env_bool("BEHIND_TLS_PROXY", False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Logs -----------------------------------------------------------------------------------------
# JSON lines with LOG_FORMAT=json (production), readable lines otherwise; both carry every extra={...}
# field (session_id, study_id, ...). The redaction filter on the one handler removes secrets and annotator
# tokens from messages, arguments, fields, tracebacks and request paths. django, django.request and
# django.server (runserver's access lines) write through it, as Celery workers (config/celery.py) and gunicorn
# (`gunicorn -c config/gunicorn.py config.wsgi`: its access and error lines) do.
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text").lower()
if LOG_FORMAT not in {"json", "text"}:
    raise ImproperlyConfigured(f"environment variable LOG_FORMAT={LOG_FORMAT!r}: use json or text.")
LOGGING = logging_config(LOG_FORMAT, level=os.environ.get("LOG_LEVEL", "INFO"))

# --- Researcher area and researcher API ----------------------------------------------------------
SPECTACULAR_SETTINGS = {
    "TITLE": "Clicklab researcher API",
    "DESCRIPTION": (
        "Set up, watch and steer click-collection studies. Authenticate with `Authorization: Token <key>` "
        "(a researcher's DRF token). Annotator endpoints are not part of this API."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/researcher/",
    "COMPONENT_SPLIT_REQUEST": True,
}
# Where the researcher area sends people who are not logged in.
RESEARCHER_LOGIN_URL = "/researcher/login/"

# --- Annotator links and segmenters ----------------------------------------------------------------
# Annotator links are signed with SECRET_KEY (salted); a token is scoped to one session.
ANNOTATOR_TOKEN_MAX_AGE_S = env_int("ANNOTATOR_TOKEN_MAX_AGE_S", 7 * 24 * 3600)
# Public base URL used in links handed to crowd platforms (no trailing slash).
PUBLIC_BASE_URL = os.environ.get("PUBLIC_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
SEGMENTER_CHECKPOINT_DIR = Path(os.environ.get("CLICKLAB_CHECKPOINT_DIR", VAR_DIR / "checkpoints"))


def _segmenter_checkpoints() -> dict:
    """The checkpoints a study may choose for its next-round builds, by key (``sam:vit_b``, ...).

    ``CLICKLAB_SEGMENTER_CHECKPOINTS``: a JSON object or comma-separated ``predictor:variant[:label]=path``
    entries, paths absolute or relative to CLICKLAB_CHECKPOINT_DIR (format: segmenters/checkpoints.py).
    """
    text = os.environ.get("CLICKLAB_SEGMENTER_CHECKPOINTS", "")
    if not text.strip():
        return {}
    from segmenters.base import SegmenterError
    from segmenters.checkpoints import parse_checkpoint_table

    try:
        return parse_checkpoint_table(text, source="CLICKLAB_SEGMENTER_CHECKPOINTS")
    except SegmenterError as error:
        raise ImproperlyConfigured(str(error)) from None


SEGMENTER_CHECKPOINTS = _segmenter_checkpoints()
# Segmenters of next-round builds for studies that choose none: "embedded", keys of SEGMENTER_CHECKPOINTS,
# predictor names or predictor:variant (official file names in the checkpoint directory).
NEXT_ROUND_SEGMENTERS = env_list("CLICKLAB_NEXT_ROUND_SEGMENTERS", "embedded")

# --- Crowd platforms ---------------------------------------------------------------------------------
# Credentials come from the environment only and are never logged (config.logging_filters).
TOLOKA_TOKEN = os.environ.get("TOLOKA_TOKEN", "")
TOLOKA_API_URL = os.environ.get("TOLOKA_API_URL", "https://toloka.dev").rstrip("/")
AWS_ACCESS_KEY_ID = os.environ.get("AWS_ACCESS_KEY_ID", "")
AWS_SECRET_ACCESS_KEY = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
MTURK_SANDBOX = env_bool("MTURK_SANDBOX", True)
MTURK_ENDPOINT_URL = os.environ.get("MTURK_ENDPOINT_URL", "")
# Toloka client: retries (5xx, 408/429, timeouts) and timeouts of every API call; the entry page makes
# one quick call (the worker waits) with its own timeout.
TOLOKA_RETRIES = env_int("TOLOKA_RETRIES", 3)
TOLOKA_TIMEOUT_S = env_float("TOLOKA_TIMEOUT_S", 10.0)
TOLOKA_ENTRY_TIMEOUT_S = env_float("TOLOKA_ENTRY_TIMEOUT_S", 5.0)
# Hosts allowed to frame the MTurk views (CSP frame-ancestors) and to receive the externalSubmit post.
MTURK_FRAME_ANCESTORS = env_list(
    "MTURK_FRAME_ANCESTORS", "https://www.mturk.com,https://workersandbox.mturk.com"
)
MTURK_SUBMIT_ORIGINS = env_list(
    "MTURK_SUBMIT_ORIGINS", "https://www.mturk.com,https://workersandbox.mturk.com"
)
MTURK_REGION = os.environ.get("MTURK_REGION", "us-east-1")
PROLIFIC_COMPLETE_URL = os.environ.get(
    "PROLIFIC_COMPLETE_URL", "https://app.prolific.com/submissions/complete"
).rstrip("/")
PLATFORM_SYNC_INTERVAL_S = env_float("PLATFORM_SYNC_INTERVAL_S", 60.0)

# --- Sessions and validation ------------------------------------------------------------------------
# Abandoned sessions give their targets back once past expires_at (study.session_timeout_s after start).
EXPIRE_SESSIONS_EVERY_S = env_float("CLICKLAB_EXPIRE_SESSIONS_EVERY_S", 60.0)
# Running batches not heard from for their study's reservation_grace_s give their unclicked images back
# (collector.services.reservations); this often the beat looks for them.
RELEASE_STALE_EVERY_S = env_float("CLICKLAB_RELEASE_STALE_EVERY_S", 30.0)
# A player page not heard from for this long before it is loaded again was left: the trial it showed without
# a click is shown afresh (not flagged replayed). Longer than the player's 20 s heartbeat interval.
RETURN_AFTER_S = env_float("CLICKLAB_RETURN_AFTER_S", 30.0)
# Safety nets for lost messages (a killed worker on a broker without acknowledgements; the file-system
# transport drops a message whose worker was killed), each sending again what is still pending (a duplicate
# is a no-op): validations of finished sessions, next-round builds of closed rounds, corrective mask updates.
REQUEUE_VALIDATIONS_EVERY_S = env_float("CLICKLAB_REQUEUE_VALIDATIONS_EVERY_S", 300.0)
REQUEUE_BUILDS_EVERY_S = env_float("CLICKLAB_REQUEUE_BUILDS_EVERY_S", 600.0)
REQUEUE_CORRECTIVE_EVERY_S = env_float("CLICKLAB_REQUEUE_CORRECTIVE_EVERY_S", 600.0)

# --- Transactional outbox -------------------------------------------------------------------------
# Tasks are written as rows in the transaction of the change (collector.models.TaskIntent) and published
# after the commit; what the broker refused is sent by the relay (beat, a thread in each worker and
# `manage.py outbox_relay`) at least every OUTBOX_RELAY_EVERY_S seconds: a finished session's validation
# goes out within that interval after the broker is back. The relay leaves intents younger than
# OUTBOX_RELAY_GRACE_S to the after-commit send.
OUTBOX_RELAY_EVERY_S = env_float("CLICKLAB_OUTBOX_RELAY_EVERY_S", 60.0)
OUTBOX_RELAY_GRACE_S = env_float("CLICKLAB_OUTBOX_RELAY_GRACE_S", 5.0)
OUTBOX_RELAY_IN_WORKER = env_bool("CLICKLAB_OUTBOX_RELAY_IN_WORKER", True)
OUTBOX_KEEP_SENT_S = env_float("CLICKLAB_OUTBOX_KEEP_SENT_S", 7 * 24 * 3600)

# --- Celery ---------------------------------------------------------------------------------------
BROKER_DIR = Path(os.environ.get("CLICKLAB_BROKER_DIR", VAR_DIR / "broker"))
# Redis redelivers a message whose worker died (acks_late) once it has been unacknowledged this long; it must
# exceed the longest task (and any countdown), or a running task is delivered twice.
BROKER_VISIBILITY_TIMEOUT_S = env_int("CLICKLAB_BROKER_VISIBILITY_TIMEOUT_S", 3600)
CELERY: dict[str, Any]  # Celery's settings, by its own (lower-case) names
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY = {
        "broker_url": CELERY_BROKER_URL,
        "broker_transport_options": {
            "visibility_timeout": BROKER_VISIBILITY_TIMEOUT_S,
            # kombu looks for such messages every interval x throttle seconds, 10 x 10 by default: a validation
            # whose worker was SIGKILLed came back up to 100 s after its timeout (seen in bench_load_faults).
            # One cheap sorted-set range read every 10 s (or half the timeout, when shorter) instead.
            "unacked_restore_interval": max(1, min(10, BROKER_VISIBILITY_TIMEOUT_S // 2)),
            "unacked_restore_throttle": 1,
            # Each sweep holds a lock in Redis for milliseconds; a worker SIGKILLed inside a sweep, or a Redis
            # stop between its lock and unlock, leaves the lock to expire: after 300 s by default, and no
            # message was redelivered until then (a validation missed bench_load_faults' deadline). As long
            # as one sweep interval instead; two sweeps that overlap restore a message once (a transaction).
            "unacked_mutex_expire": max(1, min(10, BROKER_VISIBILITY_TIMEOUT_S // 2)),
        },
    }
elif CELERY_BROKER_URL:
    CELERY = {"broker_url": CELERY_BROKER_URL}
else:
    # kombu's file-system transport: messages are files under var/broker, so a real worker process runs
    # with no broker server.
    for sub in ("queue", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY = {
        "broker_url": "filesystem://",
        "broker_transport_options": {
            "data_folder_in": str(BROKER_DIR / "queue"),
            "data_folder_out": str(BROKER_DIR / "queue"),
            "processed_folder": str(BROKER_DIR / "processed"),
            "control_folder": str(BROKER_DIR / "control"),
            "store_processed": False,
            # kombu polls the folder (default once a second): 0.2 s keeps a click's validation, a stimulus
            # render or a benchmark task from waiting a second for pickup, for a directory listing 5x/s.
            "polling_interval": env_float("CLICKLAB_BROKER_POLL_S", 0.2),
        },
    }
CELERY.update(
    {
        "task_default_queue": "default",
        "task_queues": (Queue("default", routing_key="default"), Queue("models", routing_key="models")),
        # Model work, and the beat jobs that send it again, on the `models` queue; everything else on `default`.
        "task_routes": {
            name: {"queue": "models"}
            for name in (
                task_names.SEGMENTATION_BUILD_NEXT_ROUND,
                task_names.SEGMENTATION_REQUEUE_PENDING_BUILDS,
                task_names.BENCHMARK_EVALUATE_INSTANCE,
                task_names.CORRECTIVE_UPDATE_ITEM,  # corrective campaigns' mask updates
                task_names.CORRECTIVE_REQUEUE_PENDING_UPDATES,
            )
        },
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "timezone": "UTC",
        "broker_connection_retry_on_startup": True,
        "task_always_eager": False,
        # Periodic jobs (run by `celery beat`; `make prod` starts it), every interval a setting above.
        "beat_schedule": {
            "platforms-sync": {
                "task": task_names.PLATFORMS_SYNC_OPEN_CAMPAIGNS,
                "schedule": PLATFORM_SYNC_INTERVAL_S,
            },
            "expire-sessions": {
                "task": task_names.SESSIONS_EXPIRE_SESSIONS,
                "schedule": EXPIRE_SESSIONS_EVERY_S,
            },
            "release-stale-sessions": {
                "task": task_names.SESSIONS_RELEASE_STALE,
                "schedule": RELEASE_STALE_EVERY_S,
            },
            "requeue-pending-validations": {
                "task": task_names.VALIDATION_REQUEUE_PENDING_VALIDATIONS,
                "schedule": REQUEUE_VALIDATIONS_EVERY_S,
            },
            "requeue-pending-builds": {
                "task": task_names.SEGMENTATION_REQUEUE_PENDING_BUILDS,
                "schedule": REQUEUE_BUILDS_EVERY_S,
            },
            "requeue-pending-corrective-updates": {
                "task": task_names.CORRECTIVE_REQUEUE_PENDING_UPDATES,
                "schedule": REQUEUE_CORRECTIVE_EVERY_S,
            },
            "outbox-relay": {
                "task": task_names.OUTBOX_RELAY_TASK_INTENTS,
                "schedule": OUTBOX_RELAY_EVERY_S,
            },
        },
    }
)
