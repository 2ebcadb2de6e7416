"""A database that is restarting or unreachable answers 503 with Retry-After, not a 500 with a traceback.

PostgreSQL restarts (a failover, a minor upgrade, an OOM kill) break the connections a request holds; the
query raises ``OperationalError`` / ``InterfaceError`` and Django would answer 500. Nothing was stored (the
request's transaction did not commit), so the right answer is "try again shortly": the player's outbox
retries a 503 with backoff like any 5xx and keeps the click, API clients see a JSON reason, and people
see a short page instead of a server error. Django drops the broken connection at the end of the request
(``close_if_unusable_or_obsolete``), so the next request connects afresh.
"""

from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse

logger = logging.getLogger(__name__)

RETRY_AFTER_S = 5
MESSAGE = "The database is unavailable for a moment (restarting or unreachable); nothing was stored. Try again in a few seconds."


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        logger.warning(
            "database unavailable: answered 503",
            extra={"path": request.path, "error": type(exception).__name__},
        )
        if request.path.startswith("/api/") or "json" in request.headers.get("Accept", ""):
            response = JsonResponse({"error": MESSAGE, "code": "database_unavailable"}, status=503)
        else:
            response = HttpResponse(MESSAGE, status=503, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(RETRY_AFTER_S)
        response["Cache-Control"] = "no-store"
        return response
