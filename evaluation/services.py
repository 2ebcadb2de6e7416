"""The evaluation server's writes: keys, runs and the run state machine (the local ClickSession's semantics).

Order of calls for a run, as in :class:`benchmark.session.ClickSession`::

    create -> [preparing] -> ready --next--> awaiting_mask --submit--> [preparing] -> ready ... -> finished

``preparing`` is the server's own work: scoring a submission (IoU against the ground truth, kept here) and
computing the next clicks (the run's clicker -- baseline, clicking group or replay -- on the last accepted
prediction). It runs in the request for ordinary images and in a Celery worker
(``tasks.evaluation.process_run``) for samples larger than ``EVAL_INLINE_MAX_PIXELS`` (clicking-group runs,
which compute clickability maps: ``EVAL_GROUP_INLINE_MAX_PIXELS``); clients poll the run meanwhile.
Every step is committed, so a server restart or a client reconnect resumes where it stopped. The time budget
``max_time_s`` means what it means locally, the method's time (the client's ``get_clicks`` -> ``submit_masks``),
bounded by the server's clock (from serving the clicks to receiving the mask): the network never counts.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import io
import logging
import math
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
from django.db import DatabaseError, transaction
from django.utils import timezone
from PIL import Image as PILImage

from benchmark.clickability.click_model import BASELINE_NAMES, load_click_model
from benchmark.clickers import DEFAULT_GROUP_BOUNDS, BaselineClicker, GroupClicker, Round1Cache
from benchmark.datasets import SampleKey, read_image_rgb, resize_long_side
from benchmark.engine import trajectory_rng
from benchmark.maskcodec import MaskFormatError, decode_png, decode_rle, encode_png
from benchmark.metrics import iou
from benchmark.report import session_values
from benchmark.session import ClickSession, sample_id
from collector.models import Dataset, Instance
from collector.services.outbox import task_intent_add
from segmenters.base import Click
from tasks import names as task_names

from .conf import limit
from .models import EvaluationKey, EvaluationRow, EvaluationRun, PublishedBenchmark
from .protocol import ProtocolMismatch, run_config

logger = logging.getLogger(__name__)
State = EvaluationRun.State
REMOTE_CLICKERS = ("baseline", "group", "replay")
# Click models that need no weights (benchmark.clickability.load_click_model's names). `benchmark run` has no
# default (--click-model is required with groups); its README runs the groups with `dt`, and so does the server.
REMOTE_CLICK_MODELS = BASELINE_NAMES
DEFAULT_CLICK_MODEL = "dt"
OPEN_STATES = (State.PREPARING, State.READY, State.AWAITING_MASK)


class EvalError(Exception):
    """A request the run cannot take; ``status`` is the HTTP status, ``code`` a stable error name."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


# --------------------------------------------------------------------------------------------------
# health


def health() -> tuple[int, dict]:
    """(status, body) of ``GET /api/eval/health/``: 200 when the database answers, else 503."""
    from benchmark.provenance import code_version

    body = {"service": "clicklab-evaluation", "api_version": 1, "code_version": code_version()}
    try:
        slugs = list(PublishedBenchmark.objects.order_by("slug").values_list("slug", flat=True)[:100])
    except DatabaseError as exc:
        return 503, {
            **body,
            "status": "unavailable",
            "database": f"unavailable ({type(exc).__name__}); try again shortly",
        }
    return 200, {**body, "status": "ok", "database": "ok", "benchmarks": slugs}


# --------------------------------------------------------------------------------------------------
# keys


def key_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def create_key(*, user, name: str = "") -> tuple[EvaluationKey, str]:
    """A new evaluation key for ``user``; the raw key is returned once and only its hash is stored."""
    raw = "ek_" + secrets.token_urlsafe(32)
    key = EvaluationKey.objects.create(user=user, name=name[:100], prefix=raw[:10], key_hash=key_hash(raw))
    return key, raw


# hash -> (monotonic time of the lookup, the key with its user): a run's every request is authenticated, and a
# query per request was a fifth of a submission's database round trips (bench/bench_eval_remote.py)
_known_keys: dict[str, tuple[float, EvaluationKey]] = {}
_known_keys_lock = threading.Lock()


def key_lookup(raw: str) -> EvaluationKey | None:
    """The valid key ``raw`` is (its user active, not revoked), else None. A valid key is remembered by this
    process for ``EVAL_KEY_CACHE_S`` seconds: a key revoked elsewhere stops working within that time (at once
    in the process that revoked it, :func:`key_revoke`)."""
    digest, now = key_hash(raw), time.monotonic()
    known = _known_keys.get(digest)
    if known is not None and now - known[0] < limit("EVAL_KEY_CACHE_S"):
        return known[1]
    key = (
        EvaluationKey.objects.select_related("user")
        .filter(key_hash=digest, revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if key is not None and (
        key.last_used_at is None or timezone.now() - key.last_used_at > timedelta(minutes=1)
    ):
        EvaluationKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    with _known_keys_lock:
        if len(_known_keys) > 10_000:
            _known_keys.clear()
        if key is None:
            _known_keys.pop(digest, None)
        else:
            _known_keys[digest] = (now, key)
    return key


def key_revoke(*, user, key_id: int) -> int:
    """Revoke ``user``'s key ``key_id`` (refused from now on in this process, within ``EVAL_KEY_CACHE_S``
    everywhere); returns how many keys were revoked (0, a key already revoked, or 1). EvalError 404 when
    ``user`` has no key ``key_id``: another user's key is answered as one that does not exist."""
    if not EvaluationKey.objects.filter(pk=key_id, user=user).exists():
        raise EvalError(
            404, "unknown_key", f"you have no evaluation key {key_id}; revoke one of the keys listed."
        )
    revoked = EvaluationKey.objects.filter(pk=key_id, user=user, revoked_at__isnull=True)
    hashes = list(revoked.values_list("key_hash", flat=True))
    count = revoked.update(revoked_at=timezone.now())
    with _known_keys_lock:
        for digest in hashes:
            _known_keys.pop(digest, None)
    return count


# --------------------------------------------------------------------------------------------------
# samples (ground truth stays here)


@dataclass(frozen=True)
class _Truth:
    key: SampleKey
    gt: np.ndarray
    ignore: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return self.gt.shape


def _read_gray(field) -> np.ndarray:
    from PIL import Image as PILImage

    with field.open("rb") as handle:
        return np.asarray(PILImage.open(handle).convert("L"))


@functools.lru_cache(maxsize=16)
def _truth(instance_id: int) -> _Truth:
    """GT and ignore band of an instance (instances never change after import; cached per process)."""
    instance = Instance.objects.select_related("image__dataset").filter(pk=instance_id).first()
    if instance is None:
        raise EvalError(
            409, "sample_gone", f"instance {instance_id} of this run was deleted; start a new run."
        )
    image = instance.image
    gt = _read_gray(instance.mask_file) > 127
    ignore = (
        _read_gray(instance.ignore_file) > 127 if instance.ignore_file else np.zeros(gt.shape, dtype=bool)
    )
    key = SampleKey(image.dataset.name, image.stem, instance.object_stem)
    return _Truth(key=key, gt=gt, ignore=ignore)


def sample_image(instance: Instance) -> np.ndarray:
    """(H, W, 3) uint8 RGB at the canonical size, decoded exactly as the local benchmark loader does."""
    image = instance.image
    picture = read_image_rgb(Path(image.file.path))
    if picture.shape[:2] != (image.height, image.width):
        picture = resize_long_side(picture, max(image.width, image.height))
    return picture


@functools.lru_cache(maxsize=4)
def sample_image_png(instance_id: int) -> bytes:
    """The PNG a client downloads for an instance's image (:func:`sample_image`, lossless); cached per process:
    every group of an instance, and every instance of an image, is served the same bytes."""
    instance = Instance.objects.select_related("image").filter(pk=instance_id).first()
    if instance is None:
        raise EvalError(
            409, "sample_gone", f"instance {instance_id} of this run was deleted; start a new run."
        )
    buffer = io.BytesIO()
    PILImage.fromarray(sample_image(instance)).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


# --------------------------------------------------------------------------------------------------
# runs


def _int(data: dict, name: str, default: int, low: int, high: int) -> int:
    value = data.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise EvalError(400, "invalid_config", f"{name}={value!r} must be an integer in [{low}, {high}].")
    return value


def _float(data: dict, name: str, default, low: float, high: float, *, allow_none=False):
    value = data.get(name, default)
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise EvalError(400, "invalid_config", f"{name}={value!r} must be a number in [{low}, {high}]"
                        + (" or null." if allow_none else "."))  # fmt: skip
    return float(value)


def _group_config(data: dict, clicker: str) -> tuple[str, list]:
    """(click model name, group bounds) of a ``group`` run from the create request; ("", []) for the others."""
    if clicker != "group":
        for name in ("click_model", "group_bounds"):
            if data.get(name) is not None:
                raise EvalError(400, "invalid_config",
                                f"{name} applies only to clicker='group' (this run has clicker={clicker!r}).")  # fmt: skip
        return "", []
    model = data.get("click_model")
    model = DEFAULT_CLICK_MODEL if model is None else model
    if not isinstance(model, str) or model.lower() not in REMOTE_CLICK_MODELS:
        raise EvalError(400, "invalid_config",
                        f"click_model={model!r} is not served; use one of {REMOTE_CLICK_MODELS} (default "
                        f"{DEFAULT_CLICK_MODEL!r}). Trained checkpoints run locally: ClickSession(click_model=path).")  # fmt: skip
    bounds = data.get("group_bounds")
    if bounds is None:
        return _click_model(model.lower()).name, [list(pair) for pair in DEFAULT_GROUP_BOUNDS]
    most = limit("EVAL_MAX_GROUPS")
    if not isinstance(bounds, list) or not 1 <= len(bounds) <= most:
        raise EvalError(400, "invalid_config",
                        f"group_bounds must be a list of 1 to {most} [low, high] pairs, e.g. [[0, 0.5], [0.5, 1]]; "
                        f"got {str(bounds)[:80]}.")  # fmt: skip
    for index, pair in enumerate(bounds):
        numbers = (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in pair)
        )
        if not numbers or not 0.0 <= pair[0] < pair[1] <= 1.0:
            raise EvalError(400, "invalid_config",
                            f"group_bounds[{index}]={str(pair)[:60]} must be a pair [low, high] of numbers with "
                            "0 <= low < high <= 1 (mass fractions; G1 = [0, 0.1] holds the least likely clicks).")  # fmt: skip
    return _click_model(model.lower()).name, [[float(low), float(high)] for low, high in bounds]


def _run_settings(data: dict) -> tuple[str, int, float | None, float, list[float], int, str]:
    """A new run's settings from the request body: (clicker, max_clicks, max_time_s, threshold, target_ious,
    seed, method), each checked in that order; EvalError 400 ``invalid_config`` names the first at fault.
    ``shuffle`` and ``stop_at_target`` are only checked to be booleans."""
    clicker = data.get("clicker", "baseline")
    if clicker not in REMOTE_CLICKERS:
        raise EvalError(
            400,
            "invalid_config",
            f"clicker={clicker!r} is not served remotely; use one of {REMOTE_CLICKERS}.",
        )
    max_clicks = _int(data, "max_clicks", 20, 1, limit("EVAL_MAX_CLICKS"))
    max_time_s = _float(data, "max_time_s", None, 1e-6, 24 * 3600, allow_none=True)
    threshold = _float(data, "threshold", 0.5, 0.0, 1.0)
    targets = data.get("target_ious", [0.85, 0.90])
    if not isinstance(targets, list) or not 1 <= len(targets) <= 10:
        raise EvalError(400, "invalid_config", "target_ious must be a list of 1 to 10 numbers in (0, 1].")
    targets = [_float({"t": t}, "t", None, 1e-6, 1.0) for t in targets]
    seed = _int(data, "seed", 0, 0, 2**63 - 1)
    for flag in ("shuffle", "stop_at_target"):
        if not isinstance(data.get(flag, False), bool):
            raise EvalError(400, "invalid_config", f"{flag} must be true or false.")
    method = data.get("method", "")
    if not isinstance(method, str) or len(method) > 100:
        raise EvalError(400, "invalid_config", "method must be a name of at most 100 characters.")
    return clicker, max_clicks, max_time_s, threshold, targets, seed, method


def _benchmark(slug) -> PublishedBenchmark | None:
    """The published benchmark a create request names (``benchmark``), None when it names none."""
    if slug is None:
        return None
    found = (
        PublishedBenchmark.objects.select_related("dataset").filter(slug=slug).first()
        if isinstance(slug, str)
        else None
    )
    if found is None:
        slugs = ", ".join(PublishedBenchmark.objects.values_list("slug", flat=True)[:20]) or "none published"
        raise EvalError(
            400, "unknown_benchmark", f"benchmark={slug!r} is not published here; published: {slugs}."
        )
    return found


def create_run(*, user, key: EvaluationKey | None, data: dict, create_key: str = "") -> EvaluationRun:
    """A new run on a dataset, or on a published benchmark (``benchmark``: its protocol applies, and a value sent
    that differs from it is a 400 naming it); idempotent per ``create_key``; its first interaction is prepared."""
    if create_key:
        existing = EvaluationRun.objects.filter(owner=user, create_key=create_key).first()
        if existing is not None:
            return existing
    benchmark = _benchmark(data.get("benchmark"))
    if benchmark is not None:
        try:
            data = run_config(benchmark, data)
        except ProtocolMismatch as exc:
            raise EvalError(400, "protocol_mismatch", str(exc)) from None
    name = data.get("dataset")
    dataset = Dataset.objects.filter(name=name).first() if isinstance(name, str) else None
    if dataset is None:
        names = ", ".join(Dataset.objects.values_list("name", flat=True)[:20]) or "none imported"
        raise EvalError(
            400, "unknown_dataset", f"dataset={name!r} is not on this server; available: {names}."
        )
    clicker, max_clicks, max_time_s, threshold, targets, seed, method = _run_settings(data)
    click_model, group_bounds = _group_config(data, clicker)

    with transaction.atomic():
        active = EvaluationRun.objects.select_for_update().filter(
            owner=user, state__in=OPEN_STATES, expires_at__gt=timezone.now()
        )
        if len(active) >= limit("EVAL_MAX_ACTIVE_RUNS"):
            raise EvalError(429, "too_many_runs",
                            f"you have {len(active)} unfinished runs (limit {limit('EVAL_MAX_ACTIVE_RUNS')}); "
                            "finish one or wait until it expires.")  # fmt: skip
        instances = sorted(
            Instance.objects.filter(image__dataset=dataset).values_list("pk", "image__stem", "object_stem"),
            key=lambda row: (row[1], row[2]),
        )
        if clicker == "replay":
            units = _replay_units([pk for pk, _, _ in instances])
            if not units:
                raise EvalError(400, "no_real_clicks",
                                f"dataset {dataset.name!r} has no valid real first-round clicks to replay; "
                                "use clicker='baseline' or collect clicks first.")  # fmt: skip
        elif clicker == "group":  # the local session's order: per instance, G1..Gk
            units = [[pk, f"G{k + 1}", k] for pk, _, _ in instances for k in range(len(group_bounds))]
        else:
            units = [[pk, "base"] for pk, _, _ in instances]
        if data.get("shuffle", False):
            order = np.random.default_rng(seed).permutation(len(units))
            units = [units[i] for i in order]
        run = EvaluationRun.objects.create(
            owner=user, key=key, create_key=create_key[:100], dataset=dataset, method=method,
            session_id=secrets.token_hex(8), clicker=clicker, max_clicks=max_clicks, max_time_s=max_time_s,
            threshold=threshold, target_ious=targets, stop_at_target=data.get("stop_at_target", False),
            seed=seed, shuffle=data.get("shuffle", False), units=units, state=State.PREPARING, rows_written=0,
            click_model=click_model, group_bounds=group_bounds, benchmark=benchmark,
            expires_at=timezone.now() + timedelta(seconds=limit("EVAL_RUN_TTL_S")),
        )  # fmt: skip
        dispatch(run)
    return run


@functools.lru_cache(maxsize=4096)
def _size(instance_id: int) -> tuple[int, int]:
    """(width, height) of an instance's image (instances never change after import)."""
    row = Instance.objects.filter(pk=instance_id).values_list("image__width", "image__height").first()
    if row is None:
        raise EvalError(
            409, "sample_gone", f"instance {instance_id} of this run was deleted; start a new run."
        )
    return row


def _replay_units(instance_ids: list[int]) -> list[list]:
    """One unit per valid real first-round click, per instance in order: [instance, "userJ", x, y]."""
    from collector.models import Click as RealClick
    from collector.models import Trial

    by_instance: dict[int, list] = {}
    rows = (
        RealClick.objects.filter(trial__target__instance_id__in=instance_ids, trial__target__click_type="first",
                                 trial__role=Trial.Role.TASK, is_valid=True)
        .order_by("received_at", "pk")
        .values_list("trial__target__instance_id", "x", "y")
    )  # fmt: skip
    for instance_id, x, y in rows:
        by_instance.setdefault(instance_id, []).append((x, y))
    units = []
    for instance_id in instance_ids:
        for j, (x, y) in enumerate(by_instance.get(instance_id, [])):
            units.append([instance_id, f"user{j + 1}", float(x), float(y)])
    return units


def _pixels_of_unit(run: EvaluationRun, index: int) -> int:
    if not 0 <= index < len(run.units):
        return 0
    width, height = _size(run.units[index][0])
    return width * height


#: What changes on a run after its creation: a step saves only these (its configuration and visiting order,
#: ``units``, which is long for a group run, are written once, by the create).
STEP_FIELDS = [
    "state", "unit_index", "round", "clicks", "last_clicks", "new_sample", "unit_done", "elapsed_s", "pred_png",
    "logits", "clicker_state", "interaction", "next_key", "served_at", "served", "pending", "pending_png",
    "pending_logits", "submit_key", "last_result", "error", "summary", "instance_values", "scored_async",
    "server_seconds", "rows_written", "updated_at", "finished_at",
]  # fmt: skip


def save_step(run: EvaluationRun) -> None:
    deferred = run.get_deferred_fields()  # the logits a request did not load (nor set) stay as they are
    run.save(update_fields=[name for name in STEP_FIELDS if name not in deferred])


def dispatch(run: EvaluationRun, *, save: bool = True) -> None:
    """Do the locked run's pending work now, in its transaction (small samples), or hand it to a Celery
    worker once the transaction commits (large ones: ``EVAL_INLINE_MAX_PIXELS``, and for clicking-group runs,
    whose clickability maps cost more, ``EVAL_GROUP_INLINE_MAX_PIXELS``); saves the run unless ``save`` is
    False (the caller saves it once, with what else it changed)."""
    index = run.unit_index if run.unit_index >= 0 else 0
    pixels = _pixels_of_unit(run, index)
    if pixels > limit("EVAL_INLINE_MAX_PIXELS") or (
        run.clicker == "group" and pixels > limit("EVAL_GROUP_INLINE_MAX_PIXELS")
    ):
        # through the transactional outbox: sent after commit, relayed while the broker is down
        task_intent_add(name=task_names.EVALUATION_PROCESS_RUN, args=[str(run.pk)])
    else:
        _process(run)
    if save:
        save_step(run)


def expire_due(run_id=None) -> int:
    """Mark open runs past ``expires_at`` as expired (committed on its own, before any request's work)."""
    due = EvaluationRun.objects.filter(state__in=OPEN_STATES, expires_at__lte=timezone.now())
    if run_id is not None:
        due = due.filter(pk=run_id)
    return due.update(state=State.EXPIRED)


def _check_open(run: EvaluationRun) -> None:
    if run.state in OPEN_STATES and run.expires_at <= timezone.now():
        run.state = State.EXPIRED
    if run.state == State.EXPIRED:
        raise EvalError(
            410,
            "run_expired",
            f"run {run.pk} expired at {run.expires_at:%Y-%m-%d %H:%M} UTC; start a new run.",
        )
    if run.state == State.FAILED:
        raise EvalError(409, "run_failed", f"run {run.pk} failed on the server: {run.error}")


def process_run(run_id, *, asynchronous: bool = False) -> None:
    """Score the pending submission (if any) and prepare the next interaction; idempotent."""
    with transaction.atomic():
        run = EvaluationRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.state != State.PREPARING:
            return  # done already (a redelivered task) or gone
        _process(run, asynchronous=asynchronous)
        save_step(run)


def _process(run: EvaluationRun, *, asynchronous: bool = False) -> None:
    """The work of ``preparing`` on a locked run (the caller saves it)."""
    started = time.perf_counter()
    run._new_rows = []  # the report rows of this step, written once the whole step succeeded
    try:
        if run.pending is not None:
            _score(run)
            run.scored_async += int(asynchronous)
        _prepare_next(run)
        _write_rows(run)
    except EvalError as exc:
        run.state, run.error = State.FAILED, exc.message
    except Exception as exc:  # a bug or broken files: fail the run visibly instead of leaving it hanging
        logger.exception("evaluation run %s failed", run.pk)
        run.state, run.error = (
            State.FAILED,
            f"{type(exc).__name__} while scoring; the administrators were told.",
        )
    run.server_seconds += time.perf_counter() - started


def _clicks(raw: list) -> list[Click]:
    return [Click(x=float(x), y=float(y), is_positive=bool(p)) for x, y, p in raw]


def _raw(clicks: list[Click]) -> list:
    return [[c.x, c.y, c.is_positive] for c in clicks]


def _prediction(run: EvaluationRun, shape) -> np.ndarray:
    decoded = getattr(run, "_decoded", None)  # the array behind pred_png, when scored in this process
    if decoded is not None and decoded[0] == bytes(run.pred_png or b""):
        return decoded[1]
    if run.pred_png:
        return decode_png(bytes(run.pred_png), shape=shape)
    return np.zeros(shape, dtype=bool)


def _prepare_next(run: EvaluationRun) -> None:
    """The local ``ClickSession.next`` loop, on the stored state."""
    while True:
        if run.unit_index >= 0 and not run.unit_done:
            new = _next_clicks(run)[: run.max_clicks - len(run.clicks)]
            if new:
                run.last_clicks = _raw(new)
                run.clicks = run.clicks + _raw(new)
                run.state = State.READY
                return
        run.unit_index += 1
        if run.unit_index >= len(run.units):
            _finish(run)
            return
        run.clicks, run.last_clicks, run.round, run.elapsed_s = [], [], 0, 0.0
        run.unit_done, run.new_sample, run.pred_png, run.clicker_state = False, True, None, None
        run.logits = None


def _next_clicks(run: EvaluationRun) -> list[Click]:
    """The current unit's clicker, rebuilt from the stored state, gives the next round's clicks."""
    unit = run.units[run.unit_index]
    if run.clicker == "replay":
        # ReplayClicker: the unit's one recorded click (clipped into the image), then nothing
        if run.clicks:
            return []
        width, height = _size(unit[0])
        x, y = unit[2], unit[3]
        return [
            Click(x=float(np.clip(x, 0, width - 1)), y=float(np.clip(y, 0, height - 1)), is_positive=True)
        ]
    truth = _truth(unit[0])
    pred = _prediction(run, truth.shape)
    if run.clicker == "group":
        return _group_clicks(run, truth, pred)
    clicker = BaselineClicker()  # its whole state: the pixels clicked so far
    clicker.restore(image=np.zeros((*truth.shape, 1), np.uint8), gt=truth.gt, ignore=truth.ignore,
                    clicks=_clicks(run.clicks))  # fmt: skip
    return clicker.next_clicks(pred)


def _group_clicks(run: EvaluationRun, truth: _Truth, pred: np.ndarray) -> list[Click]:
    """The local session's ``GroupClicker`` of this unit, continued: the same map, bounds and random stream.

    Its state is the clicks so far (one per round) and its random stream's state, stored on the run after
    every round (``clicker_state``), so a restarted server or worker draws what an uninterrupted one would.
    Computes clickability maps: runs in a Celery worker (see :func:`dispatch`).
    """
    instance_id, _, index = run.units[run.unit_index]
    low, high = run.group_bounds[index]
    if run.clicker_state is None:  # the unit's first round: the stream ClickSession gives this trajectory
        rng = trajectory_rng(seed=run.seed, key=truth.key, stream=1, group=index, sample=0, common=False)
    else:
        rng = rng_from_state(run.clicker_state)
    clicks = _clicks(run.clicks)
    first_map, round1_cache = _first_round(instance_id, run.click_model) if not clicks else (None, None)
    clicker = GroupClicker(
        map_fn=_click_model(run.click_model), low=low, high=high, rng=rng,
        first_round_map=first_map, shared_cache=round1_cache,
    )  # fmt: skip
    clicker.restore(image=_image(instance_id), gt=truth.gt, ignore=truth.ignore, clicks=clicks)
    new = clicker.next_clicks(pred)
    run.clicker_state = rng_state(rng)
    return new


def rng_state(rng: np.random.Generator) -> dict:
    """JSON-safe state of a PCG64 generator (its 128-bit integers as decimal strings)."""
    state = rng.bit_generator.state
    if state["bit_generator"] != "PCG64":
        raise ValueError(f"only PCG64 streams are stored; got {state['bit_generator']}.")
    return {"bit_generator": "PCG64", "state": str(state["state"]["state"]), "inc": str(state["state"]["inc"]),
            "has_uint32": int(state["has_uint32"]), "uinteger": int(state["uinteger"])}  # fmt: skip


def rng_from_state(stored: dict) -> np.random.Generator:
    """The generator :func:`rng_state` described, in that very state."""
    bit_generator = np.random.PCG64()
    bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": int(stored["state"]), "inc": int(stored["inc"])},
        "has_uint32": int(stored["has_uint32"]),
        "uinteger": int(stored["uinteger"]),
    }
    return np.random.Generator(bit_generator)


@functools.lru_cache(maxsize=8)
def _click_model(name: str):
    """The click model ``name`` (no weights: the baseline models); cached per process."""
    return load_click_model(name)


@functools.lru_cache(maxsize=2)
def _image(instance_id: int) -> np.ndarray:
    """The instance's image as the local loader gives it, read-only; cached per process (one sample at a time)."""
    instance = Instance.objects.select_related("image").filter(pk=instance_id).first()
    if instance is None:
        raise EvalError(
            409, "sample_gone", f"instance {instance_id} of this run was deleted; start a new run."
        )
    picture = sample_image(instance)
    picture.setflags(write=False)
    return picture


@functools.lru_cache(maxsize=2)
def _first_round(instance_id: int, click_model: str) -> tuple[np.ndarray, Round1Cache]:
    """Round 1 of an instance, the same for all its groups: its map and the clickers' round-1 cache.

    The cache (error region, deepest point, sorted weights; filled by the unit's first group) is shared by
    the groups of this instance only, as in ``ClickSession`` and the engine. Its entries are computed from
    the instance alone, so two threads filling it at once store the same values.
    """
    truth = _truth(instance_id)
    first = _click_model(click_model)(_image(instance_id), truth.gt, truth.gt & ~truth.ignore)
    first.setflags(write=False)
    return first, {}


def _score(run: EvaluationRun) -> None:
    pending = run.pending
    truth = _truth(run.units[run.unit_index][0])
    decoded = getattr(run, "_decoded", None)
    if decoded is not None and decoded[0] == bytes(run.pending_png):
        pred = decoded[1]  # decoded by the request that took it: no second PNG decode
    else:
        pred = decode_png(bytes(run.pending_png), shape=truth.shape)
    run.round += 1
    run.elapsed_s += pending["timing_s"]  # the method's time (bounded by the server's clock at the submit)
    if run.max_time_s is not None and run.elapsed_s > run.max_time_s:
        run.unit_done = True
        value, status = float("nan"), "timed_out"
    else:
        run.pred_png = bytes(run.pending_png)
        run.logits = None if run.pending_logits is None else bytes(run.pending_logits)
        value, status = iou(pred, truth.gt, truth.ignore), "accepted"
        if len(run.clicks) >= run.max_clicks or (run.stop_at_target and value >= max(run.target_ious)):
            run.unit_done = True
    _record(run, truth, value, pending, status)
    run.last_result = {
        "interaction": pending["interaction"], "status": status, "iou": None if math.isnan(value) else value,
        "round": run.round, "clicks": len(run.clicks),
    }  # fmt: skip
    run.pending, run.pending_png, run.pending_logits = None, None, None


def _record(run: EvaluationRun, truth: _Truth, value: float, pending: dict, status: str) -> None:
    """The rows of the scored round, kept on ``run._new_rows`` for :func:`_process` to write."""
    position = run.rows_written if run.rows_written is not None else run.rows.count()  # older runs: count
    first_index = len(run.clicks) - len(run.last_clicks)
    run._new_rows.extend(
        EvaluationRow(
            run=run,
            position=position + offset,
            sample_id=sample_id(truth.key),
            image_stem=truth.key.image_stem,
            object_stem=truth.key.object_stem,
            group=run.units[run.unit_index][1],
            click_index=first_index + offset + 1,
            x=click.x,
            y=click.y,
            is_positive=click.is_positive,
            iou=None if math.isnan(value) else value,
            timing_s=pending["timing_s"],
            server_timing_s=pending["server_timing_s"],
            status=status,
            round=run.round,
        )  # fmt: skip
        for offset, click in enumerate(_clicks(run.last_clicks))
    )


def report_rows(run: EvaluationRun) -> list[dict]:
    """The report as the local session's rows (NaN IoU for timed-out rounds)."""
    name = run.dataset.name
    return [
        {
            "dataset": name,
            "sample_id": r.sample_id,
            "image_stem": r.image_stem,
            "object_stem": r.object_stem,
            "clicker": run.clicker,
            "group": r.group,
            "click_index": r.click_index,
            "x": r.x,
            "y": r.y,
            "is_positive": r.is_positive,
            "iou": float("nan") if r.iou is None else r.iou,
            "timing_s": r.timing_s,
            "status": r.status,
            "round": r.round,
            "session_id": run.session_id,
        }  # fmt: skip
        for r in run.rows.order_by("position")
    ]


def _no_nan(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_no_nan(v) for v in value]
    return value


def _write_rows(run: EvaluationRun) -> None:
    """Write the rows :func:`_record` kept (once the next clicks are made: a failure before leaves none)."""
    rows, run._new_rows = getattr(run, "_new_rows", []), []
    if rows:
        EvaluationRow.objects.bulk_create(rows)
        run.rows_written = (run.rows_written or 0) + len(rows)


def _finish(run: EvaluationRun) -> None:
    _write_rows(run)  # the last round's rows belong in the summary
    # The local session's own summary code, on the stored rows, so both summaries are computed alike.
    group = (
        {"click_model": run.click_model, "group_bounds": run.group_bounds} if run.clicker == "group" else {}
    )
    helper = ClickSession(dataset=[], clicker=run.clicker, max_clicks=run.max_clicks, threshold=run.threshold,
                          target_ious=run.target_ious, seed=run.seed, real_clicks={}, **group)  # fmt: skip
    helper.session_id = run.session_id
    helper._rows = report_rows(run)
    run.summary = _no_nan(helper._compute_summary())
    if run.clicker in ("baseline", "group") and helper._rows:
        # per-instance NoC@85/90 and IoU-AuC: what the leaderboard's ΔSB/ΔGR/ΔHH are computed from
        run.instance_values = _no_nan(session_values(helper.get_report(), max_clicks=run.max_clicks))
    run.state, run.finished_at = State.FINISHED, timezone.now()
    run.last_clicks, run.pred_png, run.logits = [], None, None


def locked_run(run_id, user) -> EvaluationRun:
    """The user's run, locked for this transaction. The stored logits (up to megabytes) are not read: a step
    only replaces them (``runs/{id}/previous/`` reads them)."""
    run = (
        EvaluationRun.objects.select_for_update()
        .defer("logits", "pending_logits")
        .filter(pk=run_id, owner=user)
        .first()
    )
    if run is None:
        raise EvalError(404, "unknown_run", f"run {run_id} does not exist or is not yours.")
    return run


def _serve_next(*, run_id, user, idempotency_key: str = "", resume: bool = False) -> tuple[int, dict]:
    """(status, payload) of ``next``: the next interaction, ``{"done": true}``, or 202 while preparing.

    While an interaction awaits its mask, only a repeat (same idempotency key) or an explicit ``resume``
    (a reconnecting client) gets it again; any other ``next`` is out of order (409)."""
    with transaction.atomic():
        run = locked_run(run_id, user)
        if run.state == State.FINISHED:
            return 200, {"done": True, "run": str(run.pk)}
        _check_open(run)
        if run.state == State.AWAITING_MASK:
            if resume or (idempotency_key and idempotency_key == run.next_key):
                return 200, run.served
            raise EvalError(409, "awaiting_mask",
                            f"interaction {run.interaction} still awaits a mask: submit it before asking for the next.")  # fmt: skip
        if run.state == State.PREPARING:
            _resend_if_stuck(run)
            return 202, {"done": False, "status": "preparing", "retry_after_s": 0.05}
        return 200, _serve(run, idempotency_key)


RESEND_AFTER_S = 60.0


def _resend_if_stuck(run: EvaluationRun) -> None:
    """A run preparing for long lost its task (a broker restart): send it again (the task is idempotent)."""
    if (timezone.now() - run.updated_at).total_seconds() > RESEND_AFTER_S:
        task_intent_add(name=task_names.EVALUATION_PROCESS_RUN, args=[str(run.pk)])
        run.save(update_fields=["updated_at"])


def _serve(run: EvaluationRun, idempotency_key: str, *, save: bool = True) -> dict:
    """Serve the prepared interaction of a locked ``ready`` run (saves it unless ``save`` is False)."""
    truth = _truth(run.units[run.unit_index][0])
    width, height = _size(run.units[run.unit_index][0])
    run.interaction += 1
    payload = {
        "done": False, "run": str(run.pk), "interaction": run.interaction, "round": run.round + 1,
        "is_new": run.new_sample, "clicks": run.clicks, "last_clicks": run.last_clicks,
        "sample": {
            "index": run.unit_index, "dataset": truth.key.dataset, "sample_id": sample_id(truth.key),
            "image_stem": truth.key.image_stem, "object_stem": truth.key.object_stem,
            "group": run.units[run.unit_index][1], "width": width, "height": height,
            "image_url": f"/api/eval/runs/{run.pk}/samples/{run.unit_index}/image.png",
        },
    }  # fmt: skip
    run.new_sample, run.state, run.served, run.served_at = (
        False,
        State.AWAITING_MASK,
        payload,
        timezone.now(),
    )
    run.next_key = idempotency_key[:100]
    if save:
        save_step(run)
    return payload


def _then_next(run: EvaluationRun, data: dict, submit_key: str, *, save: bool = True) -> dict | None:
    """With ``then_next``, a submission's answer also carries the next interaction (one request per
    interaction instead of two); a retried submission gets the same one."""
    if data.get("then_next") is not True:
        return None
    key = f"then:{submit_key}"[:100] if submit_key else ""
    if run.state == State.FINISHED:
        return {"done": True, "run": str(run.pk)}
    if run.state == State.READY:
        return _serve(run, key, save=save)
    if run.state == State.AWAITING_MASK and key and run.next_key == key:
        return run.served
    return None


def decode_submission(data: dict, shape: tuple[int, int]) -> np.ndarray:
    has_png, has_rle = data.get("mask_png") is not None, data.get("mask_rle") is not None
    if has_png == has_rle:
        raise EvalError(
            400, "invalid_mask", "send exactly one of mask_png (base64 PNG) or mask_rle (COCO RLE)."
        )
    try:
        if has_png:
            if not isinstance(data["mask_png"], str):
                raise MaskFormatError("mask_png must be a base64 string of a PNG file.")
            try:
                raw = base64.b64decode(data["mask_png"], validate=True)
            except (binascii.Error, ValueError):
                raise MaskFormatError("mask_png is not valid base64.") from None
            return decode_png(raw, shape=shape, max_pixels=4 * shape[0] * shape[1] + 16)
        return decode_rle(data["mask_rle"], shape=shape)
    except MaskFormatError as exc:
        raise EvalError(400, "invalid_mask", str(exc)) from None


def decode_logits(data: dict) -> bytes | None:
    """The ``logits`` of a submission (base64 of the client's ``benchmark.statecodec`` bytes), or None."""
    raw = data.get("logits")
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise EvalError(400, "invalid_logits", "logits must be a base64 string (benchmark.statecodec bytes).")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise EvalError(400, "invalid_logits", "logits is not valid base64.") from None


def previous_prediction(run: EvaluationRun) -> dict:
    """What the run's current sample submitted last (its accepted prediction): the mask as a base64 PNG and the
    logits sent with it (base64, or null when none were sent). A client resumed in a new process passes them
    back as ``previous_logits``. These are the client's own predictions, never the ground truth."""
    has_sample = run.state in (State.READY, State.AWAITING_MASK) and run.round > 0 and run.pred_png
    return {
        "sample_index": run.unit_index,
        "round": run.round if has_sample else 0,
        "prediction_png": base64.b64encode(bytes(run.pred_png)).decode("ascii") if has_sample else None,
        "logits": base64.b64encode(bytes(run.logits)).decode("ascii") if has_sample and run.logits else None,
    }


def _submit(*, run_id, user, data: dict, idempotency_key: str = "") -> tuple[int, dict]:
    """Take the mask of the served interaction; (status, payload): 200 with the result, 202 while scoring."""
    with transaction.atomic():
        run = locked_run(run_id, user)
        if idempotency_key and idempotency_key == run.submit_key:
            if run.state == State.PREPARING:
                _resend_if_stuck(run)
                return 202, {"status": "scoring", "interaction": run.pending["interaction"]}
            return 200, {"result": run.last_result, "next": _then_next(run, data, idempotency_key)}
        if run.state != State.FINISHED:
            _check_open(run)
        if run.state != State.AWAITING_MASK:
            why = {
                State.PREPARING: "the previous submission is still being scored",
                State.READY: "no interaction was served: call next first",
                State.FINISHED: "the run is finished",
            }.get(run.state, run.state)
            raise EvalError(409, "not_awaiting_mask", f"run {run.pk} takes no mask now: {why}.")
        interaction = data.get("interaction")
        if interaction != run.interaction or isinstance(interaction, bool):
            raise EvalError(409, "wrong_interaction",
                            f"interaction={interaction!r}, but the run awaits the mask of interaction {run.interaction} "
                            f"(sample {run.served['sample']['sample_id']}).")  # fmt: skip
        timing = data.get("timing_s", 0.0)
        if (
            isinstance(timing, bool)
            or not isinstance(timing, int | float)
            or not math.isfinite(timing)
            or timing < 0
        ):
            raise EvalError(
                400, "invalid_timing", f"timing_s={timing!r} must be a non-negative number of seconds."
            )
        truth = _truth(run.units[run.unit_index][0])
        pred = decode_submission(data, truth.shape)
        logits = decode_logits(data)
        server_timing = (timezone.now() - run.served_at).total_seconds()
        run.pending = {
            "interaction": run.interaction,
            # max_time_s counts the method's time, as the local session does: the client's perf_counter from
            # get_clicks to submit_masks. It cannot exceed what the server saw pass between serving the clicks
            # and receiving the mask (which also holds both transfers), so that bounds it.
            "timing_s": min(float(timing), server_timing),
            "server_timing_s": server_timing,
        }
        # the client's PNG, checked by the decode, is kept as it came (an RLE is stored as a PNG)
        png = base64.b64decode(data["mask_png"]) if data.get("mask_png") is not None else encode_png(pred)
        run.pending_png, run.submit_key, run.state = png, idempotency_key[:100], State.PREPARING
        run.pending_logits = logits
        run._decoded = (run.pending_png, pred)
        dispatch(run, save=False)
        following = (
            _then_next(run, data, idempotency_key, save=False) if run.state != State.PREPARING else None
        )
        save_step(run)  # one write of the run per submission
    if run.state == State.PREPARING:
        return 202, {"status": "scoring", "interaction": run.interaction}
    if run.state == State.FAILED:
        raise EvalError(409, "run_failed", f"run {run.pk} failed on the server: {run.error}")
    return 200, {"result": run.last_result, "next": following}


def _recording_expiry(function):
    @functools.wraps(function)
    def wrapper(*, run_id, **kwargs):
        try:
            return function(run_id=run_id, **kwargs)
        except EvalError as exc:
            if exc.code == "run_expired":
                expire_due(run_id)  # the 410 rolled the request's transaction back: record the expiry now
            raise

    return wrapper


serve_next = _recording_expiry(_serve_next)
submit = _recording_expiry(_submit)
