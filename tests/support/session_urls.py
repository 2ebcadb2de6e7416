"""The project's URLs plus one view whose only database work happens in a middleware's code: it writes a new
session (no cookie sent, so nothing is read), which SessionMiddleware saves on the way out
(tests/config/test_unavailable.py)."""

from django.http import HttpResponse
from django.urls import include, path


def touch_session(request):
    request.session["touched"] = True
    return HttpResponse("touched")


urlpatterns = [path("touch-session/", touch_session), path("", include("config.urls"))]
