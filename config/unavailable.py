"""A database that is restarting or unreachable: a safe request runs once more, else 503 with Retry-After.

PostgreSQL restarts (a failover, a minor upgrade, an OOM kill) break the connections a request holds; the
query raises ``OperationalError`` / ``InterfaceError`` and Django would answer 500.

``DatabaseRetryMiddleware`` (in MIDDLEWARE right after WhiteNoise and the CSP middleware, above the rest) runs a
request whose database connection broke a second time, once, when running it twice is harmless
(``retry_safe``): a GET or HEAD (not a crowd platform's entry, which starts sessions and may ask the
platform, nor a corrective campaign's endpoint), and the annotator API's POSTs that are idempotent by design:
``click`` (its idempotency key), ``presented`` (its presentation id), ``finish`` (a finished session answers
its code again) and ``client`` (a merge of the same values). Whatever the first run stored before the
connection broke, the commit of which may have gone through with its acknowledgement lost, the second run
answers as the API answers a client's retry of the same request (a stored click: 200, ``created`` false).
The link entry's POST (``/s/<token>/``) is in the set too: ``session_start`` resumes the worker's running
batch, and a first visit's newly minted worker is kept on the request (``annotation_ui.views``), so the
second run names the same worker and resumes the batch the first may have committed.

Only a lost connection is run again (``connection_lost``: the server said it ends the connection, or it is
closed, broken or fails its health check), not a deadlock, a serialization failure or a timeout on a
connection that still works. Before the second run the broken connections are closed, so it opens a new
one, which waits for a restarting server (``config.postgresql``, ``DB_CONNECT_WAIT_S``). The body is read
into ``request.body`` before the first run so the second parses it again; a body larger than the annotator
API takes (``annotation_ui.parsers.MAX_BODY_BYTES``; the API refuses it unread) is not read ahead, and its
request is not run again. The middleware below the retry point run again on the same request object:
each sets its attributes afresh (session, user, messages), the annotator API is CSRF-exempt and a GET is
not checked.

An error raised in a middleware's own code below the retry point (SessionMiddleware saving the session on
the way out) never reaches a ``process_exception``: Django turns it into a 500 where it is raised. Such an
error is noted on the request when Django reports it (``got_request_exception``), and the retry middleware
treats that 500 as the error it stands for: a second run when the request is safe to repeat and the
connection was lost, else the 503 below.

``DatabaseUnavailableMiddleware`` (near the view) turns the error into the answer when there is no second
run, or the second run fails too: a 503 with Retry-After. A failed run stored nothing (its transaction did
not commit; if only the acknowledgement of a commit was lost, the write was idempotent and the client's
retry is answered as one), so the right answer is "try again shortly": the player's outbox retries a 503
with backoff like any 5xx and keeps the click, API clients see a JSON reason, and people see a short page
instead of a server error. Django drops the broken connection at the end of the request
(``close_if_unusable_or_obsolete``), so the next request connects afresh.
"""

from __future__ import annotations

import logging
import re
import sys

from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError, connections
from django.http import HttpResponse

from .api_errors import error_response
from .logging_filters import redact

logger = logging.getLogger(__name__)

RETRY_AFTER_S = 5
MESSAGE = "The database is unavailable for a moment (restarting or unreachable); nothing was stored. Try again in a few seconds."
#: The annotator API's POSTs that may run twice (see the module docstring).
SAFE_POST = re.compile(r"/api/annotator/[^/]+/(?:click|presented|finish|client)|/s/[^/]+/")
#: GETs that write (a platform entry starts a session) or that were not checked (corrective campaigns).
UNCHECKED_GET = re.compile(r"/(?:toloka|prolific|mturk)/|/api/annotator/[^/]+/corrective/")
#: annotation_ui.parsers.MAX_BODY_BYTES (config imports nothing of the apps; a test keeps the two equal)
MAX_BODY_BYTES = 16_000
#: request attribute: "armed" while a second run is possible; the error's type name once it is due
_RETRY = "_database_retry"
#: request attribute: a database error Django answered with a 500 where it was raised (a middleware's code)
_ANSWERED_500 = "_database_error_500"


def _note_database_error(sender, request=None, **kwargs) -> None:
    """``got_request_exception``: Django is answering an error with a 500; keep it on the request when it is
    a database error, for the retry middleware above (see the module docstring)."""
    error = sys.exc_info()[1]
    if request is not None and isinstance(error, OperationalError | InterfaceError):
        setattr(request, _ANSWERED_500, error)


got_request_exception.connect(_note_database_error, dispatch_uid="config.unavailable.note_database_error")


def retry_safe(request) -> bool:
    """True when ``request`` may run a second time after its database connection broke."""
    if request.method in ("GET", "HEAD"):
        return UNCHECKED_GET.match(request.path_info) is None
    return request.method == "POST" and SAFE_POST.fullmatch(request.path_info) is not None


#: SQLSTATEs with which the server ends a connection: admin_shutdown (a fast shutdown or restart,
#: pg_terminate_backend), crash_shutdown, cannot_connect_now; and class 08, connection exceptions.
SERVER_ENDED = ("57P01", "57P02", "57P03")


def _broken(wrapper) -> bool:
    raw = wrapper.connection
    if raw is None:
        return False
    if getattr(raw, "closed", False) or getattr(raw, "broken", False):
        return True
    return not wrapper.is_usable()


def connection_lost(exception: BaseException) -> bool:
    """True when ``exception`` came with a connection that cannot be used any more, False for an error on a
    connection that still works (a deadlock, a serialization failure, a timeout: the server sends those with
    a SQLSTATE of their own and keeps the connection).

    Lost: the driver's error carries a SQLSTATE with which the server ends a connection (``SERVER_ENDED``,
    class 08), or a connection is closed, broken or fails its health check now. Django closes a connection
    itself when the rollback after an error fails (leaving an ``atomic`` block), so one it dropped after a
    driver error without a SQLSTATE (the client found the socket closed) counts too. Never while a
    connection is inside ``atomic`` (a transaction around the whole request cannot be run again)."""
    if not isinstance(exception, OperationalError | InterfaceError):
        return False
    wrappers = connections.all(initialized_only=True)
    if any(wrapper.in_atomic_block for wrapper in wrappers):
        return False  # a transaction around the request (a test's): it cannot run again in it
    cause = exception.__cause__  # Django's wrap_database_errors raises its error from the driver's
    from_driver = cause is not None and type(cause).__module__.partition(".")[0] == "psycopg"
    sqlstate = getattr(cause, "sqlstate", None) if from_driver else None
    if sqlstate is not None and (sqlstate in SERVER_ENDED or sqlstate.startswith("08")):
        return True
    if from_driver and sqlstate is None and any(wrapper.connection is None for wrapper in wrappers):
        return True
    return any(_broken(wrapper) for wrapper in wrappers)


def _body_kept(request) -> bool:
    """Read a POST's body into ``request.body`` (so a second run parses it again); False when it cannot be."""
    if request.method != "POST":
        return True
    if hasattr(request, "_body"):
        return True
    if getattr(request, "_read_started", False):
        return False
    try:
        if int(request.META.get("CONTENT_LENGTH") or 0) > MAX_BODY_BYTES:
            return False
    except ValueError:
        return False
    try:
        request.body  # noqa: B018  (cached on the request)
    except OSError:  # the client went away mid-body (UnreadablePostError): the normal path meets it
        return False
    return True


class DatabaseRetryMiddleware:
    """See the module docstring. In MIDDLEWARE before ClickFastPathMiddleware, after WhiteNoise."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not retry_safe(request) or not _body_kept(request):
            return self._unavailable_for_500(request, self.get_response(request))
        setattr(request, _RETRY, "armed")
        response = self.get_response(request)
        state = getattr(request, _RETRY, None)
        setattr(request, _RETRY, None)  # once only: a second failure is answered by the 503
        if state == "armed" and response.status_code == 500:
            error = getattr(request, _ANSWERED_500, None)
            if error is not None and connection_lost(error):
                state = type(error).__name__  # raised in a middleware's code: run it again all the same
        if state is None or state == "armed":
            return self._unavailable_for_500(request, response)
        for wrapper in connections.all(initialized_only=True):
            if _broken(wrapper):
                wrapper.close()
        logger.warning(
            "database connection lost: the request runs again",
            extra={"path": redact(request.path), "error": state},
        )
        setattr(request, _ANSWERED_500, None)
        return self._unavailable_for_500(request, self.get_response(request))

    @staticmethod
    def _unavailable_for_500(request, response):
        """``response``, or the 503 when it is the 500 of a database error raised in a middleware's code."""
        error = getattr(request, _ANSWERED_500, None)
        if response.status_code != 500 or error is None:
            return response
        logger.warning(
            "database unavailable: answered 503",
            extra={"path": redact(request.path), "error": type(error).__name__},
        )
        return unavailable_response(request)


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        if getattr(request, _RETRY, None) == "armed" and connection_lost(exception):
            setattr(request, _RETRY, type(exception).__name__)  # DatabaseRetryMiddleware runs it again
        else:
            logger.warning(
                "database unavailable: answered 503",
                extra={"path": request.path, "error": type(exception).__name__},
            )
        return unavailable_response(request)


def unavailable_response(request) -> HttpResponse:
    """The 503 with Retry-After: JSON for the API and JSON clients, a short text for people."""
    if request.path.startswith("/api/") or "json" in request.headers.get("Accept", ""):
        response: HttpResponse = error_response(503, "database_unavailable", MESSAGE)
    else:
        response = HttpResponse(MESSAGE, status=503, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_S)
    response["Cache-Control"] = "no-store"
    return response
