"""Stimulus rendering: display size, each display mode's picture, error regions, storage, the Celery task."""

from __future__ import annotations

import io

import numpy as np
import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from PIL import Image as PILImage

from collector.models import DisplayMode, Instance, Round, Target
from collector.services.stimuli import (
    GRAY_RGB,
    HIGHLIGHT_RGB,
    display_size,
    round_stimuli_render,
    stimulus_path,
    target_stimuli_ensure,
)
from tests.factories import make_dataset, make_study


def _decode(name: str) -> np.ndarray:
    with default_storage.open(stimulus_path(name), "rb") as handle:
        return np.asarray(PILImage.open(handle).convert("RGB")).astype(int)


def _mask(instance: Instance, size: tuple[int, int]) -> np.ndarray:
    with instance.mask_file.open("rb") as handle:
        return np.asarray(PILImage.open(handle).convert("L").resize(size, PILImage.Resampling.NEAREST)) > 127


def _erode(mask: np.ndarray, steps: int) -> np.ndarray:
    out = mask.copy()
    for _ in range(steps):
        out[1:-1, 1:-1] &= out[:-2, 1:-1] & out[2:, 1:-1] & out[1:-1, :-2] & out[1:-1, 2:]
        out[0, :] = out[-1, :] = out[:, 0] = out[:, -1] = False
    return out


def _dilate(mask: np.ndarray, steps: int) -> np.ndarray:
    """4-neighbour dilation (the image border is not treated as region)."""
    out = mask.copy()
    for _ in range(steps):
        grown = out.copy()
        grown[1:, :] |= out[:-1, :]
        grown[:-1, :] |= out[1:, :]
        grown[:, 1:] |= out[:, :-1]
        grown[:, :-1] |= out[:, 1:]
        out = grown
    return out


def _first_target(study) -> Target:
    return (
        Target.objects.filter(round__study=study)
        .select_related("round__study", "instance__image")
        .order_by("id")
        .first()
    )


@pytest.fixture
def media(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def test_display_size_keeps_aspect_and_never_upscales():
    assert display_size(width=4000, height=3000, long_side=1280) == (1280, 960)
    assert display_size(width=481, height=321, long_side=1280) == (481, 321)
    assert display_size(width=300, height=2000, long_side=1000) == (150, 1000)


@pytest.mark.django_db
def test_object_cutout_shows_the_object_in_place_on_gray(tmp_path, media):
    dataset = make_dataset(tmp_path, n_images=1, size=(200, 150))
    study = make_study(dataset, publish=True, display_long_side=100)
    target = _first_target(study)
    record = target_stimuli_ensure(target=target)

    assert record["display"]["width"] == 100 and record["display"]["height"] == 75
    assert record["mode"] == DisplayMode.OBJECT_CUTOUT and record["text"] == ""
    display, picture = _decode(record["display"]["name"]), _decode(record["target"]["name"])
    assert display.shape == picture.shape == (75, 100, 3)
    region = _mask(target.instance, (100, 75))
    inside, outside = _erode(region, 3), _erode(~region, 3)
    assert inside.sum() > 200 and outside.sum() > 2000
    assert np.abs(picture[inside] - display[inside]).mean() < 8
    gray_error = np.abs(picture[outside] - np.array(GRAY_RGB)).max(axis=1)
    assert gray_error.mean() < 2 and np.percentile(gray_error, 99) < 12  # lossy chroma bleeds at edges
    assert np.abs(display[outside] - np.array(GRAY_RGB)).mean() > 20  # the background really changed
    assert Target.objects.get(pk=target.pk).stimuli == record


@pytest.mark.django_db
def test_shifted_cutout_moves_the_object_to_the_top_left(tmp_path, media):
    dataset = make_dataset(tmp_path, n_images=1, size=(200, 150))
    study = make_study(dataset, publish=True, display_mode=DisplayMode.SHIFTED_CUTOUT)
    target = _first_target(study)
    record = target_stimuli_ensure(target=target)
    picture = _decode(record["target"]["name"])
    instance = target.instance
    height = instance.bbox_y1 - instance.bbox_y0 + 1
    width = instance.bbox_x1 - instance.bbox_x0 + 1
    object_rgb = np.array([200, 60, 50])  # the factory paints objects in this colour
    assert np.abs(picture[height // 2, width // 2] - object_rgb).max() < 16
    centre_y = (instance.bbox_y0 + instance.bbox_y1) // 2
    centre_x = (instance.bbox_x0 + instance.bbox_x1) // 2
    assert centre_x > width  # the original place does not overlap the shifted copy
    assert np.abs(picture[centre_y, centre_x] - np.array(GRAY_RGB)).max() < 12


@pytest.mark.django_db
def test_silhouette_is_the_region_white_on_black_losslessly(tmp_path, media):
    dataset = make_dataset(tmp_path, n_images=1, size=(160, 120))
    study = make_study(dataset, publish=True, display_mode=DisplayMode.SILHOUETTE_MASK)
    target = _first_target(study)
    picture = _decode(target_stimuli_ensure(target=target)["target"]["name"])
    expected = np.where(_mask(target.instance, (160, 120)), 255, 0)
    assert (picture[..., 0] == expected).all() and (picture[..., 2] == expected).all()


@pytest.mark.django_db
def test_highlighted_instance_outlines_the_region_in_green(tmp_path, media):
    dataset = make_dataset(tmp_path, n_images=1, size=(160, 120))
    study = make_study(dataset, publish=True, display_mode=DisplayMode.HIGHLIGHTED_INSTANCE)
    target = _first_target(study)
    record = target_stimuli_ensure(target=target)
    display, picture = _decode(record["display"]["name"]), _decode(record["target"]["name"])
    region = _mask(target.instance, (160, 120))
    ring = _dilate(region, 2) & ~region  # just outside the region
    far = ~_dilate(region, 8)
    # Lossy WebP smears a thin line's chroma, so "green" means green clearly dominates red and blue.
    assert HIGHLIGHT_RGB == (0, 255, 0)
    greenish = picture[..., 1] - np.maximum(picture[..., 0], picture[..., 2]) > 80
    assert greenish[ring].mean() > 0.9
    assert greenish[_erode(region, 2)].mean() < 0.05 and greenish[far].mean() < 0.05
    assert np.abs(picture[far] - display[far]).mean() < 6


@pytest.mark.django_db
def test_text_description_has_no_picture_and_falls_back_with_a_flag(tmp_path, media):
    dataset = make_dataset(tmp_path, n_images=2, size=(80, 60))
    study = make_study(dataset, publish=True, display_mode=DisplayMode.TEXT_DESCRIPTION)
    first, second = Target.objects.filter(round__study=study).order_by("id")[:2]
    Instance.objects.filter(pk=first.instance_id).update(text_description="the red ball")
    Instance.objects.filter(pk=second.instance_id).update(category="ball")
    first.refresh_from_db()
    second.refresh_from_db()
    one, two = target_stimuli_ensure(target=first), target_stimuli_ensure(target=second)
    assert one["target"] is None and one["text"] == "the red ball" and not one["text_fallback"]
    assert two["target"] is None and two["text"] == "ball" and two["text_fallback"]


def _write_png(path: str, mask: np.ndarray) -> str:
    buffer = io.BytesIO()
    PILImage.fromarray(np.where(mask, 255, 0).astype(np.uint8), mode="L").save(buffer, format="PNG")
    return default_storage.save(path, ContentFile(buffer.getvalue()))


@pytest.mark.django_db
@pytest.mark.parametrize("mode", [DisplayMode.OBJECT_CUTOUT, DisplayMode.TEXT_DESCRIPTION])
def test_error_targets_show_the_error_region_not_the_instance(tmp_path, media, mode):
    dataset = make_dataset(tmp_path, n_images=1, size=(160, 120))
    study = make_study(dataset, publish=True, display_mode=mode)
    first = _first_target(study)
    instance = first.instance
    round_2 = Round.objects.create(study=study, number=2)
    error = np.zeros((120, 160), dtype=bool)
    error[2:26, 4:44] = True  # a false-positive patch of background, away from the object
    target = Target.objects.create(
        round=round_2,
        instance=instance,
        click_type=Target.ClickType.FP,
        model_type="embedded",
        full_stem=f"{instance.image.stem}_embedded_fp",
        error_mask_file=_write_png("rounds/test/error.png", error),
        error_area=int(error.sum()),
    )
    record = target_stimuli_ensure(target=Target.objects.select_related("round__study").get(pk=target.pk))
    assert record["mode"] == DisplayMode.OBJECT_CUTOUT
    assert record["mode_fallback"] == (mode == DisplayMode.TEXT_DESCRIPTION)
    display, picture = _decode(record["display"]["name"]), _decode(record["target"]["name"])
    assert np.abs(picture[_erode(error, 3)] - display[_erode(error, 3)]).mean() < 8
    object_inside = _erode(_mask(instance, (160, 120)), 3)
    assert np.abs(picture[object_inside] - np.array(GRAY_RGB)).max() < 12


@pytest.mark.django_db
def test_files_are_content_addressed_and_rendering_is_idempotent(tmp_path, media):
    dataset = make_dataset(tmp_path, n_images=1, size=(160, 120), objects_per_image=2)
    study = make_study(dataset, publish=True)
    targets = list(Target.objects.filter(round__study=study).order_by("id"))
    assert round_stimuli_render(round_id=targets[0].round_id) == 2
    one, two = (Target.objects.get(pk=t.pk).stimuli for t in targets)
    assert one["display"]["name"] == two["display"]["name"]  # same image, stored once
    assert one["target"]["name"] != two["target"]["name"]
    files = sorted(p.name for p in (media / "stimuli").iterdir())
    assert files == sorted({one["display"]["name"], one["target"]["name"], two["target"]["name"]})
    assert round_stimuli_render(round_id=targets[0].round_id) == 0
    study.display_long_side = 80
    study.save()
    assert round_stimuli_render(round_id=targets[0].round_id) == 2
    assert round_stimuli_render(round_id=999999) == 0


@pytest.mark.django_db
def test_unreadable_mask_names_the_target_and_file(tmp_path, media):
    dataset = make_dataset(tmp_path, n_images=1, size=(80, 60))
    study = make_study(dataset, publish=True)
    target = _first_target(study)
    default_storage.delete(target.instance.mask_file.name)
    default_storage.save(target.instance.mask_file.name, ContentFile(b"not a png"))
    from collector.services.stimuli import StimulusError

    with pytest.raises(StimulusError, match=target.full_stem):
        target_stimuli_ensure(target=target)


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_publishing_renders_stimuli_in_a_real_worker(tmp_path, celery_worker):
    from tests.support.celery_worker import wait_until

    dataset = make_dataset(tmp_path, n_images=3, size=(96, 64))
    study = make_study(dataset, publish=True)  # sends tasks.stimuli.render_round_stimuli on commit

    def all_rendered():
        records = list(Target.objects.filter(round__study=study).values_list("stimuli", flat=True))
        return len(records) == 3 and all(r.get("display") for r in records)

    wait_until(
        all_rendered, timeout_s=60, what=f"stimuli of study {study.pk}; worker log:\n{celery_worker.log()}"
    )
    record = Target.objects.filter(round__study=study).first().stimuli
    assert default_storage.exists(stimulus_path(record["target"]["name"]))
