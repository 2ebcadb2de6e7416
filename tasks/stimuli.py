"""Rendering a round's stimuli (sent by ``study_publish`` and by the next-round build)."""

from __future__ import annotations

from collector.services.stimuli import round_stimuli_render
from tasks import names
from tasks.base import clicklab_task


@clicklab_task(
    names.STIMULI_RENDER_ROUND_STIMULI,
    autoretry_for=(OSError,),
    retry_backoff=True,
    retry_backoff_max=300,
    max_retries=5,
)
def render_round_stimuli(round_id: int) -> int:
    """Render the display image and phase-B picture of every target of ``round_id`` that lacks them.

    Idempotent (targets with current stimuli are skipped), so a redelivered message is harmless; returns
    the number rendered, 0 when the round is gone."""
    return round_stimuli_render(round_id=round_id)
