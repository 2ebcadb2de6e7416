"""Who gets into the researcher area, and the lookup of a study its user may change."""

from __future__ import annotations

from functools import wraps

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied

from collector.models import Study
from collector.selectors.permissions import study_visible_or_404, user_can_change_study, user_is_researcher
from config.api_errors import error_response


def researcher_required(view):
    """Anonymous visitors go to the login page; logged-in users who are not researchers get 403."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), settings.RESEARCHER_LOGIN_URL)
        if not user_is_researcher(request.user):
            raise PermissionDenied(
                "This area is for researchers: ask an administrator to make your account staff or add it "
                "to the group 'researchers'."
            )
        return view(request, *args, **kwargs)

    return wrapper


def researcher_json(view):
    """For JSON endpoints of the area: 401 / 403 in the error envelope (``config.api_errors``) instead of the
    login redirect."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return error_response(401, "not_authenticated", "log in to the researcher area first.")
        if not user_is_researcher(request.user):
            return error_response(
                403, "permission_denied", "this is for researchers (staff or group 'researchers')."
            )
        return view(request, *args, **kwargs)

    return wrapper


def changeable_study_or_403(*, user, study_id: int) -> Study:
    """The study if ``user`` may change it; 404 when they may not even see it, 403 when it is only shared."""
    study = study_visible_or_404(user=user, study_id=study_id)
    if not user_can_change_study(user, study):
        raise PermissionDenied(
            f"study {study.pk} is shared with you to look at; only its owner can change it."
        )
    return study
