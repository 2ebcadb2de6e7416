"""Who may see which study: the one per-study permission rule of all researcher-facing code.

A user may see a study when they are a researcher at all (active, and staff or in the group
``researchers``; superusers always are) and, for a given study, superuser, its owner, or listed in
``study.researchers``. That rule is written once, in :func:`studies_visible_to`; the researcher pages,
the researcher API, the study preview, media files and the export downloads (views and admin actions)
all ask it, and a study the user may not see answers 404 everywhere, exactly as one that does not exist.
"""

from __future__ import annotations

from typing import TypeGuard

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet
from django.http import Http404

from collector.models import Study

RESEARCHER_GROUP = "researchers"


def user_is_researcher(user: AbstractBaseUser | AnonymousUser | None) -> TypeGuard[AbstractBaseUser]:
    """True for an active, authenticated user who is superuser, staff, or in the group "researchers"."""
    if user is None or not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False):
        return False
    if user.is_superuser or user.is_staff:
        return True
    return user.groups.filter(name=RESEARCHER_GROUP).exists()


def studies_visible_to(user: AbstractBaseUser | AnonymousUser | None) -> QuerySet[Study]:
    """Studies ``user`` may see: all for a superuser, owned or shared ones for a researcher, none else.

    Returns a queryset (without duplicates) that callers may filter and annotate further."""
    if not user_is_researcher(user):
        return Study.objects.none()
    if user.is_superuser:
        return Study.objects.all()
    shared_ids = Study.researchers.through.objects.filter(user_id=user.pk).values("study_id")
    return Study.objects.filter(Q(owner_id=user.pk) | Q(pk__in=shared_ids))


def study_visible_or_404(*, user: AbstractBaseUser | AnonymousUser | None, study_id: int) -> Study:
    """The study ``study_id``, with its dataset and owner, if ``user`` may see it; Http404 otherwise.

    Never 403: another researcher's study answers exactly as one that does not exist, so ids reveal
    nothing."""
    study = studies_visible_to(user).select_related("dataset", "owner").filter(pk=study_id).first()
    if study is None:
        raise Http404(f"study {study_id} does not exist or is not shared with you.")
    return study


def user_can_view_study(user: AbstractBaseUser | AnonymousUser | None, study: Study) -> bool:
    """True when ``user`` may see ``study`` (the rule of :func:`studies_visible_to`)."""
    return studies_visible_to(user).filter(pk=study.pk).exists()


def user_can_change_study(user: AbstractBaseUser | AnonymousUser | None, study: Study) -> bool:
    """True when ``user`` may publish, pause, close or edit ``study``: superuser or owner.

    Researchers a study is shared with may look but not steer."""
    if not user_is_researcher(user):
        return False
    return bool(user.is_superuser or study.owner_id == user.pk)
