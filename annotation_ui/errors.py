"""The annotator API answers in JSON, errors included: a bad token is a 404 in the error envelope
(``config.api_errors``: ``{"code": "not_found", "message", "field": null}``).

Views of ``/api/annotator/<token>/...`` that are not DRF views (the stimuli) find their session with
``views.session_from_token``, which raises Http404; Django would render that as an HTML page (or, in DEBUG, its
technical page), which the player cannot read. This middleware turns an Http404 raised by those views into the
API's JSON error, DEBUG or not.
"""

from __future__ import annotations

from django.http import Http404
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from config.api_errors import error_response

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
        return error_response(404, "not_found", f"{reason}; {WHAT_TO_DO}")
