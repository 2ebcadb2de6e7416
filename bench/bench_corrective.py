"""Corrective-click campaigns (issue 17): model-update latency between rounds and the pipeline's throughput
with simulated annotators, against the timed click study on the same machine in the same run.

Ours: GrabCut imported through the real service, a corrective study (box start, 3 rounds x up to 4 clicks,
embedded segmenter), worked by the seed-001 simulator through the same services as the annotator API
(``collector.services.corrective_simulation``, model updates inline in this process, i.e. what one ``models``
worker does). Printed: the model-update latency per update (p50/p95, s; the box start and each round's update),
instances finished per minute of wall time (no human time: the pipeline's own cost), and the mIoU per round.

Baseline, same run, same images: the timed click study (RClicks): each simulated worker's batch is started,
one click per trial is recorded, the batch is finished and validated (``session_validate``), as the default
queue would. Printed: targets finished per minute, and the ratio ours / baseline (a corrective instance costs
1 + 3 model runs, a timed target none, so the ratio says what the model costs the pipeline).

    .venv/bin/python bench/bench_corrective.py [--instances 10] [--seed 0]
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

from collector.services.corrective_simulation import corrective_simulate  # noqa: E402
from collector.services.datasets import dataset_import  # noqa: E402
from collector.services.studies import study_create, study_publish  # noqa: E402
from exports.corrective import corrective_export  # noqa: E402
from exports.corrective_quality import quality_ranking  # noqa: E402
from tests.factories import make_validated_batch  # noqa: E402


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=10, help="Instances (one object per GrabCut image).")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    with bench_environment("corrective"):
        dataset = dataset_import(path=GRABCUT_ROOT, layout="grabcut", name="GrabCut").dataset
        batch = min(args.instances, 10)
        sessions = -(-args.instances // batch)

        corrective = study_create(
            name="bench corrective",
            dataset=dataset,
            kind="corrective",
            batch_size=batch,
            quota_pc=1,
            quota_mobile=0,
        )
        study_publish(study_id=corrective.pk)
        result = corrective_simulate(study_id=corrective.pk, seed=args.seed, max_sessions=sessions)
        with tempfile.TemporaryDirectory() as out:
            report = corrective_export(study_id=corrective.pk, out_dir=out).report
        ranking = quality_ranking(study_id=corrective.pk, holdout=0.3, seed=args.seed)
        ours_per_min = result.items / result.wall_seconds * 60

        timed = study_create(
            name="bench timed",
            dataset=dataset,
            batch_size=batch,
            quota_pc=1,
            quota_mobile=0,
            min_valid_per_session=1,
        )
        timed = study_publish(study_id=timed.pk)
        started, targets = time.perf_counter(), 0
        for _ in range(sessions):
            session = make_validated_batch(timed, device="pc")
            targets += session.trials.count()
        baseline_wall = time.perf_counter() - started
        baseline_per_min = targets / baseline_wall * 60

    latencies = result.update_seconds
    print(
        f"corrective campaign: {result.items} instances, {result.updates} model updates in {result.wall_seconds:.1f} s"
    )
    print(
        f"model-update latency (embedded, GrabCut): p50 {statistics.median(latencies):.2f} s, "
        f"p95 {_percentile(latencies, 95):.2f} s, max {max(latencies):.2f} s"
    )
    print(
        "mIoU per round (mask after round r):",
        {k: round(v, 3) for k, v in report["miou_per_round"].items() if v},
    )
    print(f"final mIoU {report['final_miou']:.3f}; states {report['states']}; clicks {report['clicks']}")
    rho = "undefined" if ranking.spearman is None else f"{ranking.spearman:.3f}"
    print(f"quality model Mr: Spearman vs true IoU on {len(ranking.heldout)} held-out instances {rho}")
    print(
        f"throughput: corrective {ours_per_min:.1f} instances/min; timed study {baseline_per_min:.1f} targets/min"
    )
    print(f"ratio corrective / timed: {ours_per_min / baseline_per_min:.3f}")


if __name__ == "__main__":
    main()
