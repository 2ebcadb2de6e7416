"""collector.services.next_round: the round-2 build from round-1 clicks (seed rule, fn/fp regions, files,
provenance, all-or-nothing), with a square predictor of exact geometry and with the embedded GrabCut one."""

from __future__ import annotations

import hashlib
import importlib
import re

import numpy as np
import pytest
import torch
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from PIL import Image as PILImage
from scipy import ndimage

from benchmark.metrics import iou
from benchmark.rclicks import drop_small_components, task_error_regions
from benchmark.stems import full_stem_check
from collector.models import Round, Target
from collector.services.datasets import dataset_import
from collector.services.next_round import (
    MAX_PREVIOUS_IOU,
    round_build_next,
    round_build_retry,
    rounds_awaiting_build,
)
from segmenters.base import Embedding, Prediction, Predictor
from segmenters.checkpoints import file_sha256, parse_checkpoint_table, resolve_checkpoint
from segmenters.registry import register, unregister
from tests.factories import make_clicked_session, make_rect_dataset, make_study
from tests.segmenters.standins import (
    PLAINVIT_MODEL,
    RITM_SERIALIZATION,
    TinyPlainVitModel,
    isegm_checkpoint,
    isegm_clone,
)

# --------------------------------------------------------------------------------------------------
# A predictor of exact geometry: a SIDE x SIDE square centred on the (last) click.

SIDE = 100


class SquarePredictor(Predictor):
    name = "test-square"
    model_type = "square"
    threshold = 0.5
    side = SIDE

    @property
    def model_id(self) -> str:
        return f"test-square-{self.side}"

    def encode(self, image: np.ndarray) -> Embedding:
        return Embedding(model_id=self.model_id, image_shape=image.shape[:2], payload=None, nbytes=0)

    def predict(self, embedding, clicks, previous_logits=None) -> Prediction:
        height, width = embedding.image_shape
        probabilities = np.zeros((height, width), dtype=np.float32)
        x0, y0 = round(clicks[-1].x - self.side / 2), round(clicks[-1].y - self.side / 2)
        probabilities[max(0, y0) : max(0, y0 + self.side), max(0, x0) : max(0, x0 + self.side)] = 1.0
        return Prediction(probabilities=probabilities)


class CheckpointedSquarePredictor(SquarePredictor):
    """The square predictor with variants (the square's side) and a checkpoint file, resolved and hashed
    by the library's own checkpoint code, like a real adapter."""

    name = "test-square-ckpt"
    variants = {"side100": "square_100.bin", "side60": "square_60.bin"}

    def __init__(self, *, checkpoint=None, variant: str = "side100", checkpoint_dir=None) -> None:
        self.variant = variant
        self.side = int(variant.removeprefix("side"))
        self.checkpoint_path = resolve_checkpoint(
            predictor_name=self.name,
            variant=variant,
            checkpoint=checkpoint,
            default_file_name=self.variants[variant],
            directory=checkpoint_dir,
            download_hint="written by the test",
        )
        self._sha256 = file_sha256(self.checkpoint_path)

    @property
    def checkpoint_hash(self) -> str:
        return self._sha256


class BrokenPredictor(SquarePredictor):
    """A predictor with a bug (not a SegmenterError): the build must not hide it as a configuration error."""

    name = "test-broken"
    model_type = "broken"

    def predict(self, embedding, clicks, previous_logits=None) -> Prediction:
        raise KeyError("a bug in the predictor, not a configuration error")


RECT = (150, 100, 249, 199)  # the object of make_rect_dataset: 100 x 100 px, centre (200, 150)
CX, CY = 200.0, 150.0


@pytest.fixture
def square_segmenter(settings, tmp_path):
    """Registered for the test only, so the registry's contract tests never see it."""
    register("test-square")(SquarePredictor)
    settings.NEXT_ROUND_SEGMENTERS = ["test-square"]
    settings.MEDIA_ROOT = str(tmp_path / "media")
    yield settings
    unregister("test-square")


def _closed_round_1(study):
    round_1 = study.rounds.get(number=1)
    Round.objects.filter(pk=round_1.pk).update(state=Round.State.CLOSED)
    return round_1


def _read(name: str) -> np.ndarray:
    with default_storage.open(name, "rb") as handle:
        picture = PILImage.open(handle)
        picture.load()
    assert picture.mode == "L", f"{name} is {picture.mode}, want an 8-bit single-channel PNG"
    return np.asarray(picture)


# --------------------------------------------------------------------------------------------------
# Pure parts


def test_iou_leaves_out_the_ignore_band():
    mask = np.zeros((10, 10), bool)
    mask[2:8, 2:8] = True
    prediction = np.zeros_like(mask)
    prediction[2:8, 2:9] = True  # one extra column
    assert iou(prediction, mask, None) == pytest.approx(36 / 42)
    ignore = np.zeros_like(mask)
    ignore[:, 8] = True
    assert iou(prediction, mask, ignore) == 1.0


def test_small_components_are_dropped_before_the_area_check():
    region = np.zeros((40, 40), bool)
    region[0:10, 0:10] = True  # 100 px
    region[20:25, 20:25] = True  # 25 px
    region[30, 30] = True  # 1 px
    kept = drop_small_components(region, min_area_px=25)
    assert int(kept.sum()) == 125 and not kept[30, 30]
    mask = np.zeros((40, 40), bool)
    previous = region.copy()  # everything is fp
    regions = task_error_regions(mask=mask, previous=previous, ignore=None, min_area_px=101)
    assert regions == {"fn": None, "fp": None}  # 126 px in total, but no component reaches 101
    regions = task_error_regions(mask=mask, previous=previous, ignore=None, min_area_px=30)
    assert regions["fn"] is None and int(regions["fp"].sum()) == 100


# --------------------------------------------------------------------------------------------------
# The build with exact geometry


@pytest.mark.django_db
def test_seed_rule_picks_the_best_mask_not_above_095_and_makes_fn_fp_targets(tmp_path, square_segmenter):
    study = make_study(make_rect_dataset(tmp_path, n_images=2), publish=True, min_error_area_px=100)
    round_1 = study.rounds.get(number=1)
    t0, t1 = round_1.targets.order_by("instance__image__stem")
    # Instance 0: pc clicks at +0 (IoU 1.0, too good), +10 px (0.818); mobile click at +5 px (0.905): the
    # previous mask comes from the mobile click, k = 1. A rejected session's click and an invalid click
    # are ignored and do not count for k.
    make_clicked_session(study, clicks=[(t0, CX + 3, CY)], validity="rejected")
    make_clicked_session(study, clicks=[(t0, CX, CY), (t1, CX + 20, CY)])
    make_clicked_session(study, clicks=[(t0, CX + 30, CY, False)], device="mobile")
    make_clicked_session(study, clicks=[(t0, CX + 10, CY)])
    make_clicked_session(study, clicks=[(t0, CX + 5, CY), (t1, CX, CY + 2)], device="mobile")
    _closed_round_1(study)

    result = round_build_next(round_id=round_1.pk)

    assert result.created and result.round.number == 2 and result.round.state == Round.State.OPEN
    targets = {(t.instance_id, t.click_type): t for t in result.round.targets.all()}
    assert set(targets) == {(t0.instance_id, "fn"), (t0.instance_id, "fp"), (t1.instance_id, "fn"),
                            (t1.instance_id, "fp")}  # fmt: skip
    fn, fp = targets[(t0.instance_id, "fn")], targets[(t0.instance_id, "fp")]
    assert (fn.source_device, fn.source_index, fn.model_type) == ("mobile", 1, "square")
    assert fn.source_click.x == CX + 5 and fp.source_click_id == fn.source_click_id
    assert fn.previous_iou == pytest.approx(95 / 105) and fn.previous_iou <= MAX_PREVIOUS_IOU
    assert fn.full_stem == f"{t0.instance.image.stem}_square_fn_mobile_1"
    assert fp.full_stem == f"{t0.instance.image.stem}_square_fp_mobile_1"
    # fn: the 5 left columns of the object; fp: the 5 columns right of it.
    fn_mask, fp_mask = _read(fn.error_mask_file.name) == 255, _read(fp.error_mask_file.name) == 255
    x0, y0, x1, y1 = RECT
    expected_fn = np.zeros_like(fn_mask)
    expected_fn[y0 : y1 + 1, x0 : x0 + 5] = True
    expected_fp = np.zeros_like(fp_mask)
    expected_fp[y0 : y1 + 1, x1 + 1 : x1 + 6] = True
    assert np.array_equal(fn_mask, expected_fn) and np.array_equal(fp_mask, expected_fp)
    assert (fn.error_area, fp.error_area) == (500, 500)
    previous = _read(fn.previous_mask_file.name)
    assert previous.shape == (300, 400) and set(np.unique(previous)) == {0, 255}
    assert int((previous == 255).sum()) == SIDE * SIDE and fn.previous_mask_file == fp.previous_mask_file
    # Instance 1: pc click at +20 px (IoU 0.667), mobile at +2 px vertically (0.961 > 0.95): the pc one.
    fn1 = targets[(t1.instance_id, "fn")]
    assert (fn1.source_device, fn1.source_index) == ("pc", 1)
    assert fn1.previous_iou == pytest.approx(80 / 120) and fn1.error_area == 2000
    for target in result.round.targets.select_related("instance__image"):
        full_stem_check(
            full_stem=target.full_stem, image_stem=target.instance.image.stem,
            object_stem=target.instance.object_stem, click_type=target.click_type,
            model_type=target.model_type, source_device=target.source_device,
            source_index=target.source_index, what=f"target {target.pk}",
        )  # fmt: skip


@pytest.mark.django_db
def test_k_counts_valid_clicks_per_device_in_click_order(tmp_path, square_segmenter):
    study = make_study(make_rect_dataset(tmp_path, n_images=1), publish=True)
    round_1 = study.rounds.get(number=1)
    (target,) = round_1.targets.all()
    for dx in (0, 1, 30):  # pc k = 1 (IoU 1.0), k = 2 (0.980), k = 3 (0.538)
        make_clicked_session(study, clicks=[(target, CX + dx, CY)])
    for dy in (40, 12):  # mobile k = 1 (0.429), k = 2 (0.786): the best overall
        make_clicked_session(study, clicks=[(target, CX, CY + dy)], device="mobile")
    _closed_round_1(study)
    result = round_build_next(round_id=round_1.pk)
    fn = result.round.targets.get(click_type="fn")
    assert (fn.source_device, fn.source_index) == ("mobile", 2)
    assert fn.previous_iou == pytest.approx(88 / 112)


@pytest.mark.django_db
def test_no_candidate_or_no_click_gives_no_target_and_says_why(tmp_path, square_segmenter):
    study = make_study(make_rect_dataset(tmp_path, n_images=2), publish=True)
    round_1 = study.rounds.get(number=1)
    perfect, unclicked = round_1.targets.order_by("instance__image__stem")
    make_clicked_session(study, clicks=[(perfect, CX, CY)])
    make_clicked_session(study, clicks=[(perfect, CX + 1, CY + 1)], device="mobile")  # IoU 0.98
    _closed_round_1(study)
    result = round_build_next(round_id=round_1.pk)
    assert result.round.targets.count() == 0 and result.round.state == Round.State.CLOSED
    assert "IoU > 0.95" in result.skipped[perfect.instance_id]
    assert result.skipped[unclicked.instance_id] == "no valid first click in a counted session"


@pytest.mark.django_db
def test_regions_under_the_minimum_area_are_dropped(tmp_path, square_segmenter):
    study = make_study(make_rect_dataset(tmp_path, n_images=1), publish=True, min_error_area_px=501)
    round_1 = study.rounds.get(number=1)
    (target,) = round_1.targets.all()
    make_clicked_session(study, clicks=[(target, CX + 5, CY)])  # fn 500 px, fp 500 px
    _closed_round_1(study)
    result = round_build_next(round_id=round_1.pk)
    assert result.round.targets.count() == 0
    assert result.skipped[target.instance_id] == "fn region under 501 px; fp region under 501 px"


@pytest.mark.django_db
def test_ignore_band_is_outside_the_regions_and_the_iou(tmp_path, square_segmenter):
    dataset = make_rect_dataset(tmp_path, n_images=1, ignore_width=3)
    study = make_study(dataset, publish=True, min_error_area_px=100)
    round_1 = study.rounds.get(number=1)
    (target,) = round_1.targets.all()
    make_clicked_session(study, clicks=[(target, CX + 8, CY)])  # fp: 8 columns, 3 of them in the band
    _closed_round_1(study)
    result = round_build_next(round_id=round_1.pk)
    fp = result.round.targets.get(click_type="fp")
    fn = result.round.targets.get(click_type="fn")
    assert fp.error_area == 5 * 100 and fn.error_area == 8 * 100
    assert fp.previous_iou == pytest.approx(92 * 100 / (100 * 100 + 5 * 100))


@pytest.mark.django_db
def test_build_is_idempotent_and_guarded(tmp_path, square_segmenter):
    study = make_study(make_rect_dataset(tmp_path, n_images=1), publish=True)
    round_1 = study.rounds.get(number=1)
    (target,) = round_1.targets.all()
    make_clicked_session(study, clicks=[(target, CX + 5, CY)])
    assert round_build_next(round_id=round_1.pk).round is None  # still open
    _closed_round_1(study)
    first = round_build_next(round_id=round_1.pk)
    second = round_build_next(round_id=round_1.pk)
    assert first.created and not second.created and second.round.pk == first.round.pk
    assert (
        Round.objects.filter(study=study).count() == 2 and Target.objects.filter(round__number=2).count() == 2
    )
    assert round_build_next(round_id=first.round.pk).round is None  # round 2 is the last (max_rounds 2)
    assert round_build_next(round_id=10**9).round is None


@pytest.mark.django_db
def test_last_round_gets_no_next_round(tmp_path, square_segmenter):
    study = make_study(make_rect_dataset(tmp_path, n_images=1), publish=True, max_rounds=1)
    round_1 = _closed_round_1(study)
    (target,) = round_1.targets.all()
    make_clicked_session(study, clicks=[(target, CX + 5, CY)])
    assert round_build_next(round_id=round_1.pk).round is None
    assert not Round.objects.filter(study=study, number=2).exists()


def _files_under(folder: str) -> list[str]:
    found = []
    try:
        folders, files = default_storage.listdir(folder)
    except FileNotFoundError:
        return found
    found += [f"{folder}/{name}" for name in files]
    for sub in folders:
        found += _files_under(f"{folder}/{sub}")
    return found


@pytest.mark.django_db
def test_failed_build_leaves_no_round_and_no_files_and_orphans_are_cleaned(tmp_path, square_segmenter):
    study = make_study(make_rect_dataset(tmp_path, n_images=2), publish=True)
    round_1 = study.rounds.get(number=1)
    t0, t1 = round_1.targets.order_by("instance__image__stem")
    make_clicked_session(study, clicks=[(t0, CX + 5, CY), (t1, CX + 5, CY)])
    _closed_round_1(study)
    # A crashed earlier build left files behind.
    orphan = default_storage.save(
        f"rounds/study_{study.pk}/round_2/build_dead/error/x.png", ContentFile(b"not a png")
    )
    # The second instance's mask is gone: the build fails after computing the first instance.
    mask_name = t1.instance.mask_file.name
    saved = default_storage.open(mask_name, "rb").read()
    default_storage.delete(mask_name)
    failed = round_build_next(round_id=round_1.pk)
    assert failed.round is None and not failed.created and mask_name in failed.error
    round_1.refresh_from_db()
    assert round_1.build_error == failed.error and round_1.build_failed_at is not None
    assert not Round.objects.filter(study=study, number=2).exists()
    assert _files_under(f"rounds/study_{study.pk}/round_2") == [orphan]
    # Repaired, the build still waits for a retry (it is not re-run by a redelivered message or the beat).
    default_storage.save(mask_name, ContentFile(saved))
    assert round_build_next(round_id=round_1.pk).error == failed.error
    assert round_1.pk not in rounds_awaiting_build()
    assert not Round.objects.filter(study=study, number=2).exists()
    # Retried, the build runs once and removes the orphan.
    assert round_build_retry(round_id=round_1.pk) and not round_build_retry(round_id=round_1.pk)
    round_1.refresh_from_db()
    assert (round_1.build_error, round_1.build_failed_at) == ("", None)
    result = round_build_next(round_id=round_1.pk)
    assert result.created and result.round.targets.count() == 4
    assert not default_storage.exists(orphan)
    files = _files_under(f"rounds/study_{study.pk}/round_2")
    stored = set(Target.objects.filter(round=result.round).values_list("error_mask_file", flat=True))
    stored |= set(Target.objects.filter(round=result.round).values_list("previous_mask_file", flat=True))
    assert set(files) == stored and len(stored) == 4 + 2


# --------------------------------------------------------------------------------------------------
# The study's segmenter choice, provenance, and failures shown to the researcher


@pytest.fixture
def checkpointed_square(settings, tmp_path):
    """``test-square-ckpt`` registered; the site's checkpoint folder holds the official side100 file and
    SEGMENTER_CHECKPOINTS names a side60 file kept elsewhere."""
    register("test-square-ckpt")(CheckpointedSquarePredictor)
    register("test-broken")(BrokenPredictor)
    settings.MEDIA_ROOT = str(tmp_path / "media")
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / "square_100.bin").write_bytes(b"official hundred")
    ours = tmp_path / "elsewhere" / "ours_60.bin"
    ours.parent.mkdir()
    ours.write_bytes(b"our sixty")
    settings.SEGMENTER_CHECKPOINT_DIR = folder
    settings.SEGMENTER_CHECKPOINTS = parse_checkpoint_table(f"test-square-ckpt:side60={ours}")
    settings.NEXT_ROUND_SEGMENTERS = ["test-square-ckpt"]
    yield {"official": folder / "square_100.bin", "ours": ours}
    unregister("test-square-ckpt")
    unregister("test-broken")


def _one_click_study(tmp_path, **fields):
    study = make_study(make_rect_dataset(tmp_path, n_images=1), publish=True, min_error_area_px=100, **fields)
    round_1 = study.rounds.get(number=1)
    (target,) = round_1.targets.all()
    make_clicked_session(study, clicks=[(target, CX + 5, CY)])
    return study, _closed_round_1(study)


@pytest.mark.django_db
def test_the_study_choice_picks_model_variant_and_checkpoint_and_targets_record_them(
    tmp_path, checkpointed_square
):
    chosen, round_chosen = _one_click_study(tmp_path / "a", next_round_segmenter="test-square-ckpt:side60")
    default, round_default = _one_click_study(tmp_path / "b")

    built = round_build_next(round_id=round_chosen.pk).round
    (fn,) = built.targets.all()  # a 60 px square inside the 100 px object: no fp region
    assert fn.click_type == "fn" and fn.error_area == 100 * 100 - 60 * 60
    assert (fn.model_type, fn.model_id, fn.model_variant) == ("square", "test-square-60", "side60")
    assert fn.checkpoint_sha256 == hashlib.sha256(b"our sixty").hexdigest()

    fn, fp = round_build_next(round_id=round_default.pk).round.targets.order_by("click_type")
    assert (fn.error_area, fp.error_area) == (500, 500)  # the site default: side100, official file
    for target in (fn, fp):
        assert (target.model_id, target.model_variant) == ("test-square-100", "side100")
        assert target.checkpoint_sha256 == hashlib.sha256(b"official hundred").hexdigest()


@pytest.mark.parametrize("case", ["checkpoint file missing", "package missing", "unknown segmenter"])
@pytest.mark.django_db
def test_a_segmenter_that_cannot_run_fails_the_build_with_its_reason(
    tmp_path, settings, checkpointed_square, case
):
    if case == "checkpoint file missing":
        settings.SEGMENTER_CHECKPOINTS = {}  # side60 now means its official file, absent from the folder
        segmenter = "test-square-ckpt:side60"
        expected = re.escape(f"not found at {checkpointed_square['official'].parent / 'square_60.bin'}")
    elif case == "package missing":  # really missing here: no RITM/SimpleClick clone (isegm) is installed
        segmenter = "simpleclick"
        expected = r"predictor 'simpleclick' cannot run here: the 'isegm' package is not installed"
    else:
        segmenter, expected = "nope", r"segmenter 'nope' is neither an entry of the checkpoint table"
    settings.NEXT_ROUND_SEGMENTERS = [segmenter]
    study, round_1 = _one_click_study(tmp_path)
    result = round_build_next(round_id=round_1.pk)
    assert result.round is None and re.search(expected, result.error), result.error
    round_1.refresh_from_db()
    assert round_1.build_error == result.error and round_1.build_failed_at is not None
    assert not Round.objects.filter(study=study, number=2).exists()
    assert round_1.pk not in rounds_awaiting_build()


@pytest.mark.django_db
def test_a_bug_in_a_segmenter_is_not_recorded_as_a_build_failure(tmp_path, settings, checkpointed_square):
    settings.NEXT_ROUND_SEGMENTERS = ["test-broken"]
    study, round_1 = _one_click_study(tmp_path)
    with pytest.raises(KeyError, match="a bug in the predictor"):
        round_build_next(round_id=round_1.pk)
    round_1.refresh_from_db()
    assert round_1.build_error == "" and round_1.pk in rounds_awaiting_build()


@pytest.mark.django_db
def test_a_study_cannot_choose_a_segmenter_the_site_cannot_name(tmp_path, checkpointed_square):
    dataset = make_rect_dataset(tmp_path, n_images=1)
    with pytest.raises(ValidationError, match="next_round_segmenter.*'sam:vit_x' is neither"):
        make_study(dataset, next_round_segmenter="sam:vit_x")
    assert make_study(dataset, next_round_segmenter="test-square-ckpt:side60").next_round_segmenter


# --------------------------------------------------------------------------------------------------
# Upstream models a researcher installs: a SimpleClick checkpoint (a plain ViT with a fixed patch grid) on
# images that are not its square, and an RITM clone whose code fails under this NumPy


@pytest.mark.django_db
def test_a_simpleclick_checkpoint_builds_round_2_from_images_that_are_not_its_square(
    tmp_path, settings, installed_package
):
    # The stand-in network fails on any input but 64 x 64 (as a real 448 model on anything but 448 x 448);
    # the 400 x 300 images of the dataset reach it only through the fixed-square zoom-in.
    settings.MEDIA_ROOT = str(tmp_path / "media")
    isegm_clone(installed_package, PLAINVIT_MODEL, module="is_plainvit_model")
    torch.manual_seed(0)
    params = {
        "img_size": 64,
        "patch_size": 16,
        "embed_dim": 160,
        "depth": 8,
    }  # ViT-xTiny's shape, 64 px square
    path = tmp_path / "models" / "our_vit_xtiny.pth"
    path.parent.mkdir()
    isegm_checkpoint(path, "isegm.model.is_plainvit_model.PlainVitModel", params, TinyPlainVitModel(**params))
    settings.SEGMENTER_CHECKPOINTS = parse_checkpoint_table(f"simpleclick:vit_xtiny:ours={path}")
    study, round_1 = _one_click_study(tmp_path / "data", next_round_segmenter="simpleclick:vit_xtiny:ours")

    result = round_build_next(round_id=round_1.pk)
    assert result.error == "" and result.created, result.error
    targets = list(result.round.targets.all())
    assert [t.click_type for t in targets] == ["fn"]  # a blob around the click, inside the 100 px object
    (fn,) = targets
    assert (fn.model_type, fn.model_variant) == ("simple", "vit_xtiny")
    assert fn.model_id.startswith("simpleclick:vit_xtiny:zoom64x64s-1")
    assert fn.checkpoint_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    previous = _read(fn.previous_mask_file.name) == 255
    assert previous[150, 205] and 0 < previous.sum() < 100 * 100


@pytest.mark.django_db
def test_a_checkpoint_listed_under_another_variant_fails_the_build_instead_of_mislabelling_its_masks(
    tmp_path, settings, installed_package
):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    isegm_clone(installed_package, PLAINVIT_MODEL, module="is_plainvit_model")
    params = {"img_size": 64, "patch_size": 16, "embed_dim": 160, "depth": 8}  # an xtiny ...
    path = tmp_path / "models" / "cocolvis_vit_base.pth"
    path.parent.mkdir()
    isegm_checkpoint(path, "isegm.model.is_plainvit_model.PlainVitModel", params, TinyPlainVitModel(**params))
    settings.SEGMENTER_CHECKPOINTS = parse_checkpoint_table(
        f"simpleclick:vit_base={path}"
    )  # ... listed as base
    study, round_1 = _one_click_study(tmp_path / "data", next_round_segmenter="simpleclick:vit_base")

    result = round_build_next(round_id=round_1.pk)

    assert result.round is None and not Target.objects.filter(round__study=study, round__number=2).exists()
    assert (
        "holds a vit160x8p16 network, not the vit768x12p16 of simpleclick variant 'vit_base'" in result.error
    )
    assert "pass variant 'vit_xtiny'" in result.error
    round_1.refresh_from_db()
    assert round_1.build_error == result.error


HRNET_MODEL_WITH_NP_INT = """
    import numpy as np
    import torch


    class HRNetModel(torch.nn.Module):
        with_prev_mask = True

        def __init__(self, width=18):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 1, 1)

        def forward(self, image, points):
            return {"instances": self.conv(image) * np.int(5)}
"""


@pytest.mark.django_db
def test_upstream_code_failing_on_a_click_fails_the_build_with_the_fix(tmp_path, settings, installed_package):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    isegm_clone(
        installed_package, HRNET_MODEL_WITH_NP_INT, module="is_hrnet_model", serialization=RITM_SERIALIZATION
    )
    module = importlib.import_module("isegm.model.is_hrnet_model")
    isegm_checkpoint(
        tmp_path / "coco_lvis_h18_itermask.pth",
        "isegm.model.is_hrnet_model.HRNetModel",
        {"width": 18},  # the default variant's architecture (the stand-in ignores the width)
        module.HRNetModel(),
    )
    settings.SEGMENTER_CHECKPOINT_DIR = tmp_path
    settings.NEXT_ROUND_SEGMENTERS = ["ritm"]  # its default variant: the official file name in that folder
    study, round_1 = _one_click_study(tmp_path / "data")

    result = round_build_next(round_id=round_1.pk)  # predicting, not building, fails: no exception escapes
    assert result.round is None
    assert result.error.startswith(
        "RITM clone (isegm): running the network on a (2, 4, 300, 400) input failed"
    )
    assert "np.int" in result.error and "is_hrnet_model.py" in result.error
    assert "replace np.int with int" in result.error
    round_1.refresh_from_db()
    assert round_1.build_error == result.error and round_1.build_failed_at is not None
    assert not Round.objects.filter(study=study, number=2).exists()
    assert round_1.pk not in rounds_awaiting_build()


# --------------------------------------------------------------------------------------------------
# GrabCut with the embedded segmenter


def _clicks_inside(mask: np.ndarray, ignore: np.ndarray, *, n: int, rng) -> list[tuple[float, float]]:
    """Realistic first clicks: the point deepest inside the object, then points drawn from its interior
    at least 10 px from the boundary (x = column, y = row, pixel centres)."""
    depth = ndimage.distance_transform_edt(mask & ~ignore)
    row, col = np.unravel_index(int(np.argmax(depth)), depth.shape)
    points = [(col + 0.5, row + 0.5)]
    rows, cols = np.nonzero(depth >= min(10.0, depth.max() / 2))
    for index in rng.choice(len(rows), size=n - 1, replace=False):
        points.append((cols[index] + 0.5, rows[index] + 0.5))
    return points


@pytest.mark.dataset
@pytest.mark.django_db
def test_grabcut_build_with_the_embedded_segmenter_gives_valid_fn_fp_targets(
    grabcut_root, settings, tmp_path
):
    settings.NEXT_ROUND_SEGMENTERS = ["embedded"]
    settings.MEDIA_ROOT = str(tmp_path / "media")
    dataset = dataset_import(path=grabcut_root, layout="grabcut", name="GrabCut").dataset
    study = make_study(dataset, publish=True, min_error_area_px=100)
    round_1 = study.rounds.get(number=1)
    chosen = list(round_1.targets.select_related("instance__image").order_by("instance__image__stem")[:3])
    rng = np.random.default_rng(3)
    for target in chosen:
        instance = target.instance
        mask = _read(instance.mask_file.name) > 127
        ignore = _read(instance.ignore_file.name) > 127 if instance.ignore_file else np.zeros_like(mask)
        (pc_a, pc_b, mobile) = _clicks_inside(mask, ignore, n=3, rng=rng)
        make_clicked_session(study, clicks=[(target, *pc_a)])
        make_clicked_session(study, clicks=[(target, *pc_b)])
        make_clicked_session(study, clicks=[(target, *mobile)], device="mobile")
    _closed_round_1(study)

    result = round_build_next(round_id=round_1.pk)

    assert result.created
    targets = list(result.round.targets.select_related("instance__image", "source_click__trial__session"))
    assert targets, f"no round-2 target; reasons: {result.skipped}"
    chosen_instances = {t.instance_id for t in chosen}
    assert {t.instance_id for t in targets} | set(result.skipped) >= chosen_instances
    assert len(set(result.skipped) - chosen_instances) == len(round_1.targets.all()) - 3
    for target in targets:
        instance, image = target.instance, target.instance.image
        assert target.instance_id in chosen_instances
        mask = _read(instance.mask_file.name) > 127
        ignore = _read(instance.ignore_file.name) > 127 if instance.ignore_file else np.zeros_like(mask)
        previous = _read(target.previous_mask_file.name)
        error = _read(target.error_mask_file.name)
        assert previous.shape == error.shape == (image.height, image.width)
        assert set(np.unique(previous)) <= {0, 255} and set(np.unique(error)) <= {0, 255}
        previous, error = previous == 255, error == 255
        allowed = (mask & ~previous if target.click_type == "fn" else ~mask & previous) & ~ignore
        assert not (error & ~allowed).any(), (
            f"{target.full_stem}: error pixels outside the {target.click_type} set"
        )
        assert int(error.sum()) == target.error_area >= study.min_error_area_px
        assert np.array_equal(drop_small_components(error, min_area_px=study.min_error_area_px), error)
        overlap = iou(previous, mask, ignore)
        assert overlap == pytest.approx(target.previous_iou) and overlap <= MAX_PREVIOUS_IOU
        assert target.model_type == "embedded"
        click = target.source_click
        assert click is not None and click.trial.target.instance_id == instance.pk
        assert click.trial.session.device == target.source_device and target.source_index >= 1
        same_device = sorted(
            (c.received_at, c.pk)
            for c in type(click).objects.filter(
                trial__target=click.trial.target, trial__session__device=target.source_device
            )
        )
        assert same_device.index((click.received_at, click.pk)) + 1 == target.source_index
        assert target.full_stem == (
            f"{instance.first_round_full_stem}_embedded_{target.click_type}_{target.source_device}_"
            f"{target.source_index}"
        )
