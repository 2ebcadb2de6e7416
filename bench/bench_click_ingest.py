"""Benchmark: click requests per second and their latency, the lean click path against the old one.

Over HTTP, from client processes separate from the server: the current tree and an older git ref (default
``83492fb``, before the lean click path) are each served by gunicorn (``--workers`` sync workers) on
loopback against the same throw-away PostgreSQL database (``bench_<name>`` of DATABASE_URL, dropped at the
end). Each server gets its own sessions (batches of 10 trials, presented 30 s ago, as the player reports
them); ``--clients`` processes of ``--threads`` threads each play whole batches, one click request after
the other, as the player's outbox does. Printed per server: clicks/s (wall clock), client-observed latency
p50/p99, status counts, and the ratio new/old. PostgreSQL only (the production stack). Usage::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/clicklab_ingest CELERY_BROKER_URL=redis://127.0.0.1:6379/2 \\
        .venv/bin/python bench/bench_click_ingest.py [--clicks 2000] [--workers 2] [--clients 2] [--threads 8]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(64))  # shared with the servers: tokens must verify


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _play(args) -> tuple[list[float], Counter]:
    """One client process: ``threads`` threads, each playing whole batches (10 click requests in order)."""
    import threading

    import requests

    base_url, tokens, threads = args
    latencies: list[float] = []
    statuses: Counter = Counter()
    lock = threading.Lock()
    queue = list(tokens)

    def run():
        http = requests.Session()
        while True:
            with lock:
                if not queue:
                    return
                token = queue.pop()
            for position in range(10):
                body = {
                    "position": position, "idempotency_key": uuid.uuid4().hex, "x": 10.5, "y": 20.5,
                    "shown_width": 640, "shown_height": 480, "pointer_type": "mouse", "reaction_ms": 600,
                    "event_timestamp_ms": 9000.0, "phase_onsets_ms": {"A": 1, "B": 2, "C": 3, "D": 4},
                    "blocked_clicks": 0, "flags": [], "refresh_hz": 60,
                }  # fmt: skip
                started = time.perf_counter()
                try:
                    status = http.post(
                        f"{base_url}/api/annotator/{token}/click", json=body, timeout=60
                    ).status_code
                except requests.RequestException as exc:
                    status = type(exc).__name__
                elapsed = time.perf_counter() - started
                with lock:
                    latencies.append(elapsed)
                    statuses[status] += 1

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return latencies, statuses


def _serve(cwd: Path, port: int, workers: int, env: dict) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi", "-b", f"127.0.0.1:{port}", "-w", str(workers),
         "--log-level", "warning"],
        cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process
        except OSError:
            if process.poll() is not None:
                message = process.stderr.read().decode()[-2000:]
                raise RuntimeError(f"gunicorn in {cwd} exited: {message}") from None
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"gunicorn in {cwd} did not listen on port {port} within 60 s")


def _measure(label: str, base_url: str, tokens: list[str], clients: int, threads: int) -> dict:
    shares = [tokens[index::clients] for index in range(clients)]
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        results = pool.map(_play, [(base_url, share, threads) for share in shares])
    wall = time.perf_counter() - started
    latencies = sorted(value for result in results for value in result[0])
    statuses = sum((result[1] for result in results), Counter())
    figures = {
        "rate": len(latencies) / wall,
        "p50": statistics.median(latencies) * 1000,
        "p99": latencies[int(0.99 * (len(latencies) - 1))] * 1000,
    }
    print(
        f"{label:<28} {figures['rate']:7.1f} clicks/s   p50 {figures['p50']:6.1f} ms   p99 {figures['p99']:6.1f} ms   "
        f"statuses {dict(statuses)}   ({len(latencies)} clicks in {wall:.1f} s)"
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clicks", type=int, default=2000, help="clicks per server (batches of 10)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn sync workers per server")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--threads", type=int, default=8, help="threads per client process")
    parser.add_argument("--old-ref", default="83492fb", help="git ref of the old click path")
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_test_environment
    from django.utils import timezone

    from collector.models import Trial
    from collector.services.datasets import dataset_import
    from collector.services.sessions import session_start
    from collector.services.studies import study_create, study_publish
    from collector.services.tokens import session_token_make
    from collector.services.workers import worker_get_or_create
    from tests.factories import draw_dataset_folder

    if connection.vendor != "postgresql":
        sys.exit("bench_click_ingest needs PostgreSQL: set DATABASE_URL (see the module docstring).")
    setup_test_environment()
    test_settings = settings.DATABASES["default"].setdefault("TEST", {})
    test_settings["NAME"] = f"bench_{connection.settings_dict['NAME']}"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    servers: list[subprocess.Popen] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = draw_dataset_folder(Path(tmp) / "bench", n_images=10, size=(160, 120))
            dataset = dataset_import(path=folder, layout="folder", name="bench").dataset
        study = study_publish(
            study_id=study_create(name="bench-clicks", dataset=dataset, quota_pc=10**6, quota_mobile=10**6).pk
        )
        n_sessions = args.clicks // 10

        def tokens() -> list[str]:
            made = []
            for _ in range(n_sessions):
                worker = worker_get_or_create(platform="link", external_id=f"bench-{uuid.uuid4().hex}")
                session = session_start(study=study, worker=worker, device="pc")
                made.append(session_token_make(session_id=session.pk))
            return made

        old_tokens, new_tokens = tokens(), tokens()
        presented = [{"id": "bench", "at": (timezone.now() - timezone.timedelta(seconds=30)).isoformat()}]
        Trial.objects.update(presentations=presented)

        db = connection.settings_dict
        env = {
            **os.environ,
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "DEBUG": "false",
            "SECURE_SSL_REDIRECT": "false",
            "ALLOWED_HOSTS": "127.0.0.1",
        }
        old_tree = Path(tempfile.mkdtemp(prefix="bench-old-tree-"))
        archive = subprocess.run(
            ["git", "archive", args.old_ref], cwd=ROOT, capture_output=True, check=True
        ).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(old_tree, filter="data")
        old_port, new_port = _free_port(), _free_port()
        servers.append(_serve(old_tree, old_port, args.workers, env))
        servers.append(_serve(ROOT, new_port, args.workers, env))
        print(
            f"{args.clicks} clicks per server, gunicorn {args.workers} sync workers each, {args.clients} client "
            f"processes x {args.threads} threads, PostgreSQL {db['NAME']}"
        )
        old = _measure(
            f"old path ({args.old_ref})",
            f"http://127.0.0.1:{old_port}",
            old_tokens,
            args.clients,
            args.threads,
        )
        new = _measure(
            "lean path (this tree)", f"http://127.0.0.1:{new_port}", new_tokens, args.clients, args.threads
        )
        print(
            f"ratio new/old: throughput {new['rate'] / old['rate']:.2f}x, p50 {new['p50'] / old['p50']:.2f}x, "
            f"p99 {new['p99'] / old['p99']:.2f}x"
        )
    finally:
        for server in servers:
            server.send_signal(signal.SIGINT)  # gunicorn's quick shutdown
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
