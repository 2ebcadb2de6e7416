"""A click session in the style of the DAVIS interactive framework, for any segmenter.

::

    with ClickSession(dataset=open_dataset(root, "grabcut"), clicker="baseline") as sess:
        while sess.next():
            sample, clicks, is_new = sess.get_clicks(only_last=False)
            if is_new:
                embedding = predictor.encode(sample.load_image())
            prediction = predictor.predict(embedding, clicks, sess.previous_logits)
            sess.submit_masks(prediction)       # or probabilities / a bool mask (+ logits=...)
        report = sess.get_report()              # one row per sample x click
        summary = sess.get_global_summary()     # NoC, NoF, mIoU curve, IoU-AuC, time per click

A *sample* of the session is one trajectory: an instance under one clicker and group (``baseline``:
one per instance; ``group``: one per instance and clicking group; ``replay``: one per real first
click; ``annotator``: one per instance, k clicks per round). The service side (GT, clicker, IoU)
never leaves the session; the caller only sees the image, the clicks and its own masks.

Differences from DAVIS (``../shared/spec/session-and-eval.md`` §4.2): an explicit state machine
raises :class:`SessionStateError` on every out-of-order call (also ``get_clicks`` before ``next`` and
after the end); a late submission is not dropped silently but returns status ``"timed_out"`` and
appears in the report; time is measured with ``perf_counter`` and only between ``get_clicks`` and
``submit_masks`` (the caller's model time, never ours); shuffling is seeded and the seed is in the
summary.
"""

from __future__ import annotations

import enum
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmark.clickers import (
    DEFAULT_GROUP_BOUNDS,
    AnnotatorSimulator,
    BaselineClicker,
    Clicker,
    GroupClicker,
    MapFn,
    ReplayClicker,
    Round1Cache,
)
from benchmark.datasets import Dataset, Sample, SampleKey
from benchmark.engine import trajectory_rng
from benchmark.metrics import iou, iou_auc, miou_at, noc, quality_time_curve
from benchmark.report import iou_series, seconds_series, session_statistics, session_values
from segmenters.base import Click

REPORT_COLUMNS = (
    "dataset",
    "sample_id",
    "image_stem",
    "object_stem",
    "clicker",
    "group",
    "click_index",
    "x",
    "y",
    "is_positive",
    "iou",
    "timing_s",
    "status",
    "round",
    "session_id",
)
CLICKERS = ("baseline", "group", "replay", "annotator")


class SessionStateError(RuntimeError):
    """A session method was called out of order (the message says what to call first)."""


class _State(enum.Enum):
    CREATED = "created"
    READY = "ready"  # entered, next() not called yet
    AWAITING_GET = "awaiting_get"  # next() returned True
    AWAITING_MASK = "awaiting_mask"  # get_clicks() returned clicks
    FINISHED = "finished"


@dataclass(frozen=True)
class SubmitResult:
    """What :meth:`ClickSession.submit_masks` did with a submission."""

    status: str  # "accepted" | "timed_out"
    iou: float  # NaN when timed out
    round: int  # 1-based round of the sample
    clicks: int  # clicks so far in the sample


@dataclass
class _Unit:
    sample: Sample
    group: str
    make_clicker: Callable[[], Clicker]


def sample_id(key: SampleKey) -> str:
    """The RClicks round-1 full_stem of an instance: ``image_stem`` or ``image_stem_______object_stem``."""
    return f"{key.image_stem}_______{key.object_stem}" if key.object_stem else key.image_stem


class ClickSession:
    """Simulated-user session over a dataset (context manager).

    Args:
      dataset: an opened :class:`~benchmark.datasets.Dataset` (or a list of its samples).
      clicker: ``"baseline"`` (RITM), ``"group"`` (clicking groups of ``map_fn``), ``"replay"``
        (real first clicks of ``real_clicks``), ``"annotator"`` (seed-001 simulator).
      max_clicks: clicks per sample (20); a sample also ends when the clicker has no click left.
      max_time_s: budget per sample of caller time (get_clicks -> submit_masks), None = unlimited.
      threshold: applied to float submissions (probabilities strictly above it are object).
      target_ious: thresholds of the summary's NoC/NoF.
      stop_at_target: end a sample once IoU >= max(target_ious) (default: run all clicks so
        every mIoU@k is defined).
      map_fn, group_bounds: clickability map and groups for ``clicker="group"``.
      click_model: instead of ``map_fn``, a click model by name (``uniform``/``ud``, ``dt``, ``sm``, ``si``)
        or checkpoint path, loaded with :func:`benchmark.clickability.load_click_model`; the evaluation
        server takes the same names (default there: ``dt``). The summary records the model's name.
      real_clicks: {SampleKey: (n, 2) float (x, y)} for ``clicker="replay"``.
      annotator_options: keyword arguments of :class:`~benchmark.clickers.AnnotatorSimulator`
        (``noise_sigma_px``, ``min_region_px``, ``mode``, ``clicks_per_round``).
      seed: seeds shuffling and every random clicker (same streams as the engine's).
      shuffle: visit samples in a seeded random order.
      report_save_dir: if given, the report CSV and summary JSON are written there at the end.
    """

    # The current sample's state: set by _advance before any method reads it (next() reads it once
    # _unit_index >= 0; get_clicks, submit_masks and _record only in the states that follow a next()).
    _gt: np.ndarray
    _ignore: np.ndarray
    _pred: np.ndarray
    _clicker: Clicker
    _clicks: list[Click]
    _last_clicks: list[Click]
    _round: int
    _elapsed_s: float
    _unit_done: bool
    _new_sample: bool
    _clock: float  # perf_counter() at the last get_clicks
    _image_cache: tuple[Path, np.ndarray]  # the last loaded image, by path

    def __new__(cls, *args, host: str | None = None, **kwargs):
        if host is not None:  # the same session against an evaluation server (benchmark/remote.py)
            from benchmark.remote import RemoteClickSession

            return RemoteClickSession(host=host, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        *,
        dataset: Dataset | Sequence[Sample],
        clicker: str = "baseline",
        max_clicks: int = 20,
        max_time_s: float | None = None,
        threshold: float = 0.5,
        target_ious: Sequence[float] = (0.85, 0.90),
        stop_at_target: bool = False,
        map_fn: MapFn | None = None,
        click_model: str | None = None,
        group_bounds: Sequence[tuple[float, float]] = DEFAULT_GROUP_BOUNDS,
        real_clicks: dict[SampleKey, np.ndarray] | None = None,
        annotator_options: dict | None = None,
        seed: int = 0,
        shuffle: bool = False,
        report_save_dir: Path | None = None,
        host: str | None = None,  # remote only (see __new__); None = this local session
        key: str | None = None,
    ) -> None:
        if clicker not in CLICKERS:
            raise ValueError(f"clicker={clicker!r} is unknown; use one of {CLICKERS}.")
        if map_fn is not None and click_model is not None:
            raise ValueError("Pass map_fn or click_model, not both.")
        if clicker == "group" and map_fn is None and click_model is not None:
            from benchmark.clickability import load_click_model

            map_fn = load_click_model(click_model)
        if clicker == "group" and map_fn is None:
            raise ValueError(
                "clicker='group' needs click_model='dt' (or 'uniform', 'sm', 'si', a checkpoint) or "
                "map_fn=(image, gt, error) -> (H, W) clickability map."
            )
        if clicker == "replay" and real_clicks is None:
            raise ValueError("clicker='replay' needs real_clicks={SampleKey: (n, 2) array of (x, y)}.")
        if max_clicks < 1:
            raise ValueError(f"max_clicks={max_clicks} must be at least 1.")
        if max_time_s is not None and max_time_s <= 0:
            raise ValueError(f"max_time_s={max_time_s} must be positive or None.")
        self.samples = list(dataset.samples if isinstance(dataset, Dataset) else dataset)
        self.clicker_name, self.max_clicks, self.max_time_s = clicker, int(max_clicks), max_time_s
        self.threshold, self.target_ious = float(threshold), tuple(float(t) for t in target_ious)
        self.stop_at_target, self.map_fn = stop_at_target, map_fn
        self.click_model_name = _map_name(map_fn) if map_fn is not None else None
        self.group_bounds = tuple(tuple(b) for b in group_bounds)
        self.real_clicks = real_clicks or {}
        self.annotator_options = dict(annotator_options or {})
        self.seed, self.shuffle = int(seed), shuffle
        self.report_save_dir = Path(report_save_dir) if report_save_dir else None
        self.session_id = secrets.token_hex(8)
        self._state = _State.CREATED
        self._units: list[_Unit] = []
        self._unit_index = -1
        self._previous_logits: Any = None  # model-specific, as segmenters.base.Prediction.logits
        self._rows: list[dict] = []
        self._summary: dict | None = None

    # -- context manager ---------------------------------------------------------------------------

    def __enter__(self) -> ClickSession:
        if self._state is not _State.CREATED:
            raise SessionStateError("A ClickSession can be entered only once; create a new session.")
        self._units = self._build_units()
        if self.shuffle:
            order = np.random.default_rng(self.seed).permutation(len(self._units))
            self._units = [self._units[i] for i in order]
        self._state = _State.READY
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._state is not _State.FINISHED and self.report_save_dir is not None:
            # an interrupted session still leaves its data behind
            self._write_files(self.report_save_dir, suffix=".partial")
        return None

    def _build_units(self) -> list[_Unit]:
        units: list[_Unit] = []
        # The current instance's round-1 map and round-1 cache (kept for one instance at a time).
        first_rounds: dict[SampleKey, tuple[np.ndarray, Round1Cache]] = {}

        def group_factory(
            map_fn: MapFn, sample: Sample, index: int, low: float, high: float
        ) -> Callable[[], Clicker]:
            def make() -> Clicker:
                # Round 1 is the same for every group of an instance: its map, error region, deepest
                # point and sorted weights are computed once, as the engine does (never across instances).
                if sample.key not in first_rounds:
                    first_rounds.clear()
                    gt, ignore = sample.load_masks()
                    first_rounds[sample.key] = (map_fn(self._image(sample), gt, gt & ~ignore), {})
                first_map, round1_cache = first_rounds[sample.key]
                rng = trajectory_rng(
                    seed=self.seed, key=sample.key, stream=1, group=index, sample=0, common=False
                )
                return GroupClicker(map_fn=map_fn, low=low, high=high, rng=rng, first_round_map=first_map,
                                    shared_cache=round1_cache)  # fmt: skip

            return make

        for sample in self.samples:
            if self.clicker_name == "baseline":
                units.append(_Unit(sample, "base", BaselineClicker))
            elif self.clicker_name == "group":
                map_fn = self.map_fn
                assert map_fn is not None  # __init__ refuses clicker="group" without map_fn or click_model
                for index, (low, high) in enumerate(self.group_bounds):
                    make = group_factory(map_fn, sample, index, low, high)
                    units.append(_Unit(sample, f"G{index + 1}", make))
            elif self.clicker_name == "replay":
                recorded = np.asarray(self.real_clicks.get(sample.key, np.zeros((0, 2))), dtype=np.float64)
                for j in range(len(recorded)):
                    units.append(_Unit(sample, f"user{j + 1}", _replay_factory(recorded[j : j + 1])))
            else:
                rng = trajectory_rng(
                    seed=self.seed, key=sample.key, stream=4, group=0, sample=0, common=False
                )
                units.append(_Unit(sample, "annotator", _annotator_factory(rng, self.annotator_options)))
        return units

    # -- the loop ----------------------------------------------------------------------------------

    def next(self) -> bool:
        """Prepare the next interaction; False when every sample is done (the summary is then ready)."""
        if self._state is _State.CREATED:
            raise SessionStateError("Call next() inside 'with ClickSession(...) as sess:'.")
        if self._state is _State.AWAITING_MASK:
            raise SessionStateError(
                "next() called before submit_masks(): submit a mask for the current clicks first."
            )
        if self._state is _State.FINISHED:
            return False
        while True:
            if self._unit_index >= 0 and not self._unit_done:
                new_clicks = self._clicker.next_clicks(self._pred)
                new_clicks = new_clicks[: self.max_clicks - len(self._clicks)]
                if new_clicks:
                    self._last_clicks = list(new_clicks)
                    self._clicks.extend(new_clicks)
                    self._state = _State.AWAITING_GET
                    return True
            if not self._advance():
                self._finish()
                return False

    def _advance(self) -> bool:
        self._unit_index += 1
        if self._unit_index >= len(self._units):
            return False
        unit = self._units[self._unit_index]
        gt, ignore = unit.sample.load_masks()
        self._gt, self._ignore = gt, ignore
        self._pred = np.zeros(gt.shape, dtype=bool)
        self._previous_logits = None
        self._clicks = []
        self._last_clicks = []
        self._round = 0
        self._elapsed_s = 0.0
        self._unit_done = False
        self._new_sample = True
        self._clicker = unit.make_clicker()
        self._clicker.start(image=self._image(unit.sample), gt=gt, ignore=ignore)
        return True

    def _image(self, sample: Sample) -> np.ndarray:
        cached = getattr(self, "_image_cache", None)
        if cached is None or cached[0] != sample.image_path:
            self._image_cache = (sample.image_path, sample.load_image())
        return self._image_cache[1]

    def get_clicks(self, only_last: bool = False) -> tuple[Sample, list[Click], bool]:
        """(sample, clicks, is_new_sample) for the current interaction.

        ``clicks``: all clicks of the sample so far (or only this round's with ``only_last``), as
        ``Click(x, y, is_positive)`` in loaded-image pixels. ``is_new_sample`` is True on the first
        interaction of a sample (encode its image then). Starts the interaction clock.
        """
        if self._state is _State.FINISHED:
            raise SessionStateError("get_clicks() called after the session ended (next() returned False).")
        if self._state is _State.AWAITING_MASK:
            raise SessionStateError("get_clicks() called twice: call submit_masks() with a mask first.")
        if self._state is not _State.AWAITING_GET:
            raise SessionStateError("get_clicks() called before next(): call sess.next() first.")
        is_new = self._new_sample
        self._new_sample = False
        self._state = _State.AWAITING_MASK
        self._clock = time.perf_counter()
        unit = self._units[self._unit_index]
        return unit.sample, list(self._last_clicks if only_last else self._clicks), is_new

    @property
    def previous_logits(self):
        """What to pass as ``predictor.predict(..., previous_logits)``: the logits submitted for this
        sample's previous round, None on its first round (the engine hands them over the same way)."""
        return self._previous_logits if self._unit_index >= 0 else None

    def submit_masks(self, mask_or_probs, logits=None) -> SubmitResult:
        """Submit the prediction for the current clicks.

        ``mask_or_probs``: a ``segmenters.base.Prediction`` (its probabilities are thresholded and its
        logits kept for :attr:`previous_logits`), a bool (H, W) mask or float (H, W) probabilities.
        ``logits``: with an array, what :attr:`previous_logits` returns next round (default: the mask).
        """
        timing_s = time.perf_counter() - getattr(self, "_clock", time.perf_counter())
        if hasattr(mask_or_probs, "probabilities"):
            if logits is None:
                logits = getattr(mask_or_probs, "logits", None)
            mask_or_probs = mask_or_probs.probabilities
        if self._state is not _State.AWAITING_MASK:
            raise SessionStateError(
                "submit_masks() called before get_clicks(): call next() and get_clicks() first."
            )
        array = np.asarray(mask_or_probs)
        if array.shape != self._gt.shape:
            raise ValueError(
                f"submit_masks: got shape {array.shape}, expected the sample's (H, W) = {self._gt.shape}."
            )
        self._state = _State.AWAITING_GET
        self._round += 1
        self._elapsed_s += timing_s
        unit = self._units[self._unit_index]
        if self.max_time_s is not None and self._elapsed_s > self.max_time_s:
            self._unit_done = True
            self._record(unit, float("nan"), timing_s, "timed_out")
            return SubmitResult("timed_out", float("nan"), self._round, len(self._clicks))
        mask = array if array.dtype == bool else array > self.threshold
        self._pred = mask
        self._previous_logits = mask if logits is None else logits
        value = iou(mask, self._gt, self._ignore)
        self._record(unit, value, timing_s, "accepted")
        if len(self._clicks) >= self.max_clicks or (self.stop_at_target and value >= max(self.target_ious)):
            self._unit_done = True
        return SubmitResult("accepted", value, self._round, len(self._clicks))

    def _record(self, unit: _Unit, value: float, timing_s: float, status: str) -> None:
        key = unit.sample.key
        first_index = len(self._clicks) - len(self._last_clicks)
        for offset, click in enumerate(self._last_clicks):
            self._rows.append(
                {
                    "dataset": key.dataset,
                    "sample_id": sample_id(key),
                    "image_stem": key.image_stem,
                    "object_stem": key.object_stem,
                    "clicker": self.clicker_name,
                    "group": unit.group,
                    "click_index": first_index + offset + 1,
                    "x": click.x,
                    "y": click.y,
                    "is_positive": click.is_positive,
                    "iou": value,
                    "timing_s": timing_s,
                    "status": status,
                    "round": self._round,
                    "session_id": self.session_id,
                }
            )

    def _finish(self) -> None:
        self._state = _State.FINISHED
        self._summary = self._compute_summary()
        if self.report_save_dir is not None:
            self._write_files(self.report_save_dir, suffix="")

    # -- results -----------------------------------------------------------------------------------

    def get_report(self) -> pd.DataFrame:
        """One row per sample x click, columns :data:`REPORT_COLUMNS` (fresh 0..n-1 index)."""
        return pd.DataFrame(self._rows, columns=list(REPORT_COLUMNS))

    def get_global_summary(self, save_file: str | Path | None = None) -> dict:
        """NoC/NoF at ``target_ious``, the mIoU curve, mIoU@k, IoU-AuC, time per click, per group.

        Raises :class:`SessionStateError` before the session ended. Curves carry the last accepted IoU
        forward over clicks a sample did not reach (stopped early or timed out; 0 before any).
        """
        if self._state is not _State.FINISHED or self._summary is None:
            raise SessionStateError("get_global_summary() is available once next() has returned False.")
        if save_file is not None:
            Path(save_file).write_text(json.dumps(self._summary, indent=1), encoding="utf-8")
        return self._summary

    def _series(self, frame: pd.DataFrame) -> list[np.ndarray]:
        """Per sample, the IoU after each click 1..max_clicks (carried forward)."""
        return [values for _, _, values in iou_series(frame, self.max_clicks)]

    def _summarize_frame(self, frame: pd.DataFrame) -> dict:
        series = self._series(frame)
        curve = np.mean(series, axis=0) if series else np.zeros(self.max_clicks)
        timed = (
            quality_time_curve(np.asarray(series), np.asarray(seconds_series(frame, self.max_clicks)))
            if series
            else {"seconds": [0.0], "miou": [0.0], "auc": float("nan")}
        )
        accepted = frame[frame["status"] == "accepted"].drop_duplicates(["sample_id", "group", "round"])
        nocs_at: dict[str, float] = {}  # filled below, after the curve values
        nofs_at: dict[str, int] = {}
        out = {
            "samples": len(series),
            "noc": nocs_at,
            "nof": nofs_at,
            "miou_curve": curve.tolist(),
            "miou_at": {str(k): v for k, v in miou_at(curve).items()},
            "iou_auc": float(np.mean([iou_auc(s) for s in series])) if series else float("nan"),
            # mIoU against the method's time (the caller's get_clicks -> submit_masks), with its AUC
            "time_curve": {"seconds": timed["seconds"], "miou": timed["miou"]},
            "time_auc": timed["auc"],
            "seconds_per_click": float(
                accepted["timing_s"].sum() / max(len(frame[frame["status"] == "accepted"]), 1)
            ),
            "timed_out": int(
                frame[frame["status"] == "timed_out"]
                .drop_duplicates(["sample_id", "group", "round"])
                .shape[0]
            ),
        }
        for target in self.target_ious:
            tag = f"{round(target * 100):d}"
            nocs = [noc(s, target, max_clicks=self.max_clicks) for s in series]
            nocs_at[tag] = float(np.mean(nocs)) if nocs else float("nan")
            nofs_at[tag] = int(sum(1 for n in nocs if n >= self.max_clicks))
        return out

    def _compute_summary(self) -> dict:
        frame = self.get_report()
        summary = self._summarize_frame(frame)
        summary.update(session_id=self.session_id, seed=self.seed, clicker=self.clicker_name,
                       max_clicks=self.max_clicks, threshold=self.threshold)  # fmt: skip
        if self.clicker_name == "group":
            summary["groups"] = {
                group: self._summarize_frame(rows) for group, rows in frame.groupby("group", sort=False)
            }
            summary["click_model"] = self.click_model_name
            summary["group_bounds"] = [list(bounds) for bounds in self.group_bounds]
            if len(frame):
                # RClicks statistics that need no baseline run (ΔGR, ΔHH, Sample NoC ± STD ...);
                # ΔSB: benchmark.report.session_statistics(values, baseline values)
                values = session_values(frame, max_clicks=self.max_clicks, thresholds=self.target_ious)
                summary["statistics"] = session_statistics(values)
        return summary

    def _write_files(self, directory: Path, *, suffix: str) -> None:
        session_files_write(directory, self.session_id, self.get_report(), self._summary, suffix=suffix)


def session_files_write(
    directory: Path, session_id: str | None, report: pd.DataFrame, summary: dict | None, *, suffix: str
) -> None:
    """A session's files in ``directory`` (created): ``clicksession_<id><suffix>.csv``, the report, and, once
    there is a summary, ``clicksession_<id><suffix>.json``. The local and the remote session write the same."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / f"clicksession_{session_id}"
    report.to_csv(stem.with_name(stem.name + f"{suffix}.csv"), index=False)
    if summary is not None:
        stem.with_name(stem.name + f"{suffix}.json").write_text(
            json.dumps(summary, indent=1), encoding="utf-8"
        )


def _map_name(map_fn) -> str:
    """The name a click model goes by in summaries (``ClickModel.name``, else the function's name)."""
    return str(getattr(map_fn, "name", "") or getattr(map_fn, "__name__", "") or type(map_fn).__name__)


def _replay_factory(clicks_xy: np.ndarray) -> Callable[[], Clicker]:
    return lambda: ReplayClicker(clicks_xy)


def _annotator_factory(rng: np.random.Generator, options: dict[str, Any]) -> Callable[[], Clicker]:
    return lambda: AnnotatorSimulator(rng=rng, **options)
