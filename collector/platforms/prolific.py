"""Prolific: URL parameters in, a redirect with the completion code out (``crowd-platforms.md`` §4.3).

The study's external URL on Prolific is our entry
``{PUBLIC_BASE_URL}/prolific/<study>/<device>/?PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}``
(:func:`external_study_url`). PROLIFIC_PID is the worker, SESSION_ID the submission (our assignment id),
STUDY_ID the Prolific study (our batch id). The page opens top-level, not framed.

Prolific checks the ``cc`` it receives against the completion codes configured on its study, so the
redirect carries ``platform_config["prolific_completion_code"]`` when set (our per-session code otherwise).
Publishing, approval and bonuses happen in Prolific's own interface through this integration.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from urllib.parse import urlencode

from django.conf import settings
from django.utils.translation import gettext as _

from .base import Entry, EntryRefused, FinishAction, PlatformAdapter, PlatformNotSupported, register_adapter

PLACEHOLDERS = {
    "PROLIFIC_PID": "{{%PROLIFIC_PID%}}",
    "STUDY_ID": "{{%STUDY_ID%}}",
    "SESSION_ID": "{{%SESSION_ID%}}",
}


def external_study_url(*, study_id: int, device: str) -> str:
    query = "&".join(f"{name}={value}" for name, value in PLACEHOLDERS.items())
    return f"{settings.PUBLIC_BASE_URL}/prolific/{study_id}/{device}/?{query}"


def _clean(value: str) -> str:
    value = (value or "").strip()
    return "" if value.startswith("{{%") else value[:200]


@register_adapter
class ProlificAdapter(PlatformAdapter):
    name = "prolific"
    framed = False
    supports_bonus = False
    device_filter_server_side = True
    fee_fraction = Decimal("0.333")

    def parse_entry(self, *, study, device: str, params: Mapping[str, str]) -> Entry:
        worker, prolific_study, submission = (
            _clean(params.get(name, "")) for name in ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID")
        )
        if not worker or not submission:
            raise EntryRefused(
                _(
                    "This link is missing your Prolific details (PROLIFIC_PID and SESSION_ID). Open the study "
                    "again from Prolific."
                )
            )
        expected = str((study.platform_config or {}).get("prolific_study_id", "")).strip()
        if expected and prolific_study != expected:
            raise EntryRefused(
                _("This link belongs to another Prolific study. Open the study again from Prolific.")
            )
        return Entry(
            platform=self.name,
            external_worker_id=worker,
            external_assignment_id=submission,
            external_batch_id=prolific_study,
            is_preview=False,
            device=device,
            return_info={"prolific_study_id": prolific_study},
        )

    def finish_action(self, *, session) -> FinishAction:
        configured = str((session.study.platform_config or {}).get("prolific_completion_code", "")).strip()
        code = configured or session.completion_code
        return FinishAction(
            kind="redirect", code=code, url=f"{settings.PROLIFIC_COMPLETE_URL}?{urlencode({'cc': code})}"
        )

    def publish(self, *, campaign) -> None:
        for pool in campaign.pools.all():
            url = external_study_url(study_id=campaign.study_id, device=pool.device)
            if pool.entry_url != url:
                pool.entry_url = url
                pool.external_status = "manual"
                pool.save(update_fields=["entry_url", "external_status"])

    def accept(self, *, pool, assignment_id: str, comment: str) -> None:
        raise PlatformNotSupported(
            f"approve Prolific submission {assignment_id} in Prolific's interface (not automated here)."
        )

    def reject(self, *, pool, assignment_id: str, comment: str) -> None:
        raise PlatformNotSupported(
            f"review Prolific submission {assignment_id} in Prolific's interface (not automated here)."
        )
