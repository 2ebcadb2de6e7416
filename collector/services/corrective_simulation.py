"""Simulation and replay of corrective campaigns (issues 17, 34): simulated annotators, or a campaign's own click
log, work a study instead of people, through the same services as the annotator API (sessions, idempotent clicks,
undos, round submits, model updates, finishing), so a dry run or a replay makes the same rows and the same outputs
(``exports.corrective``) a paid crowd would.

``corrective_simulate``: the seed-001 annotator (``benchmark.clickers.AnnotatorSimulator.seed_001``) sees each
instance's current mask and gives up to K clicks on its error regions (regions of at least ``min_region_px``
pixels, chosen in proportion to their area, region centres or uniform in the region (``mode``), N(0,
``noise_sigma_px``) noise, the largest region first); no error region left means "mask is fine" (skip). A
first-click start gets the simulator's first positive click. Simulated time (documented, not measured):
``click_ms`` per click and ``decision_ms`` per round, recorded as the item's round times and the clicks' ``item_ms``,
so the report's time analyses have values to show.

``corrective_replay``: the clicks of a campaign's ``clicks.csv`` (``exports.corrective``), exactly as logged (full
precision, undone ones undone again right after they are made), given to a study of the same dataset. A logged
instance's clicks go to the first new item of that instance (image and object), the next logged item of it to the
next, in the log's session order; a round without logged clicks ends the item with its mask (as "mask is fine"
did), and the last logged round ends it with "done". With the same settings and segmenter the replay makes the same
masks, byte for byte: every model update is a function of the image, the instance, the round and the clicks
(``collector.services.corrective``, ``segmenters.embedded``).

Model updates run inline here (``inline=True``, the default: one process, deterministic) or on the ``models`` queue
(``inline=False``: then the call waits for each update to be stored).
"""

from __future__ import annotations

import csv
import logging
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from collector.models import CorrectiveItem, Study
from collector.services.corrective import (
    CorrectiveRefused,
    corrective_click_record,
    corrective_click_undo,
    corrective_item_skip,
    corrective_items_ensure,
    corrective_round_submit,
    corrective_session_finish,
    corrective_update_apply,
    round_budget,
)
from collector.services.masks import instance_masks, read_image, read_mask
from collector.services.session_start import SessionStartRefused, session_start
from collector.services.workers import worker_get_or_create

logger = logging.getLogger(__name__)

SIMULATED_PLATFORM = "simulated"
REPLAY_PLATFORM = "replay"


@dataclass
class SimulationResult:
    sessions: int = 0
    items: int = 0
    updates: int = 0
    update_seconds: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0
    replayed_clicks: int = 0  # corrective_replay: logged clicks given to the study


@dataclass(frozen=True)
class PlannedClick:
    """A click an annotator makes in a round (canonical image pixels); ``undone``: undone right after."""

    x: float
    y: float
    is_positive: bool
    undone: bool = False
    item_ms: float | None = None
    pointer_type: str = ""


@dataclass(frozen=True)
class PlannedRound:
    """What an annotator does in one round: its clicks, then submit (``finish``: "done", the item ends after the
    update); no live click means "mask is fine". ``round_ms``: the round's time, when known."""

    clicks: list[PlannedClick]
    round_ms: float | None = None
    finish: bool = False


class _Annotator(Protocol):
    def plan(self, *, mask: np.ndarray | None, round_number: int, budget: int) -> PlannedRound: ...


class _Simulated:
    """The seed-001 simulated annotator on one instance (the module docstring)."""

    def __init__(self, simulator, *, gt: np.ndarray, click_ms: float, decision_ms: float) -> None:
        self.simulator, self.gt = simulator, gt
        self.click_ms, self.decision_ms, self.item_ms = click_ms, decision_ms, 0.0

    def plan(self, *, mask: np.ndarray | None, round_number: int, budget: int) -> PlannedRound:
        clicks = self.simulator.next_clicks(np.zeros_like(self.gt) if mask is None else mask)
        if round_number == 0:
            clicks = [c for c in clicks if c.is_positive]
        planned = []
        for click in clicks[:budget]:
            self.item_ms += self.click_ms
            planned.append(
                PlannedClick(x=click.x, y=click.y, is_positive=click.is_positive, item_ms=self.item_ms)
            )
        if not planned:
            return PlannedRound(clicks=[], round_ms=self.decision_ms)
        self.item_ms += self.decision_ms
        return PlannedRound(clicks=planned, round_ms=len(planned) * self.click_ms + self.decision_ms)


class _Replayed:
    """A logged item's clicks, round by round."""

    def __init__(self, rounds: dict[int, list[PlannedClick]]) -> None:
        self.rounds = rounds

    def plan(self, *, mask: np.ndarray | None, round_number: int, budget: int) -> PlannedRound:
        clicks = self.rounds.get(round_number, [])
        return PlannedRound(clicks=clicks, finish=bool(clicks) and round_number >= max(self.rounds))


AnnotatorFactory = Callable[[CorrectiveItem], _Annotator]


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


def _corrective_study(study_id: int) -> Study:
    study = Study.objects.get(pk=study_id)
    if not study.is_corrective:
        raise CorrectiveRefused(
            f"study {study_id} is a {study.kind} study, not a corrective campaign.", status=400
        )
    return study


def _work_item(
    *,
    session,
    item: CorrectiveItem,
    annotator: _Annotator,
    result: SimulationResult,
    inline: bool,
    timeout_s: float,
) -> None:
    """One item from its first round to its end: the annotator's rounds, the model updates between them."""
    study = session.study
    while True:
        item = CorrectiveItem.objects.select_related("current_mask").get(pk=item.pk)
        if item.state == CorrectiveItem.State.UPDATING:
            result.updates += 1
            if inline:
                began = time.perf_counter()
                corrective_update_apply(item_id=item.pk, round_number=item.round)
                result.update_seconds.append(time.perf_counter() - began)
            else:
                _wait_stored(item.pk, item.round, timeout_s)
            continue
        if item.state != CorrectiveItem.State.CLICKING:
            return
        mask = read_mask(item.current_mask.file.name) if item.current_mask_id else None
        planned = annotator.plan(
            mask=mask, round_number=item.round, budget=round_budget(study=study, round_number=item.round)
        )
        for order, click in enumerate(planned.clicks):
            key = f"{session.worker.platform}-{session.pk}-{item.pk}-{item.round}-{order}"
            corrective_click_record(session=session, item_id=item.pk, idempotency_key=key, x=click.x, y=click.y,
                                    is_positive=click.is_positive, pointer_type=click.pointer_type,
                                    item_ms=click.item_ms)  # fmt: skip
            if click.undone:
                corrective_click_undo(session=session, item_id=item.pk, idempotency_key=key)
        if not any(not click.undone for click in planned.clicks):
            if item.current_mask_id is None:  # no object pixel to click: nothing can be made
                return
            corrective_item_skip(session=session, item_id=item.pk, round_ms=planned.round_ms)
            continue
        corrective_round_submit(session=session, item_id=item.pk, round_number=item.round,
                                round_ms=planned.round_ms, finish=planned.finish, send=not inline)  # fmt: skip


def _work_study(
    study: Study,
    *,
    annotator_for: AnnotatorFactory,
    worker_prefix: str,
    platform: str,
    device: str,
    max_sessions: int | None,
    inline: bool,
    update_timeout_s: float,
) -> SimulationResult:
    """Sessions of new workers until no instance is left for one (or ``max_sessions``), each item worked."""
    result = SimulationResult()
    started = time.perf_counter()
    while max_sessions is None or result.sessions < max_sessions:
        worker = worker_get_or_create(platform=platform, external_id=f"{worker_prefix}-{result.sessions}")
        try:
            session = session_start(study=study, worker=worker, device=device)
        except SessionStartRefused:
            break
        result.sessions += 1
        for item in corrective_items_ensure(session=session, send=not inline):
            result.items += 1
            item = CorrectiveItem.objects.select_related("trial__target__instance__image").get(pk=item.pk)
            _work_item(session=session, item=item, annotator=annotator_for(item), result=result, inline=inline,
                       timeout_s=update_timeout_s)  # fmt: skip
        corrective_session_finish(session_id=session.pk)
    result.wall_seconds = time.perf_counter() - started
    return result


def corrective_simulate(
    *,
    study_id: int,
    device: str = "pc",
    seed: int = 0,
    max_sessions: int | None = None,
    noise_sigma_px: float | None = None,
    min_region_px: int | None = None,
    mode: str = "center",
    click_ms: float = 2500.0,
    decision_ms: float = 1500.0,
    inline: bool = True,
    update_timeout_s: float = 300.0,
) -> SimulationResult:
    """Work the published corrective study ``study_id`` with simulated annotators on ``device`` until no
    instance is left for a new simulated worker (or ``max_sessions`` sessions). ``noise_sigma_px`` and
    ``min_region_px`` default to the seed's (3 px, 100 px). Returns counts and the model update durations
    (s, inline mode)."""
    from benchmark.clickers import SEED_001_MIN_REGION_PX, SEED_001_NOISE_SIGMA_PX, AnnotatorSimulator

    study = _corrective_study(study_id)

    def annotator_for(item: CorrectiveItem) -> _Annotator:
        instance = item.trial.target.instance
        gt, ignore = instance_masks(instance)
        # One generator per instance, from the seed and the instance's name: the same clicks whatever order the
        # allocation hands the instances out in (it shuffles), so a dry run repeats exactly.
        simulator = AnnotatorSimulator.seed_001(
            rng=np.random.default_rng([seed, zlib.crc32(instance.first_round_full_stem.encode())]),
            clicks_per_round=study.corrective_clicks_per_round,
            mode=mode,
            noise_sigma_px=SEED_001_NOISE_SIGMA_PX if noise_sigma_px is None else noise_sigma_px,
            min_region_px=SEED_001_MIN_REGION_PX if min_region_px is None else min_region_px,
        )
        simulator.start(
            image=read_image(instance.image), gt=gt, ignore=np.zeros_like(gt) if ignore is None else ignore
        )
        return _Simulated(simulator, gt=gt, click_ms=click_ms, decision_ms=decision_ms)

    result = _work_study(study, annotator_for=annotator_for, worker_prefix=f"sim-{seed}", platform=SIMULATED_PLATFORM,
                         device=device, max_sessions=max_sessions, inline=inline,
                         update_timeout_s=update_timeout_s)  # fmt: skip
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


#: The columns of clicks.csv a replay reads (``exports.corrective.CLICK_COLUMNS``).
REPLAY_COLUMNS = ("session_id", "item_id", "image", "object", "round", "order", "sign", "x", "y", "pointer_type",
                  "item_ms", "undone")  # fmt: skip


def read_click_log(path) -> dict[tuple[str, str], list[dict[int, list[PlannedClick]]]]:
    """A campaign's ``clicks.csv``, per instance (image stem, object stem): each logged item's clicks by round,
    the items in the log's order. Raises CorrectiveRefused naming the row and column at fault."""
    path = Path(path)
    items: dict[tuple[str, str], dict[str, dict[int, list[tuple[int, PlannedClick]]]]] = defaultdict(dict)
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [column for column in REPLAY_COLUMNS if column not in (reader.fieldnames or [])]
        if missing:
            raise CorrectiveRefused(
                f"{path}: no column(s) {', '.join(missing)}; give the clicks.csv of export_corrective.",
                status=400,
            )
        for line, row in enumerate(reader, start=2):
            try:
                click = PlannedClick(
                    x=float(row["x"]), y=float(row["y"]), is_positive={"positive": True, "negative": False}[row["sign"]],
                    undone=row["undone"] == "1", item_ms=float(row["item_ms"]) if row["item_ms"] else None,
                    pointer_type=row["pointer_type"],
                )  # fmt: skip
                round_number, order = int(row["round"]), int(row["order"])
            except (KeyError, ValueError) as error:
                raise CorrectiveRefused(
                    f"{path} line {line}: {error!r} is not a logged click; {row}", status=400
                ) from None
            rounds = items[(row["image"], row["object"])].setdefault(row["item_id"], defaultdict(list))
            rounds[round_number].append((order, click))
    return {
        instance: [
            {
                number: [click for _, click in sorted(clicks, key=lambda pair: pair[0])]
                for number, clicks in rounds.items()
            }
            for rounds in logged.values()
        ]
        for instance, logged in items.items()
    }


def corrective_replay(
    *, study_id: int, clicks_csv, device: str = "pc", inline: bool = True, update_timeout_s: float = 300.0
) -> SimulationResult:
    """Work the published corrective study ``study_id`` with the clicks of a campaign's log (the module
    docstring); an instance the log has no clicks for ends with its first mask."""
    study = _corrective_study(study_id)
    logged = read_click_log(clicks_csv)
    used: defaultdict[tuple[str, str], int] = defaultdict(int)
    result_clicks = 0

    def annotator_for(item: CorrectiveItem) -> _Annotator:
        nonlocal result_clicks
        instance = item.trial.target.instance
        key = (instance.image.stem, instance.object_stem)
        candidates = logged.get(key, [])
        rounds = candidates[used[key]] if used[key] < len(candidates) else {}
        used[key] += 1
        result_clicks += sum(len(clicks) for clicks in rounds.values())
        return _Replayed(rounds)

    result = _work_study(study, annotator_for=annotator_for, worker_prefix=f"replay-{study.pk}",
                         platform=REPLAY_PLATFORM, device=device, max_sessions=None, inline=inline,
                         update_timeout_s=update_timeout_s)  # fmt: skip
    result.replayed_clicks = result_clicks
    logger.info(
        "corrective replay done",
        extra={
            "study_id": study_id,
            "sessions": result.sessions,
            "items": result.items,
            "clicks": result_clicks,
        },
    )
    return result
