"""The RClicks benchmark engine: simulate click trajectories on every instance and save the IoUs.

Per instance (``evaluate_instance``), with one image embedding reused by every click:

* ``Base``: the RITM baseline clicker, ``max_clicks`` rounds;
* ``G1..G10``: one trajectory per (group, sample) with :class:`~benchmark.clickers.GroupClicker`;
  the round-1 clickability map is computed once and shared by all groups;
* optional merged halves ``[0, 0.5]`` and ``[0.5, 1]`` (for the paper's ΔHH);
* ``User``: one single-click trajectory per real first-round click;
* ``Sample``: as many single clicks sampled from the whole round-1 map ([0, 1]) as there are real clicks.

Results are written per instance to ``<out_dir>/instances/<key>.npz`` (plain arrays plus the explicit
key), so a run resumes after an interruption and the report can be rebuilt from the files.

Random streams (protocol §8 item 22): by default every (instance, group, sample) trajectory gets its
own independent stream derived from ``(seed, instance key, group, sample)``, so groups do not share
noise and results do not depend on instance order or on which process ran them.
``common_random_numbers=True`` gives every group of an instance the same stream instead, as the
reference does (it re-seeds at the start of each image).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import quote

import numpy as np

from benchmark.clickers import (
    DEFAULT_GROUP_BOUNDS,
    BaselineClicker,
    Clicker,
    GroupClicker,
    MapFn,
    ReplayClicker,
    Round1Cache,
    clicks_to_array,
)
from benchmark.datasets import Sample, SampleKey
from benchmark.metrics import DEFAULT_MAX_CLICKS, InstanceIoU
from segmenters.base import Click, Embedding, Predictor
from segmenters.cache import EmbeddingCache

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PARENT_WATCH_SECONDS = 1.0
HALF_BOUNDS: tuple[tuple[float, float], ...] = ((0.0, 0.5), (0.5, 1.0))
RESULT_VERSION = 3  # 2: GrabCut seeded per prediction, timings out of the files; 3: exact distance transforms
TIMING_FIELDS = ("base_seconds", "group_seconds", "encode_seconds", "map_seconds", "total_seconds")
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed member dates: equal results give equal bytes


class EngineError(RuntimeError):
    """The engine cannot run as configured (the message says what to change)."""


@dataclass(frozen=True)
class EngineConfig:
    """Everything that changes the numbers of a run (stored with every instance file).

    ``threshold``: probability threshold (strictly greater); None = the predictor's own (0.49/0.5).
    ``group_bounds``: clicking groups as (low, high) mass fractions, G1 first.
    ``samples_per_group``: trajectories per group (the paper uses 1; more reduce the noise).
    ``halves``: also sample the merged halves [0, 0.5] and [0.5, 1] (for the paper's ΔHH).
    ``reencode_per_click``: re-run ``encode`` before every prediction, as the reference does for
      SAM-like models (only for speed comparisons; the numbers are the same).
    """

    max_clicks: int = DEFAULT_MAX_CLICKS
    threshold: float | None = None
    group_bounds: tuple[tuple[float, float], ...] = DEFAULT_GROUP_BOUNDS
    samples_per_group: int = 1
    halves: bool = False
    seed: int = 42
    common_random_numbers: bool = False
    run_base: bool = True
    run_user: bool = True
    reencode_per_click: bool = False

    def __post_init__(self) -> None:
        if self.max_clicks < 1:
            raise EngineError(f"max_clicks={self.max_clicks} must be at least 1.")
        if self.samples_per_group < 1:
            raise EngineError(f"samples_per_group={self.samples_per_group} must be at least 1.")
        for low, high in self.group_bounds:
            if not 0.0 <= low <= high <= 1.0:
                raise EngineError(f"clicking group ({low}, {high}) must satisfy 0 <= low <= high <= 1.")

    def fingerprint(self) -> str:
        """JSON of the settings that change results (not the speed-only ``reencode_per_click``)."""
        data = asdict(self)
        data.pop("reencode_per_click")
        data["group_bounds"] = [list(b) for b in self.group_bounds]
        data["version"] = RESULT_VERSION
        return json.dumps(data, sort_keys=True)


@dataclass
class Trajectory:
    """One simulated trajectory: per round the IoU, the time of the model step, and all clicks."""

    ious: np.ndarray  # float64 (rounds,)
    seconds: np.ndarray  # float64 (rounds,) predict (+ encode when re-encoding) wall time
    clicks: np.ndarray  # float64 (n_clicks, 3) rows (x, y, is_positive)


@dataclass
class InstanceResult:
    """Per-instance arrays of one (method, dataset) run; G groups, S samples, C = max_clicks, n real clicks."""

    key: SampleKey
    method: str
    model_id: str
    config_json: str
    checkpoint_sha256: str = ""  # the predictor's Predictor.checkpoint_hash ("" for weight-free ones)
    base_iou: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (C,)
    base_clicks: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))  # (C, 3)
    base_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (C,)
    group_bounds: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # (G, 2)
    group_iou: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0)))  # (G, S, C)
    group_clicks: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0, 3)))  # (G, S, C, 3)
    group_seconds: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0)))  # (G, S, C)
    half_iou: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0)))  # (2, S, C) or empty
    half_clicks: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0, 3)))
    user_clicks: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # (n, 2) x, y
    user_iou: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (n,)
    sample_clicks: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))  # (n, 3)
    sample_iou: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (n,)
    encode_seconds: float = 0.0
    map_seconds: float = 0.0
    total_seconds: float = 0.0

    def save(self, path: Path) -> None:
        """Write the ``.npz`` and its ``.timing.json`` (atomically: a killed run never leaves a half-written file).

        The ``.npz`` holds only what the run computed (no wall times, fixed zip dates), so the same
        config gives byte-identical files whatever the number of workers, resumes or fan-out; the wall
        times go to the sidecar ``<name>.timing.json``.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {
            name: np.asarray(value)
            for name, value in vars(self).items()
            if name != "key" and name not in TIMING_FIELDS
        }
        arrays.update(
            dataset=np.asarray(self.key.dataset),
            image_stem=np.asarray(self.key.image_stem),
            object_stem=np.asarray(self.key.object_stem),
        )
        timing = {
            name: (value.tolist() if isinstance(value, np.ndarray) else value)
            for name, value in vars(self).items()
            if name in TIMING_FIELDS
        }
        timing_path = timing_file(path)
        partial = timing_path.with_name(timing_path.name + f".{os.getpid()}.partial")
        partial.write_text(json.dumps(timing, allow_nan=True), encoding="utf-8")
        os.replace(partial, timing_path)
        partial = path.with_name(path.name + f".{os.getpid()}.partial")
        with open(partial, "wb") as handle:
            _write_npz(handle, arrays)
        os.replace(partial, path)

    @classmethod
    def load(cls, path: Path) -> InstanceResult:
        with np.load(path, allow_pickle=False) as data:
            values = {name: data[name] for name in data.files}
        key = SampleKey(
            str(values.pop("dataset")), str(values.pop("image_stem")), str(values.pop("object_stem"))
        )
        for name in ("method", "model_id", "config_json"):
            values[name] = str(values[name])
        values["checkpoint_sha256"] = str(values.get("checkpoint_sha256", ""))
        timing_path = timing_file(path)
        if timing_path.is_file():
            try:
                timing = json.loads(timing_path.read_text(encoding="utf-8"))
            except ValueError:
                timing = {}  # wall times are informative only; a damaged sidecar loses them
            for name in TIMING_FIELDS:
                if name in timing:
                    values[name] = timing[name]
        for name in ("encode_seconds", "map_seconds", "total_seconds"):
            values[name] = float(values.get(name, 0.0))
        for name in ("base_seconds", "group_seconds"):
            if name in values:
                values[name] = np.asarray(values[name], dtype=np.float64)
        result = cls(key=key, **values)
        if result.base_seconds.size == 0 and result.base_iou.size:
            result.base_seconds = np.full(result.base_iou.shape, np.nan)
        if result.group_seconds.size == 0 and result.group_iou.size:
            result.group_seconds = np.full(result.group_iou.shape, np.nan)
        return result


def timing_file(path: Path) -> Path:
    """The wall-time sidecar of an instance file: ``<name>.timing.json`` next to ``<name>.npz``."""
    return path.with_name(path.name[: -len(".npz")] + ".timing.json")


def _write_npz(handle, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez`` with fixed member dates and order, so equal arrays give equal bytes."""
    import zipfile

    with zipfile.ZipFile(handle, mode="w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(name + ".npy", date_time=_ZIP_DATE)
            info.external_attr = 0o600 << 16
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(arrays[name]), allow_pickle=False)


def instance_file_name(key: SampleKey) -> str:
    """A file name that encodes the key reversibly: percent-encoded parts joined by ``--``."""

    def part(text: str) -> str:
        return quote(text, safe="").replace("-", "%2D").replace(".", "%2E")

    return f"{part(key.dataset)}--{part(key.image_stem)}--{part(key.object_stem)}.npz"


def trajectory_rng(*, seed: int, key: SampleKey, stream: int, group: int, sample: int, common: bool):
    """The random stream of one trajectory (see the module docstring for the two policies)."""
    key_hash = zlib.crc32("\x00".join((key.dataset, key.image_stem, key.object_stem)).encode("utf-8"))
    entropy = [seed, key_hash, stream] if common else [seed, key_hash, stream, group, sample]
    return np.random.default_rng(np.random.SeedSequence(entropy))


def run_trajectory(
    *,
    predictor: Predictor,
    embedding: Embedding,
    image: np.ndarray,
    gt: np.ndarray,
    ignore: np.ndarray,
    clicker: Clicker,
    max_clicks: int,
    threshold: float,
    reencode_per_click: bool = False,
    instance_iou: InstanceIoU | None = None,
    timing: dict[str, float] | None = None,
) -> Trajectory:
    """Run one trajectory from an empty mask until ``max_clicks`` clicks or the clicker stops.

    ``instance_iou``: the instance's prepared IoU (made here if None). ``timing``: if given, adds
    ``model_s`` (encode + predict) and ``own_s`` (clicker, threshold, IoU) wall seconds to it.
    """
    measure = instance_iou or InstanceIoU(gt, ignore)
    own_s = model_s = 0.0
    tick = time.perf_counter()
    clicker.start(image=image, gt=gt, ignore=ignore)
    pred = np.zeros(gt.shape, dtype=bool)
    clicks: list[Click] = []
    logits = None
    ious: list[float] = []
    seconds: list[float] = []
    while len(clicks) < max_clicks:
        new_clicks = clicker.next_clicks(pred)
        if not new_clicks:
            break
        clicks.extend(new_clicks[: max_clicks - len(clicks)])
        started = time.perf_counter()
        own_s += started - tick
        current = predictor.encode(image) if reencode_per_click else embedding
        prediction = predictor.predict(current, clicks, logits)
        tick = time.perf_counter()
        seconds.append(tick - started)
        model_s += tick - started
        logits = prediction.logits
        pred = np.asarray(prediction.probabilities) > threshold
        ious.append(measure(pred))
    if timing is not None:
        timing["own_s"] = timing.get("own_s", 0.0) + own_s + (time.perf_counter() - tick)
        timing["model_s"] = timing.get("model_s", 0.0) + model_s
        timing["clicks"] = timing.get("clicks", 0) + len(clicks)
    return Trajectory(
        ious=np.asarray(ious, dtype=np.float64),
        seconds=np.asarray(seconds, dtype=np.float64),
        clicks=clicks_to_array(clicks),
    )


def _pad(values: np.ndarray, length: int, fill: float = np.nan) -> np.ndarray:
    out = np.full((length,) + values.shape[1:], fill, dtype=np.float64)
    out[: len(values)] = values[:length]
    return out


EMBEDDING_CACHE_BYTES = int(os.environ.get("CLICKLAB_BENCHMARK_CACHE_BYTES", 256 * 1024 * 1024))
_CACHE = EmbeddingCache(EMBEDDING_CACHE_BYTES)


def clear_embedding_cache() -> None:
    """Forget the embeddings kept by this process (e.g. between measurements)."""
    _CACHE.clear()


def _cached_embedding(predictor: Predictor, image: np.ndarray) -> tuple[Embedding, float]:
    """(embedding, encode seconds; 0.0 on a cache hit), keyed by image content, model and checkpoint.

    Instances of one image (multi-object TETRIS images) reach the same process one after another,
    so their image is encoded once.
    """
    misses = _CACHE.stats.misses
    started = time.perf_counter()
    embedding = _CACHE.get_or_encode(predictor, image)
    elapsed = time.perf_counter() - started
    return embedding, (elapsed if _CACHE.stats.misses > misses else 0.0)


# C901: one instance's evaluation in protocol order (stored result, embedding, Base, clickability groups,
# halves, User/Sample); the inner sweep shares the embedding and round-1 cache a split would pass around.
def evaluate_instance(  # noqa: C901
    *,
    predictor: Predictor,
    sample: Sample,
    config: EngineConfig,
    method: str,
    map_fn: MapFn | None = None,
    real_clicks_xy: np.ndarray | None = None,
    out_dir: Path | None = None,
    timing: dict[str, float] | None = None,
) -> InstanceResult:
    """Evaluate one instance and (if ``out_dir``) save ``<out_dir>/instances/<key>.npz``.

    An existing file made with the same config fingerprint and model is loaded instead of recomputed.

    Args:
      predictor: the segmenter; ``encode`` runs once per image (unless ``config.reencode_per_click``).
      sample: the instance (image + GT + ignore band).
      config: see :class:`EngineConfig`.
      method: label of the method in reports (e.g. the registry name).
      map_fn: clickability map ``(image, gt, E) -> (H, W)``; None skips groups, halves and Sample.
      real_clicks_xy: (n, 2) float real first-round clicks in loaded-image pixels; None/empty skips User/Sample.
      timing: optional dict that accumulates ``model_s``, ``own_s`` and ``clicks`` over the trajectories
        (the split of ``bench/bench_engine_embedding_reuse.py``; the round-1 map is in ``map_seconds``).
    """
    path = None
    if out_dir is not None:
        path = Path(out_dir) / "instances" / instance_file_name(sample.key)
        if path.is_file():
            try:
                existing = InstanceResult.load(path)
            except Exception as error:  # a corrupt file from a crash of another tool: recompute
                logger.warning("Recomputing %s: unreadable result file (%s)", path, error)
            else:
                if (existing.config_json, existing.model_id, existing.checkpoint_sha256) == (
                    config.fingerprint(),
                    predictor.model_id,
                    predictor.checkpoint_hash,
                ):
                    return existing
                logger.warning("Recomputing %s: it was made with another config, model or checkpoint", path)
    started = time.perf_counter()
    image = sample.load_image()
    gt, ignore = sample.load_masks()
    threshold = predictor.threshold if config.threshold is None else float(config.threshold)
    if config.reencode_per_click:  # the reference's behaviour: nothing is kept between calls
        encode_started = time.perf_counter()
        embedding = predictor.encode(image)
        encode_seconds = time.perf_counter() - encode_started
    else:
        embedding, encode_seconds = _cached_embedding(predictor, image)
    result = InstanceResult(
        key=sample.key,
        method=method,
        model_id=predictor.model_id,
        config_json=config.fingerprint(),
        checkpoint_sha256=predictor.checkpoint_hash,
    )
    result.encode_seconds = encode_seconds
    instance_iou = InstanceIoU(gt, ignore)

    def trajectory(clicker: Clicker, max_clicks: int) -> Trajectory:
        """One trajectory of this instance: every one shares the embedding, the IoU and the timing."""
        return run_trajectory(
            predictor=predictor,
            embedding=embedding,
            image=image,
            gt=gt,
            ignore=ignore,
            clicker=clicker,
            max_clicks=max_clicks,
            threshold=threshold,
            reencode_per_click=config.reencode_per_click,
            instance_iou=instance_iou,
            timing=timing,
        )

    n_clicks = config.max_clicks
    if config.run_base:
        base = trajectory(BaselineClicker(), n_clicks)
        result.base_iou = _pad(base.ious, n_clicks)
        result.base_seconds = _pad(base.seconds, n_clicks)
        result.base_clicks = _pad(base.clicks, n_clicks)

    first_map = None
    round1_cache: Round1Cache = {}  # the sorted round-1 weights: the same for every group, half and Sample click
    if map_fn is not None:
        map_started = time.perf_counter()
        first_map = np.asarray(map_fn(image, gt, gt & ~ignore), dtype=np.float64)
        result.map_seconds = time.perf_counter() - map_started

        def sweep(
            bounds: Sequence[tuple[float, float]], stream: int
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            shape = (len(bounds), config.samples_per_group, n_clicks)
            ious, seconds, clicks = (
                np.full(shape, np.nan),
                np.full(shape, np.nan),
                np.full(shape + (3,), np.nan),
            )
            for g, (low, high) in enumerate(bounds):
                for s in range(config.samples_per_group):
                    rng = trajectory_rng(
                        seed=config.seed,
                        key=sample.key,
                        stream=stream,
                        group=g,
                        sample=s,
                        common=config.common_random_numbers,
                    )
                    clicker = GroupClicker(map_fn=map_fn, low=low, high=high, rng=rng,
                                           first_round_map=first_map, shared_cache=round1_cache)  # fmt: skip
                    run = trajectory(clicker, n_clicks)
                    ious[g, s] = _pad(run.ious, n_clicks)
                    seconds[g, s] = _pad(run.seconds, n_clicks)
                    clicks[g, s] = _pad(run.clicks, n_clicks)
            return ious, seconds, clicks

        result.group_bounds = np.asarray(config.group_bounds, dtype=np.float64).reshape(-1, 2)
        result.group_iou, result.group_seconds, result.group_clicks = sweep(config.group_bounds, stream=1)
        if config.halves:
            result.half_iou, _, result.half_clicks = sweep(HALF_BOUNDS, stream=2)

    if config.run_user and real_clicks_xy is not None and len(real_clicks_xy):
        replay = ReplayClicker(real_clicks_xy)
        user = [trajectory(replay, 1) for _ in range(len(replay))]
        result.user_clicks = replay.clicks_xy.copy()
        result.user_iou = np.array([run.ious[0] for run in user], dtype=np.float64)
        if map_fn is not None:  # and so first_map is its round-1 map
            rng = trajectory_rng(
                seed=config.seed,
                key=sample.key,
                stream=3,
                group=0,
                sample=0,
                common=config.common_random_numbers,
            )
            sampled = []
            for _ in range(len(replay)):
                clicker = GroupClicker(map_fn=map_fn, low=0.0, high=1.0, rng=rng, first_round_map=first_map,
                                       shared_cache=round1_cache)  # fmt: skip
                sampled.append(trajectory(clicker, 1))
            result.sample_iou = np.array([run.ious[0] for run in sampled], dtype=np.float64)
            result.sample_clicks = np.concatenate([run.clicks for run in sampled])
    result.total_seconds = time.perf_counter() - started + encode_seconds
    if path is not None:
        result.save(path)
    return result


# ---------------------------------------------------------------------------------------------------
# fan-out over local processes


@dataclass(frozen=True)
class RunSpec:
    """What every worker needs to rebuild the predictor and the click model (all picklable)."""

    method: str
    predictor_options: dict
    click_model: str | None
    config: EngineConfig
    out_dir: str


_WORKER: dict = {}


def build_click_model(name: str | None) -> MapFn | None:
    """``benchmark.clickability.load_click_model(name)`` (a baseline name or a checkpoint path), or None."""
    if not name:
        return None
    from benchmark.clickability.click_model import load_click_model

    return load_click_model(name)


def die_with_parent(parent_pid: int) -> None:
    """Make this (pool worker) process end when ``parent_pid`` ends, however it ends.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` (the kernel signals us when the parent dies, even by
    SIGKILL). Everywhere: a daemon thread that exits the process once our parent pid changes (also
    covers a parent that died before the prctl call). SIGINT is ignored here: a Ctrl-C reaches the
    whole process group, and the parent stops its workers itself.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError) as error:  # pragma: no cover - other libcs
            logger.warning(
                "prctl(PR_SET_PDEATHSIG) unavailable (%s); relying on the parent-watch thread", error
            )
    if os.getppid() != parent_pid:
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_WATCH_SECONDS)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker_init(spec: RunSpec, single_thread: bool = False, parent_pid: int | None = None) -> None:
    if parent_pid is not None:
        die_with_parent(parent_pid)
    from segmenters.registry import get_predictor

    if single_thread:
        import torch

        torch.set_num_threads(1)  # in a pool, processes (not threads) share the cores
    _WORKER["spec"] = spec
    _WORKER["predictor"] = get_predictor(spec.method, **spec.predictor_options)
    _WORKER["map_fn"] = build_click_model(spec.click_model)


def _worker_run(jobs: list[tuple[Sample, np.ndarray | None]]) -> list[SampleKey]:
    """Evaluate the instances of one image in this worker (the embedding is reused across them)."""
    spec: RunSpec = _WORKER["spec"]
    done = []
    for sample, real_clicks in jobs:
        evaluate_instance(
            predictor=_WORKER["predictor"],
            sample=sample,
            config=spec.config,
            method=spec.method,
            map_fn=_WORKER["map_fn"],
            real_clicks_xy=real_clicks,
            out_dir=Path(spec.out_dir),
        )
        done.append(sample.key)
    return done


def jobs_by_image(
    samples: Iterable[Sample], real_clicks: dict[SampleKey, np.ndarray]
) -> list[list[tuple[Sample, np.ndarray | None]]]:
    """Group instances by image, in dataset order, so one image is encoded once."""
    grouped: dict[Path, list[tuple[Sample, np.ndarray | None]]] = {}
    for sample in samples:
        grouped.setdefault(sample.image_path, []).append((sample, real_clicks.get(sample.key)))
    return list(grouped.values())


def run_local(
    *,
    spec: RunSpec,
    samples: Sequence[Sample],
    real_clicks: dict[SampleKey, np.ndarray],
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Evaluate every instance, in this process (``workers <= 1``) or in a pool of processes.

    ``progress(n)`` is called with the number of instances finished by each completed job.
    """
    jobs = jobs_by_image(samples, real_clicks)
    if workers <= 1:
        _worker_init(spec)
        try:
            for job in jobs:
                done = _worker_run(job)
                if progress:
                    progress(len(done))
        finally:
            _WORKER.clear()
        return
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # torch and fork do not mix
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_worker_init, initargs=(spec, True, os.getpid())
    )
    try:
        futures = [pool.submit(_worker_run, job) for job in jobs]
        for future in as_completed(futures):
            done = future.result()
            if progress:
                progress(len(done))
    except BaseException:  # Ctrl-C, SIGTERM (see benchmark.cli) or a failed instance: stop every worker now
        _stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's processes and wait for them (finished instance files stay; a rerun resumes)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        if process.is_alive():
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(timeout=10)
        if process.is_alive():  # pragma: no cover - a worker stuck in native code
            process.kill()
            process.join(timeout=5)


# ---------------------------------------------------------------------------------------------------
# fan-out over Celery


CELERY_TASK_NAME = "tasks.benchmark.benchmark_evaluate_instance"


def sample_to_dict(sample: Sample) -> dict:
    """JSON-able description of a sample (paths are strings; the worker must see the same paths)."""
    return {
        "dataset": sample.key.dataset,
        "image_stem": sample.key.image_stem,
        "object_stem": sample.key.object_stem,
        "image_path": str(sample.image_path),
        "mask_path": str(sample.mask_path),
        "object_id": int(sample.object_id),
        "layout": sample.layout,
        "max_side": sample.max_side,
    }


def sample_from_dict(data: dict) -> Sample:
    key = SampleKey(data["dataset"], data["image_stem"], data["object_stem"])
    return Sample(
        key=key,
        image_path=Path(data["image_path"]),
        mask_path=Path(data["mask_path"]),
        object_id=int(data["object_id"]),
        layout=data["layout"],
        max_side=data["max_side"],
    )


def config_to_dict(config: EngineConfig) -> dict:
    data = asdict(config)
    data["group_bounds"] = [list(b) for b in config.group_bounds]
    return data


def config_from_dict(data: dict) -> EngineConfig:
    values = dict(data)
    values["group_bounds"] = tuple(tuple(b) for b in values["group_bounds"])
    return EngineConfig(**values)


def evaluate_instance_from_payload(payload: dict) -> dict:
    """What the Celery task runs: rebuild predictor/click model (cached per process) and evaluate one instance."""
    spec = RunSpec(
        method=payload["method"],
        predictor_options=payload["predictor_options"],
        click_model=payload["click_model"],
        config=config_from_dict(payload["config"]),
        out_dir=payload["out_dir"],
    )
    if _WORKER.get("spec") != spec:
        _worker_init(spec)
    real = payload.get("real_clicks_xy")
    real_clicks = np.asarray(real, dtype=np.float64).reshape(-1, 2) if real else None
    (key,) = _worker_run([(sample_from_dict(payload["sample"]), real_clicks)])
    return {"dataset": key.dataset, "image_stem": key.image_stem, "object_stem": key.object_stem}


def run_celery(
    *,
    spec: RunSpec,
    samples: Sequence[Sample],
    real_clicks: dict[SampleKey, np.ndarray],
    broker_url: str,
    broker_transport_options: dict | None = None,
    queue: str = "models",
    poll_seconds: float = 2.0,
    timeout_seconds: float | None = None,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Send one task per missing instance to the Celery workers and wait for their result files.

    A bare Celery client (no Django import) sends ``tasks.benchmark.benchmark_evaluate_instance`` by
    name; the workers of ``config.celery:app`` run it and write ``<out_dir>/instances/*.npz`` on a
    path they share with this machine. Completion is read from those files. ``broker_transport_options``
    are kombu's (e.g. the folders of the single-machine ``filesystem://`` broker).
    """
    from celery import Celery

    # not the current app: in a process that also runs config.celery:app (tests, notebooks), shared tasks
    # would otherwise resolve to this bare client and lose the app's routes (e.g. the models queue)
    client = Celery("clicklab-benchmark-client", broker=broker_url, set_as_current=False)
    if broker_transport_options:
        client.conf.broker_transport_options = broker_transport_options
    out_dir = Path(spec.out_dir)
    fingerprint = spec.config.fingerprint()
    pending: dict[Path, Sample] = {}
    for sample in samples:
        path = out_dir / "instances" / instance_file_name(sample.key)
        if _is_done(path, fingerprint):
            continue
        pending[path] = sample
        real = real_clicks.get(sample.key)
        payload = {
            "method": spec.method,
            "predictor_options": spec.predictor_options,
            "click_model": spec.click_model,
            "config": config_to_dict(spec.config),
            "out_dir": str(out_dir),
            "sample": sample_to_dict(sample),
            "real_clicks_xy": None if real is None else np.asarray(real).tolist(),
        }
        client.send_task(CELERY_TASK_NAME, kwargs={"payload": payload}, queue=queue)
    if progress:
        progress(len(samples) - len(pending))
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    while pending:
        finished = [path for path in pending if _is_done(path, fingerprint)]
        for path in finished:
            pending.pop(path)
        if progress and finished:
            progress(len(finished))
        if not pending:
            break
        if deadline is not None and time.monotonic() > deadline:
            raise EngineError(
                f"{len(pending)} instance(s) not finished by the Celery workers after {timeout_seconds} s, e.g. "
                f"{next(iter(pending))}; check that workers consume queue {queue!r} and see {out_dir}. "
                "Re-running the same command resumes."
            )
        time.sleep(poll_seconds)


def _is_done(path: Path, fingerprint: str) -> bool:
    if not path.is_file():
        return False
    try:
        return InstanceResult.load(path).config_json == fingerprint
    except Exception:
        return False


def load_results(out_dir: Path) -> list[InstanceResult]:
    """Every instance result under ``<out_dir>/instances``, sorted by key."""
    files = sorted((Path(out_dir) / "instances").glob("*.npz"))
    return sorted((InstanceResult.load(path) for path in files), key=lambda r: r.key)
