"""DRF permission: only researchers (see ``collector.selectors.permissions``) use the researcher API."""

from __future__ import annotations

from rest_framework.permissions import BasePermission

from collector.selectors.permissions import user_is_researcher


class IsResearcher(BasePermission):
    message = (
        "This API is for researchers: the account must be staff or in the group 'researchers'. "
        "Annotator session tokens are not accepted here."
    )

    def has_permission(self, request, view) -> bool:
        return user_is_researcher(request.user)
