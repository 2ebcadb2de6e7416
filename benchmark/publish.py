"""``python -m benchmark publish RUN_DIR``: put a local ``benchmark run`` result on an evaluation server's leaderboard.

    python -m benchmark publish var/benchmark-runs/embedded/GrabCut --host https://clicklab.example --key ek_...
        [--benchmark SLUG]

``RUN_DIR`` is a run folder (``<out>/<method>/<dataset>/``, with ``summary.json``) or an ``--out`` folder (every
run folder under it is published). The server shows the run as "local, unverified", with its provenance
(dataset content hash, checkpoint sha256, seed, code version: all in ``summary.json``) and, when
``timing.json`` is there, its quality-against-time curve. With ``--benchmark`` it joins that published
benchmark's board, if it follows the benchmark's protocol (clicks, seed, groups, click model; the server says
which value differs otherwise); without it, the publisher's own board. Publishing a run again changes nothing.
``--host`` and ``--key`` default to the environment variables ``CLICKLAB_EVAL_HOST`` and ``CLICKLAB_EVAL_KEY``.
Talks HTTP only (httpx); no Django.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def run_folders(path: Path) -> list[Path]:
    """The run folders ``path`` names: itself if it holds a summary.json, else every ``*/*/`` below it that does."""
    if (path / "summary.json").is_file():
        return [path]
    return sorted(p.parent for p in path.glob("*/*/summary.json"))


def _nulls(value):
    """JSON has no NaN: an undefined figure (NaN in summary.json) goes as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _nulls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nulls(v) for v in value]
    return value


def payload(folder: Path, benchmark: str | None) -> dict:
    """What ``POST /api/eval/local-runs/`` takes for the run folder ``folder``."""
    body = {"summary": _nulls(json.loads((folder / "summary.json").read_text(encoding="utf-8")))}
    if (folder / "timing.json").is_file():
        body["timing"] = _nulls(json.loads((folder / "timing.json").read_text(encoding="utf-8")))
    if benchmark:
        body["benchmark"] = benchmark
    return body


def main(argv: Sequence[str] | None = None, *, transport=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmark publish", description=__doc__.splitlines()[0])
    parser.add_argument(
        "run_dir", type=Path, help="a run folder (<out>/<method>/<dataset>) or an --out folder"
    )
    parser.add_argument(
        "--host", default=os.environ.get("CLICKLAB_EVAL_HOST"), help="the evaluation server's URL"
    )
    parser.add_argument(
        "--key", default=os.environ.get("CLICKLAB_EVAL_KEY"), help="your evaluation key (ek_...)"
    )
    parser.add_argument("--benchmark", help="a published benchmark's slug (default: your own board)")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not args.host or not args.key:
        print("error: publish needs --host URL and --key ek_... (or CLICKLAB_EVAL_HOST and CLICKLAB_EVAL_KEY); "
              "create a key on the server's leaderboard page (Evaluation keys).", file=sys.stderr)  # fmt: skip
        return 2
    folders = run_folders(args.run_dir)
    if not folders:
        print(f"error: {args.run_dir} holds no summary.json (nor */*/summary.json): give the folder python -m "
              "benchmark run wrote, e.g. var/benchmark-runs/<method>/<dataset>.", file=sys.stderr)  # fmt: skip
        return 2
    import httpx

    from benchmark.remote import remote_error

    headers = {"Authorization": f"EvalKey {args.key}", "User-Agent": "clicklab-publish/1"}
    failed = 0
    with httpx.Client(
        base_url=args.host.rstrip("/"), headers=headers, timeout=60, transport=transport
    ) as client:
        for folder in folders:
            try:
                response = client.post("/api/eval/local-runs/", json=payload(folder, args.benchmark))
            except httpx.HTTPError as exc:
                print(f"error: {folder}: {args.host} did not answer ({exc}).", file=sys.stderr)
                return 2
            if response.status_code >= 400:
                refusal = remote_error(response)
                print(
                    f"error: {folder}: the server refused it ({refusal})",
                    file=sys.stderr,
                )
                failed += 1
                continue
            run = response.json()
            where = f"benchmark {run['benchmark']}" if run.get("benchmark") else "your runs"
            verb = "published" if response.status_code == 201 else "already published"
            print(f"{verb}: {run['method']} on {run['dataset']} ({run['source']}, {where}): "
                  f"{args.host.rstrip('/')}{run['url']}")  # fmt: skip
    return 1 if failed else 0
