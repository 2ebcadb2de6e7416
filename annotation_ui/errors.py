"""The annotator API answers in JSON, errors included: ``{"error": message}`` with 404 for a bad token.

Views of ``/api/annotator/<token>/...`` find their session with ``views.session_from_token``, which raises
Http404; Django would render that as an HTML page (or, in DEBUG, its technical page), which the player cannot
read. This middleware turns an Http404 raised by those views into the API's JSON error, DEBUG or not.
"""

from __future__ import annotations

from django.http import Http404, JsonResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

API_PREFIX = "/api/annotator/"
WHAT_TO_DO = gettext_lazy("open the task again from the platform.")


class AnnotatorApiJsonErrorsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, Http404) or not request.path.startswith(API_PREFIX):
            return None
        reason = str(exception) or _("not found")
        response = JsonResponse({"error": f"{reason}; {WHAT_TO_DO}"}, status=404)
        response["Cache-Control"] = "no-store"
        return response
