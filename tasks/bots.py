"""Simulated annotators' test run of a draft study (the study page's "Run simulated annotators")."""

from __future__ import annotations

from tasks import names
from tasks.base import clicklab_task


@clicklab_task(names.BOTS_RUN_BOTS, acks_late=False)
def run_bots(study_id: int, bots: int, phone_share: float, leave_share: float, run: str) -> dict:
    """Run ``bots`` simulated annotators on draft ``study_id`` over HTTP against ``PUBLIC_BASE_URL``
    (``collector.services.bots.bot_run``); returns the run's summary, or {"refused": why} when the study is
    gone or no longer a draft. Not acknowledged late and not retried: a run a dead worker cut short is not
    played again behind the researcher's back (its bots show on the study page as they got)."""
    from collector.models import Study
    from collector.services.bots import BotRunRefused, bot_run

    if not Study.objects.filter(pk=study_id).exists():
        return {"refused": f"study {study_id} is gone"}
    try:
        report = bot_run(
            study_id=study_id, bots=bots, phone_share=phone_share, leave_share=leave_share, run=run
        )
    except BotRunRefused as exc:
        return {"refused": str(exc)}
    return report.summary
