"""Corrective-click campaigns (issues 17, 34): does each round of corrections improve the masks, per model, against a
no-update baseline measured in the same run and beside seed 001's reported figures; and what the model updates cost
the pipeline against the timed click study on the same machine in the same run.

Ours: GrabCut imported through the real service, one corrective study per model (box start, 3 rounds x up to 4
clicks), each worked by seed 001's simulated annotators (``AnnotatorSimulator.seed_001``: 3 px click noise, error
regions of 10 x 10 px or more chosen in proportion to their area, region centres, the largest region first) through
the same services as the annotator API (``collector.services.corrective_simulation``; model updates inline in this
process, i.e. what one ``models`` worker does). Printed per model: the mean IoU with the ground truth of every
instance's mask in effect after round r (``report.json``'s ``miou_after_round``), r = 0 (the box start) .. 3, and the
gain of each round.

Models: ``embedded`` (the default, no weights: seed 001's Mb+c, one GrabCut on the corrected mask and every click so
far, ``segmenters.embedded.EmbeddedPredictor._round``); ``embedded, click by click`` (the same segmenter fed the
round's clicks one at a time after a box "anchor" click, the update before issue 34, kept here as a second
baseline); and every entry of the site's ``SEGMENTER_CHECKPOINTS`` (SAM, SimpleClick, RITM checkpoints: the
corrected mask goes in as their prior input), or the reason it cannot run here.

Baselines, same run, same instances: "no update" (the box start kept: what the corrections add); the timed click
study (RClicks) for throughput: each simulated worker's batch is started, one click per trial is recorded, the batch
is finished and validated (``session_validate``), as the default queue would.

    .venv/bin/python bench/bench_corrective.py [--instances 21] [--seed 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_player_setup import GRABCUT_ROOT, bench_environment  # noqa: E402
from django.conf import settings  # noqa: E402

from collector.selectors.corrective_quality import QualityModelError, quality_ranking  # noqa: E402
from collector.services.corrective_simulation import corrective_simulate  # noqa: E402
from collector.services.datasets import dataset_import  # noqa: E402
from collector.services.studies import study_create, study_publish  # noqa: E402
from exports.corrective import corrective_export  # noqa: E402
from segmenters.base import Predictor  # noqa: E402
from segmenters.embedded import EmbeddedPredictor  # noqa: E402
from segmenters.registry import register  # noqa: E402
from tests.factories import make_validated_batch  # noqa: E402

#: Seed 001's own figures (COCO, its convnet Mb / Mb+c; not the same images, model or annotators): §3.2.1 the box
#: start Mb at 65 % mIoU, §3.2.2 region clicks at 80 % after three rounds of 3 clicks in simulation ("clear
#: improvements in every round"), §5.3 84 % after three rounds of up to 4 clicks by its human annotators.
SEED_001 = "seed 001 (COCO, its convnets): start 0.65, 0.80 after 3 simulated rounds of 3 clicks (+0.15), 0.84 after 3 human rounds of 4"
ROUNDS = 3


class ClickByClickEmbedded(EmbeddedPredictor):
    """The embedded segmenter as corrective rounds used it before issue 34: the base class's click-model round
    (one click at a time, each with every click so far) after a box anchor click."""

    name = "bench-embedded-click-by-click"
    needs_anchor_click = True
    _round = Predictor._round


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _campaign(dataset, *, segmenter: str, batch: int, sessions: int, seed: int, label: str) -> dict:
    study = study_create(name=f"bench corrective {label}", dataset=dataset, kind="corrective", batch_size=batch,
                         quota_pc=1, quota_mobile=0, next_round_segmenter=segmenter,
                         session_timeout_s=batch * ROUNDS * 60)  # fmt: skip
    study_publish(study_id=study.pk)
    result = corrective_simulate(study_id=study.pk, seed=seed, max_sessions=sessions)
    with tempfile.TemporaryDirectory() as out:
        report = corrective_export(study_id=study.pk, out_dir=out).report
    miou = [report["miou_after_round"].get(str(r)) for r in range(ROUNDS + 1)]
    return {"study": study, "result": result, "report": report, "miou": miou}


def _line(label: str, miou: list) -> str:
    figures = ", ".join("—" if v is None else f"{v:.3f}" for v in miou)
    gains = ", ".join("—" if a is None or b is None else f"{b - a:+.3f}" for a, b in zip(miou, miou[1:]))
    return f"  {label:<34} {figures}   (gain per round {gains})"


def _checkpoint_models() -> list[tuple[str, str]]:
    """(key, why it cannot run or "") of every SEGMENTER_CHECKPOINTS entry."""
    from segmenters.base import SegmenterError
    from segmenters.checkpoints import segmenter_choice
    from segmenters.registry import get_predictor

    models = []
    for key in settings.SEGMENTER_CHECKPOINTS:
        try:
            choice = segmenter_choice(key, settings.SEGMENTER_CHECKPOINTS)
            get_predictor(
                choice.predictor, **choice.options(checkpoint_dir=str(settings.SEGMENTER_CHECKPOINT_DIR))
            )
            models.append((key, ""))
        except SegmenterError as error:
            models.append((key, str(error)))
    return models


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=21, help="Instances (one object per GrabCut image).")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    register(ClickByClickEmbedded.name)(ClickByClickEmbedded)

    with bench_environment("corrective"):
        dataset = dataset_import(path=GRABCUT_ROOT, layout="grabcut", name="GrabCut").dataset
        batch = min(args.instances, 10)
        sessions = -(-args.instances // batch)
        runs = {}
        for label, segmenter in (("embedded (default, Mb+c)", "embedded"),
                                 ("embedded, click by click (before)", ClickByClickEmbedded.name)):  # fmt: skip
            runs[label] = _campaign(dataset, segmenter=segmenter, batch=batch, sessions=sessions, seed=args.seed,
                                    label=label)  # fmt: skip
        skipped = []
        for key, why in _checkpoint_models():
            if why:
                skipped.append(f"  {key}: not run: {why}")
            else:
                runs[key] = _campaign(dataset, segmenter=key, batch=batch, sessions=sessions, seed=args.seed,
                                      label=key)  # fmt: skip
        default = runs["embedded (default, Mb+c)"]
        try:
            ranking = quality_ranking(study_id=default["study"].pk)
        except QualityModelError as error:
            ranking, refused = None, str(error)

        timed = study_create(name="bench timed", dataset=dataset, batch_size=batch, quota_pc=1, quota_mobile=0,
                             min_valid_per_session=1)  # fmt: skip
        timed = study_publish(study_id=timed.pk)
        started, targets = time.perf_counter(), 0
        for _ in range(sessions):
            targets += make_validated_batch(timed, device="pc").trials.count()
        baseline_per_min = targets / (time.perf_counter() - started) * 60

    result, report = default["result"], default["report"]
    print(f"corrective campaigns on GrabCut: {result.items} instances per model, box start, {ROUNDS} rounds x up to 4 "
          f"clicks, seed 001's simulated annotators (seed {args.seed})")  # fmt: skip
    print("mean IoU with the ground truth after round 0 (box start) .. 3, every instance's mask in effect:")
    start = default["miou"][0]
    print(_line("no update (baseline: box start kept)", [start] * (ROUNDS + 1)))
    for label, run in runs.items():
        print(_line(label, run["miou"]))
    for line in skipped:
        print(line)
    if not settings.SEGMENTER_CHECKPOINTS:
        print(
            "  SAM / SimpleClick / RITM: not run: SEGMENTER_CHECKPOINTS names no checkpoint on this machine"
        )
    final = default["miou"][ROUNDS]
    print(f"  ratio after round {ROUNDS}, default / no update: {final / start:.3f} (+{final - start:.3f})")
    print(f"  {SEED_001}")
    latencies = result.update_seconds
    print(
        f"model-update latency (embedded, {result.updates} updates): p50 {statistics.median(latencies):.2f} s, "
        f"p95 {_percentile(latencies, 95):.2f} s, max {max(latencies):.2f} s"
    )
    print(
        f"states {report['states']}; clicks {report['clicks']}; clicks per round {report['clicks_per_round']}"
    )
    if ranking is None:
        print(f"quality model Mr: {refused}")
    else:
        cv = ranking.cv
        print(f"quality model Mr: held-out Spearman {ranking.spearman} on {len(ranking.heldout)}; cross-validated "
              f"{cv.mean:.3f} ± {cv.sd:.3f} over {ranking.n_with_truth}. {ranking.verdict}")  # fmt: skip
    ours_per_min = result.items / result.wall_seconds * 60
    print(
        f"throughput: corrective {ours_per_min:.1f} instances/min; timed study {baseline_per_min:.1f} targets/min"
    )
    print(f"ratio corrective / timed: {ours_per_min / baseline_per_min:.3f}")


if __name__ == "__main__":
    main()
