"""The researcher's preview of a study: the batch a new worker would get now, and whether a click counts.

The batch is chosen by the allocation's own rule (``collector.services.allocation.target_candidates``:
distinct images, furthest from quota first) and shown in a random order seeded by the preview's batch
number, as a session shuffles its targets; nothing is reserved. Click feedback applies the validation's
own rule (``collector.services.validation.click_verdict``: inside the region, or within the study's radius
of it; the ignore band never counts as region). Nothing here writes.
"""

from __future__ import annotations

import math
import random

from collector.models import Round, Target
from collector.services.allocation import least_batch, target_candidates
from collector.services.validation import click_verdict, target_region


def preview_targets(*, round: Round, device: str, seed: int = 0) -> list[Target]:
    """Up to ``study.batch_size`` targets of ``round`` for a new ``device`` worker, in play order.

    When the allocation would give nothing (every target has its quota, fewer are left than the study's
    short-batch policy lets a batch start with, or the round is closed) the preview still shows one target per
    image, so the researcher can look at the stimuli."""
    study = round.study
    ids = target_candidates(round=round, device=device, count=study.batch_size)
    if len(ids) < least_batch(study=study, count=study.batch_size):
        ids = []
    if not ids:
        seen: set[int] = set()
        for target_id, image_id in (
            Target.objects.filter(round=round).order_by("id").values_list("id", "instance__image_id")
        ):
            if image_id not in seen and len(ids) < study.batch_size:
                seen.add(image_id)
                ids.append(target_id)
    by_id = Target.objects.select_related("instance__image", "round__study").in_bulk(ids)
    targets = [by_id[target_id] for target_id in ids]
    random.Random(seed).shuffle(targets)
    return targets


def preview_click_check(*, target: Target, x: float, y: float) -> dict:
    """Would a click at canonical (x, y) px (x = column, y = row) count for ``target``?

    Returns ``{"valid": bool, "distance_px": float | None (None: empty region), "radius_px": float,
    "reason": "" | "outside_region" | "outside_image" | "ignore_band", "message": str}``."""
    study = target.round.study
    image = target.instance.image
    radius_px = study.radius_fraction * image.diagonal_px
    region, ignore = target_region(target=target)
    verdict = click_verdict(x=x, y=y, region=region, ignore=ignore, radius_px=radius_px)
    distance = None if verdict.distance_px is None or math.isinf(verdict.distance_px) else verdict.distance_px
    if verdict.is_valid:
        message = (
            "Counts: inside the object."
            if distance == 0
            else f"Counts: {distance:.1f} px from the object, within the {radius_px:.1f} px radius."
        )
    elif verdict.invalid_reason == "outside_image":
        message = "Does not count: outside the image."
    else:
        far = "an unknown distance" if distance is None else f"{distance:.1f} px"
        message = f"Does not count: {far} from the object, farther than the {radius_px:.1f} px radius."
    return {
        "valid": verdict.is_valid,
        "distance_px": None if distance is None else round(distance, 2),
        "radius_px": round(radius_px, 2),
        "reason": str(verdict.invalid_reason),
        "message": message,
    }
