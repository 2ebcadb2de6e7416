"""What both exports say about where their rows come from: the datasets (name, layout, content hash) and, per
study, the rules its rounds were built with.

The RClicks export writes it into ``manifest.json``; the full export beside its file
(``<file>.manifest.json``) and, for Parquet, into the file's key-value metadata (key :data:`PARQUET_KEY`), so a
downloaded file carries it. ``python -m benchmark run --export`` reads the dataset name and content hash from it
(``benchmark.rclicks.open_export``).

``datasets``: one entry per dataset of the exported studies::

    {"name": "GrabCut", "layout": "grabcut", "content_hash": "<64 hex>", "studies": [3, 5]}

``name`` is the ``dataset`` column value; ``content_hash`` is ``benchmark.datasets.dataset_content_hash`` of
the folder the dataset was imported from (computed from what the import stored,
``collector.selectors.datasets``).

Per study, ``round_rules``: ``min_error_area_px`` (error-region components smaller than that were dropped
and regions left smaller got no target: ``benchmark.rclicks.task_error_regions``), ``next_round_segmenter``
(the setting: a key of ``SEGMENTER_CHECKPOINTS``, ``embedded``, or "" for the site default) and ``models``, the
segmenters that made the study's previous masks as its targets record them (model token, RClicks
``model_type``, model id, variant, checkpoint sha256); ``batch_rule`` (``study_batch_rule``), which batches
counted.
"""

from __future__ import annotations

from collections.abc import Iterable

from benchmark.stems import rclicks_model_type
from collector.models import Study
from collector.selectors.datasets import dataset_content_hash_stored
from exports.selectors import ExportTarget, export_dataset_name

FORMAT_VERSION = 2
PARQUET_KEY = b"clicklab_manifest"


def target_model(target: ExportTarget) -> dict[str, str]:
    """The model that made a target's previous mask, as the manifests name it."""
    return {
        "model_name": target.model_type,
        "model_type": rclicks_model_type(target.model_type),
        "model_id": target.model_id,
        "model_variant": target.model_variant,
        "checkpoint_sha256": target.checkpoint_sha256,
    }


def _round_rules(study: Study, targets: Iterable[ExportTarget]) -> dict:
    models: dict[tuple, dict[str, str]] = {}
    for target in targets:
        if target.study_id == study.pk and target.click_type != "first":
            model = target_model(target)
            models.setdefault(tuple(model.values()), model)
    return {
        "min_error_area_px": study.min_error_area_px,
        "next_round_segmenter": study.next_round_segmenter,
        "models": [models[key] for key in sorted(models)],
    }


def study_batch_rule(study: Study) -> dict:
    """Which batches counted (issue 32 item 7): ``rule`` ``valid`` (at least ``min_per_batch`` of
    ``batch_size`` clicks valid: inside the target or within ``radius_fraction`` x the image diagonal of it) or
    ``inside`` (that many clicks inside the target region itself, the RClicks paper's wording), in words too."""
    return {
        "rule": study.batch_rule,
        "min_per_batch": study.min_valid_per_session,
        "batch_size": study.batch_size,
        "radius_fraction": study.radius_fraction,
        "text": f"a batch counts when at least {study.min_valid_per_session} of its {study.batch_size} clicks "
        f"are {study.get_batch_rule_display()}",
    }


def export_sources(*, studies: list[Study], targets: dict[int, ExportTarget]) -> dict:
    """``{"datasets": [...], "studies": [...]}`` of the module docstring (studies in the order given)."""
    datasets: dict[int, dict] = {}
    for study in studies:
        dataset = study.dataset
        if dataset.pk not in datasets:
            datasets[dataset.pk] = {
                "name": export_dataset_name(name=dataset.name, layout=dataset.layout),
                "layout": dataset.layout,
                "content_hash": dataset_content_hash_stored(dataset=dataset),
                "studies": [],
            }
        datasets[dataset.pk]["studies"].append(study.pk)
    return {
        "datasets": list(datasets.values()),
        "studies": [
            {
                "id": study.pk,
                "name": study.name,
                "state": study.state,
                "dataset": export_dataset_name(name=study.dataset.name, layout=study.dataset.layout),
                "display_mode": study.display_mode,
                "batch_rule": study_batch_rule(study),
                "round_rules": _round_rules(study, targets.values()),
            }
            for study in studies
        ],
    }
