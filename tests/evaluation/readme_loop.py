"""The benchmark README's session loop as a user runs it, in a process of its own (tests/evaluation/test_resume.py).

    python -m tests.evaluation.readme_loop --method sam --checkpoint tiny.pth --dataset FOLDER --out DIR
        [--host URL --key KEY [--resume RUN_ID]] [--stop-after N --stop-at before-submit|after-submit]

Locally (no ``--host``) it reads the dataset folder; remotely it names the server's dataset ``GrabCut``. With
``--stop-after N`` it prints ``STOP`` at the N-th interaction (before or after its submission) and waits to be
killed. At the end it writes ``report.csv`` and ``summary.json`` into ``--out``. It prints ``RUN <id>`` as soon
as a remote run exists, and ``PREVIOUS <sha256>`` of every ``previous_logits`` it passes on (None: ``-``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np


def predictor_for(method: str, checkpoint: str | None):
    from segmenters.registry import get_predictor

    if method == "sam":
        import torch

        from tests.segmenters.conftest import TINY_SAM

        torch.set_num_threads(1)  # the same arithmetic in every process that runs the loop
        return get_predictor("sam", checkpoint=checkpoint, architecture=TINY_SAM, device="cpu")
    return get_predictor("embedded", work_long_side_px=96, grabcut_iterations=1)


def digest(logits) -> str:
    if logits is None:
        return "-"
    array = getattr(logits, "probabilities", logits)  # IsegmState carries its array
    return hashlib.sha256(np.ascontiguousarray(np.asarray(array)).tobytes()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--method", default="sam")
    parser.add_argument("--checkpoint")
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--host")
    parser.add_argument("--key")
    parser.add_argument("--resume")
    parser.add_argument("--max-clicks", type=int, default=4)
    parser.add_argument("--stop-after", type=int)
    parser.add_argument("--stop-at", choices=("before-submit", "after-submit"), default="after-submit")
    args = parser.parse_args(argv)

    from benchmark.datasets import open_dataset
    from benchmark.session import ClickSession

    predictor = predictor_for(args.method, args.checkpoint)
    if args.host:
        where = dict(host=args.host, key=args.key, dataset="GrabCut", resume=args.resume)
    else:
        where = dict(dataset=open_dataset(args.dataset, "grabcut"))
    interactions = 0

    def stop_here(at: str) -> None:
        if interactions == args.stop_after and args.stop_at == at:
            print("STOP", flush=True)
            time.sleep(3600)  # the test kills this process now

    # The README's loop (benchmark/README.md, "Session API"), unchanged between local and remote.
    with ClickSession(clicker="baseline", max_clicks=args.max_clicks, seed=0, **where) as sess:
        if args.host:
            print(f"RUN {sess.run_id}", flush=True)
        embedding = None
        while sess.next():
            sample, clicks, is_new = sess.get_clicks(only_last=False)
            if is_new:
                embedding = predictor.encode(sample.load_image())
            print(f"PREVIOUS {digest(sess.previous_logits)}", flush=True)
            prediction = predictor.predict(embedding, clicks, sess.previous_logits)
            interactions += 1
            stop_here("before-submit")
            sess.submit_masks(prediction)
            stop_here("after-submit")
    args.out.mkdir(parents=True, exist_ok=True)
    sess.get_report().to_csv(args.out / "report.csv", index=False)
    (args.out / "summary.json").write_text(json.dumps(sess.get_global_summary(), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
