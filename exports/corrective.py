"""Outputs of a corrective-click campaign (issue 17, seed 001 analyses).

``corrective_export(study_id=..., out_dir=...)`` writes::

    masks.json        COCO instances: one annotation per finished instance (done or skipped) with its final
                      mask as RLE made by pycocotools (``segmentation = {"size": [h, w], "counts": str}``),
                      area and bbox from pycocotools too; ``clicklab`` holds item, session, worker pseudonym,
                      device, state, mask round, model id/variant/checkpoint sha256, IoU vs ground truth.
    masks/<image stem>[_<object stem>]_<item id>.png   the same masks, 0/255 PNG at the image's size.
    clicks.csv        the full click log: session, worker pseudonym, device, item, image, object, round, order,
                      sign, x, y (canonical pixels as stored: the shortest decimal that reads back to the exact
                      float the player sent, so ``collector.services.corrective_simulation.corrective_replay``
                      replays the campaign bit for bit), pointer, ms since the item was shown, undone, received at.
    report.json       the seed's analyses: clicks per round, skips, time per instance and per round, mIoU per
                      round vs ground truth (``miou_per_round``: the masks made after round r;
                      ``miou_after_round``: every finished instance's mask in effect after round r, the last
                      one carried on for an instance that ended earlier), and the quality-vs-time curve
                      (mean IoU against mean cumulative worker time after each round).
    quality_vs_time.png   that curve (matplotlib).
    quality.json      with ``top_percent``: the quality model Mr (``collector.selectors.corrective_quality``): how it
                      was trained, how well it ranks, whether to trust it, and which masks were kept.

Instances of failed items are left out of the masks (they are counted in the report). Reads only.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image as PILImage
from pycocotools import mask as coco_mask

from collector.models import CorrectiveClick, CorrectiveItem, CorrectiveMask, Study
from collector.services.masks import read_mask  # a stored 0/255 mask as bool (H, W); re-exported
from exports.selectors import ExportError

CLICK_COLUMNS = (
    "session_id", "worker", "device", "item_id", "image", "object", "round", "order", "sign", "x", "y",
    "pointer_type", "item_ms", "undone", "received_at",
)  # fmt: skip
FINISHED = (CorrectiveItem.State.DONE, CorrectiveItem.State.SKIPPED)


@dataclass(frozen=True)
class CorrectiveExport:
    out_dir: Path
    annotations: int
    clicks: int
    report: dict


def rle_encode(mask: np.ndarray) -> dict:
    """COCO RLE of a bool (H, W) mask by pycocotools, ``counts`` as a str (JSON-ready)."""
    rle = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def rle_decode(segmentation: dict) -> np.ndarray:
    """The inverse of :func:`rle_encode` (pycocotools), bool (H, W)."""
    rle = {"size": segmentation["size"], "counts": segmentation["counts"].encode("ascii")}
    return coco_mask.decode(rle).astype(bool)


def _items(study: Study):
    return (
        CorrectiveItem.objects.filter(
            session__study=study, session__is_qualification=False, session__is_bot=False
        )
        .select_related("session__worker", "trial__target__instance__image", "current_mask")
        .order_by("session_id", "position")
    )


def _object_name(instance) -> str:
    return f"{instance.image.stem}_{instance.object_stem}" if instance.object_stem else instance.image.stem


def corrective_export(*, study_id: int, out_dir, top_percent: float | None = None) -> CorrectiveExport:
    """Write the campaign's outputs (see the module docstring) into ``out_dir`` (created). With ``top_percent``
    the masks are only the best N % by the quality model Mr's predicted IoU
    (``collector.selectors.corrective_quality``), each with its prediction, and ``quality.json`` says how Mr was trained (model, parameters, target, split,
    seed, held-out ids), how well it ranks (held-out and cross-validated Spearman, with the spread and whether
    there are enough instances to trust it) and what was kept."""
    study = Study.objects.filter(pk=study_id).first()
    if study is None:
        raise ExportError(f"study {study_id} does not exist.")
    if not study.is_corrective:
        raise ExportError(
            f"study {study_id} is a {study.kind} study; this export is for corrective campaigns."
        )
    out = Path(out_dir)
    (out / "masks").mkdir(parents=True, exist_ok=True)
    items = list(_items(study))

    ranking, kept = None, None
    if top_percent is not None:
        ranking, kept = _quality_write(study, out, top_percent=top_percent)

    images: dict[int, dict[str, Any]] = {}  # COCO's images and annotations, by image id
    annotations: list[dict[str, Any]] = []
    categories: dict[str, int] = {}  # category name -> COCO category id
    for item in items:
        if item.state not in FINISHED or item.current_mask is None:
            continue
        if kept is not None and item.pk not in kept:
            continue
        instance = item.trial.target.instance
        image = instance.image
        mask = read_mask(item.current_mask.file.name)
        if mask.shape != (image.height, image.width):
            raise ExportError(
                f"mask {item.current_mask.file.name} is {mask.shape[1]}x{mask.shape[0]}, its image {image.stem} is "
                f"{image.width}x{image.height}; the stored mask is damaged."
            )
        images.setdefault(image.pk, {"id": image.pk, "file_name": image.file.name.rsplit("/", 1)[-1],
                                     "width": image.width, "height": image.height, "stem": image.stem})  # fmt: skip
        category = instance.category or "object"
        category_id = categories.setdefault(category, len(categories) + 1)
        rle = rle_encode(mask)
        encoded = {"size": rle["size"], "counts": rle["counts"].encode("ascii")}
        name = f"{_object_name(instance)}_{item.pk}.png"
        PILImage.fromarray(np.where(mask, 255, 0).astype(np.uint8), mode="L").save(out / "masks" / name)
        provenance = item.current_mask
        annotations.append(
            {
                "id": item.pk,
                "image_id": image.pk,
                "category_id": category_id,
                "segmentation": rle,
                "area": int(coco_mask.area(encoded)),
                "bbox": [float(v) for v in coco_mask.toBbox(encoded)],
                "iscrowd": 0,
                "clicklab": {
                    "item_id": item.pk,
                    "instance_id": instance.pk,
                    "object": _object_name(instance),
                    "session_id": item.session_id,
                    "worker": item.session.worker.pseudonym,
                    "device": item.session.device,
                    "state": item.state,
                    "mask_round": provenance.round,
                    "predictor": provenance.predictor,
                    "model_id": provenance.model_id,
                    "model_variant": provenance.model_variant,
                    "checkpoint_sha256": provenance.checkpoint_sha256,
                    "iou": provenance.iou,
                    "png": f"masks/{name}",
                    "predicted_iou": ranking.predicted.get(item.pk) if ranking else None,
                },
            }
        )
    coco = {
        "info": {"description": f"Clicklab corrective campaign {study.pk}: {study.name}"},
        "images": list(images.values()),
        "annotations": annotations,
        "categories": [{"id": i, "name": n} for n, i in categories.items()],
    }
    (out / "masks.json").write_text(json.dumps(coco, indent=1))

    clicks = list(
        CorrectiveClick.objects.filter(
            item__session__study=study, item__session__is_qualification=False, item__session__is_bot=False
        )
        .select_related("item__session__worker", "item__trial__target__instance__image")
        .order_by("item__session_id", "item__position", "round", "order")
    )
    with open(out / "clicks.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CLICK_COLUMNS)
        for click in clicks:
            instance = click.item.trial.target.instance
            writer.writerow(
                [click.item.session_id, click.item.session.worker.pseudonym, click.item.session.device, click.item_id,
                 instance.image.stem, instance.object_stem, click.round, click.order,
                 "positive" if click.is_positive else "negative", repr(click.x), repr(click.y),
                 click.pointer_type, "" if click.item_ms is None else f"{click.item_ms:.1f}", int(click.undone),
                 click.received_at.isoformat()]
            )  # fmt: skip

    report = corrective_report(study=study, items=items, clicks=clicks)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    _plot_quality_vs_time(report, out / "quality_vs_time.png")
    return CorrectiveExport(out_dir=out, annotations=len(annotations), clicks=len(clicks), report=report)


def _quality_write(study: Study, out: Path, *, top_percent: float):
    """Fit Mr (``collector.selectors.corrective_quality``), write quality.json (how it was trained, how well it
    ranks, whether to trust it, what was kept) and return (ranking, the kept item ids)."""
    from collector.selectors.corrective_quality import (
        QualityModelError,
        kept_count,
        quality_ranking,
        top_items,
    )

    try:
        kept_count(1, top_percent)  # a bad percentage is refused before the model is fitted
        ranking = quality_ranking(study_id=study.pk)
    except QualityModelError as exc:
        raise ExportError(str(exc)) from None
    kept = top_items(ranking, top_percent=top_percent)
    quality = {
        **ranking.training(),
        "top_percent": top_percent,
        "kept": len(kept),
        "of": len(ranking.predicted),
        "kept_rule": "the nearest whole number of instances to top_percent % of the finished ones (halves up, at "
        "least one), by Mr's estimate, ties by item id",
        "kept_ids": kept,
    }
    (out / "quality.json").write_text(json.dumps(quality, indent=1))
    return ranking, set(kept)


def corrective_report(*, study: Study, items: list, clicks: list) -> dict:
    """The seed's analyses of a campaign, from its items, masks and clicks."""
    live = [c for c in clicks if not c.undone]
    per_round_clicks: defaultdict[int, int] = defaultdict(int)
    for click in live:
        per_round_clicks[click.round] += 1
    masks = list(CorrectiveMask.objects.filter(item__in=[i.pk for i in items]).order_by("item_id", "round"))
    by_round = defaultdict(list)
    for mask in masks:
        if mask.iou is not None:
            by_round[mask.round].append(mask.iou)
    round_ms = defaultdict(list)
    for item in items:
        for key, value in (item.round_ms or {}).items():
            round_ms[int(key)].append(float(value))
    states: defaultdict[str, int] = defaultdict(int)
    for item in items:
        states[item.state] += 1
    rounds = sorted(set(by_round) | set(per_round_clicks) | set(round_ms))
    mean = lambda values: float(np.mean(values)) if values else None  # noqa: E731
    curve, elapsed = [], 0.0
    for number in rounds:
        elapsed += mean(round_ms.get(number, [])) or 0.0
        if by_round.get(number):
            curve.append({"round": number, "mean_cumulative_ms": elapsed, "miou": mean(by_round[number])})
    finished = [i for i in items if i.state in FINISHED]
    in_effect = _miou_in_effect(masks, finished_ids={i.pk for i in finished}, rounds=study.corrective_rounds)
    return {
        "study_id": study.pk,
        "settings": {
            "init": study.corrective_init,
            "rounds": study.corrective_rounds,
            "clicks_per_round": study.corrective_clicks_per_round,
        },
        "instances": len(items),
        "states": dict(states),
        "skips": states.get(CorrectiveItem.State.SKIPPED, 0),
        "clicks": len(live),
        "undone_clicks": len(clicks) - len(live),
        "clicks_per_round": {str(r): per_round_clicks.get(r, 0) for r in rounds},
        "mean_clicks_per_instance": len(live) / len(items) if items else None,
        "time_per_instance_ms": {
            "mean": mean([i.active_ms for i in finished]),
            "median": float(np.median([i.active_ms for i in finished])) if finished else None,
        },
        "time_per_round_ms": {str(r): mean(round_ms.get(r, [])) for r in rounds},
        "miou_per_round": {str(r): mean(by_round.get(r, [])) for r in rounds},
        "masks_per_round": {str(r): len(by_round.get(r, [])) for r in rounds},
        "miou_after_round": {str(r): mean(values) for r, values in sorted(in_effect.items())},
        "instances_after_round": {str(r): len(values) for r, values in sorted(in_effect.items())},
        "final_miou": mean(
            [i.current_mask.iou for i in finished if i.current_mask and i.current_mask.iou is not None]
        ),
        "quality_vs_time": curve,
    }


def _miou_in_effect(masks: list, *, finished_ids: set[int], rounds: int) -> dict[int, list[float]]:
    """IoUs of each finished instance's mask in effect after round r, for r = 0..the last round (an instance that
    ended earlier keeps its last mask), so every round averages the same instances: the seed's mIoU-per-round."""
    per_item: defaultdict[int, dict[int, float]] = defaultdict(dict)
    for mask in masks:
        if mask.item_id in finished_ids and mask.iou is not None:
            per_item[mask.item_id][mask.round] = mask.iou
    last = max([rounds, *(r for by_round in per_item.values() for r in by_round)])
    in_effect: defaultdict[int, list[float]] = defaultdict(list)
    for by_round in per_item.values():
        current = None
        for number in range(last + 1):
            current = by_round.get(number, current)
            if current is not None:
                in_effect[number].append(current)
    return dict(in_effect)


def _plot_quality_vs_time(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    curve = report["quality_vs_time"]
    figure, axes = plt.subplots(figsize=(5, 3.5), dpi=100)
    if curve:
        axes.plot([p["mean_cumulative_ms"] / 1000 for p in curve], [p["miou"] for p in curve], marker="o")
        for point in curve:
            axes.annotate(
                f"r{point['round']}", (point["mean_cumulative_ms"] / 1000, point["miou"]), fontsize=8
            )
    axes.set_xlabel("mean worker time per instance (s)")
    axes.set_ylabel("mIoU vs ground truth")
    axes.set_ylim(0, 1)
    axes.set_title("Quality vs time")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    path.write_bytes(buffer.getvalue())
