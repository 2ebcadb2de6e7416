"""One settings module for every environment, driven by environment variables.

Embedded default (no environment): SQLite under ``var/`` and a Celery broker on the local file system,
with a real worker process (``make demo`` starts one). Production: ``DATABASE_URL`` (PostgreSQL) and
``CELERY_BROKER_URL`` (Redis), ``SECRET_KEY``, ``ALLOWED_HOSTS``; ``DEBUG`` is off unless asked for.
Secrets are read from the environment only and never logged (see ``config.logging_filters``).
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from csp.constants import NONCE, NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from config.environment import read
from config.log_format import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent


VAR_DIR = Path(read("CLICKLAB_VAR_DIR", BASE_DIR / "var"))
DATABASE_URL = read("DATABASE_URL")
CELERY_BROKER_URL = read("CELERY_BROKER_URL")
EMBEDDED = not DATABASE_URL

DEBUG = read("DEBUG", EMBEDDED)


def _secret_key() -> str:
    key = read("SECRET_KEY")
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
# Former keys: what they signed (annotator links, completion codes, sessions) still verifies; see README.
SECRET_KEY_FALLBACKS = read("SECRET_KEY_FALLBACKS")
ALLOWED_HOSTS = read("ALLOWED_HOSTS", ["127.0.0.1", "localhost"] if DEBUG or EMBEDDED else [])
CSRF_TRUSTED_ORIGINS = read("CSRF_TRUSTED_ORIGINS")

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
    "axes",  # login throttling (AXES_* below)
    "csp",  # the Content-Security-Policy header (CONTENT_SECURITY_POLICY below)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Content-Security-Policy on every answer; a framed platform's page gets its frame-ancestors through
    # collector.platforms.framing
    "csp.middleware.CSPMiddleware",
    # a request whose database connection broke (a PostgreSQL restart) runs once more when that is safe: a GET,
    # the annotator API's idempotent POSTs (config/unavailable.py)
    "config.unavailable.DatabaseRetryMiddleware",
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
    # login throttling: a locked-out login answered with researcher/locked_out.html (django-axes wants it last)
    "axes.middleware.AxesMiddleware",
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
            "NAME": Path(read("CLICKLAB_SQLITE_PATH", VAR_DIR / "clicklab.sqlite3")),
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
STATIC_ROOT = Path(read("CLICKLAB_STATIC_ROOT", VAR_DIR / "staticfiles"))
# Nothing serves MEDIA_ROOT directly (ground-truth masks live there): MEDIA_URL is the login-checked view of
# collector/researcher/media.py; annotators get stimuli through their session's views (check clicklab.E001/2).
MEDIA_URL = "/researcher/files/"
MEDIA_ROOT = Path(read("CLICKLAB_MEDIA_ROOT", VAR_DIR / "media"))
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
    text = read("CLICKLAB_IMPORT_ROOT")
    if text is None:
        return None
    root = Path(text).expanduser().resolve()
    if not root.is_dir():
        raise ImproperlyConfigured(
            f"environment variable CLICKLAB_IMPORT_ROOT={str(text)!r} is not a folder: point it at the folder whose "
            "dataset folders researchers may import, or unset it (archive uploads only)."
        )
    return root


DATASET_IMPORT_ROOT = _import_root()
DATASET_UPLOAD_MAX_BYTES = read("CLICKLAB_DATASET_UPLOAD_MAX_BYTES")
DATASET_ARCHIVE_MAX_BYTES = read("CLICKLAB_DATASET_ARCHIVE_MAX_BYTES")
DATASET_ARCHIVE_MAX_MEMBERS = read("CLICKLAB_DATASET_ARCHIVE_MAX_MEMBERS")

LOGIN_URL = "/admin/login/"
# django-axes checks every password login (researcher area, admin) first: CLICKLAB_LOGIN_FAILURE_LIMIT wrong
# passwords for one username from one address lock that pair out for CLICKLAB_LOGIN_COOLOFF_S seconds, the
# right password included; other addresses and other accounts are not affected. The address is REMOTE_ADDR
# (behind a proxy: the proxy's, so the lock is then per account).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = read("CLICKLAB_LOGIN_FAILURE_LIMIT")
AXES_COOLOFF_TIME = timedelta(seconds=read("CLICKLAB_LOGIN_COOLOFF_S"))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "researcher/locked_out.html"
AXES_VERBOSE = False

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
# PostgreSQL (config.postgresql): a new connection refused for the moment (a restart) is tried again for up
# to this many seconds before the request gets its 503.
DB_CONNECT_WAIT_S = read("CLICKLAB_DB_CONNECT_WAIT_S")
SECURE_CONTENT_TYPE_NOSNIFF = True
# An annotator's address carries the session token: no other site sees it in a Referer (the annotator pages
# also say no-referrer in a meta tag).
SECURE_REFERRER_POLICY = "same-origin"
# Scripts and styles from this site only, inline ones with the response's nonce (request.csp_nonce in the
# template); style attributes (the researcher area's progress bars) are allowed, they cannot run code. Images
# also from blob: (the player's decoded stimuli) and data: URLs. No page may be framed (X-Frame-Options DENY
# too) except a framed platform's (collector.platforms.framing replaces frame-ancestors for those).
# connect-src: this site, and Prolific's origin (added below, once its completion URL is read)
csp_connect_src: list[str] = [SELF]  # lower case: not a setting (django-csp refuses CSP_* names)
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, NONCE],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": [SELF, "data:", "blob:"],
        "connect-src": csp_connect_src,
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
    }
}
if not DEBUG:
    SECURE_SSL_REDIRECT = read("SECURE_SSL_REDIRECT")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = read("SECURE_HSTS_SECONDS")
    SECURE_HSTS_INCLUDE_SUBDOMAINS = read("SECURE_HSTS_INCLUDE_SUBDOMAINS")
    SECURE_HSTS_PRELOAD = read("SECURE_HSTS_PRELOAD")
    # Behind a proxy that terminates TLS every request arrives over http: the proxy's X-Forwarded-Proto then
    # says whether the client used https, or SECURE_SSL_REDIRECT would send an https request to itself.
    if read("BEHIND_TLS_PROXY"):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Logs -----------------------------------------------------------------------------------------
# JSON lines with LOG_FORMAT=json (production), readable lines otherwise; both carry every extra={...}
# field (session_id, study_id, ...). The redaction filter on the one handler removes secrets and annotator
# tokens from messages, arguments, fields, tracebacks and request paths. django, django.request and
# django.server (runserver's access lines) write through it, as Celery workers (config/celery.py) and gunicorn
# (`gunicorn -c config/gunicorn.py config.wsgi`: its access and error lines) do.
LOG_FORMAT = read("LOG_FORMAT")
LOGGING = logging_config(LOG_FORMAT, level=read("LOG_LEVEL"))

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

# --- Evaluation server (evaluation.conf.limit) ----------------------------------------------------
EVAL_RUN_TTL_S = read("CLICKLAB_EVAL_RUN_TTL_S")
EVAL_MAX_ACTIVE_RUNS = read("CLICKLAB_EVAL_MAX_ACTIVE_RUNS")
# a submission's request body; at most Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB by default)
EVAL_MAX_UPLOAD_BYTES = read("CLICKLAB_EVAL_MAX_UPLOAD_BYTES")
EVAL_INLINE_MAX_PIXELS = read("CLICKLAB_EVAL_INLINE_MAX_PIXELS")
EVAL_RATE_LIMIT = read("CLICKLAB_EVAL_RATE_LIMIT")
EVAL_KEY_CACHE_S = read("CLICKLAB_EVAL_KEY_CACHE_S")
EVAL_MAX_CLICKS = read("CLICKLAB_EVAL_MAX_CLICKS")
EVAL_MAX_GROUPS = read("CLICKLAB_EVAL_MAX_GROUPS")
# In the request up to the same size as the other clickers: a queue hop per interaction made a remote group
# run 5-8x slower than a local one with a fast method (bench/bench_eval_remote.py).
EVAL_GROUP_INLINE_MAX_PIXELS = read("CLICKLAB_EVAL_GROUP_INLINE_MAX_PIXELS")

# --- Annotator links and segmenters ----------------------------------------------------------------
# Annotator links are signed with SECRET_KEY (salted); a token is scoped to one session.
ANNOTATOR_TOKEN_MAX_AGE_S = read("ANNOTATOR_TOKEN_MAX_AGE_S")
# Public base URL used in links handed to crowd platforms (no trailing slash).
PUBLIC_BASE_URL = read("PUBLIC_BASE_URL").rstrip("/")
SEGMENTER_CHECKPOINT_DIR = Path(read("CLICKLAB_CHECKPOINT_DIR", VAR_DIR / "checkpoints"))


def _segmenter_checkpoints() -> dict:
    """The checkpoints a study may choose for its next-round builds, by key (``sam:vit_b``, ...).

    ``CLICKLAB_SEGMENTER_CHECKPOINTS``: a JSON object or comma-separated ``predictor:variant[:label]=path``
    entries, paths absolute or relative to CLICKLAB_CHECKPOINT_DIR (format: segmenters/checkpoints.py).
    """
    text = read("CLICKLAB_SEGMENTER_CHECKPOINTS")
    if not text:
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
NEXT_ROUND_SEGMENTERS = read("CLICKLAB_NEXT_ROUND_SEGMENTERS")

# --- Crowd platforms ---------------------------------------------------------------------------------
# Credentials come from the environment only and are never logged (config.logging_filters).
TOLOKA_TOKEN = read("TOLOKA_TOKEN")
TOLOKA_API_URL = read("TOLOKA_API_URL").rstrip("/")
AWS_ACCESS_KEY_ID = read("AWS_ACCESS_KEY_ID")
AWS_SECRET_ACCESS_KEY = read("AWS_SECRET_ACCESS_KEY")
MTURK_SANDBOX = read("MTURK_SANDBOX")
MTURK_ENDPOINT_URL = read("MTURK_ENDPOINT_URL")
# Toloka client: retries (5xx, 408/429, timeouts) and timeouts of every API call; the entry page makes
# one quick call (the worker waits) with its own timeout.
TOLOKA_RETRIES = read("TOLOKA_RETRIES")
TOLOKA_TIMEOUT_S = read("TOLOKA_TIMEOUT_S")
TOLOKA_ENTRY_TIMEOUT_S = read("TOLOKA_ENTRY_TIMEOUT_S")
# Hosts allowed to frame the MTurk views (CSP frame-ancestors) and to receive the externalSubmit post.
MTURK_FRAME_ANCESTORS = read("MTURK_FRAME_ANCESTORS")
MTURK_SUBMIT_ORIGINS = read("MTURK_SUBMIT_ORIGINS")
MTURK_REGION = read("MTURK_REGION")
PROLIFIC_COMPLETE_URL = read("PROLIFIC_COMPLETE_URL").rstrip("/")
# The finished player first asks whether Prolific answers (a no-cors fetch of its origin) before it sends the
# participant there: the policy's connect-src must let that one origin through.
csp_connect_src.append("{0.scheme}://{0.netloc}".format(urlsplit(PROLIFIC_COMPLETE_URL)))
PLATFORM_SYNC_INTERVAL_S = read("PLATFORM_SYNC_INTERVAL_S")

# --- Sessions and validation ------------------------------------------------------------------------
# Abandoned sessions give their targets back once past expires_at (study.session_timeout_s after start).
EXPIRE_SESSIONS_EVERY_S = read("CLICKLAB_EXPIRE_SESSIONS_EVERY_S")
# Running batches not heard from for their study's reservation_grace_s give their unclicked images back
# (collector.services.reservations); this often the beat looks for them.
RELEASE_STALE_EVERY_S = read("CLICKLAB_RELEASE_STALE_EVERY_S")
# A player page not heard from for this long before it is loaded again was left: the trial it showed without
# a click is shown afresh (not flagged replayed). Longer than the player's 20 s heartbeat interval.
RETURN_AFTER_S = read("CLICKLAB_RETURN_AFTER_S")
# A batch whose player said it was going away (pagehide: the tab closed) and was not heard from since is
# released this long after the signal (a reload is heard from within it), not a grace period later.
LEAVE_GRACE_S = read("CLICKLAB_LEAVE_GRACE_S")
# A worker about to be told "the remaining images are being worked on": batches silent for the grace period
# give their images back first (collector.services.reservations.sessions_release_on_demand).
RELEASE_ON_DEMAND = read("CLICKLAB_RELEASE_ON_DEMAND")
# A worker told "the remaining images are being worked on" gets a page that asks again this often.
WAIT_RECHECK_S = read("CLICKLAB_WAIT_RECHECK_S")
# Safety nets for lost messages (a killed worker on a broker without acknowledgements; the file-system
# transport drops a message whose worker was killed), each sending again what is still pending (a duplicate
# is a no-op): validations of finished sessions, next-round builds of closed rounds, corrective mask updates.
REQUEUE_VALIDATIONS_EVERY_S = read("CLICKLAB_REQUEUE_VALIDATIONS_EVERY_S")
REQUEUE_BUILDS_EVERY_S = read("CLICKLAB_REQUEUE_BUILDS_EVERY_S")
REQUEUE_CORRECTIVE_EVERY_S = read("CLICKLAB_REQUEUE_CORRECTIVE_EVERY_S")

# --- Transactional outbox -------------------------------------------------------------------------
# Tasks are written as rows in the transaction of the change (collector.models.TaskIntent) and published
# after the commit; what the broker refused is sent by the relay (beat, a thread in each worker and
# `manage.py outbox_relay`) at least every OUTBOX_RELAY_EVERY_S seconds: a finished session's validation
# goes out within that interval after the broker is back. The relay leaves intents younger than
# OUTBOX_RELAY_GRACE_S to the after-commit send.
OUTBOX_RELAY_EVERY_S = read("CLICKLAB_OUTBOX_RELAY_EVERY_S")
OUTBOX_RELAY_GRACE_S = read("CLICKLAB_OUTBOX_RELAY_GRACE_S")
OUTBOX_RELAY_IN_WORKER = read("CLICKLAB_OUTBOX_RELAY_IN_WORKER")
OUTBOX_KEEP_SENT_S = read("CLICKLAB_OUTBOX_KEEP_SENT_S")

# --- Celery ---------------------------------------------------------------------------------------
# The broker's options, queues, routes and the beat schedule are config/celery.py's (celery_options), made
# from these and the intervals above.
BROKER_DIR = Path(read("CLICKLAB_BROKER_DIR", VAR_DIR / "broker"))
# Redis redelivers a message whose worker died (acks_late) once it has been unacknowledged this long; it must
# exceed the longest task (and any countdown), or a running task is delivered twice.
BROKER_VISIBILITY_TIMEOUT_S = read("CLICKLAB_BROKER_VISIBILITY_TIMEOUT_S")
# the file-system broker (embedded): how often a worker lists the queue folder
BROKER_POLL_S = read("CLICKLAB_BROKER_POLL_S")
