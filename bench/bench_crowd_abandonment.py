"""Crowd abandonment (issue 32 item 2): N simulated annotators over HTTP against the production stack, 30 % of
them leaving their batch at a random phase and 10 % of all coming back a minute later, against a crowd without
leavers in the same run.

Services are throw-away ones of its own, as ``bench/bench_load_faults.py`` starts them (a PostgreSQL cluster
under /tmp, a Redis server, and ``config/runner.py``'s gunicorn, ``default`` worker, outbox relay and Celery
beat, which runs the release of batches not heard from). Each crowd works on a study of its own (same dataset
and quotas). An annotator speaks the player's protocol: entry (POST /s/<link>/) -> client report -> per trial
presented, phases A-C, click (the showing of the next trial carried on it) -> finish; a heartbeat every
``HEARTBEAT_S``. An annotator told "no task available" for now (409, temporary) keeps the waiting page open,
which posts the entry again after its countdown (``data-retry-after``); one told it is final stops.

Times are scaled down so a run takes minutes (printed with the result): phases of 100 ms (RClicks: 1.5 / 2 /
1.5 s), so one second here stands for about 16.7 s; the grace period, heartbeat, "come back after a minute"
and the 30-minute hold are scaled by the same factor. A leaver stops at a random trial and phase (the tab is closed:
nothing more is sent but, for ``--beacon-share`` of them, the player's pagehide beacon); a returner opens its task link again (GET /a/<token>/) after the scaled minute,
asks for the state and plays the trials still without a click.

Before the crowds, rounds of concurrent GETs of the entry page run until the web processes answer within a
second (gunicorn's port opens before its workers have booted: without this the first crowd measured the boot).
Each annotator keeps its link cookie, as a browser does, so a waiting worker asking again is the same worker.

Printed: the time to fill every quota for both crowds and their ratio (goal: within 1.1x), the slot-minutes
the leavers' reservations held unused (from the moment a leaver left until its slots were given back, or the
session expired) against what a 30-minute hold would have held, refusals (temporary / final). Asserted (exit
1 otherwise): every quota met exactly, no batch counted with fewer valid clicks than the rule, every
acknowledged click stored exactly once and no click stored twice.

    .venv/bin/python bench/bench_crowd_abandonment.py --short      # 60 annotators per crowd (~5 min on 2 busy cores)
    .venv/bin/python bench/bench_crowd_abandonment.py              # 300 annotators per crowd
    ... --no-on-demand    # CLICKLAB_RELEASE_ON_DEMAND off, for comparison
    ... --timeline        # each session's start, release, beacon, finish and validation, per crowd
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import math
import os
import random
import re
import secrets
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
_SPEC = importlib.util.spec_from_file_location(
    "bench_load_faults", PROJECT_ROOT / "bench" / "bench_load_faults.py"
)
faults = importlib.util.module_from_spec(_SPEC)  # its throw-away services and lean HTTP client
_SPEC.loader.exec_module(faults)

PHASE_MS = 100
#: Real seconds one second of the run stands for: RClicks' phases A-C (5 s) over the run's (0.3 s).
SCALE = 5.0 / (3 * PHASE_MS / 1000)
REAL = {"grace_s": 120, "heartbeat_s": 20, "return_after_s": 60, "hold_s": 1800, "leave_grace_s": 10}
SCALED = {name: value / SCALE for name, value in REAL.items()}
PLAYER_ADDRESS = re.compile(r'history\.replaceState\(null, "", "/a/([^/"]+)/"\)')
RETRY_AFTER = re.compile(r'data-retry-after="(\d+)"')


async def _annotator(http, spec: dict, index: int, rng: random.Random, log: dict) -> None:  # noqa: C901
    """One annotator of the crowd (see the module docstring); appends what it did to ``log``."""
    await asyncio.sleep(spec["ramp_s"] * index / spec["annotators"])
    record = {"clicks": [], "left_at": None, "returned": False, "returned_at": None, "finished": False,
              "refusals": [], "token": None, "n_trials": 0}  # fmt: skip
    log["annotators"].append(record)
    leaves = spec["leavers"] and rng.random() < spec["leave_share"]
    returns = leaves and rng.random() < spec["return_share"] / spec["leave_share"]
    leave_at = (rng.randrange(spec["batch"]), rng.choice("ABCD")) if leaves else None
    # a draw of its own, so the crowd's leavers and their moments are those of a run without beacons
    beacon = leaves and random.Random(f"beacon-{spec['seed']}-{index}").random() < spec["beacon_share"]

    jar: dict[str, str] = {}  # one browser: the link entry's worker cookie comes back with each retry

    async def call(method, path, *, body=None, data=None, timeout_s=15):
        for attempt in range(60):
            try:
                cookie = "; ".join(f"{name}={value}" for name, value in jar.items())
                response = await http.request(
                    method, path, json=body, data=data, timeout=timeout_s, cookie=cookie
                )
                for line in response.headers.get("set-cookie", "").splitlines():
                    name, _, value = line.split(";", 1)[0].partition("=")
                    if name.strip():
                        jar[name.strip()] = value.strip()
            except Exception as exc:
                log["stages"][f"{method} {path.rsplit('/', 1)[-1] or 'entry'} {type(exc).__name__}"] += 1
                await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
                continue
            if response.status_code < 500:
                return response
            await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
        return None

    token = None
    while token is None:
        if log["filled"].is_set():
            return
        # The entry answers the player page itself; its address (the task link) is in the page.
        # A browser waits for the page: a retry of an entry that was only slow would start a second batch.
        response = await call("POST", f"/s/{spec['link']}/", data={"device": "pc"}, timeout_s=120)
        shown = PLAYER_ADDRESS.search(response.text.replace("\\u002D", "-")) if response is not None else None
        log["stages"][
            f"entry {response.status_code if response is not None else 'none'} {'token' if shown else '-'}"
        ] += 1
        if response is not None and response.status_code == 200 and shown:
            token = shown[1]
            break
        text = response.text if response is not None else ""
        retry = RETRY_AFTER.search(text)
        final = "being worked on" not in text
        record["refusals"].append("final" if final else "temporary")
        if final:
            return
        # The waiting page posts the entry again by itself after its countdown (static/player/waiting.js: a
        # worker who keeps it open); its seconds come from the server's scaled CLICKLAB_WAIT_RECHECK_S.
        await asyncio.sleep(int(retry[1]) if retry else spec["recheck_s"])
    api = f"/api/annotator/{token}"
    record["token"] = token
    alive = {"on": True}

    async def heartbeats():
        while alive["on"]:
            await asyncio.sleep(SCALED["heartbeat_s"])
            if alive["on"]:
                await call("POST", f"{api}/heartbeat", body={"visibility": "visible"})

    async def play(positions: list[int], *, may_leave: bool) -> bool:
        """Play ``positions``: True when done, False when the annotator left (or its batch ended), "reload"
        when a trial was refused ``trial_released``."""
        for position in positions:
            if may_leave and leave_at and position == leave_at[0] and leave_at[1] == "A":
                return False
            response = await call(
                "POST", f"{api}/presented", body={"position": position, "presentation_id": uuid.uuid4().hex}
            )
            if response is None or response.status_code != 200:
                released = (
                    response is not None
                    and response.status_code == 409
                    and b"trial_released" in response.content
                )
                return "reload" if released else False
            for phase in "BCD":
                await asyncio.sleep(PHASE_MS / 1000 if phase != "D" else 0.05)
                if may_leave and leave_at and position == leave_at[0] and leave_at[1] == phase:
                    return False
            key = uuid.uuid4().hex
            body = {"position": position, "idempotency_key": key, "x": 32.0, "y": 24.0, "shown_width": 64,
                    "shown_height": 48, "pointer_type": "mouse", "reaction_ms": 400, "event_timestamp_ms": 9000.5,
                    "phase_onsets_ms": {"A": 1, "B": 2, "C": 3, "D": 4}, "blocked_clicks": 0, "flags": [],
                    "refresh_hz": 60}  # fmt: skip
            response = await call("POST", f"{api}/click", body=body)
            acked = response is not None and response.status_code in (200, 201)
            record["clicks"].append({"key": key, "acked": acked})
            if not acked:
                released = (
                    response is not None
                    and response.status_code == 409
                    and b"trial_released" in response.content
                )
                return "reload" if released else False
        return True

    beat = asyncio.create_task(heartbeats())
    log["stages"]["entered"] += 1
    state = await call("GET", f"{api}/state")
    log["stages"]["state " + (str(state.status_code) if state is not None else "none")] += 1
    positions = [t["position"] for t in state.json()["trials"] if not t["done"]] if state else []
    record["n_trials"] = len(positions)
    done = await play(positions, may_leave=True)
    while done == "reload":  # as the player: its batch was given back while it was slow; reload and go on
        log["stages"]["reload after a release"] += 1
        await call("GET", f"/a/{token}/")
        state = await call("GET", f"{api}/state")
        positions = [t["position"] for t in state.json()["trials"] if not t["done"]] if state else []
        done = await play(positions, may_leave=True)
    if not done:
        # the tab is closed: nothing more is sent but, from most browsers, the pagehide beacon
        alive["on"] = False
        record["left_at"] = time.monotonic()
        if beacon:
            record["beacon"] = True
            await call("POST", f"{api}/heartbeat", body={"visibility": "gone"})
        if not returns:
            beat.cancel()
            return
        await asyncio.sleep(SCALED["return_after_s"])
        record["returned"], record["returned_at"] = True, time.monotonic()
        page = await call("GET", f"/a/{token}/")
        if page is None or page.status_code != 200:
            beat.cancel()
            return
        alive["on"] = True
        beat = asyncio.create_task(heartbeats())
        state = await call("GET", f"{api}/state")
        positions = [t["position"] for t in state.json()["trials"] if not t["done"]]
        done = await play(positions, may_leave=False)
        while done == "reload":
            await call("GET", f"/a/{token}/")
            state = await call("GET", f"{api}/state")
            positions = [t["position"] for t in state.json()["trials"] if not t["done"]] if state else []
            done = await play(positions, may_leave=False)
    if done:
        response = await call("POST", f"{api}/finish", body={})
        record["finished"] = response is not None and response.status_code == 200
    alive["on"] = False
    beat.cancel()


async def _warm(base: str, link: str, *, rounds_needed: int = 3, limit_s: float = 90.0) -> float:
    """Until the web processes answer: the port opens when gunicorn's master binds it, before its workers have
    booted (``config.wsgi.warm_process``), so a crowd sent at once queues behind the boot and the first crowd
    measured the boot. 32 concurrent GETs of the entry page (which creates nothing), again until three rounds
    in a row all answer 200 within a second. Returns the seconds it took."""
    http = faults.LeanHTTP(base, max_connections=32)
    started, good = time.monotonic(), 0
    try:
        while good < rounds_needed and time.monotonic() - started < limit_s:
            t0 = time.monotonic()
            answers = await asyncio.gather(
                *(http.request("GET", f"/s/{link}/", timeout=30) for _ in range(32)), return_exceptions=True
            )
            fine = all(not isinstance(a, BaseException) and a.status_code == 200 for a in answers)
            good = good + 1 if fine and time.monotonic() - t0 < 1.0 else 0
    finally:
        await http.close()
    return time.monotonic() - started


def _study_filled(study_id: int) -> bool:
    from collector.models import Study, Target

    study = Study.objects.get(pk=study_id)
    return not Target.objects.filter(round__study=study, valid_pc__lt=study.quota_pc).exists()


async def _crowd(name: str, args, base: str, link: str, study_id: int, *, leavers: bool) -> dict:
    spec = {"annotators": args.annotators, "ramp_s": args.ramp, "link": link, "batch": args.batch,
            "leavers": leavers, "leave_share": 0.30, "return_share": 0.10, "beacon_share": args.beacon_share, "seed": args.seed,
            "recheck_s": args.recheck / SCALE}  # fmt: skip
    log: dict = {"annotators": [], "filled": asyncio.Event(), "stages": Counter()}
    http = faults.LeanHTTP(base, max_connections=64)
    rng = random.Random(args.seed)
    started = time.monotonic()
    tasks = [asyncio.create_task(_annotator(http, spec, i, rng, log)) for i in range(args.annotators)]
    filled_s = None
    while time.monotonic() - started < args.limit:
        if await asyncio.to_thread(_study_filled, study_id):
            filled_s = time.monotonic() - started
            log["filled"].set()
            break
        if all(task.done() for task in tasks) and not await asyncio.to_thread(_pending_validations, study_id):
            if await asyncio.to_thread(_study_filled, study_id):
                filled_s = time.monotonic() - started
            break
        await asyncio.sleep(0.2)
    log["filled"].set()
    await asyncio.wait(tasks, timeout=60)
    for task in tasks:
        task.cancel()
    print(f"   requests: {dict(log['stages'])}", flush=True)
    failures = [
        task.exception() for task in tasks if task.done() and not task.cancelled() and task.exception()
    ]
    if failures:
        print(f"   {len(failures)} annotator(s) failed: {failures[0]!r}", flush=True)
    await http.close()
    return {
        "name": name,
        "filled_s": filled_s,
        "annotators": log["annotators"],
        "wall_s": time.monotonic() - started,
    }


def _timeline(study_id: int, t0_wall: float) -> None:
    """``--timeline``: each session of the crowd's study, in start order, with its moments in seconds from the
    crowd's start (what held the quotas' tail)."""
    from collector.models import Session, Trial

    print("   session  start released  left finished validated status   ended_by  validity tasks fillers")
    for session in Session.objects.filter(study_id=study_id).order_by("started_at"):

        def at(moment):
            return f"{moment.timestamp() - t0_wall:8.1f}" if moment else "       -"

        roles = Trial.objects.filter(session=session).values_list("role", flat=True)
        print(
            f"   {session.pk:7d} {at(session.started_at)} {at(session.released_at)} {at(session.left_at)}"
            f" {at(session.finished_at)} {at(session.validated_at)} {session.status:8s} {session.ended_by or '-':9s}"
            f" {session.validity:8s} {sum(1 for r in roles if r == 'task'):5d} {sum(1 for r in roles if r == 'filler'):7d}"
        )


def _pending_validations(study_id: int) -> int:
    from collector.models import Session

    return Session.objects.filter(study_id=study_id, status="finished", validated_at__isnull=True).count()


def _check(study_id: int, result: dict) -> dict:
    """What the database holds for the crowd's study: quotas, counted batches, clicks."""
    from django.db.models import Count

    from collector.models import Click, Session, Study, Target, Trial

    study = Study.objects.get(pk=study_id)
    valid = list(Target.objects.filter(round__study=study).values_list("valid_pc", flat=True))
    counted = Session.objects.filter(study=study, validity="counted")
    below = counted.filter(valid_clicks__lt=study.min_valid_per_session).count()
    keys = [c["key"] for a in result["annotators"] for c in a["clicks"] if c["acked"]]
    stored = set(Click.objects.filter(trial__session__study=study).values_list("idempotency_key", flat=True))
    doubled = Trial.objects.filter(session__study=study).annotate(n=Count("click")).filter(n__gt=1).count()
    lost = [key for key in keys if key not in stored]
    # slot time the leavers' reservations held unused: from leaving to the release (or the expiry)
    released = list(
        Session.objects.filter(study=study, released_at__isnull=False).values_list("pk", flat=True)
    )
    return {
        "quota": study.quota_pc,
        "targets": len(valid),
        "exact": all(v == study.quota_pc for v in valid),
        "over": sum(max(0, v - study.quota_pc) for v in valid),
        "under": sum(max(0, study.quota_pc - v) for v in valid),
        "counted": counted.count(),
        "counted_below_rule": below,
        "acked": len(keys),
        "lost": len(lost),
        "duplicated": len(keys) - len(set(keys)) + doubled,
        "released_sessions": len(released),
        "inflight_left": sum(Target.objects.filter(round__study=study).values_list("inflight_pc", flat=True)),
    }


def _wasted(result: dict, study_id: int, t0_wall: float, t0_mono: float) -> tuple[float, float, float]:
    """(slot-minutes the leavers' unclicked slots were held unused in this run, what a 30-minute hold would have
    held, and what the leavers' clicked trials held), in real-time minutes (scaled back). Held unused: from the moment a leaver left until the release
    gave the slots back (``Session.released_at``), or until it came back if that was first; with a 30-minute hold,
    until the session's timeout from its start, or until it came back."""
    from collector.models import Session
    from collector.services.tokens import session_token_read

    held_s = hold_s = 0.0
    clicked_s = [0.0]
    for annotator in result["annotators"]:
        if annotator["left_at"] is None:
            continue
        unclicked = annotator["n_trials"] - sum(1 for c in annotator["clicks"] if c["acked"])
        left = t0_wall + (annotator["left_at"] - t0_mono)
        back = t0_wall + (annotator["returned_at"] - t0_mono) if annotator["returned_at"] else None
        session = Session.objects.get(pk=session_token_read(token=annotator["token"]))
        released = session.released_at.timestamp() if session.released_at else None
        ends = [moment for moment in (released, back, session.expires_at.timestamp()) if moment]
        held_s += unclicked * max(0.0, min(ends) - left)
        # the clicked trials of a batch never finished keep their slots until the worker is back or it expires
        clicked_ends = [moment for moment in (back, session.expires_at.timestamp()) if moment]
        clicked_s[0] += (annotator["n_trials"] - unclicked) * max(0.0, min(clicked_ends) - left)
        timeout_end = session.started_at.timestamp() + SCALED["hold_s"]
        hold_s += unclicked * max(0.0, min(moment for moment in (back, timeout_end) if moment) - left)
    return held_s * SCALE / 60, hold_s * SCALE / 60, clicked_s[0] * SCALE / 60


RELEASE_EVERY_S = 0.5


def main(argv=None) -> int:  # noqa: C901
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotators", type=int, default=300, help="annotators per crowd")
    parser.add_argument("--short", action="store_true", help="60 annotators per crowd, a quick run")
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument("--ramp", type=float, default=None, help="seconds over which a crowd arrives")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds a crowd may take to fill")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--short-batches", default="pad", choices=("pad", "tail", "full_only"),
                        help="the studies' short-batch policy (Study.short_batches)")  # fmt: skip
    parser.add_argument("--beacon-share", type=float, default=0.5,
                        help="share of leavers whose browser delivers the pagehide beacon (a closed tab on a PC "
                             "does; a phone killed in the background or a lost network does not)")  # fmt: skip
    parser.add_argument(
        "--recheck",
        type=float,
        default=30.0,
        help="real seconds between the waiting page's own retries (CLICKLAB_WAIT_RECHECK_S)",
    )
    parser.add_argument(
        "--leave-grace",
        type=float,
        default=REAL["leave_grace_s"],
        help="real seconds after the pagehide beacon before a release (CLICKLAB_LEAVE_GRACE_S)",
    )
    parser.add_argument(
        "--no-on-demand",
        action="store_true",
        help="CLICKLAB_RELEASE_ON_DEMAND off: a waiting worker does not make abandoned batches give their images "
        "back at once (as before it existed)",
    )
    parser.add_argument(
        "--leavers-first", action="store_true", help="run the crowd with leavers first (order effects)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs)")
    parser.add_argument("--timeline", action="store_true", help="print each session's moments")
    args = parser.parse_args(argv)
    if args.short:
        args.annotators = 60
    # Enough work for about 60 % of a crowd without leavers, so the crowd with leavers (70 % stay, 10 % come
    # back) can still fill: 10 images, quota per image from the crowd's size.
    n_images = 10
    quota = max(1, math.floor(0.6 * args.annotators * args.batch / n_images))
    if args.ramp is None:
        args.ramp = args.annotators / 10.0  # ten arrivals a second (scaled: one every 1.7 s of real time)

    tmp = Path(tempfile.mkdtemp(prefix="clicklab-bench-crowd-"))
    os.chmod(tmp, 0o755)
    stack: dict = {}
    t_start = time.monotonic()
    try:
        print(f"bench_crowd_abandonment: temporary services under {tmp}", flush=True)
        pg = stack["pg"] = faults.Postgres(tmp)
        pg.init()
        redis_port = faults.free_port()
        (tmp / "redis").mkdir()
        stack["redis"] = faults.Proc("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                                               "--dir", str(tmp / "redis"), "--save", ""],
                                     os.environ.copy(), tmp / "redis.log", port=redis_port)  # fmt: skip
        stack["redis"].start()
        env = {**os.environ, "DATABASE_URL": pg.url, "CELERY_BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
               "SECRET_KEY": secrets.token_urlsafe(48), "ALLOWED_HOSTS": "127.0.0.1", "DEBUG": "false",
               "SECURE_SSL_REDIRECT": "false", "CLICKLAB_VAR_DIR": str(tmp / "var"),
               "CLICKLAB_MEDIA_ROOT": str(tmp / "media"), "CLICKLAB_STATIC_ROOT": str(tmp / "static"),
               "CLICKLAB_OUTBOX_RELAY_EVERY_S": "1", "CLICKLAB_OUTBOX_RELAY_GRACE_S": "1",
               "CLICKLAB_RELEASE_STALE_EVERY_S": str(RELEASE_EVERY_S),
               "CLICKLAB_RETURN_AFTER_S": f"{1.5 * SCALED['heartbeat_s']:.3f}",
               "CLICKLAB_LEAVE_GRACE_S": f"{args.leave_grace / SCALE:.3f}",
               "CLICKLAB_WAIT_RECHECK_S": f"{args.recheck / SCALE:.3f}",
               "CLICKLAB_RELEASE_ON_DEMAND": "false" if args.no_on_demand else "true",
               "CLICKLAB_EXPIRE_SESSIONS_EVERY_S": "5", "PLATFORM_SYNC_INTERVAL_S": "3600",
               "PYTHONUNBUFFERED": "1", "DJANGO_SETTINGS_MODULE": "config.settings", "LOG_LEVEL": "WARNING"}  # fmt: skip
        os.environ.update(env)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        from collector.models import Study
        from collector.services.stimuli import round_stimuli_render
        from collector.services.tokens import study_link_token_make
        from tests.factories import make_dataset, make_study

        studies = {}
        for name in ("no leavers", "with leavers"):
            study = make_study(make_dataset(tmp / name.replace(" ", "-"), n_images=n_images, size=(64, 48)),
                               publish=True, quota_pc=quota, quota_mobile=0, max_rounds=1, batch_size=args.batch,
                               min_valid_per_session=math.ceil(0.7 * args.batch), short_batches=args.short_batches,
                               image_ms=PHASE_MS, target_ms=PHASE_MS, blocked_ms=PHASE_MS,
                               session_timeout_s=max(60, math.ceil(SCALED["hold_s"])))  # fmt: skip
            # The grace scaled down (below the form's 30 s floor, which a real study keeps).
            Study.objects.filter(pk=study.pk).update(reservation_grace_s=max(1, round(SCALED["grace_s"])))
            # Its stimuli rendered before the crowd comes, as the publish task does in production (a first batch
            # would otherwise wait for them longer than the scaled grace period).
            round_stimuli_render(round_id=study.rounds.get().pk)
            studies[name] = (study.pk, study_link_token_make(study_id=study.pk, device="pc"))
        from django.db import connections

        connections.close_all()
        from config.runner import commands

        port = faults.free_port()
        ns = argparse.Namespace(host="127.0.0.1", port=port, web_workers=2, web_threads=8,
                                default_concurrency=2, grace=5, log_level="WARNING")  # fmt: skip
        cmds = commands(ns)
        stack["web"] = faults.Proc("web", cmds["web"], env, tmp / "web.log", port=port)
        stack["worker"] = faults.Proc("worker", cmds["worker-default"], env, tmp / "worker.log")
        stack["relay"] = faults.Proc("relay", cmds["relay"], env, tmp / "relay.log")
        stack["beat"] = faults.Proc("beat", cmds["beat"], env, tmp / "beat.log")
        for name in ("web", "worker", "relay", "beat"):
            stack[name].start()
        base = f"http://127.0.0.1:{port}"
        grace_run = max(1, round(SCALED["grace_s"]))
        print(
            f"services up after {time.monotonic() - t_start:.1f}s. Times scaled 1:{SCALE:.1f} (phases of {PHASE_MS} "
            f"ms for RClicks' 1.5/2/1.5 s): grace {grace_run} s (120 s), heartbeat {SCALED['heartbeat_s']:.1f} s "
            f"(20 s), come back after {SCALED['return_after_s']:.1f} s (a minute), 30-minute hold "
            f"{SCALED['hold_s']:.0f} s; release task every {RELEASE_EVERY_S} s; released {args.leave_grace / SCALE:.2f} s "
            f"({args.leave_grace:.0f} s) after a pagehide beacon, sent by {args.beacon_share:.0%} of leavers; the "
            f"waiting page asks again every {args.recheck / SCALE:.2f} s ({args.recheck:.0f} s); release on demand "
            f"{'off' if args.no_on_demand else 'on'}.\n"
            f"{args.annotators} annotators per crowd arriving over {args.ramp:.0f} s; {n_images} images, quota "
            f"{quota} valid PC clicks each, batches of {args.batch} needing {math.ceil(0.7 * args.batch)} valid "
            f"(short batches: {args.short_batches}).",
            flush=True,
        )

        warm_s = asyncio.run(_warm(base, studies["no leavers"][1]))
        print(f"web processes answering after {warm_s:.1f} s of warm-up requests", flush=True)
        results, checks = {}, {}
        crowds = [("no leavers", False), ("with leavers", True)]
        for name, leavers in reversed(crowds) if args.leavers_first else crowds:
            study_id, link = studies[name]
            t0_wall, t0_mono = time.time(), time.monotonic()
            results[name] = asyncio.run(_crowd(name, args, base, link, study_id, leavers=leavers))
            deadline = time.monotonic() + 30
            while _pending_validations(study_id) and time.monotonic() < deadline:
                time.sleep(0.5)
            checks[name] = _check(study_id, results[name])
            checks[name]["wasted"] = _wasted(results[name], study_id, t0_wall, t0_mono)
            if args.timeline:
                _timeline(study_id, t0_wall)
            r, c = results[name], checks[name]
            people = r["annotators"]
            refusals = [x for a in people for x in a["refusals"]]
            print(
                f"\n== {name}: filled in {r['filled_s']:.1f} s"
                if r["filled_s"] is not None
                else f"\n== {name}: NOT filled within {args.limit:.0f} s",
                flush=True,
            )
            print(
                f"   annotators arrived {len(people)}, left {sum(1 for a in people if a['left_at'])}, came back "
                f"{sum(1 for a in people if a['returned'])}, finished {sum(1 for a in people if a['finished'])}; "
                f"refused for now {refusals.count('temporary')} times, refused for good {refusals.count('final')}"
            )
            print(
                f"   quotas: {c['targets']} targets x {c['quota']}: exact {c['exact']} (over {c['over']}, under "
                f"{c['under']}); counted batches {c['counted']}, counted below the rule {c['counted_below_rule']}; "
                f"clicks acknowledged {c['acked']}, lost {c['lost']}, duplicated {c['duplicated']}; batches released "
                f"{c['released_sessions']}"
            )
            if leavers:
                held, hold, clicked = c["wasted"]
                print(
                    f"   leavers' clicked trials (kept for a return, given back by expiry): {clicked:.0f} slot-minutes"
                )
                print(
                    f"   leavers' unclicked slots held unused: {held:.0f} slot-minutes (real time), against "
                    f"{hold:.0f} with a 30-minute hold ({held / hold:.1%} of it)"
                    if hold
                    else "   no leaver"
                )
        fast, slow = results["no leavers"]["filled_s"], results["with leavers"]["filled_s"]
        ratio = slow / fast if fast and slow else math.inf
        print(f"\nfill time with leavers / without: {ratio:.2f}x (goal: within 1.1x)")
        print(f"total {time.monotonic() - t_start:.1f}s")
        bad = [
            f"{name}: {what}"
            for name, c in checks.items()
            for what, failed in (
                ("quotas not met exactly", not c["exact"]),
                (f"{c['counted_below_rule']} batch(es) counted below the rule", c["counted_below_rule"]),
                (f"{c['lost']} acknowledged click(s) lost", c["lost"]),
                (f"{c['duplicated']} click(s) duplicated", c["duplicated"]),
            )
            if failed
        ]
        print("FAILED: " + "; ".join(bad) if bad else "OK: quotas met exactly, none counted below the rule, no click "
              "lost or duplicated")  # fmt: skip
        return 1 if bad else 0
    finally:
        for name in ("web", "worker", "relay", "beat", "redis"):
            if name in stack:
                stack[name].stop(timeout_s=5)
        if "pg" in stack:
            stack["pg"].stop()
        if args.keep:
            print(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(PROJECT_ROOT))
    sys.exit(main())
