"""Pictures of study data: load the files and rows a chart needs and hand them to ``collector.charts``.

Also renders the researcher-only phase-B preview of one instance in a display mode for the study form (the
player's own rendering, at preview size), and each session trial's picture for the session page: the image,
the region the click was judged against outlined, and the click.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw

from collector import charts
from collector.models import DisplayMode, Instance, Study, Target, Trial
from collector.selectors import targets as target_selectors
from collector.selectors import timing
from collector.services.stimuli import render_target_picture

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
    title = f"{target.display_name} · round {target.round.number}"
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
    """PNG of phase B of a trial for ``instance`` in ``display_mode`` (a DisplayMode value), drawn by the
    player's own rendering (``collector.services.stimuli.render_target_picture``: the cut-out on grey, the
    cut-out moved to the top-left corner, the white silhouette, the image with the object outlined in green),
    or the text description on grey. At most PREVIEW_MAX_SIDE_PX on the long side; the outline's width
    follows the picture's size as in the player."""
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
    if display_mode == DisplayMode.TEXT_DESCRIPTION:
        text = instance.text_description or instance.category or "(no text description for this object)"
        canvas = PILImage.fromarray(np.full_like(image, 128))
        draw = ImageDraw.Draw(canvas)
        draw.multiline_text((16, image.shape[0] // 2 - 10), _wrap(text, width=48), fill=(255, 255, 255))
        out = np.asarray(canvas)
    else:
        out = render_target_picture(display=np.ascontiguousarray(image), region=mask, mode=display_mode)
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


#: Long side of a session page's trial picture (px).
TRIAL_PICTURE_MAX_SIDE_PX = 480
#: Click marker colours: valid (the researcher pages' pc blue), invalid (their red), not judged yet (amber).
CLICK_RGB = {True: (31, 119, 180), False: (214, 39, 40), None: (255, 191, 0)}


def session_trial_get(*, study: Study, session_id: int, position: int) -> Trial:
    """One trial of a session of ``study``, with its target's instance and image and its click (if any);
    raises ``Trial.DoesNotExist`` for a trial of another study's session."""
    return Trial.objects.select_related("target__instance__image", "target__round", "click", "session").get(
        session_id=session_id, session__study=study, position=position
    )


def trial_picture(*, trial: Trial, radius_fraction: float) -> bytes:
    """PNG of one trial for the session page: the trial's image with the region its click was judged
    against outlined in green, as the player's Highlighted Instance draws it (the object for a first click,
    the error region for a correction), and the click: a dot, blue when valid, red when not, amber before
    the validation, inside a ring of the click radius (``radius_fraction`` of the image diagonal). At most
    ``TRIAL_PICTURE_MAX_SIDE_PX`` on the long side; researchers only (the view checks the login)."""
    image_row = trial.target.instance.image
    image = _canonical(_read_rgb(image_row.file), width=image_row.width, height=image_row.height)
    region = _read_mask(target_selectors.target_region_file(target=trial.target))
    scale = min(1.0, TRIAL_PICTURE_MAX_SIDE_PX / max(image_row.width, image_row.height))
    size = (max(1, round(image_row.width * scale)), max(1, round(image_row.height * scale)))
    shown = np.asarray(PILImage.fromarray(image).resize(size, PILImage.Resampling.BILINEAR))
    picture = PILImage.fromarray(region.astype(np.uint8) * 255)
    shown_region = np.asarray(picture.resize(size, PILImage.Resampling.BOX)) >= 128
    outlined = render_target_picture(
        display=shown, region=shown_region, mode=DisplayMode.HIGHLIGHTED_INSTANCE
    )
    canvas = PILImage.fromarray(np.ascontiguousarray(outlined))
    click = getattr(trial, "click", None)
    if click is not None:
        draw = ImageDraw.Draw(canvas)
        x, y = click.x * scale, click.y * scale
        ring = radius_fraction * image_row.diagonal_px * scale
        colour = CLICK_RGB[click.is_valid]
        if ring >= 2:
            draw.ellipse((x - ring, y - ring, x + ring, y + ring), outline=(255, 255, 255), width=1)
        dot = max(4.0, max(size) / 80)
        draw.ellipse((x - dot - 1.5, y - dot - 1.5, x + dot + 1.5, y + dot + 1.5), fill=(0, 0, 0))
        draw.ellipse((x - dot, y - dot, x + dot, y + dot), fill=colour, outline=(255, 255, 255), width=2)
    buffer = io.BytesIO()
    canvas.save(buffer, format="PNG")
    return buffer.getvalue()
