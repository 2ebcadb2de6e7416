"""The benchmark README's loop, previous logits included, gives the local report remotely, also when the client
process is SIGKILLed mid-run and a new process resumes the run: the resumed process is told the sample is new
to it (so it encodes the image) and gets the very logits the killed one submitted last.

The loop runs in processes of its own (tests/evaluation/readme_loop.py) with a tiny random-initialised SAM,
whose low-res logits (fed back as ``mask_input``) cannot be rebuilt from the mask: without them a resumed run
would give other masks, or fail on the shape.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
VOLATILE = ["timing_s", "session_id"]
TIMING_KEYS = ("session_id", "seconds_per_click", "time_curve", "time_auc")

pytestmark = [pytest.mark.dataset, pytest.mark.slow]


def _loop(*args: str) -> subprocess.Popen:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tests.evaluation.readme_loop", *args],
        cwd=PROJECT_ROOT, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _finish(process: subprocess.Popen) -> list[str]:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-4000:]
    return out.splitlines()


def _until_stop(process: subprocess.Popen) -> list[str]:
    """The lines the loop prints up to STOP (then it waits to be killed)."""
    lines = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("STOP"):
            return lines
    raise AssertionError(f"the loop ended without stopping: {lines[-5:]}\n{process.stderr.read()[-3000:]}")


def _results(folder: Path) -> tuple[pd.DataFrame, dict]:
    summary = json.loads((folder / "summary.json").read_text())
    for key in TIMING_KEYS:
        summary.pop(key, None)
    return pd.read_csv(folder / "report.csv").drop(columns=VOLATILE), summary


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stop_at", ["after-submit", "before-submit"])
def test_the_readme_loop_killed_and_resumed_remotely_gives_the_local_report(
    stop_at, grabcut3, eval_dataset, eval_key, live_server, tiny_sam_checkpoint, local_run, tmp_path
):
    common = ["--method", "sam", "--checkpoint", str(tiny_sam_checkpoint), "--dataset", str(grabcut3)]
    local_folder, local_lines = local_run

    remote = ["--host", live_server.url, "--key", eval_key, "--out", str(tmp_path / "remote")]
    first = _loop(
        *common, *remote, "--stop-after", "6", "--stop-at", stop_at
    )  # mid-sample: 4 clicks a sample
    first_lines = _until_stop(first)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    run_id = first_lines[0].split()[1]
    second_lines = _finish(_loop(*common, *remote, "--resume", run_id))

    local_report, local_summary = _results(local_folder)
    remote_report, remote_summary = _results(tmp_path / "remote")
    assert len(local_report) == 3 * 4
    pd.testing.assert_frame_equal(local_report, remote_report)
    assert local_summary == remote_summary

    # The resumed process passed the method the logits the killed one submitted last: the sequence of
    # previous_logits (their digests) is the local one, the interaction the kill interrupted served again.
    local_previous = [line for line in local_lines if line.startswith("PREVIOUS")]
    killed = [line for line in first_lines if line.startswith("PREVIOUS")]
    resumed = [line for line in second_lines if line.startswith("PREVIOUS")]
    again = 1 if stop_at == "before-submit" else 0  # the unsubmitted interaction is served again
    assert killed + resumed[again:] == local_previous
    assert resumed[0] != "PREVIOUS -", "the resumed process starts mid-sample: it needs the previous logits"


@pytest.fixture(scope="session")
def tiny_sam_checkpoint(tmp_path_factory) -> Path:
    from tests.segmenters.conftest import write_tiny_sam_checkpoint

    return write_tiny_sam_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny_sam.pth", seed=0)


@pytest.fixture(scope="module")
def local_run(grabcut3, tiny_sam_checkpoint, tmp_path_factory) -> tuple[Path, list[str]]:
    """The loop run locally (its own process too), once for the module: (output folder, printed lines)."""
    folder = tmp_path_factory.mktemp("local")
    common = ["--method", "sam", "--checkpoint", str(tiny_sam_checkpoint), "--dataset", str(grabcut3)]
    return folder, _finish(_loop(*common, "--out", str(folder)))
