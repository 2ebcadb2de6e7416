"""Who may see which study: the one per-study permission rule of all researcher-facing code.

A user may see a study when they are a researcher at all (active, and staff or in the group
``researchers``; superusers always are) and, for a given study, superuser, its owner, or listed in
``study.researchers``. Pages, the researcher API and the export downloads all ask these functions.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet

from collector.models import Study

RESEARCHER_GROUP = "researchers"


def user_is_researcher(user: AbstractBaseUser | AnonymousUser | None) -> bool:
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


def user_can_view_study(user: AbstractBaseUser | AnonymousUser | None, study: Study) -> bool:
    """True when ``user`` may see ``study`` (same rule as :func:`studies_visible_to`)."""
    if not user_is_researcher(user):
        return False
    if user.is_superuser or study.owner_id == user.pk:
        return True
    return study.researchers.filter(pk=user.pk).exists()


def user_can_change_study(user: AbstractBaseUser | AnonymousUser | None, study: Study) -> bool:
    """True when ``user`` may publish, pause, close or edit ``study``: superuser or owner.

    Researchers a study is shared with may look but not steer."""
    if not user_is_researcher(user):
        return False
    return bool(user.is_superuser or study.owner_id == user.pk)
