"""Benchmark: sustained click requests per second and their latency, this tree against a baseline tree.

Both trees are served as ``make prod`` serves the web process (gunicorn, ``config/gunicorn.py``, gthread
workers; ``--web-workers`` x ``--web-threads``) on loopback, against one throw-away PostgreSQL database
(``bench_<name>`` of DATABASE_URL, dropped at the end), DEBUG off, access log on (as in production, written to a
file). The load generator is ``wrk`` (C, so the figure is the server's, not a Python client's), run with a Lua
script that plays whole batches: every request is a new click (its own idempotency key) for the next trial of a
session made for that server (sessions of 10 trials, presented 30 s ago, as the player reports them). Each server
gets ``--rounds`` alternating runs of ``--duration`` seconds (old, new, old, new...: the machine is noisy, so the
two are measured in the same minutes). Printed per run and as medians per server: clicks/s (2xx answers per
second of wall clock), client-observed latency p50/p99 (wrk), server-side p50/p99 (the access log's request
time), status counts, CPU per acknowledged click (user and system, from /proc: the web processes, and every
PostgreSQL process of the cluster, so run it on a quiet machine); and the ratios new/old.

The baseline is ``--old-ref`` (default ``d16832e``, main before the hand-written session read of the click
path), checked out with ``git archive``. Goal of issue 16: >= 500 clicks/s with server-side p99 < 100 ms.

    apt-get install wrk   # once
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/clicklab_ingest CELERY_BROKER_URL=redis://127.0.0.1:6379/2 \\
        .venv/bin/python bench/bench_click_ingest.py [--duration 15] [--rounds 2] [--connections 64]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(64))  # shared with the servers: tokens must verify

# One click per request; the session and position come from the request's number within its wrk thread, so the
# threads never share a session and each session's trials are clicked once. Past the run's last session it
# wraps around (those answers are 409 trial_done and are counted apart: make --sessions larger).
LUA = r"""
local tokens = {%(tokens)s}
local n_threads = %(threads)d
local threads = {}
function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end
function init(args)
  -- a new key prefix per wrk run, and its own slice of the sessions (first, count), so no run repeats another's
  -- idempotency keys or clicks another's trials
  run, first, count = args[1], tonumber(args[2]), tonumber(args[3])
  counter = 0
  statuses = {}
end
function request()
  local i = counter
  counter = counter + 1
  local s = first + (math.floor(i / 10) * n_threads + id) %% count + 1
  local body = string.format(
    '{"position":%%d,"idempotency_key":"%%s-%%d-%%d","x":10.5,"y":20.5,"shown_width":640,"shown_height":480,' ..
    '"pointer_type":"mouse","reaction_ms":600,"event_timestamp_ms":9000.0,' ..
    '"phase_onsets_ms":{"A":1,"B":2,"C":3,"D":4},"blocked_clicks":0,"flags":[],"refresh_hz":60}',
    i %% 10, run, id, i)
  return wrk.format("POST", "/api/annotator/" .. tokens[s] .. "/click",
                    {["Content-Type"] = "application/json"}, body)
end
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end
function done(summary, latency, requests)
  local merged = {}
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("statuses")) do
      merged[tostring(status)] = (merged[tostring(status)] or 0) + count
    end
  end
  local parts = {}
  for status, count in pairs(merged) do table.insert(parts, string.format('"%%s":%%d', status, count)) end
  io.write(string.format('RESULT {"duration_us":%%d,"p50_us":%%d,"p99_us":%%d,"errors":%%d,"statuses":{%%s}}\n',
    summary.duration, latency:percentile(50), latency:percentile(99),
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    table.concat(parts, ",")))
end
"""

ACCESS_MS = re.compile(r'"POST /api/annotator/\S+/click HTTP/1\.1" (\d{3}) .* (\d+)ms')


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _serve(tree: Path, port: int, args, env: dict, log: Path) -> subprocess.Popen:
    """The web process as ``config.runner`` starts it (same gunicorn configuration file and worker class)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(tree / "config" / "gunicorn.py"), "config.wsgi:application",
         "--bind", f"127.0.0.1:{port}", "--workers", str(args.web_workers), "--worker-class", "gthread",
         "--threads", str(args.web_threads), "--timeout", "30", "--keep-alive", "5", "--log-level", "info"],
        cwd=tree, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"gunicorn in {tree} exited; its log: {log}") from None
            time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    raise RuntimeError(f"gunicorn in {tree} did not listen on port {port} within 90 s; its log: {log}")


def _stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _cpu_seconds(match) -> tuple[float, float]:
    """(user, system) CPU seconds used so far by the processes ``match(pid, pgid, name)`` selects and by their
    exited children, read from /proc (the kernel's accounting, not the processes' own report)."""
    tick = os.sysconf("SC_CLK_TCK")
    user = system = 0.0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        if match(int(entry.name), int(fields[2]), name):
            # own time, plus that of its children once they exited and were reaped (a backend or an
            # autovacuum worker that ends mid-run counts in the postmaster's, a gunicorn worker in the arbiter's)
            user += (int(fields[11]) + int(fields[13])) / tick
            system += (int(fields[12]) + int(fields[14])) / tick
    return user, system


def _total(figures: dict, key: str) -> float:
    return max(figures[f"{key}_user_ms"] + figures[f"{key}_sys_ms"], 1e-9)


def _server_ms(log: Path, offset: int) -> list[int]:
    """Request times (ms) of the click requests in the access log written after byte ``offset``."""
    with log.open("rb") as handle:
        handle.seek(offset)
        text = handle.read().decode("utf-8", "replace")
    return [int(match.group(2)) for match in ACCESS_MS.finditer(text)]


def _run_wrk(
    label: str,
    url: str,
    script: Path,
    args,
    log: Path,
    sessions: range,
    server: subprocess.Popen,
    *,
    duration: int | None = None,
) -> dict:
    offset = log.stat().st_size
    web = lambda pid, pgid, name: pgid == server.pid  # noqa: E731  (gunicorn's session: arbiter and workers)
    database = lambda pid, pgid, name: name == "postgres"  # noqa: E731  (every backend of the cluster)
    cpu_before = (_cpu_seconds(web), _cpu_seconds(database))
    done = subprocess.run(
        ["wrk", "-t", str(args.wrk_threads), "-c", str(args.connections), "-d", f"{duration or args.duration}s",
         "--timeout", "10s", "-s", str(script), url, "--", uuid.uuid4().hex[:12],
         str(sessions.start), str(len(sessions))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    cpu_after = (_cpu_seconds(web), _cpu_seconds(database))
    time.sleep(1.0)  # the access log is written after the response
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no RESULT line:\n{done.stdout}\n{done.stderr}")
    result = json.loads(line[len("RESULT ") :])
    if duration is not None:
        return result  # a warm-up run: every worker process has imported the app and opened its connection
    ok = sum(count for status, count in result["statuses"].items() if status.startswith("2"))
    served = sorted(_server_ms(log, offset))
    figures = {
        "rate": ok / (result["duration_us"] / 1e6),
        "p50": result["p50_us"] / 1000,
        "p99": result["p99_us"] / 1000,
        "server_p50": statistics.median(served) if served else float("nan"),
        "server_p99": served[int(0.99 * (len(served) - 1))] if served else float("nan"),
        "statuses": result["statuses"],
        "errors": result["errors"],
        "label": label,
    }
    # CPU per acknowledged click, user + system, of the web processes and of PostgreSQL (the whole cluster:
    # run it on a quiet machine), from the kernel's accounting over the wrk run
    for key, index in (("web", 0), ("db", 1)):
        user = cpu_after[index][0] - cpu_before[index][0]
        system = cpu_after[index][1] - cpu_before[index][1]
        figures[f"{key}_user_ms"] = 1000 * user / max(ok, 1)
        figures[f"{key}_sys_ms"] = 1000 * system / max(ok, 1)
    print(
        f"  {label:<24} {figures['rate']:7.1f} clicks/s   client p50 {figures['p50']:6.1f} ms  p99 "
        f"{figures['p99']:7.1f} ms   server p50 {figures['server_p50']:5.0f} ms  p99 {figures['server_p99']:5.0f} ms"
        f"   statuses {figures['statuses']}   socket errors {figures['errors']}   CPU per click: web "
        f"{figures['web_user_ms']:.2f} user + {figures['web_sys_ms']:.2f} sys ms, PostgreSQL "
        f"{figures['db_user_ms']:.2f} user + {figures['db_sys_ms']:.2f} sys ms",
        flush=True,
    )
    return figures


def main() -> None:  # noqa: C901  (one linear script: set up, serve two trees, alternate, report, clean up)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=15, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs per server")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections (concurrent clients)")
    parser.add_argument("--wrk-threads", type=int, default=2)
    parser.add_argument("--web-workers", type=int, default=3, help="gunicorn workers (make prod's default)")
    parser.add_argument("--web-threads", type=int, default=4, help="threads per worker (make prod's default)")
    parser.add_argument(
        "--sessions",
        type=int,
        default=None,
        help="sessions (10 clicks each) per server, shared by its runs (default: enough for 1,500 clicks/s, "
        "rounds x duration x 150 plus a tenth for the warm-up)",
    )
    parser.add_argument("--old-ref", default="d16832e", help="git ref of the baseline tree")
    args = parser.parse_args()
    if args.sessions is None:
        args.sessions = math.ceil(args.rounds * args.duration * 150 / 0.9)

    if shutil.which("wrk") is None:
        sys.exit("bench_click_ingest needs wrk (a C HTTP load generator): apt-get install wrk")
    if subprocess.run(["git", "cat-file", "-e", args.old_ref], cwd=ROOT, capture_output=True).returncode:
        sys.exit(
            f"--old-ref {args.old_ref} is not in this clone's history; pass a ref that is (git log --oneline)"
        )

    import django

    django.setup()
    import logging

    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_test_environment
    from django.utils import timezone

    from collector.models import Trial
    from collector.services.datasets import dataset_import
    from collector.services.session_start import session_start
    from collector.services.studies import study_create, study_publish
    from collector.services.tokens import session_token_make
    from collector.services.workers import worker_get_or_create
    from tests.factories import draw_dataset_folder

    if connection.vendor != "postgresql":
        sys.exit("bench_click_ingest needs PostgreSQL: set DATABASE_URL (see the module docstring).")
    logging.disable(logging.INFO)  # the set-up's own "session started" lines
    setup_test_environment()
    settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = f"bench_{connection.settings_dict['NAME']}"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    servers: list[subprocess.Popen] = []
    work = Path(tempfile.mkdtemp(prefix="bench-click-ingest-"))
    try:
        folder = draw_dataset_folder(work / "dataset", n_images=10, size=(160, 120))
        dataset = dataset_import(path=folder, layout="folder", name="bench").dataset
        study = study_publish(
            study_id=study_create(name="bench-clicks", dataset=dataset, quota_pc=10**7, quota_mobile=10**7).pk
        )
        started = time.perf_counter()

        def tokens() -> list[str]:
            made = []
            for _ in range(args.sessions):
                worker = worker_get_or_create(platform="link", external_id=f"bench-{uuid.uuid4().hex}")
                made.append(
                    session_token_make(session_id=session_start(study=study, worker=worker, device="pc").pk)
                )
            return made

        trees = {"old": work / "old-tree", "new": ROOT}
        scripts = {}
        for name in trees:
            script = work / f"{name}.lua"
            script.write_text(
                LUA
                % {
                    "tokens": ",".join(f'"{token}"' for token in tokens()),
                    "threads": args.wrk_threads,
                }
            )
            scripts[name] = script
        presented = [{"id": "bench", "at": (timezone.now() - timezone.timedelta(seconds=30)).isoformat()}]
        Trial.objects.update(presentations=presented)
        print(f"set-up: {2 * args.sessions} sessions in {time.perf_counter() - started:.0f} s", flush=True)

        archive = subprocess.run(["git", "archive", args.old_ref], cwd=ROOT, capture_output=True, check=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(trees["old"], filter="data")
        db = connection.settings_dict
        env = {
            **os.environ,
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "DEBUG": "false",
            "SECURE_SSL_REDIRECT": "false",
            "ALLOWED_HOSTS": "127.0.0.1",
            "CLICKLAB_VAR_DIR": str(work / "var"),
        }
        urls, logs, procs = {}, {}, {}
        for name, tree in trees.items():
            port = _free_port()
            logs[name] = work / f"{name}-web.log"
            procs[name] = _serve(tree, port, args, env, logs[name])
            servers.append(procs[name])
            urls[name] = f"http://127.0.0.1:{port}"
        print(
            f"wrk {args.connections} connections x {args.duration} s per run, {args.rounds} runs per server "
            f"alternating; gunicorn {args.web_workers} gthread workers x {args.web_threads} threads per server; "
            f"PostgreSQL {db['NAME']}",
            flush=True,
        )
        # sessions [0, warm) for the warm-up run, then an equal slice for each measured run
        warm = args.sessions // 10
        share = (args.sessions - warm) // args.rounds
        slices = [range(warm + k * share, warm + (k + 1) * share) for k in range(args.rounds)]
        for name in ("old", "new"):
            _run_wrk(
                "warm-up", urls[name], scripts[name], args, logs[name], range(warm), procs[name], duration=5
            )
        labels = {"old": f"baseline ({args.old_ref})", "new": "this tree"}
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        for k in range(args.rounds):
            for name in ("old", "new"):
                runs[name].append(
                    _run_wrk(
                        labels[name], urls[name], scripts[name], args, logs[name], slices[k], procs[name]
                    )
                )
        medians = {}
        for name in ("old", "new"):
            medians[name] = {
                key: statistics.median(run[key] for run in runs[name])
                for key in (
                    "rate",
                    "p50",
                    "p99",
                    "server_p50",
                    "server_p99",
                    "web_user_ms",
                    "web_sys_ms",
                    "db_user_ms",
                    "db_sys_ms",
                )
            }
            m = medians[name]
            print(
                f"median {labels[name]:<24} {m['rate']:7.1f} clicks/s   client p50 {m['p50']:6.1f} ms  p99 "
                f"{m['p99']:7.1f} ms   server p50 {m['server_p50']:5.0f} ms  p99 {m['server_p99']:5.0f} ms   "
                f"CPU per click: web {m['web_user_ms']:.2f} + {m['web_sys_ms']:.2f} ms, PostgreSQL "
                f"{m['db_user_ms']:.2f} + {m['db_sys_ms']:.2f} ms (user + sys)"
            )
        old, new = medians["old"], medians["new"]
        # A run that used up its slice of sessions clicked trials already clicked (409 trial_done): its rate
        # counts only the 2xx answers, so it is capped by the sessions, not by the server.
        short = [
            run["label"]
            for name in ("old", "new")
            for run in runs[name]
            if any(not status.startswith("2") for status in run["statuses"])
        ]
        if short:
            print(
                f"WARNING: {len(short)} run(s) answered other than 2xx ({', '.join(short)}): when these are 409 "
                f"trial_done, the runs used up their sessions and their clicks/s are lower bounds; rerun with "
                f"--sessions {2 * args.sessions}."
            )
        verdict = "met" if new["rate"] >= 500 and new["server_p99"] < 100 else "not met"
        if short and verdict == "not met":
            verdict = "not measured (runs ran out of sessions)"
        print(
            f"ratio this tree / baseline: throughput {new['rate'] / old['rate']:.2f}x, client p99 "
            f"{new['p99'] / old['p99']:.2f}x, server p99 {new['server_p99'] / max(old['server_p99'], 1):.2f}x, "
            f"CPU per click web {_total(new, 'web') / _total(old, 'web'):.2f}x, PostgreSQL "
            f"{_total(new, 'db') / _total(old, 'db'):.2f}x; "
            f"goal >= 500 clicks/s with server p99 < 100 ms: {verdict}"
        )
    finally:
        for server in servers:
            _stop(server)
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
