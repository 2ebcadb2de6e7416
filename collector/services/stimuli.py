"""Stimuli: the pictures a trial shows, rendered once per target on the server.

Per target two files, both at display size (long side ``study.display_long_side``, never upscaled):

* ``display``: the image shown in phases A, C and D (WebP);
* ``target``: the phase-B picture in the study's display mode, applied to the region to click — the
  instance mask for ``first`` targets, ``Target.error_mask_file`` for ``fn``/``fp`` targets:

  - Object CutOut: the region's pixels in place on a gray background;
  - Shifted CutOut: the same cutout moved so its bounding box touches the top-left corner;
  - Silhouette Mask: the region white on black;
  - Highlighted Instance: the whole image with a green outline around the region;
  - Text Description: no picture, ``Instance.text_description`` is shown (fallback: the category, else a
    generic sentence, flagged ``text_fallback``). An error region cannot be described in words, so fn/fp
    targets in this mode get an Object CutOut picture (flagged ``mode_fallback``).

File names are content hashes (``stimuli/<sha256[:20]>.<ext>``), so identical pictures are stored once and
can be served with immutable cache headers. Rendering is idempotent: a target whose recorded stimuli
match the current rendering version, mode and size is skipped. ``Target.stimuli`` records::

    {"version": 1, "mode": "Object_CutOut", "long_side": 1280,
     "display": {"name": "<hash>.webp", "width": W', "height": H'},
     "target": {"name": "<hash>.webp", "width": W', "height": H'} | None,
     "text": "...", "text_fallback": bool, "mode_fallback": bool}

Memory: one image and one mask at canonical size plus their display-size copies per target
(about 5 bytes per canonical pixel).
"""

from __future__ import annotations

import hashlib
import io
import logging
from dataclasses import dataclass

import numpy as np
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from PIL import Image as PILImage
from PIL import ImageFilter

from collector.models import DisplayMode, Round, Target

logger = logging.getLogger(__name__)

RENDER_VERSION = 2
STIMULI_DIR = "stimuli"
GRAY_RGB = (128, 128, 128)
HIGHLIGHT_RGB = (0, 255, 0)
WEBP_QUALITY = 75
BATCH_SIZE = 50


class StimulusError(Exception):
    """A stimulus cannot be rendered; the message names the target and the file at fault."""


@dataclass(frozen=True)
class RenderedStimuli:
    """Display-size pictures of one target: ``display`` (H', W', 3) uint8 RGB, ``target`` the same or None."""

    display: np.ndarray
    target: np.ndarray | None
    mode: str
    text: str
    text_fallback: bool
    mode_fallback: bool


def display_size(*, width: int, height: int, long_side: int) -> tuple[int, int]:
    """(width, height) of the display image: long side ``long_side`` px, aspect kept, never upscaled."""
    scale = min(1.0, long_side / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def _read_rgb(field, *, what: str) -> PILImage.Image:
    try:
        with field.open("rb") as handle:
            picture: PILImage.Image = PILImage.open(handle)
            picture.load()
    except (OSError, ValueError) as exc:
        raise StimulusError(f"{what} {field.name!r} cannot be read ({exc}); re-import the dataset.") from None
    return picture.convert("RGB")


def _read_mask(field, *, size: tuple[int, int], what: str) -> np.ndarray:
    """Boolean (H, W) mask of a 0/255 PNG, resized (nearest) to ``size`` = (width, height) if needed."""
    if not field:
        raise StimulusError(f"{what} is missing; the target has no region to show.")
    try:
        with field.open("rb") as handle:
            picture: PILImage.Image = PILImage.open(handle)
            picture.load()
    except (OSError, ValueError) as exc:
        raise StimulusError(f"{what} {field.name!r} cannot be read ({exc}).") from None
    picture = picture.convert("L")
    if picture.size != size:
        picture = picture.resize(size, PILImage.Resampling.NEAREST)
    return np.asarray(picture) > 127


def _region_display(region: np.ndarray, *, size: tuple[int, int]) -> np.ndarray:
    """The canonical-size region mask at display size (box filter, then > 0.5 coverage)."""
    if region.shape[::-1] == size:
        return region
    picture = PILImage.fromarray(region.astype(np.uint8) * 255, mode="L")
    return np.asarray(picture.resize(size, PILImage.Resampling.BOX)) >= 128


def _outline(region: np.ndarray, *, width_px: int) -> np.ndarray:
    """Pixels outside ``region`` within ``width_px`` of it (a border drawn around the region)."""
    picture = PILImage.fromarray(region.astype(np.uint8) * 255, mode="L")
    grown = np.asarray(picture.filter(ImageFilter.MaxFilter(2 * width_px + 1))) > 0
    return grown & ~region


def render_target_picture(*, display: np.ndarray, region: np.ndarray, mode: str) -> np.ndarray:
    """Phase-B picture for ``mode`` of a (H, W, 3) uint8 display image and a (H, W) bool region."""
    gray = np.empty_like(display)
    gray[:] = GRAY_RGB
    if mode == DisplayMode.OBJECT_CUTOUT:
        return np.where(region[..., None], display, gray)
    if mode == DisplayMode.SHIFTED_CUTOUT:
        out = gray.copy()
        ys, xs = np.nonzero(region)
        if len(ys):
            y0, x0 = ys.min(), xs.min()
            out[ys - y0, xs - x0] = display[ys, xs]
        return out
    if mode == DisplayMode.SILHOUETTE_MASK:
        return np.repeat(np.where(region, 255, 0).astype(np.uint8)[..., None], 3, axis=2)
    if mode == DisplayMode.HIGHLIGHTED_INSTANCE:
        width_px = max(2, round(max(display.shape[:2]) / 320))
        out = display.copy()
        out[_outline(region, width_px=width_px)] = HIGHLIGHT_RGB
        return out
    raise StimulusError(f"display mode {mode!r} has no picture; known: {', '.join(DisplayMode.values)}.")


def target_text(*, target: Target) -> tuple[str, bool]:
    """(text for Text Description, fallback used): the instance's description, else its category."""
    instance = target.instance
    if instance.text_description.strip():
        return instance.text_description.strip(), False
    if instance.category.strip():
        return instance.category.strip(), True
    return "", True


def target_stimuli_render(*, target: Target) -> RenderedStimuli:
    """Render (in memory) the display image and phase-B picture of ``target`` for its study's mode."""
    study = target.round.study
    image = target.instance.image
    canonical = (image.width, image.height)
    picture = _read_rgb(image.file, what=f"image of target {target.full_stem!r}")
    if picture.size != canonical:
        picture = picture.resize(canonical, PILImage.Resampling.BILINEAR)
    size = display_size(width=image.width, height=image.height, long_side=study.display_long_side)
    display = np.asarray(picture.resize(size, PILImage.Resampling.LANCZOS) if size != canonical else picture)

    mode = study.display_mode
    text, text_fallback = "", False
    mode_fallback = False
    if target.click_type == Target.ClickType.FIRST:
        region_field, what = target.instance.mask_file, f"mask of target {target.full_stem!r}"
    else:
        region_field, what = target.error_mask_file, f"error mask of target {target.full_stem!r}"
    if mode == DisplayMode.TEXT_DESCRIPTION:
        if target.click_type == Target.ClickType.FIRST:
            text, text_fallback = target_text(target=target)
            return RenderedStimuli(display, None, mode, text, text_fallback, False)
        mode, mode_fallback = DisplayMode.OBJECT_CUTOUT, True
    region = _region_display(_read_mask(region_field, size=canonical, what=what), size=size)
    target_picture = render_target_picture(display=display, region=region, mode=mode)
    return RenderedStimuli(display, target_picture, mode, text, text_fallback, mode_fallback)


def _encode(array: np.ndarray, *, lossless: bool) -> tuple[bytes, str]:
    """WebP bytes of a (H, W, 3) uint8 picture: lossless for silhouettes, lossy (quality WEBP_QUALITY)
    for photographic pictures (about a third smaller than JPEG at equal quality, which is what makes a
    10-trial batch load in seconds on a slow phone connection)."""
    buffer = io.BytesIO()
    picture = PILImage.fromarray(array)
    if lossless:
        picture.save(buffer, format="WEBP", lossless=True, method=4)
    else:
        picture.save(buffer, format="WEBP", quality=WEBP_QUALITY, method=4)
    return buffer.getvalue(), "webp"


def _store(data: bytes, ext: str) -> str:
    """Save under a content-hash name (once); returns the file name relative to STIMULI_DIR."""
    name = f"{hashlib.sha256(data).hexdigest()[:20]}.{ext}"
    path = f"{STIMULI_DIR}/{name}"
    if not default_storage.exists(path):
        saved = default_storage.save(path, ContentFile(data))
        if saved != path:  # a concurrent writer stored the same bytes first; keep one copy
            default_storage.delete(saved)
    return name


def stimulus_path(name: str) -> str:
    """Storage path of a stimulus file name recorded in ``Target.stimuli``."""
    return f"{STIMULI_DIR}/{name}"


def stimuli_current(*, target: Target) -> bool:
    """True when ``target.stimuli`` was rendered by this version for the study's mode and size and its files
    are in storage (a cleaned-up stimuli folder makes them render again instead of a server error)."""
    study = target.round.study
    record = target.stimuli or {}
    return (
        record.get("version") == RENDER_VERSION
        and record.get("requested_mode") == study.display_mode
        and record.get("long_side") == study.display_long_side
        and bool(record.get("display"))
        and all(
            default_storage.exists(stimulus_path(record[kind]["name"]))
            for kind in ("display", "target")
            if record.get(kind)
        )
    )


def target_stimuli_ensure(*, target: Target) -> dict:
    """Render and store ``target``'s stimuli unless current ones exist; returns ``Target.stimuli``."""
    if stimuli_current(target=target):
        return target.stimuli
    rendered = target_stimuli_render(target=target)
    height, width = rendered.display.shape[:2]
    display_name = _store(*_encode(rendered.display, lossless=False))
    target_record = None
    if rendered.target is not None:
        # Silhouettes stay crisp (and tiny) lossless; photographic pictures are lossy.
        lossless = rendered.mode == DisplayMode.SILHOUETTE_MASK
        target_record = {
            "name": _store(*_encode(rendered.target, lossless=lossless)),
            "width": width,
            "height": height,
        }
    study = target.round.study
    target.stimuli = {
        "version": RENDER_VERSION,
        "requested_mode": study.display_mode,
        "mode": rendered.mode,
        "long_side": study.display_long_side,
        "display": {"name": display_name, "width": width, "height": height},
        "target": target_record,
        "text": rendered.text,
        "text_fallback": rendered.text_fallback,
        "mode_fallback": rendered.mode_fallback,
    }
    Target.objects.filter(pk=target.pk).update(stimuli=target.stimuli)
    return target.stimuli


def round_stimuli_render(*, round_id: int) -> int:
    """Render the stimuli of every target of the round that lacks current ones; returns how many were
    rendered. Works in batches of ``BATCH_SIZE`` targets; returns 0 quietly if the round is gone."""
    round_ = Round.objects.select_related("study").filter(pk=round_id).first()
    if round_ is None:
        return 0
    rendered = 0
    queryset = (
        Target.objects.filter(round=round_).select_related("round__study", "instance__image").order_by("id")
    )
    last_id = 0
    while True:
        batch = list(queryset.filter(id__gt=last_id)[:BATCH_SIZE])
        if not batch:
            break
        for target in batch:
            if not stimuli_current(target=target):
                target_stimuli_ensure(target=target)
                rendered += 1
        last_id = batch[-1].id
    logger.info("round stimuli rendered", extra={"round_id": round_id, "rendered": rendered})
    return rendered
