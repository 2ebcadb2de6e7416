"""Remote ClickSession vs local on the same run: per-interaction round trip (next + submit) p50/p95 on
loopback and the whole-run time ratio (goal: remote <= 1.3x local, embedded segmenter on GrabCut).

The local run and the remote run execute the same user script with the same predictor and OpenCV seed and
must give the same report (checked). The server is a real ``manage.py runserver`` process on 127.0.0.1
against a throw-away database (``bench_<name>`` of DATABASE_URL, or ``bench_eval.sqlite3`` under
CLICKLAB_VAR_DIR) with the GrabCut images imported; scoring runs in the request (the Celery path is the
same code; the test suite covers it). Usage::

    .venv/bin/python bench/bench_eval_remote.py [--images 4] [--max-clicks 5] [--fast]

``--fast`` uses the embedded segmenter at a 96-px working size (a much quicker model, so the transport
overhead weighs more: a harsher test of the ratio).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

PROJECT = Path(__file__).resolve().parent.parent
GRABCUT = Path(os.environ.get("CLICKLAB_SHARED_DATASETS", PROJECT.parent / "shared" / "datasets")) / "GrabCut"


def script(predictor, max_clicks, **where):
    from benchmark.session import ClickSession

    cv2.setRNGSeed(0)
    started = time.perf_counter()
    with ClickSession(clicker="baseline", max_clicks=max_clicks, seed=0, **where) as sess:
        embedding = None
        while sess.next():
            sample, clicks, is_new = sess.get_clicks()
            if is_new:
                embedding = predictor.encode(sample.load_image())
            sess.submit_masks(predictor.predict(embedding, clicks).probabilities)
    return time.perf_counter() - started, sess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--max-clicks", type=int, default=5)
    parser.add_argument("--fast", action="store_true")
    parser.add_argument(
        "--repeats", type=int, default=2, help="alternate local/remote runs; the best of each counts"
    )
    args = parser.parse_args()

    from benchmark.datasets import open_dataset
    from collector.services.datasets import dataset_import
    from evaluation.services import create_key
    from segmenters.registry import get_predictor
    from tests.factories import make_researcher
    from tests.support.celery_worker import worker_environment

    setup_test_environment()
    test_settings = settings.DATABASES["default"].setdefault("TEST", {})
    test_settings["MIGRATE"] = False
    if connection.vendor == "sqlite":
        test_settings["NAME"] = str(Path(settings.VAR_DIR) / "bench_eval.sqlite3")
    else:
        test_settings["NAME"] = f"bench_{connection.settings_dict['NAME']}"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    server = None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            settings.MEDIA_ROOT = str(Path(tmp) / "media")
            folder = Path(tmp) / "GrabCut"
            stems = sorted(p.stem for p in (GRABCUT / "data_GT").iterdir())[: args.images]
            for sub in ("data_GT", "boundary_GT"):
                (folder / sub).mkdir(parents=True)
                for path in (GRABCUT / sub).iterdir():
                    if path.stem in stems:
                        shutil.copy2(path, folder / sub / path.name)
            dataset_import(path=folder, layout="grabcut")
            key = create_key(user=make_researcher("bench"), name="bench")[1]
            port = free_port()
            env = {**worker_environment(), "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "0",
                   "CLICKLAB_EVAL_RATE_LIMIT": "100000/min"}  # fmt: skip
            server = subprocess.Popen(
                [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                cwd=PROJECT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )  # fmt: skip
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.2)
            options = {"work_long_side_px": 96, "grabcut_iterations": 1} if args.fast else {}
            predictor = get_predictor("embedded", **options)
            local_ds = open_dataset(folder, "grabcut")
            script(predictor, 1, dataset=local_ds)  # warm-up (OpenCV, imports)
            # alternate the two so that a busy machine slows both alike; the fastest of each counts
            local_times, remote_times = [], []
            for _ in range(args.repeats):
                local_s, local = script(predictor, args.max_clicks, dataset=local_ds)
                remote_s, remote = script(
                    predictor, args.max_clicks, dataset=local_ds, host=f"http://127.0.0.1:{port}", key=key
                )
                local_times.append(local_s)
                remote_times.append(remote_s)
            local_s, remote_s = min(local_times), min(remote_times)
            volatile = ["timing_s", "session_id"]
            pd.testing.assert_frame_equal(
                local.get_report().drop(columns=volatile), remote.get_report().drop(columns=volatile)
            )
            trips = remote.round_trips_s
            # one request per interaction: the submission, whose answer carries the next interaction
            # (plus the first next and one image per sample)
            submits = [t for url, t in trips if url.endswith("/submit/")]
            per_interaction = np.asarray(submits)
            interactions = len(submits)
            requests = len([1 for url, _ in trips if "/report/" not in url])
            print(f"segmenter: embedded{' (fast: 96 px, 1 iteration)' if args.fast else ''}; "
                  f"{args.images} GrabCut images x {args.max_clicks} clicks = {interactions} interactions; "
                  f"database {connection.vendor}")  # fmt: skip
            print(f"per-interaction round trip (submit + next in one request) on loopback: p50 {1000 * np.percentile(per_interaction, 50):.1f} ms, "
                  f"p95 {1000 * np.percentile(per_interaction, 95):.1f} ms over {interactions} interactions "
                  f"({requests} requests in the loop)")  # fmt: skip
            from evaluation.models import EvaluationRun

            run = EvaluationRun.objects.get(pk=remote.run_id)
            print(f"server-side scoring + next clicks: {1000 * run.server_seconds / interactions:.1f} ms per interaction "
                  f"(the rest of the round trip is HTTP, auth, JSON and the database)")  # fmt: skip
            print(f"whole run: local {local_s:.2f} s, remote {remote_s:.2f} s, "
                  f"ratio {remote_s / local_s:.2f}x (goal <= 1.3x), best of {args.repeats} alternated runs; reports identical")  # fmt: skip
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
            connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
