"""Simulation mode of corrective campaigns (issue 17): the seed-001 annotator simulator
(``benchmark.clickers.AnnotatorSimulator``) works the campaign instead of people, through the same services as
the annotator API (sessions, idempotent clicks, round submits, model updates, finishing), so the dry run makes
the same rows and the same outputs (``exports.corrective``) a paid crowd would.

Per instance: the simulator sees the current mask and gives up to K clicks on the error regions (regions of at
least ``min_region_px`` pixels, chosen by area, N(0, ``noise_sigma_px``) noise); no error region left means "mask
is fine" (skip). Clicks outside the image are clipped by the simulator; a first-click start gets the simulator's
first positive click. Model updates run inline here (``inline=True``, the default: one process, deterministic)
or on the ``models`` queue (``inline=False``: then the call waits for each update to be stored).

Simulated time (documented, not measured): ``click_ms`` per click and ``decision_ms`` per round, recorded as
the item's round times and the clicks' ``item_ms``, so the report's time analyses have values to show.
"""

from __future__ import annotations

import logging
import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from collector.models import CorrectiveItem, Study
from collector.services.corrective import (
    CorrectiveRefused,
    corrective_click_record,
    corrective_item_skip,
    corrective_items_ensure,
    corrective_round_submit,
    corrective_session_finish,
    corrective_update_apply,
    read_mask,
    round_budget,
)
from collector.services.sessions import SessionStartRefused, session_start
from collector.services.workers import worker_get_or_create

logger = logging.getLogger(__name__)

SIMULATED_PLATFORM = "simulated"


@dataclass
class SimulationResult:
    sessions: int = 0
    items: int = 0
    updates: int = 0
    update_seconds: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0


def _wait_stored(item_id: int, round_number: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        item = CorrectiveItem.objects.get(pk=item_id)
        if item.state != CorrectiveItem.State.UPDATING or item.round != round_number:
            return
        time.sleep(0.1)
    raise TimeoutError(
        f"the update of item {item_id} round {round_number} was not stored within {timeout_s} s"
    )


# C901: the simulated annotators' session -> item -> round loop, written as the campaign runs; its full
# check is the slow real-data GrabCut test, so it is left whole rather than split without it.
def corrective_simulate(  # noqa: C901
    *,
    study_id: int,
    device: str = "pc",
    seed: int = 0,
    max_sessions: int | None = None,
    noise_sigma_px: float = 3.0,
    min_region_px: int = 100,
    click_ms: float = 2500.0,
    decision_ms: float = 1500.0,
    inline: bool = True,
    update_timeout_s: float = 300.0,
) -> SimulationResult:
    """Work the published corrective study ``study_id`` with simulated annotators on ``device`` until no
    instance is left for a new simulated worker (or ``max_sessions`` sessions). Returns counts and the model
    update durations (s, inline mode)."""
    from benchmark.clickers import AnnotatorSimulator
    from collector.services.next_round import _instance_masks, _read_image

    study = Study.objects.get(pk=study_id)
    if not study.is_corrective:
        raise CorrectiveRefused(
            f"study {study_id} is a {study.kind} study, not a corrective campaign.", status=400
        )
    result = SimulationResult()
    started = time.perf_counter()
    while max_sessions is None or result.sessions < max_sessions:
        worker = worker_get_or_create(
            platform=SIMULATED_PLATFORM, external_id=f"sim-{seed}-{result.sessions}"
        )
        try:
            session = session_start(study=study, worker=worker, device=device)
        except SessionStartRefused:
            break
        result.sessions += 1
        for item in corrective_items_ensure(session=session, send=not inline):
            result.items += 1
            item = CorrectiveItem.objects.select_related("trial__target__instance__image").get(pk=item.pk)
            instance = item.trial.target.instance
            image = _read_image(instance.image)
            gt, ignore = _instance_masks(instance)
            # One generator per instance, from the seed and the instance's name: the same clicks whatever order
            # the allocation hands the instances out in (it shuffles), so a dry run repeats exactly.
            item_rng = np.random.default_rng([seed, zlib.crc32(instance.first_round_full_stem.encode())])
            simulator = AnnotatorSimulator(
                rng=item_rng,
                noise_sigma_px=noise_sigma_px,
                min_region_px=min_region_px,
                clicks_per_round=study.corrective_clicks_per_round,
            )
            simulator.start(image=image, gt=gt, ignore=np.zeros_like(gt) if ignore is None else ignore)
            item_ms = 0.0
            while True:
                item = CorrectiveItem.objects.select_related("current_mask").get(pk=item.pk)
                if item.state == CorrectiveItem.State.UPDATING:
                    result.updates += 1
                    if inline:
                        began = time.perf_counter()
                        corrective_update_apply(item_id=item.pk, round_number=item.round)
                        result.update_seconds.append(time.perf_counter() - began)
                    else:
                        _wait_stored(item.pk, item.round, update_timeout_s)
                    continue
                if item.state != CorrectiveItem.State.CLICKING:
                    break
                current = (
                    read_mask(item.current_mask.file.name) if item.current_mask_id else np.zeros_like(gt)
                )
                clicks = simulator.next_clicks(current)
                if item.round == 0:
                    clicks = [c for c in clicks if c.is_positive]
                clicks = clicks[: round_budget(study=study, round_number=item.round)]
                if not clicks:
                    if item.current_mask_id is None:  # no object pixel to click: nothing can be made
                        break
                    corrective_item_skip(session=session, item_id=item.pk, round_ms=decision_ms)
                    continue
                for order, click in enumerate(clicks):
                    item_ms += click_ms
                    corrective_click_record(
                        session=session,
                        item_id=item.pk,
                        idempotency_key=f"sim-{session.pk}-{item.pk}-{item.round}-{order}",
                        x=click.x,
                        y=click.y,
                        is_positive=click.is_positive,
                        pointer_type="",
                        item_ms=item_ms,
                    )
                item_ms += decision_ms
                corrective_round_submit(
                    session=session,
                    item_id=item.pk,
                    round_number=item.round,
                    round_ms=len(clicks) * click_ms + decision_ms,
                    send=not inline,
                )
        corrective_session_finish(session_id=session.pk)
    result.wall_seconds = time.perf_counter() - started
    logger.info(
        "corrective simulation done",
        extra={
            "study_id": study_id,
            "sessions": result.sessions,
            "items": result.items,
            "updates": result.updates,
        },
    )
    return result
