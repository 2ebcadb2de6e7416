"""``python -m benchmark <subcommand>``: run the RClicks benchmark, train or analyse the click model.

Subcommands:

* ``run``: evaluate a registered segmenter on a dataset folder (see ``benchmark/README.md``);
* ``train-clickability``: delegates to ``benchmark.clickability.train.main(argv)``;
* ``analyze``: delegates to ``benchmark.analyses.main(argv)``;
* ``publish``: delegates to ``benchmark.publish.main(argv)`` (a run folder to an evaluation server's leaderboard).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmark.datasets import (
    LAYOUTS,
    Dataset,
    DatasetError,
    dataset_content_hash,
    guess_layout,
    open_dataset,
)
from benchmark.engine import (
    EngineConfig,
    EngineError,
    RunSpec,
    build_click_model,
    load_results,
    run_celery,
    run_local,
)
from benchmark.provenance import code_version

logger = logging.getLogger(__name__)

DEFAULT_OUT = Path("var") / "benchmark-runs"


def equal_mass_groups(count: int) -> tuple[tuple[float, float], ...]:
    """``count`` clicking groups of equal probability mass: (k/count, (k+1)/count), k = 0..count-1."""
    return tuple((k / count, (k + 1) / count) for k in range(count))


def _legacy_content_hash(dataset: Dataset) -> str:
    """The run folders' content hash before ``benchmark.datasets.dataset_content_hash`` (blake2b, 32 hex digits
    of the files with their relative paths): read only to accept a run folder made by an earlier release."""
    digest = hashlib.blake2b(digest_size=16)
    root = Path(dataset.root)
    for path in sorted({p for sample in dataset.samples for p in (sample.image_path, sample.mask_path)}):
        try:
            relative = str(Path(path).relative_to(root))
        except ValueError:
            relative = str(path)
        digest.update(relative.encode("utf-8") + b"\x00")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\x00")
    keys = [(s.key.image_stem, s.key.object_stem, s.object_id, s.max_side) for s in dataset.samples]
    digest.update(json.dumps(keys).encode())
    return digest.hexdigest()


def claim_run_dir(run_dir: Path, dataset: Dataset, content_hash: str) -> None:
    """Record which dataset ``run_dir`` belongs to; refuse a dataset with the same name but other content."""
    identity_path = run_dir / "dataset.json"
    here = str(Path(dataset.root).resolve())
    if identity_path.is_file():
        known = json.loads(identity_path.read_text(encoding="utf-8"))
        if len(str(known.get("hash"))) == 32 and known.get("hash") == _legacy_content_hash(dataset):
            known["hash"] = content_hash  # a folder of an earlier release: the same content, the new hash
            identity_path.write_text(json.dumps({**known, "path": here}, indent=1), encoding="utf-8")
        if known.get("hash") != content_hash:
            raise EngineError(
                f"{run_dir} holds the results of dataset {known.get('path')} (content {known.get('hash')}), "
                f"not of {here} (content {content_hash}), although both are named {dataset.name!r}. "
                f"Pass --name to give this dataset its own name (e.g. --name {dataset.name}-{content_hash[:8]}) "
                "or --out another folder."
            )
        if known.get("path") == here:
            return
    run_dir.mkdir(parents=True, exist_ok=True)
    identity = {"name": dataset.name, "layout": dataset.layout, "path": here, "hash": content_hash}
    identity_path.write_text(json.dumps(identity, indent=1), encoding="utf-8")


def _parse_option(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(
            f"--option {text!r}: use KEY=VALUE, e.g. --option work_long_side_px=384"
        )
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def build_run_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--method", required=True, help="registered segmenter name (segmenters.registry)")
    parser.add_argument("--option", action="append", type=_parse_option, default=[], metavar="KEY=VALUE",
                        help="predictor option (JSON value), repeatable")  # fmt: skip
    parser.add_argument("--dataset", required=True, type=Path, help="dataset folder")
    parser.add_argument(
        "--layout", choices=LAYOUTS, help="dataset layout (guessed from the folder if omitted)"
    )
    parser.add_argument(
        "--name",
        help="dataset name in reports, in the clicks CSV and in the run folder (default: the layout's); "
        "a run folder belongs to one dataset content",
    )
    parser.add_argument("--max-side", type=int, help="long-side limit of loaded images (TETRIS: 2048)")
    parser.add_argument(
        "--clicks", type=Path, help="RClicks clicks.csv: real first clicks for User/Sample IoU@1"
    )
    parser.add_argument(
        "--export",
        type=Path,
        help="a Clicklab RClicks export (its folder or rclicks.zip): its real first clicks for User/Sample "
        "IoU@1; the dataset's name and layout come from its manifest, and the folder must hold the content "
        "the export names (its content hash)",
    )
    parser.add_argument("--device", choices=("pc", "mobile"), help="use only the real clicks of this device")
    parser.add_argument(
        "--click-model", help="clickability model for the groups: uniform, dt, sm, si or a checkpoint"
    )
    parser.add_argument(
        "--groups", type=int, default=10, help="clicking groups of equal mass (0: baseline only)"
    )
    parser.add_argument(
        "--samples-per-group", type=int, default=1, help="trajectories per group and instance"
    )
    parser.add_argument(
        "--halves", action="store_true", help="also sample the merged halves for the paper's ΔHH"
    )
    parser.add_argument("--max-clicks", type=int, default=20)
    parser.add_argument("--threshold", type=float, help="probability threshold (default: the predictor's)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--common-random-numbers", action="store_true",
                        help="one random stream shared by all groups of an instance (as the reference)")  # fmt: skip
    parser.add_argument("--no-base", action="store_true", help="skip the baseline clicker")
    parser.add_argument("--ritm-float-quirk", action="store_true", help="NoC thresholds as RITM's floats")
    parser.add_argument("--limit", type=int, help="only the first N instances (quick runs)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})"
    )
    parser.add_argument("--workers", type=int, default=1, help="local processes")
    parser.add_argument("--celery", action="store_true", help="fan out over the Celery workers instead")
    parser.add_argument("--broker", default=os.environ.get("CELERY_BROKER_URL"), help="Celery broker URL")
    parser.add_argument("--celery-queue", default="models")
    parser.add_argument("--celery-timeout", type=float, help="seconds to wait for the workers")
    parser.add_argument("--heatmaps", type=int, default=4, help="click heatmap PNGs to draw (0: none)")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def _real_first_clicks(
    path: Path, dataset: Dataset, device: str | None, *, csv_name: str | None = None
) -> dict:
    """Per instance key, the real first clicks of ``path`` (float (n, 2) in loaded-image pixels).

    ``csv_name``: the ``dataset`` value of the rows to take when it differs from ``dataset.name`` (an export's
    dataset opened under another ``--name``).

    Raises:
      EngineError: no first-round click of the CSV matches an instance of ``dataset``: the run would give no
        User/Sample IoU@1, which is what the clicks were passed for.
    """
    from benchmark.rclicks import group_tasks, read_clicks_csv

    frame = read_clicks_csv(path, device=device)
    if csv_name is not None and csv_name != dataset.name:
        frame.loc[frame["dataset"] == csv_name, "dataset"] = dataset.name
    real: dict = {}
    for task in group_tasks(frame, dataset):
        if task.click_type == "first":
            previous = real.get(task.key)
            real[task.key] = (
                task.clicks_xy if previous is None else np.concatenate([previous, task.clicks_xy])
            )
    if not real:
        first = frame[frame["click_type"] == "first"]
        names = sorted(set(first["dataset"]))
        found = (
            f"its {len(first)} first-round rows{f' of device {device}' if device else ''} name the dataset(s) {names}"
            if len(first)
            else f"it has no first-round rows{f' of device {device}' if device else ''}"
        )
        raise EngineError(
            f"{path}: no first-round click matches an instance of dataset {dataset.name!r} at {dataset.root} "
            f"({found}), so User and Sample IoU@1 cannot be computed. Pass the folder those clicks were made on, "
            "and --name with the CSV's dataset name (or --export with the whole export, whose manifest names "
            "it); or leave out --clicks to run without real clicks."
        )
    return real


def _export_layout(args: argparse.Namespace, export) -> str:
    layouts = sorted({entry.layout for entry in export.datasets if entry.layout})
    if args.layout:
        return args.layout
    return layouts[0] if len(layouts) == 1 else guess_layout(args.dataset)


def _open_with_clicks(
    args: argparse.Namespace, stack: contextlib.ExitStack
) -> tuple[Dataset, str, dict, dict]:
    """The dataset, its content hash, the real first clicks (``--clicks``/``--export``) and what the summary
    records about where they came from."""
    from benchmark.rclicks import open_export

    if args.export is None:
        layout = args.layout or guess_layout(args.dataset)
        dataset = open_dataset(args.dataset, layout, name=args.name, max_side=args.max_side)
        content_hash = dataset_content_hash(dataset)
        real = _real_first_clicks(args.clicks, dataset, args.device) if args.clicks else {}
        source: dict = {"clicks": str(args.clicks)} if args.clicks else {}
        return dataset, content_hash, real, source
    if args.clicks:
        raise EngineError("pass --export (a whole export) or --clicks (a clicks CSV), not both.")
    export = stack.enter_context(open_export(args.export))
    single = export.datasets[0].name if len(export.datasets) == 1 else None
    layout = _export_layout(args, export)
    dataset = open_dataset(args.dataset, layout, name=args.name or single, max_side=args.max_side)
    content_hash = dataset_content_hash(dataset)
    entry = export.dataset_for(content_hash=content_hash, folder=Path(args.dataset))
    if args.name is None and dataset.name != entry.name:
        dataset = open_dataset(args.dataset, layout, name=entry.name, max_side=args.max_side)
    real = _real_first_clicks(export.clicks_csv, dataset, args.device, csv_name=entry.name)
    source = {
        "export": str(args.export),
        "export_dataset": entry.name,
        "export_content_hash": entry.content_hash,
        "export_studies": list(entry.studies),
    }
    return dataset, content_hash, real, source


def run(args: argparse.Namespace) -> int:
    """The ``run`` subcommand; returns the exit code."""
    from benchmark import plots, report

    with contextlib.ExitStack() as stack:
        dataset, content_hash, real, clicks_source = _open_with_clicks(args, stack)
    samples = dataset.samples[: args.limit] if args.limit else dataset.samples
    if args.groups < 0:
        raise EngineError(f"--groups {args.groups}: use 0 (baseline only) or a positive number of groups.")
    if args.groups and not args.click_model:
        raise EngineError(
            "--groups needs --click-model: a trained clickability checkpoint (python -m benchmark "
            "train-clickability) or a baseline name (uniform, dt, sm, si); or pass --groups 0."
        )
    build_click_model(args.click_model if args.groups else None)  # fail fast on a bad name/path
    config = EngineConfig(
        max_clicks=args.max_clicks,
        threshold=args.threshold,
        group_bounds=equal_mass_groups(args.groups) if args.groups else (),
        samples_per_group=args.samples_per_group,
        halves=args.halves,
        seed=args.seed,
        common_random_numbers=args.common_random_numbers,
        run_base=not args.no_base,
    )
    run_dir = args.out / args.method / dataset.name
    claim_run_dir(run_dir, dataset, content_hash)
    spec = RunSpec(
        method=args.method,
        predictor_options=dict(args.option),
        click_model=args.click_model if args.groups else None,
        config=config,
        out_dir=str(run_dir),
    )
    progress_bar = None
    if not args.no_progress:
        from tqdm import tqdm

        progress_bar = tqdm(total=len(samples), desc=f"{args.method} on {dataset.name}", unit="instance")
    update = progress_bar.update if progress_bar else None
    try:
        if args.celery:
            if not args.broker:
                raise EngineError(
                    "--celery needs --broker URL or the CELERY_BROKER_URL environment variable."
                )
            run_celery(spec=spec, samples=samples, real_clicks=real, broker_url=args.broker,
                       queue=args.celery_queue, timeout_seconds=args.celery_timeout, progress=update)  # fmt: skip
        else:
            run_local(spec=spec, samples=samples, real_clicks=real, workers=args.workers, progress=update)
    finally:
        if progress_bar:
            progress_bar.close()

    wanted = {sample.key for sample in samples}
    results = [r for r in load_results(run_dir) if r.key in wanted]
    summary = report.summarize(results, ritm_float_quirk=args.ritm_float_quirk)
    summary["config"] = json.loads(config.fingerprint())
    summary["dataset_path"] = str(Path(dataset.root).resolve())
    summary["dataset_hash"] = content_hash
    summary["clicks_source"] = clicks_source
    # which weights made the masks (segmenters.provenance): one model per run folder
    summary["model_ids"] = sorted({r.model_id for r in results})
    summary["checkpoint_sha256"] = sorted({r.checkpoint_sha256 for r in results})
    summary["click_model"] = args.click_model if args.groups else None  # a name, or the checkpoint given
    summary["code_version"] = code_version()
    stored, timing = report.split_timing(summary)  # wall times apart: summary.json is reproducible
    (run_dir / "summary.json").write_text(json.dumps(stored, indent=1), encoding="utf-8")
    (run_dir / "timing.json").write_text(json.dumps(timing, indent=1), encoding="utf-8")
    plots.plot_miou_curves(summary, run_dir / "miou_vs_clicks.png")
    plots.plot_time_curves(summary, run_dir / "miou_vs_time.png")
    if args.heatmaps:
        by_key = {sample.key: sample for sample in samples}
        plots.plot_heatmaps(results, by_key, run_dir / "heatmaps", limit=args.heatmaps)
    rows = _all_summaries(args.out)
    csv_path, md_path = report.write_report(rows, args.out)
    report.write_timing(_all_summaries(args.out, "timing.json"), args.out)
    print(report.to_markdown(report.table([summary])), end="")
    timed = [f"{label} {summary[key]:.3f}" for key, label in (("time_auc_base", "Base"), ("time_auc_sample", "Sample"))
             if key in summary]  # fmt: skip
    if timed:
        print(f"mIoU against method time, AUC: {', '.join(timed)} (curves in {run_dir / 'timing.json'}, "
              f"{run_dir / 'miou_vs_time.png'})")  # fmt: skip
    print(f"Per-instance arrays: {run_dir / 'instances'}\nReport: {csv_path} and {md_path}")
    return 0


def _all_summaries(out: Path, name: str = "summary.json") -> list[dict]:
    """Every ``<out>/<method>/<dataset>/<name>`` (the report covers all runs in ``out``)."""
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(out.glob(f"*/*/{name}"))]


def _delegate(module_name: str, argv: Sequence[str]) -> int:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        print(f"{module_name} is not available ({error}).", file=sys.stderr)
        return 2
    return int(module.main(list(argv)) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmark", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build_run_parser(sub.add_parser("run", help="evaluate a segmenter on a dataset"))
    sub.add_parser("train-clickability", help="train the clickability model", add_help=False)
    sub.add_parser("analyze", help="click-model and display-mode analyses", add_help=False)
    sub.add_parser("publish", help="put a run on an evaluation server's leaderboard", add_help=False)
    if argv and argv[0] == "publish":
        return _delegate("benchmark.publish", argv[1:])
    if argv and argv[0] == "train-clickability":
        return _delegate("benchmark.clickability.train", argv[1:])
    if argv and argv[0] == "analyze":
        return _delegate("benchmark.analyses", argv[1:])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    previous = _stop_on_sigterm()
    try:
        return run(args)
    except (DatasetError, EngineError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        signum = _STOPPED_BY.get("signal", signal.SIGINT)
        print(
            f"stopped by {signal.Signals(signum).name}: the worker processes were stopped and the finished "
            "instance files kept; run the same command again to resume.",
            file=sys.stderr,
        )
        return 128 + int(signum)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


_STOPPED_BY: dict = {}


def _stop_on_sigterm():
    """Turn SIGTERM into KeyboardInterrupt (as Ctrl-C), so both stop the run and its workers the same way.

    Only in the main thread (signal handlers cannot be set elsewhere); returns the previous handler.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    _STOPPED_BY.clear()

    def handler(signum, frame):
        _STOPPED_BY["signal"] = signum
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)
