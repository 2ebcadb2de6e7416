"""Pictures of study data: load the files and rows a chart needs and hand them to ``collector.charts``.

Also renders the researcher-only phase-B preview of one instance in a display mode (the player renders
the real stimuli; this is a quick approximation for the study form).
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw

from collector import charts
from collector.models import DisplayMode, Instance, Study, Target
from collector.selectors import targets as target_selectors
from collector.selectors import timing

CHART_KINDS = ("reaction-times", "phase-timing", "devices")
PREVIEW_MAX_SIDE_PX = 640


def _read_rgb(field_file) -> np.ndarray:
    with field_file.open("rb") as handle:
        return np.asarray(PILImage.open(handle).convert("RGB"))


def _read_mask(field_file) -> np.ndarray:
    with field_file.open("rb") as handle:
        return np.asarray(PILImage.open(handle).convert("L")) > 127


def _canonical(image: np.ndarray, *, width: int, height: int) -> np.ndarray:
    """The image at the canonical size all coordinates use (files are stored at it; this guards)."""
    if image.shape[:2] == (height, width):
        return image
    return np.asarray(PILImage.fromarray(image).resize((width, height), PILImage.Resampling.BILINEAR))


def target_heatmap(*, target: Target) -> bytes:
    """PNG: the target's image, its region and all its clicks (see ``charts.target_heatmap_png``)."""
    image_row = target.instance.image
    image = _canonical(_read_rgb(image_row.file), width=image_row.width, height=image_row.height)
    region = _read_mask(target_selectors.target_region_file(target=target))
    if region.shape != image.shape[:2]:
        region = (
            np.asarray(
                PILImage.fromarray(region.astype(np.uint8) * 255).resize(
                    (image.shape[1], image.shape[0]), PILImage.Resampling.NEAREST
                )
            )
            > 127
        )
    clicks = target_selectors.target_clicks(target=target)
    title = f"{target.full_stem} · round {target.round.number} · {target.click_type}"
    return charts.target_heatmap_png(image=image, region=region, clicks=clicks, title=title)


def study_chart(*, study: Study, kind: str) -> bytes:
    """PNG chart of ``kind`` (one of CHART_KINDS) for ``study``."""
    if kind == "reaction-times":
        return charts.reaction_time_histogram_png(
            reaction_ms=timing.study_reaction_ms(study=study), min_reaction_ms=study.min_reaction_ms
        )
    if kind == "phase-timing":
        return charts.phase_timing_histogram_png(
            durations_ms=timing.study_phase_durations_ms(study=study),
            nominal_ms=timing.study_nominal_phase_ms(study=study),
        )
    if kind == "devices":
        return charts.device_comparison_png(comparison=timing.study_device_comparison(study=study))
    raise ValueError(f"chart kind {kind!r} is unknown; use one of {', '.join(CHART_KINDS)}.")


def _shrink(array: np.ndarray) -> np.ndarray:
    height, width = array.shape[:2]
    scale = PREVIEW_MAX_SIDE_PX / max(height, width)
    if scale >= 1:
        return array
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    mode = (
        PILImage.Resampling.BILINEAR
        if array.dtype == np.uint8 and array.ndim == 3
        else PILImage.Resampling.NEAREST
    )
    return np.asarray(PILImage.fromarray(array).resize(size, mode))


def instance_phase_b_preview(*, instance: Instance, display_mode: str) -> bytes:
    """PNG approximating phase B of a trial for ``instance`` in ``display_mode`` (a DisplayMode value):
    the cut-out on grey, the cut-out moved to the centre, the white silhouette, the image dimmed outside
    the object, or the text description. At most PREVIEW_MAX_SIDE_PX on the long side."""
    if display_mode not in DisplayMode.values:
        raise ValueError(
            f"display mode {display_mode!r} is unknown; use one of {', '.join(DisplayMode.values)}."
        )
    image = _shrink(_read_rgb(instance.image.file))
    mask = _shrink(_read_mask(instance.mask_file).astype(np.uint8) * 255) > 127
    if mask.shape != image.shape[:2]:
        mask = (
            np.asarray(
                PILImage.fromarray(mask.astype(np.uint8) * 255).resize(
                    (image.shape[1], image.shape[0]), PILImage.Resampling.NEAREST
                )
            )
            > 127
        )
    grey = np.full_like(image, 128)
    if display_mode == DisplayMode.OBJECT_CUTOUT:
        out = np.where(mask[..., None], image, grey)
    elif display_mode == DisplayMode.SHIFTED_CUTOUT:
        out = grey.copy()
        rows, cols = np.nonzero(mask)
        if rows.size:
            dy = image.shape[0] // 2 - int((rows.min() + rows.max()) // 2)
            dx = image.shape[1] // 2 - int((cols.min() + cols.max()) // 2)
            out[rows + dy, cols + dx] = image[rows, cols]
    elif display_mode == DisplayMode.SILHOUETTE_MASK:
        out = np.repeat(np.where(mask, 255, 0).astype(np.uint8)[..., None], 3, axis=2)
    elif display_mode == DisplayMode.HIGHLIGHTED_INSTANCE:
        out = np.where(mask[..., None], image, (image * 0.3).astype(np.uint8))
    else:
        text = instance.text_description or instance.category or "(no text description for this object)"
        canvas = PILImage.fromarray(grey)
        draw = ImageDraw.Draw(canvas)
        draw.multiline_text((16, image.shape[0] // 2 - 10), _wrap(text, width=48), fill=(255, 255, 255))
        out = np.asarray(canvas)
    buffer = io.BytesIO()
    PILImage.fromarray(np.ascontiguousarray(out, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _wrap(text: str, *, width: int) -> str:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    return "\n".join(lines)
