"""Load and fault suite (issue 16.4): N simulated annotators over HTTP against the production stack, with
faults injected, and the figure compared with a fault-free baseline measured in the same run.

Everything runs on throw-away services of its own, so nothing shared is ever restarted: a new PostgreSQL
cluster (``initdb`` under /tmp on a free port), a Redis server (append-only file, so a restart keeps its
queue), and the production processes of ``config/runner.py`` (gunicorn, a ``default`` worker, the outbox
relay). The load comes from separate client processes (``--clients``), each running its annotators as
asyncio tasks over a lean HTTP/1.1 client of its own (``LeanHTTP``, keep-alive connections on asyncio streams:
the clients share the cores with the server they measure, and httpx took 1.5-1.7 ms of CPU per request where
this client takes 0.065 ms, against a trivial local server on 2026-11-28), speaking the player's protocol:

    entry (POST /s/<link>/) -> start (POST .../client) -> 10 x (presented (one showing id per trial: carried on
    the previous click as its ``next_presentation``, or for the first trial, and when the carried report was
    not taken, POST .../presented, retried with it until 200), then, once phases A-C are over, click (POST
    .../click, one idempotency key per click, retried with that key until acknowledged)) -> finish (POST
    .../finish, retried until 200). The study's phases last 100 ms each, so a click comes 300 ms after its
    trial's report. ``--separate-presented`` sends every report on its own, as players did before.

The annotators arrive evenly over ``--ramp`` seconds (default 60: a popular Toloka pool sends a thousand
workers in minutes; ``--ramp 0`` starts them all in the same instant, as ``--short`` does) and then click as
fast as the server answers (no thinking time unless ``--think-ms``), so the clicks are a stress test.

Phases: ``baseline`` (no faults) then ``faults``: the clients drop a share of requests before sending
(``--drop``; the client waits its timeout and retries) and lose a share of responses after the server
processed them (``--lose``; the client retries the same key), while the orchestrator SIGKILLs the worker,
restarts Redis, SIGKILLs and restarts gunicorn, and restarts PostgreSQL (``pg_ctl restart -m fast``), one
after the other. After each phase it waits for every finished session to be validated.

Printed per phase: clicks sent / acknowledged / stored / lost (acknowledged, not stored) / duplicated
(stored more than once or a second click on a trial) / given up / flagged ``not_presented`` or ``replayed``
(a report lost or counted twice), sessions finished / validated, responses
by status (5xx counted, 503 apart), client-observed click latency p50/p95/p99 (successful attempts),
server-side click latency p50/p95/p99 (gunicorn's request time), the same for the entry (session start), throughput (acknowledged clicks per
second of the phase, and sustained: the middle 80 % of the acknowledgements over the time they took, which
leaves out the entry burst and the last annotators' tail), and the fault phase's figures as ratios of the
baseline's.

    make bench-faults                                   # short: 100 annotators, all faults (~1-2 min)
    .venv/bin/python bench/bench_load_faults.py --annotators 1000 --clients 2
    .venv/bin/python bench/bench_load_faults.py --annotators 200 --faults worker,broker --drop 0.05

``--against REF`` (default 322004d, the commit before issue 35's single annotator path) also runs the same phases
against REF's code in the same run: a throw-away ``git worktree`` of REF, its own temporary services, the same
arguments, the same load generator (this file's). REF runs first, then the working tree; both sustained rates
(baseline and fault phase) are printed with their ratios, and the run fails when a ratio is below
``--min-ratio`` (default 0.8). ``--against none`` measures the working tree alone. ``--rounds K`` measures each
code K times in alternating order (REF HEAD, HEAD REF, ...) and compares the means: on 2026-12-03 three
consecutive ``--ramp 0`` baselines on a quiet machine gave 397, 342 and 306 clicks/s, the first and the last of
the same code, so whichever code runs second can start behind.

    .venv/bin/python bench/bench_load_faults.py --short --against 322004d
    .venv/bin/python bench/bench_load_faults.py --annotators 1000 --clients 2 --ramp 0 --rounds 2

Exit status 1 when anything was lost or duplicated, a click was stored flagged ``not_presented`` or
``replayed``, a finished session stayed unvalidated, an annotator could not finish, or a 500 was answered in
either phase (of either code, with ``--against``), or a sustained ratio is below ``--min-ratio``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import json as _json_module  # LeanHTTP.request takes a ``json=`` argument, as httpx's
import math
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections import Counter
from pathlib import Path
from statistics import fmean

PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: The code the stack runs (``--code``: a worktree of ``--against``'s REF); the load generator is always this file.
CODE_ROOT = PROJECT_ROOT
DEFAULT_AGAINST = "322004d"
ALL_FAULTS = ("worker", "broker", "web", "postgres")
BATCH = 10
#: Each timed phase of the suite's study (A image, B target, C blocked), ms: short, so a run takes seconds per batch.
PHASE_MS = 100
PHASES_ABC_S = 3 * PHASE_MS / 1000

# ==================================================================================================
# client process (no Django): python bench/bench_load_faults.py --client spec.json out.json


# C901: a benchmark script's simulated annotator with its nested retrying request helper; not app code.
async def _annotator(http, spec: dict, index: int, rng: random.Random, stats: dict) -> dict:  # noqa: C901
    drop, lose = spec["drop"], spec["lose"]
    timeout_s = spec["timeout_s"]
    record: dict = {"token": None, "clicks": [], "finished": False, "code": ""}
    if spec["ramp_s"]:  # arrivals spread evenly over the ramp, as a pool's workers come in over minutes
        await asyncio.sleep(spec["ramp_s"] * index / spec["annotators"])

    async def call(method: str, url: str, *, kind: str, body=None, ok=(200, 201), **kw):
        """One logical request, retried (same body, same idempotency key) until an accepted status."""
        attempt = 0
        deadline = time.monotonic() + spec["give_up_s"]
        while time.monotonic() < deadline:
            attempt += 1
            if attempt > 1:
                await asyncio.sleep(min(2.0, 0.1 * 2 ** min(attempt, 5)) * (0.5 + rng.random()))
            if drop and rng.random() < drop:  # the request never reaches the server
                stats["dropped"] += 1
                await asyncio.sleep(spec["drop_wait_s"])
                continue
            stats["requests"][kind] = stats["requests"].get(kind, 0) + 1
            started = time.perf_counter()
            try:
                response = await http.request(method, url, json=body, timeout=timeout_s, **kw)
            except Exception as exc:  # connection refused/reset, timeout
                stats["errors"][type(exc).__name__] = stats["errors"].get(type(exc).__name__, 0) + 1
                continue
            elapsed_ms = (time.perf_counter() - started) * 1000
            stats["status"][str(response.status_code)] = stats["status"].get(str(response.status_code), 0) + 1
            if lose and rng.random() < lose:  # processed, but the answer never reaches the client
                stats["lost_responses"] += 1
                continue
            if response.status_code in ok:
                if kind in ("click", "entry"):
                    stats[f"{kind}_ms"].append(elapsed_ms)
                return response, attempt
            if 400 <= response.status_code < 500 and response.status_code not in (408, 429):
                stats["refused"].append(f"{kind} {response.status_code} {response.text[:200]}")
                return response, attempt
        return None, attempt

    # ?then=redirect: the entry answers 303 to the player's address (the token) instead of the player page itself
    response, _ = await call(
        "POST", f"/s/{spec['link']}/?then=redirect", kind="entry", data={"device": "pc"}, ok=(303,)
    )
    if response is None or response.status_code != 303:
        return record
    token = response.headers["location"].rstrip("/").rsplit("/", 1)[-1]
    record["token"] = token
    api = f"/api/annotator/{token}"
    await call("POST", f"{api}/client", kind="start",
               body={"client_info": {"viewport_width": 1280, "viewport_height": 800, "refresh_hz": 60},
                     "detected_device": "pc"})  # fmt: skip
    carried = None  # the showing of this trial, reported on the previous click: (presentation id, answered)
    for position in range(BATCH):
        # as the player: report the showing (carried on the previous click, else on its own), wait out phases
        # A-C (the server refuses an earlier click), click
        showing = carried[0] if carried else f"{index}-{position}-{uuid.uuid4().hex[:8]}"
        if not (carried and carried[1]):  # the first trial, the old protocol, or the carried report not taken
            await call("POST", f"{api}/presented", kind="presented",
                       body={"position": position, "presentation_id": showing})  # fmt: skip
        await asyncio.sleep(PHASES_ABC_S)
        key = f"{index}-{position}-{uuid.uuid4().hex[:12]}"
        body = {"position": position, "idempotency_key": key, "x": 10.5 + position, "y": 12.25,
                "shown_width": 640, "shown_height": 480, "pointer_type": "mouse", "reaction_ms": 400 + position,
                "event_timestamp_ms": 9000.5 + 100 * position, "phase_onsets_ms": {"A": 1, "B": 2, "C": 3, "D": 4},
                "blocked_clicks": 0, "flags": [], "refresh_hz": 60}  # fmt: skip
        carried = None
        if position + 1 < BATCH and not spec["separate_presented"]:
            carried = (f"{index}-{position + 1}-{uuid.uuid4().hex[:8]}", False)
            body["next_presentation"] = {"position": position + 1, "presentation_id": carried[0]}
        stats["clicks_sent"] += 1
        response, attempts = await call("POST", f"{api}/click", kind="click", body=body)
        acked = response is not None and response.status_code in (200, 201)
        if carried and acked:
            carried = (carried[0], bool((response.json().get("next_presentation") or {}).get("ok")))
        record["clicks"].append({"key": key, "acked": acked, "attempts": attempts,
                                 "acked_at": time.time() if acked else None})  # fmt: skip
        if spec["think_ms"]:
            await asyncio.sleep(spec["think_ms"] / 1000 * (0.5 + rng.random()))
    response, _ = await call("POST", f"{api}/finish", kind="finish", body={})
    if response is not None and response.status_code == 200:
        record["finished"] = True
        record["code"] = response.json().get("finish", {}).get("code", "")
    return record


class _Response:
    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code, self.headers, self.content = status_code, headers, content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.content)


class LeanHTTP:
    """The client side of HTTP/1.1 that the suite needs, over asyncio streams: keep-alive connections (at most
    ``max_connections``), bodies by Content-Length or chunked, no cookies, no redirects followed (see the
    module docstring for its CPU per request against httpx's). ``tests/bench/test_lean_http.py`` tests it.

    A request written on a kept connection that the server had closed (its keep-alive timeout, a restart) and
    that got no byte of answer is sent once more on a new connection, as browsers do; any other failure
    (refused, reset, timeout, a cut answer) raises, and the annotator retries it with the same key."""

    def __init__(self, base: str, max_connections: int) -> None:
        parsed = urllib.parse.urlsplit(base)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.slots = asyncio.Semaphore(max_connections)

    async def close(self) -> None:
        for _reader, writer in self.idle:
            writer.close()
        self.idle.clear()

    async def request(
        self, method: str, path: str, *, json=None, data=None, timeout: float, cookie: str = ""
    ) -> _Response:
        """``cookie``: a ``Cookie`` header's value to send (the client keeps no jar; a caller that plays one
        browser keeps its own, from the answers' ``set-cookie``)."""
        if json is not None:
            body, kind = _json_module.dumps(json).encode(), "application/json"
        elif data is not None:
            body, kind = urllib.parse.urlencode(data).encode(), "application/x-www-form-urlencoded"
        else:
            body, kind = b"", ""
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Length: {len(body)}\r\n"
        if cookie:
            head += f"Cookie: {cookie}\r\n"
        message = (head + (f"Content-Type: {kind}\r\n" if kind else "") + "\r\n").encode("latin-1") + body
        async with self.slots, asyncio.timeout(timeout):
            while self.idle:
                reader, writer = self.idle.pop()
                if reader.at_eof():
                    writer.close()
                    continue
                try:
                    return await self._exchange(reader, writer, message)
                except _ClosedBeforeAnswer:
                    continue  # a stale kept connection: the request never reached the application
            reader, writer = await asyncio.open_connection(self.host, self.port)
            return await self._exchange(reader, writer, message)

    async def _exchange(self, reader, writer, message: bytes) -> _Response:
        try:
            writer.write(message)
            await writer.drain()
            try:
                block = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as cut:
                if not cut.partial:
                    raise _ClosedBeforeAnswer() from None
                raise
            lines = block.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            headers = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    name, value = name.strip().lower(), value.strip()
                    # several set-cookie lines: kept all, one per line
                    headers[name] = (
                        f"{headers[name]}\n{value}" if name == "set-cookie" and name in headers else value
                    )
            keep = headers.get("connection", "").lower() != "close"
            if "content-length" in headers:
                content = await reader.readexactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                parts = []
                while True:
                    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                    parts.append(await reader.readexactly(size + 2))
                    if size == 0:
                        break
                content = b"".join(part[:-2] for part in parts)
            else:
                content, keep = await reader.read(), False
        except BaseException:
            writer.close()
            raise
        if keep:
            self.idle.append((reader, writer))
        else:
            writer.close()
        return _Response(status, headers, content)


class _ClosedBeforeAnswer(ConnectionError):
    """A kept connection closed by the server before any byte of the answer."""


async def _client_main(spec: dict) -> dict:
    stats = {"clicks_sent": 0, "dropped": 0, "lost_responses": 0, "status": {}, "errors": {}, "click_ms": [],
             "entry_ms": [], "refused": [], "requests": {}}  # fmt: skip
    started = time.monotonic()
    # No cookies are kept: the link entry keeps one worker per browser in a cookie, and every simulated
    # annotator is another person (a shared jar made them all one worker resuming one session).
    http = LeanHTTP(spec["base"], spec["connections"])
    try:
        rngs = [random.Random(spec["seed"] * 100_003 + i) for i in spec["indices"]]
        records = await asyncio.gather(
            *(_annotator(http, spec, i, r, stats) for i, r in zip(spec["indices"], rngs))
        )
    finally:
        await http.close()
    stats["wall_s"] = time.monotonic() - started
    return {"stats": stats, "annotators": records}


# ==================================================================================================
# orchestrator


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_port(port: int, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            probe.settimeout(0.5)
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout_s}s")


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": math.nan, "p95": math.nan, "p99": math.nan}
    ordered = sorted(values)

    def pick(q):
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50": pick(0.50), "p95": pick(0.95), "p99": pick(0.99)}


class Postgres:
    """A throw-away cluster on its own port under /tmp (never the shared one)."""

    def __init__(self, root: Path):
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
        if not bins:
            raise RuntimeError("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin")
        self.bin = bins[-1]
        self.root = root / "pg"
        self.data = self.root / "data"
        self.port = free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *cmd: str) -> None:
        subprocess.run([*self.as_user, *cmd], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def init(self) -> None:
        self.root.mkdir(parents=True)
        if self.as_user:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"
        )
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=300"
        (self.root / "options").write_text(options)
        self.start()

    def start(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"), "-w",
                  "-o", (self.root / "options").read_text(), "start")  # fmt: skip

    def restart(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                  "-o", (self.root / "options").read_text(), "restart")  # fmt: skip

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except Exception:
            pass

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"


class Proc:
    """One server process in a process group of its own (so a kill takes its children too)."""

    def __init__(self, name: str, cmd: list[str], env: dict, log: Path, port: int | None = None):
        self.name, self.cmd, self.env, self.log, self.port = name, cmd, env, log, port
        self.popen: subprocess.Popen | None = None

    def start(self, *, wait_s: float = 60) -> None:
        with open(self.log, "ab") as handle:
            self.popen = subprocess.Popen(self.cmd, cwd=CODE_ROOT, env=self.env, stdout=handle,
                                          stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        if self.port:
            wait_port(self.port, wait_s, self.name)

    def signal(self, sig: int) -> None:
        if self.popen and self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, *, timeout_s: float = 10) -> None:
        if not self.popen:
            return
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        self.signal(signal.SIGKILL)
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.popen:
            self.popen.wait(timeout=10)


ACCESS_CLICK = re.compile(r'"POST /api/annotator/\S+/click HTTP/1\.\d" \d{3} .*?(\d+)ms')
ACCESS_ENTRY = re.compile(r'"POST /s/\S+ HTTP/1\.\d" \d{3} .*?(\d+)ms')


def _server_ms(access_log: Path, offset: int) -> tuple[dict[str, list[float]], int]:
    """Request times (ms) of the click and entry requests in the web process's log (gunicorn's access lines,
    in ``config/gunicorn.py``'s format, as ``make prod`` writes them) after byte ``offset``; new offset."""
    if not access_log.exists():
        return {"click": [], "entry": []}, offset
    data = access_log.read_bytes()
    text = data[offset:].decode("utf-8", "replace")
    return {
        kind: [float(match.group(1)) for match in pattern.finditer(text)]
        for kind, pattern in (("click", ACCESS_CLICK), ("entry", ACCESS_ENTRY))
    }, len(data)


def run_phase(name: str, args, stack: dict, link: str, base: str, faults: tuple[str, ...], tmp: Path) -> dict:
    from django.db import connections

    from collector.models import Click, Session, Trial

    n, clients = args.annotators, max(1, min(args.clients, args.annotators))
    offset = stack["access_offset"]
    procs = []
    started = time.monotonic()
    for c in range(clients):
        indices = list(range(c, n, clients))
        spec = {"base": base, "link": link, "indices": indices, "seed": c + (1000 if faults else 0),
                "drop": args.drop if faults else 0.0, "lose": args.lose if faults else 0.0,
                "timeout_s": args.timeout, "drop_wait_s": min(args.timeout, 0.5), "give_up_s": args.give_up,
                "think_ms": args.think_ms, "connections": max(1, len(indices)),
                "separate_presented": args.separate_presented,
                "ramp_s": args.ramp, "annotators": n}  # fmt: skip
        spec_path, out_path = tmp / f"{name}-{c}-spec.json", tmp / f"{name}-{c}-out.json"
        spec_path.write_text(json.dumps(spec))
        procs.append((subprocess.Popen([sys.executable, __file__, "--client", str(spec_path), str(out_path)],
                                       cwd=PROJECT_ROOT), out_path))  # fmt: skip
    fault_log = []
    if faults:
        fault_log = inject_faults(stack, faults, args, lambda: all(p.poll() is not None for p, _ in procs))
    for process, _ in procs:
        process.wait()
    wall = time.monotonic() - started
    results = [json.loads(out.read_text()) for _, out in procs]

    # What the database holds (a fresh connection: PostgreSQL may have restarted under the old one).
    connections.close_all()
    keys_sent, keys_acked, tokens, finished, acked_at = [], set(), [], 0, []
    for result in results:
        for ann in result["annotators"]:
            if ann["token"]:
                tokens.append(ann["token"])
            finished += ann["finished"]
            for click in ann["clicks"]:
                keys_sent.append(click["key"])
                if click["acked"]:
                    keys_acked.add(click["key"])
                    acked_at.append(click["acked_at"])
    stored_counts = Counter(
        Click.objects.filter(idempotency_key__in=keys_sent).values_list("idempotency_key", flat=True)
    )
    from django.db.models import Count, Q

    from collector.services.tokens import session_token_read

    session_ids = [session_token_read(token=t) for t in tokens]
    double_trials = (
        Trial.objects.filter(session_id__in=session_ids).annotate(n=Count("click")).filter(n__gt=1).count()
    )
    # every trial was reported before its click: none may be stored as never presented (the presented path
    # under the same faults) and none as shown twice (a retried report is the same showing, not a replay)
    unreported = (
        Trial.objects.filter(session_id__in=session_ids, click__isnull=False)
        .filter(Q(flags__contains=["not_presented"]) | Q(flags__contains=["replayed"]))
        .count()
    )
    deadline = time.monotonic() + args.validate_within
    while True:
        pending = Session.objects.filter(
            pk__in=session_ids, status="finished", validated_at__isnull=True
        ).count()
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    validated = Session.objects.filter(pk__in=session_ids, validated_at__isnull=False).count()
    from collector.models import TaskIntent
    from tasks import names as task_names

    intents = TaskIntent.objects.filter(
        task_name=task_names.VALIDATION_VALIDATE_SESSION, args__0__in=session_ids
    )
    outbox = {"intents": intents.count(), "retried": intents.filter(attempts__gt=0).count(),
              "pending": intents.filter(sent_at__isnull=True).count()}  # fmt: skip
    time.sleep(0.5)
    server_ms, stack["access_offset"] = _server_ms(stack["access_log"], offset)

    status, errors, requests = Counter(), Counter(), Counter()
    click_ms, entry_ms, dropped, lost_responses, refused = [], [], 0, 0, []
    for result in results:
        status.update(result["stats"]["status"])
        requests.update(result["stats"]["requests"])
        errors.update(result["stats"]["errors"])
        click_ms += result["stats"]["click_ms"]
        entry_ms += result["stats"]["entry_ms"]
        dropped += result["stats"]["dropped"]
        lost_responses += result["stats"]["lost_responses"]
        refused += result["stats"]["refused"]
    fivexx = sum(v for k, v in status.items() if k.startswith("5"))
    return {
        "phase": name,
        "faults": list(faults),
        "fault_log": fault_log,
        "annotators": n,
        "wall_s": wall,
        "clicks_sent": len(keys_sent),
        "acknowledged": len(keys_acked),
        "stored": len(stored_counts),
        "lost": len(keys_acked - set(stored_counts)),
        "duplicated": sum(c - 1 for c in stored_counts.values()) + double_trials,
        "unreported": unreported,
        "given_up": len(keys_sent) - len(keys_acked),
        "sessions_finished": finished,
        "sessions_validated": validated,
        "outbox": outbox,
        "status": dict(sorted(status.items())),
        "requests": dict(sorted(requests.items())),
        "separate_presented": args.separate_presented,
        "5xx": fivexx,
        "500": status.get("500", 0),
        "503": status.get("503", 0),
        "client_errors": dict(errors),
        "dropped_requests": dropped,
        "lost_responses": lost_responses,
        "refused": refused[:5],
        "client_click_ms": percentiles(click_ms),
        "server_click_ms": percentiles(server_ms["click"]),
        "client_entry_ms": percentiles(entry_ms),
        "server_entry_ms": percentiles(server_ms["entry"]),
        "ramp_s": args.ramp,
        "throughput": len(keys_acked) / wall if wall else 0.0,
        "sustained": _sustained(acked_at),
    }


def _sustained(acked_at: list[float]) -> float:
    """Acknowledged clicks per second over the middle 80 % of the acknowledgements (the entry burst and the
    last annotators' tail left out): the rate the stack kept up while every annotator was clicking."""
    if len(acked_at) < 10:
        return 0.0
    times = sorted(acked_at)
    low, high = round(0.1 * (len(times) - 1)), round(0.9 * (len(times) - 1))
    span = times[high] - times[low]
    return (high - low) / span if span > 0 else 0.0


def inject_faults(stack: dict, faults: tuple[str, ...], args, clients_done) -> list[str]:
    """The server faults, one after the other, every ``--fault-every`` seconds while clients run."""
    log = []

    def note(text):
        log.append(f"{time.monotonic() - t0:6.1f}s {text}")
        print(f"  fault: {log[-1]}", flush=True)

    t0 = time.monotonic()
    for fault in faults:
        if clients_done():
            note(f"{fault}: clients already done, not injected")
            continue
        time.sleep(args.fault_every)
        if fault == "worker":
            stack["worker"].kill()
            note("worker SIGKILLed")
            time.sleep(0.5)
            stack["worker"].start()
            note("worker started again")
        elif fault == "broker":
            stack["redis"].stop()
            note("Redis stopped")
            time.sleep(args.outage)
            stack["redis"].start()
            note("Redis started again")
        elif fault == "web":
            stack["web"].kill()
            note("gunicorn SIGKILLed")
            time.sleep(0.5)
            stack["web"].start()
            note("gunicorn listening again")
        elif fault == "postgres":
            note("PostgreSQL restart (fast)")
            stack["pg"].restart()
            note("PostgreSQL back")
    return log


def print_phase(result: dict, baseline: dict | None = None) -> None:
    r = result
    print(
        f"\n== {r['phase']}: {r['annotators']} annotators arriving over {r['ramp_s']:g} s, "
        f"faults: {', '.join(r['faults']) or 'none'}; presentation reports "
        f"{'each on its own' if r['separate_presented'] else 'carried on clicks'}"
    )
    sent = sum(r["requests"].values())
    print(
        f"   requests sent {sent} ({sent / max(1, r['clicks_sent']):.2f} per click): "
        + ", ".join(f"{kind} {count}" for kind, count in r["requests"].items())
    )
    for line in r["fault_log"]:
        print(f"   {line}")
    print(f"   clicks sent {r['clicks_sent']} / acknowledged {r['acknowledged']} / stored {r['stored']} / "
          f"lost {r['lost']} / duplicated {r['duplicated']} / given up {r['given_up']} / flagged not presented or "
          f"replayed {r['unreported']}")  # fmt: skip
    o = r["outbox"]
    print(f"   sessions finished {r['sessions_finished']} / validated {r['sessions_validated']}; validation intents "
          f"{o['intents']}, sent by the relay after a failed send {o['retried']}, still pending {o['pending']}")  # fmt: skip
    print(f"   responses {r['status']}  5xx {r['5xx']} (500: {r['500']}, 503: {r['503']})  "
          f"client errors {r['client_errors']}  dropped {r['dropped_requests']}  lost responses {r['lost_responses']}")  # fmt: skip
    c, s = r["client_click_ms"], r["server_click_ms"]
    print(f"   click latency, client: p50 {c['p50']:.1f} / p95 {c['p95']:.1f} / p99 {c['p99']:.1f} ms; "
          f"server: p50 {s['p50']:.1f} / p95 {s['p95']:.1f} / p99 {s['p99']:.1f} ms")  # fmt: skip
    c, e = r["client_entry_ms"], r["server_entry_ms"]
    print(f"   entry latency, client: p50 {c['p50']:.1f} / p99 {c['p99']:.1f} ms; "
          f"server: p50 {e['p50']:.1f} / p99 {e['p99']:.1f} ms")  # fmt: skip
    line = (
        f"   throughput {r['throughput']:.1f} acknowledged clicks/s over {r['wall_s']:.1f} s; "
        f"sustained (middle 80 % of the acknowledgements) {r['sustained']:.1f} clicks/s"
    )
    if baseline:
        ratio = r["throughput"] / baseline["throughput"] if baseline["throughput"] else math.nan
        sustained = r["sustained"] / baseline["sustained"] if baseline["sustained"] else math.nan
        p99 = (
            s["p99"] / baseline["server_click_ms"]["p99"] if baseline["server_click_ms"]["p99"] else math.nan
        )
        line += f"; vs baseline: throughput x{ratio:.2f}, sustained x{sustained:.2f}, server p99 x{p99:.2f}"
    print(line)
    if r["refused"]:
        print(f"   refused (first): {r['refused']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotators", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--faults", default=",".join(ALL_FAULTS), help=f"comma list of {ALL_FAULTS} or none")
    parser.add_argument("--drop", type=float, default=0.03, help="share of requests dropped before sending")
    parser.add_argument("--lose", type=float, default=0.03, help="share of responses lost after processing")
    parser.add_argument(
        "--timeout", type=float, default=15.0, help="client request timeout (s), the player's"
    )
    parser.add_argument("--give-up", type=float, default=120.0, help="seconds a client retries one request")
    parser.add_argument(
        "--think-ms", type=float, default=0.0, help="mean pause between an annotator's clicks"
    )
    parser.add_argument(
        "--ramp", type=float, default=60.0,
        help="seconds over which the annotators arrive, evenly (0: all at once); a popular pool sends a "
        "thousand workers in minutes",
    )  # fmt: skip
    parser.add_argument("--fault-every", type=float, default=2.0, help="seconds between server faults")
    parser.add_argument("--outage", type=float, default=2.0, help="seconds Redis stays down")
    parser.add_argument("--validate-within", type=float, default=60.0)
    parser.add_argument("--web-workers", type=int, default=3)
    parser.add_argument(
        "--web-threads", type=int, default=4, help="threads per gunicorn worker (make prod's 4)"
    )
    parser.add_argument(
        "--separate-presented", action="store_true",
        help="report every showing with its own POST .../presented (players before the report rode on the "
        "previous click)",
    )  # fmt: skip
    parser.add_argument("--short", action="store_true", help="100 annotators, all faults, 1 client process")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs)")
    parser.add_argument(
        "--against", default=DEFAULT_AGAINST,
        help="a git commit (or none): run the same phases against its code too, in the same run, and compare",
    )  # fmt: skip
    parser.add_argument(
        "--min-ratio", type=float, default=0.8, help="fail when a sustained rate is below this x REF's"
    )
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="with --against: measure each code this many times, in the order REF HEAD, HEAD REF, REF HEAD, ... "
        "(a machine that slows down or speeds up over the run then favours neither), and compare their means",
    )  # fmt: skip
    # internal: one measurement of the code under --code, its figures written to --result as JSON
    parser.add_argument("--code", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.short:
        args.annotators, args.clients, args.faults, args.ramp = 100, 1, ",".join(ALL_FAULTS), 0.0
        args.fault_every, args.validate_within = 1.5, 45.0
    faults = () if args.faults == "none" else tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = set(faults) - set(ALL_FAULTS)
    if unknown:
        parser.error(f"--faults: unknown {sorted(unknown)}; choose from {', '.join(ALL_FAULTS)} or none")
    if args.code is None and args.against.lower() != "none":
        return compare(args, argv if argv is not None else sys.argv[1:])
    return measure(args, faults)


def _measure_in_child(code: Path, argv: list[str], result: Path) -> tuple[int, dict | None]:
    """One whole measurement (services, both phases) of ``code`` in a process of its own, so its Django
    imports come from ``code``; returns its exit status and figures."""
    command = [
        sys.executable,
        __file__,
        *argv,
        "--against",
        "none",
        "--code",
        str(code),
        "--result",
        str(result),
    ]
    rc = subprocess.run(command, cwd=code).returncode
    return rc, (json.loads(result.read_text()) if result.exists() else None)


def _git(*cmd: str) -> str:
    done = subprocess.run(["git", "-C", str(PROJECT_ROOT), *cmd], check=True, capture_output=True, text=True)
    return done.stdout.strip()


def compare(args, argv: list[str]) -> int:
    """``--against``: REF's code and the working tree's, each measured whole ``--rounds`` times in alternating
    order (REF first in odd rounds, HEAD first in even ones); the means of their sustained rates compared."""
    ref = _git("rev-parse", "--verify", f"{args.against}^{{commit}}")
    head = _git("rev-parse", "--short", "HEAD")
    dirty = " (with uncommitted changes)" if _git("status", "--porcelain", "--untracked-files=no") else ""
    tmp = Path(tempfile.mkdtemp(prefix="clicklab-bench-against-"))
    worktree = tmp / "ref"
    rounds = max(1, args.rounds)
    runs: dict[str, list[tuple[int, dict | None]]] = {"REF": [], "HEAD": []}
    order: list[str] = []
    try:
        _git("worktree", "add", "--detach", str(worktree), ref)
        print(f"bench_load_faults --against {args.against}: {ref[:10]} in {worktree}, and HEAD {head}{dirty}; "
              f"{rounds} round(s)", flush=True)  # fmt: skip
        for number in range(rounds):
            for which in ("REF", "HEAD") if number % 2 == 0 else ("HEAD", "REF"):
                label = f"REF {ref[:10]}" if which == "REF" else f"HEAD {head}{dirty}"
                print(f"\n######## {label} (round {number + 1} of {rounds})", flush=True)
                code = worktree if which == "REF" else PROJECT_ROOT
                runs[which].append(_measure_in_child(code, argv, tmp / f"{which}-{number}.json"))
                order.append(which)
    finally:
        subprocess.run(["git", "-C", str(PROJECT_ROOT), "worktree", "remove", "--force", str(worktree)],
                       capture_output=True)  # fmt: skip
        subprocess.run(["git", "-C", str(PROJECT_ROOT), "worktree", "prune"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n== HEAD {head}{dirty} against REF {ref[:10]} (same arguments, {rounds} round(s), order "
          f"{' '.join(order)})")  # fmt: skip
    bad = [
        f"{which} run {n + 1} exited {rc}"
        for which, done in runs.items()
        for n, (rc, _) in enumerate(done)
        if rc
    ]
    if any(result is None for done in runs.values() for _, result in done):
        bad.append("a run gave no figures")
    else:
        for phase in ("baseline", "faults"):
            figures = {
                which: [result[phase] for _, result in done if result.get(phase)]
                for which, done in runs.items()
            }
            ours, theirs = figures["HEAD"], figures["REF"]
            if not ours or not theirs:
                continue
            head_rate, ref_rate = (
                fmean([f["sustained"] for f in ours]),
                fmean([f["sustained"] for f in theirs]),
            )
            ratio = head_rate / ref_rate if ref_rate else math.nan
            each = "; ".join(
                f"{which} " + ", ".join(f"{f['sustained']:.1f}" for f in figures[which])
                for which in ("REF", "HEAD")
            )
            print(f"   {phase}: sustained {head_rate:.1f} clicks/s (HEAD) vs {ref_rate:.1f} (REF): x{ratio:.2f} "
                  f"(each run: {each}); server click p99 {fmean([f['server_click_ms']['p99'] for f in ours]):.1f} vs "
                  f"{fmean([f['server_click_ms']['p99'] for f in theirs]):.1f} ms; wall "
                  f"{fmean([f['wall_s'] for f in ours]):.1f} vs {fmean([f['wall_s'] for f in theirs]):.1f} s")  # fmt: skip
            if not ratio >= args.min_ratio:
                bad.append(f"{phase}: sustained x{ratio:.2f} of REF's, below --min-ratio {args.min_ratio}")
    print(
        "FAILED: " + "; ".join(bad)
        if bad
        else f"OK: every run clean, sustained at least x{args.min_ratio} of REF's"
    )
    return 1 if bad else 0


def measure(args, faults: tuple[str, ...]) -> int:
    """One measurement of ``CODE_ROOT``'s code: the services, the baseline phase, the fault phase."""

    tmp = Path(tempfile.mkdtemp(prefix="clicklab-bench-faults-"))
    os.chmod(tmp, 0o755)
    stack: dict = {"access_offset": 0, "access_log": tmp / "web.log"}
    t_start = time.monotonic()
    try:
        print(f"bench_load_faults: temporary services under {tmp}", flush=True)
        pg = stack["pg"] = Postgres(tmp)
        pg.init()
        redis_port = free_port()
        (tmp / "redis").mkdir()
        stack["redis"] = Proc("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                                        "--dir", str(tmp / "redis"), "--appendonly", "yes", "--save", ""],
                              os.environ.copy(), tmp / "redis.log", port=redis_port)  # fmt: skip
        stack["redis"].start()
        env = {**os.environ, "DATABASE_URL": pg.url, "CELERY_BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
               "SECRET_KEY": secrets.token_urlsafe(48), "ALLOWED_HOSTS": "127.0.0.1", "DEBUG": "false",
               "SECURE_SSL_REDIRECT": "false", "CLICKLAB_VAR_DIR": str(tmp / "var"),
               "CLICKLAB_MEDIA_ROOT": str(tmp / "media"), "CLICKLAB_STATIC_ROOT": str(tmp / "static"),
               "CLICKLAB_OUTBOX_RELAY_EVERY_S": "2", "CLICKLAB_OUTBOX_RELAY_GRACE_S": "2",
               "CLICKLAB_BROKER_VISIBILITY_TIMEOUT_S": "10", "CLICKLAB_REQUEUE_VALIDATIONS_EVERY_S": "3600",
               "PYTHONUNBUFFERED": "1", "DJANGO_SETTINGS_MODULE": "config.settings", "LOG_LEVEL": "WARNING"}  # fmt: skip
        os.environ.update(env)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)  # the entry's pages use the manifest
        from collector.services.tokens import study_link_token_make
        from tests.factories import make_dataset, make_study

        n_images = 20
        # Never full: both phases, plus the sessions that retried entries (a lost answer) leave behind.
        quota = math.ceil(args.annotators * 2 * BATCH / n_images) * 5
        study = make_study(make_dataset(tmp / "data", n_images=n_images, size=(64, 48)), publish=True,
                           quota_pc=quota, quota_mobile=0, max_rounds=1, batch_size=BATCH,
                           image_ms=PHASE_MS, target_ms=PHASE_MS, blocked_ms=PHASE_MS)  # fmt: skip
        link = study_link_token_make(study_id=study.pk, device="pc")
        from django.db import connections

        connections.close_all()

        from config.runner import commands

        port = free_port()
        ns = argparse.Namespace(host="127.0.0.1", port=port, web_workers=args.web_workers, web_threads=args.web_threads,
                                default_concurrency=1, grace=5, log_level="WARNING")  # fmt: skip
        cmds = commands(ns)
        # the web process logs at INFO, as in production (its access lines carry the request time)
        web_env = {**env, "LOG_LEVEL": "INFO"}
        web_cmd = [*cmds["web"][: cmds["web"].index("--log-level")], "--log-level", "info"]
        stack["web"] = Proc("web", web_cmd, web_env, stack["access_log"], port=port)
        stack["worker"] = Proc("worker", cmds["worker-default"], env, tmp / "worker.log")
        stack["relay"] = Proc("relay", cmds["relay"], env, tmp / "relay.log")
        for name in ("web", "worker", "relay"):
            stack[name].start()
        base = f"http://127.0.0.1:{port}"
        print(f"services up after {time.monotonic() - t_start:.1f}s; load from {args.clients} client process(es)",
              flush=True)  # fmt: skip

        baseline = run_phase("baseline", args, stack, link, base, (), tmp)
        print_phase(baseline)
        faulted = run_phase("faults", args, stack, link, base, faults, tmp) if faults else None
        if faulted:
            print_phase(faulted, baseline)
        print(f"\ntotal {time.monotonic() - t_start:.1f}s")
        bad = (
            [
                f"{r['phase']}: {what} {r[key]}"
                for r in filter(None, (baseline, faulted))
                for key, what in (
                    ("lost", "lost"),
                    ("duplicated", "duplicated"),
                    ("500", "HTTP 500"),
                    ("unreported", "clicks flagged not_presented or replayed"),
                )  # fmt: skip
                if r[key]
            ]
            + [
                f"{r['phase']}: {r['sessions_finished'] - r['sessions_validated']} finished session(s) not validated"
                for r in filter(None, (baseline, faulted))
                if r["sessions_validated"] < r["sessions_finished"]
            ]
            + [
                # a run where the annotators never got through is a failure, not "nothing lost"
                f"{r['phase']}: only {r['sessions_finished']} of {r['annotators']} annotators finished their batch "
                f"({r['stored']} of {r['annotators'] * BATCH} clicks stored)"
                for r in filter(None, (baseline, faulted))
                if r["sessions_finished"] < r["annotators"] or r["stored"] < r["annotators"] * BATCH
            ]
        )
        print(
            "FAILED: " + "; ".join(bad)
            if bad
            else "OK: nothing lost, nothing duplicated, no 500, all validated"
        )
        if args.result is not None:
            args.result.write_text(json.dumps({"baseline": baseline, "faults": faulted, "bad": bad}))
        return 1 if bad else 0
    finally:
        for name in ("web", "worker", "relay", "redis"):
            if name in stack:
                stack[name].stop(timeout_s=5)
        if "pg" in stack:
            stack["pg"].stop()
        if args.keep:
            print(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--client":
        spec = json.loads(Path(sys.argv[2]).read_text())
        Path(sys.argv[3]).write_text(json.dumps(asyncio.run(_client_main(spec))))
        sys.exit(0)
    if "--code" in sys.argv:  # the stack runs (and this process imports) that code's Django project
        CODE_ROOT = Path(sys.argv[sys.argv.index("--code") + 1]).resolve()
    sys.path.insert(0, str(CODE_ROOT))
    sys.exit(main())
