"""The remote half of :class:`benchmark.session.ClickSession`: the same loop against an evaluation server.

::

    with ClickSession(host="https://clicklab.example", key="ek_...", dataset="GrabCut", max_clicks=20) as sess:
        while sess.next():
            sample, clicks, is_new = sess.get_clicks()
            if is_new:
                embedding = predictor.encode(sample.load_image())
            sess.submit_masks(predictor.predict(embedding, clicks, sess.previous_logits))
        report, summary = sess.get_report(), sess.get_global_summary()

The server holds the ground truth, computes the clicks and scores the masks; this client only sees the
image, the clicks and its own masks. Masks are thresholded here exactly as the local session does
(``> threshold`` for floats) and sent as PNG, with the prediction's logits (``benchmark.statecodec``), which
the server keeps for a resumed run. Every request carries an ``Idempotency-Key``; transport errors, 429 and
502/503/504 are retried with the same key, so a retry or a reconnect never double-submits. A run can be
resumed from another process with ``ClickSession(host=..., key=..., resume=<run id>)``: the first sample it
serves is new to it (``is_new``) and ``previous_logits`` is what the old process submitted last. ``max_time_s``
is the method's time (``get_clicks`` -> ``submit_masks``, measured here), as locally. Django-free (httpx only).
"""

from __future__ import annotations

import base64
import json
import math
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmark.datasets import Dataset, SampleKey
from benchmark.maskcodec import decode_png, encode_png, encode_rle
from benchmark.session import REPORT_COLUMNS, SessionStateError, SubmitResult, session_files_write
from benchmark.statecodec import decode_state, encode_state
from segmenters.base import Click

RETRY_STATUSES = {429, 502, 503, 504}


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # an argument the caller did not pass (a benchmark's protocol then decides)


class RemoteError(RuntimeError):
    """The server refused a request: its HTTP ``status`` and the error envelope's ``code``, ``message`` and
    ``field`` (the server's ``config.api_errors``); ``str()`` reads ``HTTP 400 invalid_config (field
    max_clicks): ...``."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        where = f" (field {field})" if field else ""
        super().__init__(f"HTTP {status} {code}{where}: {message}")
        self.status, self.code, self.message, self.field = status, code, message, field


def remote_error(response) -> RemoteError:
    """The RemoteError of an error answer: its envelope, or the first 500 characters of a body that is not one
    (a proxy's HTML page)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        field = body.get("field")
        return RemoteError(response.status_code, str(body.get("code") or "error"), body["message"],
                           field if isinstance(field, str) else None)  # fmt: skip
    return RemoteError(response.status_code, "error", response.text[:500])


@dataclass
class RemoteSample:
    """What the local session's ``Sample`` offers a user script: ``key``, ``load_image()`` and the size."""

    key: SampleKey
    group: str
    width: int
    height: int
    image_url: str
    _session: RemoteClickSession = field(repr=False)

    def load_image(self) -> np.ndarray:
        return self._session._image(self.image_url, self.key.image_stem)


class RemoteClickSession:
    """ClickSession against ``host`` (see the module docstring). Arguments as the local session, plus:

    Args:
      host: server base URL; key: the evaluation key (``EvalKey``) shown once in the researcher area.
      dataset: the server's dataset name (or a local :class:`Dataset`, whose name is used).
      benchmark: a published benchmark's slug: the run follows its protocol (clickers, ``max_clicks``,
        ``max_time_s``, ``seed``, ``click_model``, ``group_bounds``) and appears on its leaderboard. Leave those
        arguments out (the benchmark's apply); one that differs from the protocol is refused, naming it.
      method: the name the run appears under on the leaderboard.
      click_model, group_bounds: with ``clicker="group"``, the server's click model by name (``dt`` by
        default, ``uniform``/``ud``, ``sm``, ``si``) and the clicking groups (default G1..G10); the same
        arguments give the local session the same clicks (``map_fn`` is local-only).
      mask_format: ``"png"`` (default) or ``"rle"`` (COCO RLE).
      resume: a run id to continue (after a crash); the run's server-side state is authoritative.
      progress: show a tqdm progress bar over samples.
      retries, timeout_s: attempts and per-request timeout; poll_timeout_s: longest wait for the server's
        scoring (202 answers) before a TimeoutError that tells how to resume.
      transport: an httpx transport (tests pass the Django app's WSGI transport).
    """

    def __init__(
        self,
        *,
        host: str,
        key: str | None,
        dataset: str | Dataset | None = None,
        benchmark: str | None = None,
        clicker: Any = UNSET,  # UNSET: the benchmark's, else the local session's default ("baseline")
        max_clicks: Any = UNSET,  # 20
        max_time_s: Any = UNSET,  # None
        threshold: float = 0.5,
        target_ious=(0.85, 0.90),
        stop_at_target: Any = UNSET,  # False
        seed: Any = UNSET,  # 0
        shuffle: bool = False,
        report_save_dir: Path | None = None,
        click_model: str | None = None,
        group_bounds=None,
        method: str = "",
        mask_format: str = "png",
        resume: str | None = None,
        progress: bool = False,
        retries: int = 5,
        timeout_s: float = 60.0,
        poll_timeout_s: float = 900.0,
        transport=None,
        **local_only,
    ) -> None:
        import httpx

        if not key:
            raise ValueError(
                "A remote ClickSession needs key=<your evaluation key> (researcher area, Evaluation keys)."
            )
        _refuse_local_only(local_only)
        if mask_format not in ("png", "rle"):
            raise ValueError(f"mask_format={mask_format!r}: use 'png' or 'rle'.")
        if dataset is None and benchmark is None and resume is None:
            raise ValueError(
                "A remote ClickSession needs dataset=<the server's dataset name> or benchmark=<slug>."
            )
        self.host = host.rstrip("/")
        self.dataset_name = (
            dataset.name if isinstance(dataset, Dataset) else (None if dataset is None else str(dataset))
        )
        given = {"clicker": clicker, "max_clicks": max_clicks, "max_time_s": max_time_s,
                 "stop_at_target": stop_at_target, "seed": seed}  # fmt: skip
        self.config = _run_request(
            {name: value for name, value in given.items() if value is not UNSET}, dataset=self.dataset_name,
            benchmark=benchmark, click_model=click_model, group_bounds=group_bounds,
            own={"threshold": float(threshold), "target_ious": [float(t) for t in target_ious], "shuffle": bool(shuffle),
                 "method": method},
        )  # fmt: skip
        self.threshold, self.mask_format = float(threshold), mask_format
        self.report_save_dir = Path(report_save_dir) if report_save_dir else None
        self.retries, self.progress, self.poll_timeout_s = retries, progress, poll_timeout_s
        self._http = httpx.Client(
            base_url=self.host, timeout=timeout_s, transport=transport,
            headers={"Authorization": f"EvalKey {key}", "User-Agent": "clicklab-remote-session/1"},
        )  # fmt: skip
        self.run_id: str | None = resume
        self.session_id: str | None = None
        self._state = "created"
        self._served: dict | None = None
        self._sample: RemoteSample | None = None
        self._images: dict[str, np.ndarray] = {}
        self._summary: dict | None = None
        self._bar = None
        self._prefetched: dict | None = None
        # What the method gets as previous_logits, as the local session keeps it; `_previous_known` is False
        # when this process joined a sample mid-way (a resume): the server's copy is fetched on first use.
        self._previous: Any = None  # model-specific, as segmenters.base.Prediction.logits
        self._previous_known = True
        self._sample_here: int | None = None  # index of the sample this process last served
        self.round_trips_s: list[tuple[str, float]] = []  # (path, seconds) per request, for the bench

    # -- transport ---------------------------------------------------------------------------------

    def _request(self, method: str, url: str, *, json_body=None, idempotent_key: str | None = None):
        import httpx

        headers = {"Idempotency-Key": idempotent_key} if idempotent_key else {}
        delay = 0.2
        for attempt in range(self.retries + 1):
            started = time.perf_counter()
            try:
                response = self._http.request(method, url, json=json_body, headers=headers)
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self.round_trips_s.append((url, time.perf_counter() - started))
            if response.status_code in RETRY_STATUSES and attempt < self.retries:
                wait = float(response.headers.get("Retry-After", delay) or delay)
                time.sleep(min(wait, 30.0))
                delay = min(delay * 2, 5.0)
                continue
            if response.status_code >= 400:
                raise remote_error(response)
            return response
        raise AssertionError("unreachable")

    def _poll(self, method: str, url: str, *, json_body=None, key: str) -> dict:
        """Repeat a request (same idempotency key) while the server answers 202 (still working)."""
        wait, deadline = 0.002, time.monotonic() + self.poll_timeout_s
        while True:
            response = self._request(method, url, json_body=json_body, idempotent_key=key)
            if response.status_code != 202:
                return response.json()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"run {self.run_id}: the server was still working after {self.poll_timeout_s:.0f} s; "
                    f"resume later with ClickSession(host=..., key=..., resume={self.run_id!r})."
                )
            time.sleep(wait)
            wait = min(wait * 2, 0.25)

    def _image(self, url: str, image_stem: str) -> np.ndarray:
        """The sample's image, downloaded once per image (the groups of an instance, and the instances of an
        image, follow one another); a fresh copy each call, as the local ``Sample.load_image`` gives."""
        if image_stem not in self._images:
            import io

            from PIL import Image

            data = self._request("GET", url).content
            self._images.clear()  # one image at a time
            self._images[image_stem] = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        return self._images[image_stem].copy()

    # -- context manager ---------------------------------------------------------------------------

    def __enter__(self) -> RemoteClickSession:
        if self._state != "created":
            raise SessionStateError("A ClickSession can be entered only once; create a new session.")
        self.server = self.health()
        if self.run_id is None:
            run = self._request(
                "POST", "/api/eval/runs/", json_body=self.config, idempotent_key=uuid.uuid4().hex
            ).json()
        else:
            run = self._request("GET", f"/api/eval/runs/{self.run_id}/").json()
        self.run_id, self.session_id = run["id"], run["session_id"]
        self.max_clicks, self.samples_total = run["max_clicks"], run["samples"]
        self.run_config = run  # what the server runs: the benchmark's protocol where one applies
        if self.progress:
            from tqdm import tqdm

            self._bar = tqdm(total=self.samples_total, desc=f"run {self.run_id[:8]}", unit="sample")
        self._state = "ready"
        if run["state"] == "awaiting_mask":  # resumed mid-interaction: take the open interaction again
            served = self._request("POST", f"/api/eval/runs/{self.run_id}/next/", json_body={"resume": True})
            self._take(served.json())
        return self

    def health(self) -> dict:
        """The server's ``GET /api/eval/health/``; a RemoteError saying so when ``host`` is not a Clicklab
        evaluation server that can take runs now (as DAVIS's client checks its server first)."""
        import httpx

        try:
            response = self._request("GET", "/api/eval/health/")
            body = response.json()
        except (RemoteError, httpx.TransportError, ValueError) as exc:
            raise RemoteError(getattr(exc, "status", 0), "unhealthy",
                              f"{self.host} is not a Clicklab evaluation server that answers now "
                              f"(GET /api/eval/health/: {exc}); check the host and try again.") from None  # fmt: skip
        if body.get("service") != "clicklab-evaluation":
            raise RemoteError(response.status_code, "unhealthy",
                              f"{self.host}/api/eval/health/ is not a Clicklab evaluation server's answer.")  # fmt: skip
        return body

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._state != "finished" and self.report_save_dir is not None and self.run_id is not None:
            try:
                self._write_files(self.report_save_dir, suffix=".partial")
            except Exception:  # the original exception matters more than a failed snapshot
                pass
        return None  # the HTTP client stays open: get_report() works after the with block, as locally

    def close(self) -> None:
        self._http.close()

    # -- the loop ----------------------------------------------------------------------------------

    def next(self) -> bool:
        if self._state == "created":
            raise SessionStateError("Call next() inside 'with ClickSession(...) as sess:'.")
        if self._state == "awaiting_mask":
            raise SessionStateError(
                "next() called before submit_masks(): submit a mask for the current clicks first."
            )
        if self._state == "finished":
            return False
        if self._state == "awaiting_get" and self._served is not None:
            return True
        if self._prefetched is not None:  # the last submission's answer carried it
            payload, self._prefetched = self._prefetched, None
        else:
            payload = self._poll("POST", f"/api/eval/runs/{self.run_id}/next/", key=uuid.uuid4().hex)
        if payload.get("done"):
            self._state = "finished"
            self._summary = self._fetch_summary()
            if self._bar is not None:
                self._bar.update(self._bar.total - self._bar.n)
            if self.report_save_dir is not None:
                self._write_files(self.report_save_dir, suffix="")
            return False
        self._take(payload)
        return True

    def _take(self, payload: dict) -> None:
        sample = payload["sample"]
        # New to this process: the server's first interaction of a sample, or any interaction of a sample
        # this process has not served yet (a run resumed mid-sample), so the loop encodes its image.
        first_here = sample["index"] != self._sample_here
        self._served = {**payload, "is_new": bool(payload["is_new"]) or first_here}
        self._sample_here = sample["index"]
        if payload["round"] == 1:
            self._previous, self._previous_known = None, True
        elif first_here:
            self._previous, self._previous_known = None, False
        key = SampleKey(sample["dataset"], sample["image_stem"], sample["object_stem"])
        self._sample = RemoteSample(
            key, sample["group"], sample["width"], sample["height"], sample["image_url"], self
        )
        if self._bar is not None and payload["is_new"] and sample["index"] > 0:
            self._bar.update(1)
        self._state = "awaiting_get"

    @property
    def previous_logits(self):
        """What the sample's previous round submitted (``Prediction.logits``, the ``logits=`` given with an
        array, else the mask), None on its first round: the local session's value. A process that resumed the
        run mid-sample gets the copy the server kept with that submission."""
        if not self._previous_known:
            stored = self._request("GET", f"/api/eval/runs/{self.run_id}/previous/").json()
            if stored["logits"] is not None:
                self._previous = decode_state(base64.b64decode(stored["logits"]))
            elif stored["prediction_png"] is not None:
                assert self._sample is not None  # _take() set it when it found the sample new to this process
                shape = (self._sample.height, self._sample.width)
                self._previous = decode_png(base64.b64decode(stored["prediction_png"]), shape=shape)
            self._previous_known = True
        return self._previous

    def get_clicks(self, only_last: bool = False) -> tuple[RemoteSample, list[Click], bool]:
        if self._state == "finished":
            raise SessionStateError("get_clicks() called after the session ended (next() returned False).")
        if self._state == "awaiting_mask":
            raise SessionStateError("get_clicks() called twice: call submit_masks() with a mask first.")
        if self._state != "awaiting_get":
            raise SessionStateError("get_clicks() called before next(): call sess.next() first.")
        assert self._served is not None and self._sample is not None  # _take() set both: state awaiting_get
        self._state = "awaiting_mask"
        self._clock = time.perf_counter()
        raw = self._served["last_clicks" if only_last else "clicks"]
        clicks = [Click(x=float(x), y=float(y), is_positive=bool(p)) for x, y, p in raw]
        return self._sample, clicks, bool(self._served["is_new"])

    def submit_masks(self, mask_or_probs, logits=None) -> SubmitResult:
        """As the local session's: a ``segmenters.base.Prediction`` (its probabilities are thresholded and its
        logits kept for :attr:`previous_logits`), a bool (H, W) mask or float (H, W) probabilities; ``logits``:
        with an array, what :attr:`previous_logits` returns next round (default: the mask). The logits travel
        with the mask (``benchmark.statecodec``), so a resumed run has them too."""
        timing_s = time.perf_counter() - getattr(self, "_clock", time.perf_counter())
        if hasattr(mask_or_probs, "probabilities"):
            if logits is None:
                logits = getattr(mask_or_probs, "logits", None)
            mask_or_probs = mask_or_probs.probabilities
        if self._state != "awaiting_mask":
            raise SessionStateError(
                "submit_masks() called before get_clicks(): call next() and get_clicks() first."
            )
        assert self._served is not None and self._sample is not None  # kept from _take() until the submit
        array = np.asarray(mask_or_probs)
        shape = (self._sample.height, self._sample.width)
        if array.shape != shape:
            raise ValueError(
                f"submit_masks: got shape {array.shape}, expected the sample's (H, W) = {shape}."
            )
        mask = array if array.dtype == bool else array > self.threshold
        body = {"interaction": self._served["interaction"], "timing_s": timing_s, "then_next": True}
        if self.mask_format == "png":
            body["mask_png"] = base64.b64encode(encode_png(mask)).decode("ascii")
        else:
            body["mask_rle"] = encode_rle(mask)
        if logits is not None:
            body["logits"] = base64.b64encode(encode_state(logits)).decode("ascii")
        key = uuid.uuid4().hex
        payload = self._poll("POST", f"/api/eval/runs/{self.run_id}/submit/", json_body=body, key=key)
        result = payload["result"]
        self._prefetched = payload.get("next")
        self._state, self._served = "ready", None
        value = float("nan") if result["iou"] is None else float(result["iou"])
        if result["status"] == "accepted":
            self._previous, self._previous_known = (mask if logits is None else logits), True
        return SubmitResult(result["status"], value, int(result["round"]), int(result["clicks"]))

    # -- results -----------------------------------------------------------------------------------

    def get_report(self) -> pd.DataFrame:
        rows = self._request("GET", f"/api/eval/runs/{self.run_id}/report/").json()
        frame = pd.DataFrame(rows, columns=list(REPORT_COLUMNS))
        frame["iou"] = frame["iou"].astype(float)
        return frame

    def _fetch_summary(self) -> dict:
        return _nan_back(self._request("GET", f"/api/eval/runs/{self.run_id}/summary/").json())

    def get_global_summary(self, save_file: str | Path | None = None) -> dict:
        if self._state != "finished" or self._summary is None:
            raise SessionStateError("get_global_summary() is available once next() has returned False.")
        if save_file is not None:
            Path(save_file).write_text(json.dumps(self._summary, indent=1), encoding="utf-8")
        return self._summary

    def _write_files(self, directory: Path, *, suffix: str) -> None:
        session_files_write(directory, self.session_id, self.get_report(), self._summary, suffix=suffix)


def _refuse_local_only(local_only: dict) -> None:
    unsupported = {name for name, value in local_only.items() if value is not None}
    if unsupported:
        hint = (
            " (for clicker='group' pass click_model='dt', 'uniform', 'sm' or 'si')"
            if "map_fn" in unsupported
            else ""
        )
        raise ValueError(
            f"{sorted(unsupported)} are local-only arguments: the server computes the clicks; remove them{hint}."
        )


def _run_request(given: dict, *, dataset, benchmark, click_model, group_bounds, own: dict) -> dict:
    """The create request of a run. Without a benchmark, what was not passed is the local session's default;
    with one, only what was passed goes (the rest is the benchmark's protocol, and a value that differs from it
    is refused with a message naming it)."""
    if benchmark is None:
        given = {"clicker": "baseline", "max_clicks": 20, "max_time_s": None, "stop_at_target": False, "seed": 0,
                 **given}  # fmt: skip
    for name, kind in (("max_clicks", int), ("seed", int), ("stop_at_target", bool)):
        if name in given:
            given[name] = kind(given[name])
    config = {**given, **own}
    if dataset is not None:
        config["dataset"] = dataset
    if benchmark is not None:
        config["benchmark"] = str(benchmark)
    if (
        given.get("clicker", "group" if benchmark else "baseline") == "group"
    ):  # others ignore them, as locally
        if click_model is not None:
            config["click_model"] = str(click_model)
        if group_bounds is not None:
            config["group_bounds"] = [[float(low), float(high)] for low, high in group_bounds]
    return config


def _nan_back(value):
    """The server sends NaN (undefined NoC, IoU-AuC of nothing) as null; the local summary has NaN."""
    if value is None:
        return math.nan
    if isinstance(value, dict):
        return {k: _nan_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_back(v) for v in value]
    return value
