"""Remote ClickSession vs local, measured in the same run: the whole-run time ratio remote/local for the baseline
and the clicking-group clicker, with a near-free method and with the embedded segmenter (goal: remote <= 1.3x
local with a fast method).

Both sides run the benchmark README's loop (previous logits fed back) with the same predictor and must give
the same report (checked, timing columns aside). The server is a real gunicorn (config/gunicorn.py, one gthread
worker) in a process of its own on a free loopback port, against a throw-away database: ``bench_<name>`` of
DATABASE_URL (real PostgreSQL), else ``bench_eval.sqlite3`` under CLICKLAB_VAR_DIR; GrabCut images imported.
Local and remote runs alternate (a busy machine slows both alike) and the fastest of each counts. Last it
prints the floor: the median time of the cheapest requests to the same server (a run read, and a ``next``
that locks the finished run and writes nothing), which no remote interaction can beat. Usage::

    .venv/bin/python bench/bench_eval_remote.py [--images 3] [--max-clicks 5] [--groups 10] [--repeats 3]
        [--methods free,embedded] [--clickers baseline,group]

``free`` is a near-free predictor (disks around the clicks, no logits: what is left is our own per-click work
and the transport); ``embedded`` is the embedded GrabCut segmenter at a 96-px working size and one iteration
(a fast method; it returns full-size float32 logits, which travel with every submission); ``embedded-mask``
(not in the default list) is the same with its logits dropped, so the mask alone travels: the difference is
what the logits cost; ``embedded-full`` (not in the default list either) is the embedded segmenter at its
defaults (512 px, 4 iterations, about a second a click here), e.g. ``--methods embedded-full --clickers baseline``.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

import pandas as pd  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

PROJECT = Path(__file__).resolve().parent.parent
GRABCUT = Path(os.environ.get("CLICKLAB_SHARED_DATASETS", PROJECT.parent / "shared" / "datasets")) / "GrabCut"
VOLATILE = ["timing_s", "session_id"]


def readme_loop(predictor, config: dict, **where):
    """benchmark/README.md's loop; returns (seconds, session)."""
    from benchmark.session import ClickSession

    started = time.perf_counter()
    with ClickSession(**config, **where) as sess:
        embedding = None
        while sess.next():
            sample, clicks, is_new = sess.get_clicks(only_last=False)
            if is_new:
                embedding = predictor.encode(sample.load_image())
            sess.submit_masks(predictor.predict(embedding, clicks, sess.previous_logits))
    return time.perf_counter() - started, sess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gunicorn(port: int):
    from tests.support.celery_worker import worker_environment

    env = {**worker_environment(), "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "0",
           "CLICKLAB_EVAL_RATE_LIMIT": "1000000/min", "CLICKLAB_EVAL_MAX_ACTIVE_RUNS": "1000"}  # fmt: skip
    log = (
        open(os.environ["BENCH_SERVER_LOG"], "w")
        if os.environ.get("BENCH_SERVER_LOG")
        else subprocess.DEVNULL
    )  # noqa: SIM115
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", "config.wsgi", "--bind", f"127.0.0.1:{port}",
         "--worker-class", "gthread", "--workers", "1", "--threads", "4"],
        cwd=PROJECT, env=env, stdout=log, stderr=log,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("gunicorn did not listen within 60 s")


def request_floor(host: str, key: str, run_id: str, n: int = 200) -> dict:
    """What the cheapest requests cost on this server, from a client like the session's (httpx, keep-alive):
    the median ms of a run read and of a ``next`` on a finished run (authentication, the throttle, one
    transaction locking the run, nothing written). No remote interaction can cost less than the second."""
    import statistics

    import httpx

    with httpx.Client(base_url=host, headers={"Authorization": f"EvalKey {key}"}) as http:
        times: dict[str, list[float]] = {"get": [], "next": []}
        for _ in range(n):
            started = time.perf_counter()
            http.get(f"/api/eval/runs/{run_id}/").raise_for_status()
            times["get"].append(time.perf_counter() - started)
            started = time.perf_counter()
            answer = http.post(f"/api/eval/runs/{run_id}/next/", json={})
            times["next"].append(time.perf_counter() - started)
            if answer.status_code != 200 or answer.json().get("done") is not True:
                raise SystemExit(
                    f"floor: next/ on the finished run answered {answer.status_code} {answer.text[:200]}"
                )
    return {name: 1000 * statistics.median(values) for name, values in times.items()} | {"n": n}


class WithoutLogits:
    """A predictor whose predictions carry no logits: the session then feeds the mask back (the embedded
    segmenter reads only ``previous > 0``, so its results do not change), and nothing but the mask travels."""

    def __init__(self, predictor) -> None:
        self.predictor = predictor

    def encode(self, image):
        return self.predictor.encode(image)

    def predict(self, embedding, clicks, previous_logits=None):
        from segmenters.base import Prediction

        return Prediction(
            probabilities=self.predictor.predict(embedding, clicks, previous_logits).probabilities
        )


def predictors(names: list[str]) -> dict:
    from bench_engine_embedding_reuse import DiskPredictor

    from segmenters.registry import get_predictor

    made = {}
    for name in names:
        if name == "free":
            made[name] = DiskPredictor()
        elif name == "embedded":
            made[name] = get_predictor("embedded", work_long_side_px=96, grabcut_iterations=1)
        elif name == "embedded-full":  # the embedded segmenter as the web app runs it (512 px, 4 iterations)
            made[name] = get_predictor("embedded")
        elif name == "embedded-mask":  # the same, its logits dropped: what their transfer costs
            made[name] = WithoutLogits(get_predictor("embedded", work_long_side_px=96, grabcut_iterations=1))
        else:
            raise SystemExit(f"--methods: unknown {name!r}; use free, embedded, embedded-mask, embedded-full")
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=3)
    parser.add_argument("--max-clicks", type=int, default=5)
    parser.add_argument("--groups", type=int, default=10, help="clicking groups of the group clicker")
    parser.add_argument(
        "--repeats", type=int, default=3, help="alternated local/remote runs; the best of each counts"
    )
    parser.add_argument("--methods", default="free,embedded")
    parser.add_argument("--clickers", default="baseline,group")
    args = parser.parse_args()

    from benchmark.cli import equal_mass_groups
    from benchmark.datasets import open_dataset
    from collector.services.datasets import dataset_import
    from evaluation.services import create_key
    from tests.factories import make_researcher

    setup_test_environment()
    test_settings = settings.DATABASES["default"].setdefault("TEST", {})
    test_settings["MIGRATE"] = True
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
            server = start_gunicorn(port)
            local_ds = open_dataset(folder, "grabcut")
            remote = dict(host=f"http://127.0.0.1:{port}", key=key, dataset="GrabCut")
            clickers = {
                "baseline": dict(clicker="baseline"),
                "group": dict(clicker="group", click_model="dt", group_bounds=equal_mass_groups(args.groups)),
            }
            print(f"{args.images} GrabCut images x {args.max_clicks} clicks; group clicker: {args.groups} groups, dt map; "
                  f"database {connection.vendor}; gunicorn, 1 gthread worker; best of {args.repeats} alternated runs")  # fmt: skip
            print(f"{'method':9} {'clicker':9} {'interactions':>12} {'local s':>8} {'remote s':>9} {'ratio':>6} "
                  f"{'overhead ms/interaction':>24}")  # fmt: skip
            for method, predictor in predictors(args.methods.split(",")).items():
                for name in args.clickers.split(","):
                    clicker = clickers[name]
                    config = dict(max_clicks=args.max_clicks, seed=0, **clicker)
                    readme_loop(
                        predictor, {**config, "max_clicks": 1}, dataset=local_ds
                    )  # warm-up both sides
                    readme_loop(predictor, {**config, "max_clicks": 1}, **remote)
                    local_times, remote_times = [], []
                    for _ in range(args.repeats):
                        local_s, local = readme_loop(predictor, config, dataset=local_ds)
                        remote_s, far = readme_loop(predictor, config, **remote)
                        local_times.append(local_s)
                        remote_times.append(remote_s)
                        pd.testing.assert_frame_equal(
                            local.get_report().drop(columns=VOLATILE), far.get_report().drop(columns=VOLATILE)
                        )
                    interactions = len(local.get_report().drop_duplicates(["sample_id", "group", "round"]))
                    best_local, best_remote = min(local_times), min(remote_times)
                    overhead = 1000 * (best_remote - best_local) / interactions
                    print(f"{method:9} {name:9} {interactions:12d} {best_local:8.2f} {best_remote:9.2f} "
                          f"{best_remote / best_local:5.2f}x {overhead:24.1f}", flush=True)  # fmt: skip
            print("reports identical local and remote in every run (timing columns aside); goal: ratio <= 1.3x "
                  "with a fast method")  # fmt: skip
            floor = request_floor(remote["host"], key, far.run_id)
            print(f"floor, the same server and client: {floor['get']:.1f} ms a run read (GET runs/<id>/), "
                  f"{floor['next']:.1f} ms a locked no-op (POST next/ on the finished run); median of "
                  f"{floor['n']}")  # fmt: skip
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
            connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
