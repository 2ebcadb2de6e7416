"""#15.5: SIGTERM stops a multi-worker run with its workers; the next run resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has stopped running (its reaper may be slow)


def _dataset(root: Path, count: int) -> None:
    rng = np.random.default_rng(0)
    (root / "data_GT").mkdir(parents=True)
    (root / "boundary_GT").mkdir()
    for index in range(count):
        image = rng.integers(0, 255, (120, 160, 3), dtype=np.uint8)
        mask = np.zeros((120, 160), np.uint8)
        mask[30 + index : 90, 40 : 120 - index] = 255
        image[mask > 0] //= 3
        Image.fromarray(image).save(root / "data_GT" / f"img{index:02d}.png")
        Image.fromarray(mask).save(root / "boundary_GT" / f"img{index:02d}.bmp")


def test_sigterm_stops_the_workers_and_the_rerun_resumes(tmp_path):
    data, out = tmp_path / "GrabCut", tmp_path / "runs"
    count = 8
    _dataset(data, count)
    command = [sys.executable, "-m", "benchmark", "run", "--method", "embedded", "--dataset", str(data),
               "--groups", "0", "--max-clicks", "8", "--workers", "2", "--heatmaps", "0", "--no-progress",
               "--out", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    instances = out / "embedded" / "GrabCut" / "instances"
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    workers: set[int] = set()
    while time.monotonic() < deadline and process.poll() is None:
        workers |= _descendants(process.pid)
        if len(list(instances.glob("*.npz"))) >= 1:
            break
        time.sleep(0.05)
    workers |= _descendants(process.pid)
    assert process.poll() is None, f"the run ended before it could be stopped: {process.stderr.read()}"
    assert len(workers) >= 2  # the pool (2 workers, plus multiprocessing's helper)
    process.send_signal(signal.SIGTERM)
    stderr = process.communicate(timeout=60)[1]
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "stopped by SIGTERM" in stderr and "run the same command again to resume" in stderr
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not [pid for pid in workers if _alive(pid)], "worker processes outlived the run"
    done = {path.name: path.stat().st_mtime_ns for path in instances.glob("*.npz")}
    assert 1 <= len(done) < count
    assert not list(instances.glob("*.partial"))

    rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert len(list(instances.glob("*.npz"))) == count
    assert {name: (instances / name).stat().st_mtime_ns for name in done} == done  # resumed, not redone
