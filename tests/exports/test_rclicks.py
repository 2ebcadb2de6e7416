"""RClicks export: golden CSV bytes, round trip through benchmark.rclicks, masks, previews, messages."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage

from benchmark.datasets import open_dataset
from benchmark.rclicks import CLICKS_COLUMNS as READER_COLUMNS
from benchmark.rclicks import error_mask, group_tasks, read_clicks_csv
from collector.models import Click, Session, Target
from exports.rclicks import CLICKS_COLUMNS, pixel_index, prev_masks_dir, rclicks_export
from exports.selectors import ExportError
from tests.exports.conftest import build_small_study
from tests.factories import make_clicked_session, make_correction_round, make_correction_target, make_study

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden" / "rclicks_small_study_clicks.csv"


def _read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_columns_are_the_datasheet_order_the_benchmark_reader_expects():
    assert CLICKS_COLUMNS == READER_COLUMNS
    assert CLICKS_COLUMNS[:7] == (
        "dataset",
        "image_stem",
        "object_stem",
        "model_type",
        "click_type",
        "full_stem",
        "device",
    )


@pytest.mark.parametrize(
    ("value", "size", "expected"),
    [
        (0.0, 10, 0),
        (0.999, 10, 0),
        (9.999, 10, 9),
        (10.0, 10, 9),
        (57.3, 10, 9),
        (-0.01, 10, 0),
        (-7.5, 10, 0),
        (4.5, 10, 4),
    ],
)
def test_pixel_index_floors_then_clips(value, size, expected):
    assert pixel_index(value, size) == expected


@pytest.mark.django_db
def test_golden_csv_bytes_of_a_small_study(small_study, tmp_path):
    result = rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path / "out")
    produced = result.clicks_csv.read_bytes()
    assert GOLDEN.is_file(), (
        f"golden file {GOLDEN} is missing; it is part of the repository (tests/fixtures/golden)."
    )
    assert produced == GOLDEN.read_bytes(), "clicks.csv differs from the golden file:\n" + produced.decode()
    assert result.rows == 11
    assert result.previews_csv is None and not (tmp_path / "out" / "previews.csv").exists()


@pytest.mark.django_db
def test_golden_study_rows_cover_every_kind_and_match_the_database(small_study, tmp_path):
    rows = _read_rows(rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path / "out").clicks_csv)
    assert {r["click_type"] for r in rows} == {"first", "fn", "fp"}
    assert {r["device"] for r in rows} == {"pc", "mobile"}
    assert {r["object_stem"] for r in rows} == {"", "1", "2"}
    first_rows = [r for r in rows if r["click_type"] == "first"]
    assert all(r["model_type"] == "" for r in first_rows)
    # Expected rows recomputed from the stored clicks: valid clicks of counted sessions only.
    expected = sorted(
        (c.trial.target.full_stem, c.trial.session.device, pixel_index(c.x, 160), pixel_index(c.y, 120))
        for c in Click.objects.filter(trial__session__study=small_study.study).select_related(
            "trial__target", "trial__session"
        )
        if c.is_valid and c.trial.session.validity == Session.Validity.COUNTED
    )
    produced = sorted((r["full_stem"], r["device"], int(r["x"]), int(r["y"])) for r in rows)
    assert produced == expected
    assert all((r["w"], r["h"]) == ("160", "120") for r in rows)


@pytest.mark.django_db
def test_full_stem_grammar_in_the_export(small_study, tmp_path):
    stems = {
        r["full_stem"]: r
        for r in _read_rows(rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path).clicks_csv)
    }
    assert stems["multi_x_______2"]["object_stem"] == "2"  # seven underscores before the object id
    assert "multi_x_______2".count("_") == 8
    # model_type keeps the RClicks vocabulary; the model RClicks has no token for is named in model_name
    assert stems["single one.v2_embedded_fn_pc_0"]["model_type"] == ""
    assert stems["single one.v2_embedded_fn_pc_0"]["model_name"] == "embedded"
    assert (
        stems["multi_x_______2_sam_fp_mobile_3"]["model_type"],
        stems["x_sample_mivos_fn"]["model_type"],
    ) == (
        "sam",
        "mivos",
    )
    assert stems["multi_x_______2_sam_fp_mobile_3"]["click_type"] == "fp"
    assert stems["x_sample_mivos_fn"]["image_stem"] == "x_sample"  # no _<device>_<k> suffix


@pytest.mark.django_db
def test_round_trip_through_the_benchmark_loader(small_study, tmp_path):
    out = tmp_path / "out"
    rclicks_export(study_ids=[small_study.study.pk], out_dir=out)
    frame = read_clicks_csv(out / "clicks.csv")
    assert frame["object_stem"].map(type).eq(str).all() and not frame.isna().any().any()
    dataset = open_dataset(small_study.folder, "folder", name=small_study.dataset.name)
    masks = prev_masks_dir(out_dir=out, dataset=dataset.name)
    tasks = group_tasks(frame, dataset, prev_masks_dir=masks)

    stored: dict[str, list[tuple[float, float, str]]] = {}
    for click in (
        Click.objects.filter(
            trial__session__study=small_study.study, is_valid=True, trial__session__validity="counted"
        )
        .select_related("trial__target", "trial__session")
        .order_by("trial__target_id", "id")
    ):
        stored.setdefault(click.trial.target.full_stem, []).append(
            (pixel_index(click.x, 160), pixel_index(click.y, 120), click.trial.session.device)
        )
    assert {t.full_stem for t in tasks} == set(stored)
    samples = {s.key: s for s in dataset.samples}
    for task in tasks:
        target = small_study.targets[task.full_stem]
        assert (task.key.image_stem, task.key.object_stem) == (
            target.instance.image.stem,
            target.instance.object_stem,
        )
        assert (task.click_type, task.model_type) == (target.click_type, target.model_type)
        got = [(x, y, d) for (x, y), d in zip(task.clicks_xy.tolist(), task.devices.tolist())]
        assert got == [(float(x), float(y), d) for x, y, d in stored[task.full_stem]]
        region = error_mask(task, samples[task.key], masks)
        obj, _ = samples[task.key].load_masks()
        if task.click_type != "first":
            with PILImage.open(target.previous_mask_file.path) as image:
                previous = np.asarray(image) > 127
            expected = obj & ~previous if task.click_type == "fn" else ~obj & previous
            assert np.array_equal(region, expected)


@pytest.mark.django_db
def test_prev_masks_are_8_bit_0_255_at_image_size_in_the_reference_folder(small_study, tmp_path):
    result = rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path)
    folder = prev_masks_dir(out_dir=tmp_path, dataset=small_study.dataset.name)
    assert folder == tmp_path / "SUBSEC_MASKS" / "Mixed stems" / "fn_fp"
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        "multi_x_______2_sam_fp_mobile_3.png",
        "single one.v2_embedded_fn_pc_0.png",
        "x_sample_mivos_fn.png",
    ]
    assert result.masks == 3
    for name in names:
        with PILImage.open(folder / name) as image:
            assert image.mode == "L" and image.size == (160, 120)
            assert set(np.unique(np.asarray(image)).tolist()) == {0, 255}


@pytest.mark.django_db
def test_reference_mask_folders_for_benchmark_datasets(tmp_path):
    assert (
        prev_masks_dir(out_dir=tmp_path, dataset="TETRIS")
        == tmp_path / "SUBSEC_MASKS/tetris_fn_fp/tetris_fn_fp_masks"
    )
    for name in ("GrabCut", "Berkeley", "DAVIS", "COCO"):
        assert (
            prev_masks_dir(out_dir=tmp_path, dataset=name)
            == tmp_path / "SUBSEC_MASKS/all_benchmark_datasets/fn_fp"
        )


def _store_0_1_mask(target) -> np.ndarray:
    array = np.zeros((120, 160), dtype=np.uint8)
    array[10:20, 30:50] = 1
    with open(target.previous_mask_file.path, "wb") as handle:
        PILImage.fromarray(array, mode="L").save(handle, format="PNG")
    return array


@pytest.mark.django_db
def test_a_stored_0_1_mask_is_written_as_0_255_when_values_are_verified(small_study, tmp_path):
    array = _store_0_1_mask(small_study.targets["x_sample_mivos_fn"])
    rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path, verify_mask_values=True)
    path = prev_masks_dir(out_dir=tmp_path, dataset=small_study.dataset.name) / "x_sample_mivos_fn.png"
    assert np.array_equal(np.asarray(PILImage.open(path)), array * 255)


@pytest.mark.django_db
def test_by_default_grey_png_masks_are_copied_as_stored_and_other_files_converted(small_study, tmp_path):
    grey = small_study.targets["x_sample_mivos_fn"]
    array = _store_0_1_mask(grey)  # header-only check: an 8-bit grey PNG is taken as it is
    colour = small_study.targets["single one.v2_embedded_fn_pc_0"]
    rgb = np.zeros((120, 160, 3), dtype=np.uint8)
    rgb[40:60, 10:30] = 255
    PILImage.fromarray(rgb).save(colour.previous_mask_file.path, format="PNG")
    rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path)
    folder = prev_masks_dir(out_dir=tmp_path, dataset=small_study.dataset.name)
    assert (folder / "x_sample_mivos_fn.png").read_bytes() == open(grey.previous_mask_file.path, "rb").read()
    assert np.array_equal(np.asarray(PILImage.open(folder / "x_sample_mivos_fn.png")), array)
    with PILImage.open(folder / "single one.v2_embedded_fn_pc_0.png") as image:
        assert image.mode == "L" and np.array_equal(np.asarray(image), rgb[..., 0])


@pytest.mark.django_db
def test_a_mask_of_the_wrong_size_is_refused_with_its_name(small_study, tmp_path):
    target = small_study.targets["x_sample_mivos_fn"]
    PILImage.fromarray(np.zeros((60, 80), dtype=np.uint8), mode="L").save(
        target.previous_mask_file.path, format="PNG"
    )
    with pytest.raises(ExportError, match=r"x_sample_mivos_fn.*80x60 but the image is 160x120"):
        rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path)


@pytest.mark.django_db
def test_a_full_stem_off_the_grammar_is_refused_naming_the_target(small_study, tmp_path):
    target = small_study.targets["single one.v2_embedded_fn_pc_0"]
    Target.objects.filter(pk=target.pk).update(full_stem="single one.v2_embedded_fn_0")
    with pytest.raises(ExportError, match=rf"target {target.pk} .*expected 'single one.v2_embedded_fn_pc_0'"):
        rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path)


@pytest.mark.django_db
def test_include_invalid_adds_a_valid_column_after_the_eleven_and_the_model_name(small_study, tmp_path):
    result = rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path, include_invalid=True)
    with open(result.clicks_csv, newline="") as handle:
        header = next(csv.reader(handle))
    assert header == [*CLICKS_COLUMNS, "model_name", "valid"]
    rows = _read_rows(result.clicks_csv)
    assert len(rows) == Click.objects.filter(trial__session__study=small_study.study).count() == 15
    assert sum(r["valid"] == "1" for r in rows) == 11
    rejected = [r for r in rows if (r["full_stem"], r["x"], r["y"]) == ("x_sample", "6", "6")]
    assert [r["valid"] for r in rejected] == ["0"]  # a valid click of a rejected session is not counted
    frame = read_clicks_csv(result.clicks_csv)
    assert list(frame.columns) == [*CLICKS_COLUMNS, "model_name", "valid"]


@pytest.mark.django_db
def test_stems_with_spaces_dots_and_underscores_survive(tmp_path):
    from collector.services.datasets import dataset_import
    from tests.factories import draw_dataset_folder

    folder = draw_dataset_folder(tmp_path / "data", stems=["a b.c d", "v1.2_sam_x", "tail.", "12.5"], seed=4)
    dataset = dataset_import(path=folder, layout="folder", name="dotted").dataset
    study = make_study(dataset, publish=True)
    targets = list(Target.objects.filter(round__study=study))
    make_clicked_session(study, clicks=[(t, 50.0, 40.0) for t in targets])
    rclicks_export(study_ids=[study.pk], out_dir=tmp_path / "out")
    frame = read_clicks_csv(tmp_path / "out" / "clicks.csv")
    assert sorted(frame["image_stem"]) == ["12.5", "a b.c d", "tail.", "v1.2_sam_x"]
    assert sorted(frame["full_stem"]) == sorted(frame["image_stem"])
    tasks = group_tasks(frame, open_dataset(folder, "folder", name="dotted"))
    assert sorted(t.key.image_stem for t in tasks) == ["12.5", "a b.c d", "tail.", "v1.2_sam_x"]


@pytest.mark.django_db
def test_no_counted_clicks_gives_a_header_only_csv_and_says_why(tmp_path):
    from tests.factories import make_dataset

    dataset = make_dataset(tmp_path, n_images=2)
    study = make_study(dataset, publish=True)
    targets = list(Target.objects.filter(round__study=study))
    for _ in range(3):
        make_clicked_session(
            study, validity="rejected", clicks=[(targets[0], 1.0, 1.0, False), (targets[1], 2.0, 2.0)]
        )
    said: list[str] = []
    result = rclicks_export(study_ids=[study.pk], out_dir=tmp_path / "out", on_message=said.append)
    assert result.clicks_csv.read_text() == ",".join([*CLICKS_COLUMNS, "model_name"]) + "\n"
    assert result.rows == 0
    assert said == result.messages and len(said) == 1
    assert f"study {study.pk}" in said[0] and "3 session(s) finished, none counted" in said[0]
    assert "fewer than 7 of 10 valid" in said[0]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["messages"] == said and manifest["studies"][0]["rows"] == 0


@pytest.mark.django_db
def test_a_study_without_sessions_says_so(tmp_path):
    from tests.factories import make_dataset

    study = make_study(make_dataset(tmp_path, n_images=1), publish=True)
    result = rclicks_export(study_ids=[study.pk], out_dir=tmp_path / "out")
    assert result.rows == 0 and "no sessions yet" in result.messages[0]


@pytest.mark.django_db
def test_unknown_study_is_named(tmp_path):
    with pytest.raises(ExportError, match="no study with id 987654"):
        rclicks_export(study_ids=[987654], out_dir=tmp_path)


@pytest.mark.django_db
def test_previews_csv_puts_display_modes_in_dataset_with_the_same_full_stems(tmp_path):
    from tests.factories import make_dataset

    dataset = make_dataset(tmp_path, n_images=2, objects_per_image=2)
    studies = [
        make_study(dataset, publish=True, display_mode="Text_Description"),
        make_study(dataset, publish=True, display_mode="Object_CutOut"),
    ]
    for index, study in enumerate(studies):
        targets = list(Target.objects.filter(round__study=study))
        make_clicked_session(study, device="pc", clicks=[(t, 30.0 + index, 40.0) for t in targets])
        make_clicked_session(study, device="mobile", clicks=[(t, 60.0, 41.0 + index) for t in targets])
    round_2 = make_correction_round(studies[1])
    fn = make_correction_target(
        round_2, instance=targets[0].instance, click_type="fn", source_device="pc", source_index=0
    )
    make_clicked_session(studies[1], round=round_2, clicks=[(fn, 10.0, 10.0)])

    out = tmp_path / "out"
    result = rclicks_export(study_ids=[s.pk for s in studies], out_dir=out)
    assert result.previews_csv == out / "previews.csv"
    previews = read_clicks_csv(out / "previews.csv")
    assert set(previews["dataset"]) == {"Text_Description", "Object_CutOut"}
    assert set(previews["click_type"]) == {"first"}  # only round-1 tasks in previews.csv
    per_mode = previews.groupby("dataset")["full_stem"].apply(lambda s: sorted(set(s)))
    assert per_mode["Text_Description"] == per_mode["Object_CutOut"]
    assert len(per_mode["Text_Description"]) == 4 and len(previews) == 16
    # the previews load with the benchmark when the folder is opened under the display-mode name
    tasks = group_tasks(previews, open_dataset(Path(dataset.source_path), "folder", name="Object_CutOut"))
    assert len(tasks) == 4 and all(len(t.clicks_xy) == 2 for t in tasks)
    clicks = read_clicks_csv(out / "clicks.csv")
    assert set(clicks["dataset"]) == {dataset.name} and len(clicks) == 17


@pytest.mark.django_db
def test_single_mode_study_writes_previews_only_when_asked(small_study, tmp_path):
    result = rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path, previews=True)
    previews = read_clicks_csv(result.previews_csv)
    assert set(previews["dataset"]) == {"Object_CutOut"} and len(previews) == result.preview_rows == 7


@pytest.mark.django_db
def test_two_studies_with_different_masks_under_one_full_stem_are_refused(tmp_path):
    a = build_small_study(tmp_path / "a")
    b_study = make_study(a.dataset, publish=True)
    round_2 = make_correction_round(b_study)
    instance = a.targets["x_sample"].instance
    other = np.zeros((120, 160), dtype=bool)
    other[:60] = True
    fn = make_correction_target(
        round_2, instance=instance, click_type="fn", model_type="mivos", previous_mask=other
    )
    make_clicked_session(b_study, round=round_2, clicks=[(fn, 5.0, 5.0)])
    with pytest.raises(ExportError, match=r"x_sample_mivos_fn.png.*previous masks differ.*separately"):
        rclicks_export(study_ids=[a.study.pk, b_study.pk], out_dir=tmp_path / "out")
    # the same mask content under the same full_stem is one task: fine
    left_half = np.zeros((120, 160), dtype=bool)
    left_half[:, :80] = True
    PILImage.fromarray(np.where(left_half, 255, 0).astype(np.uint8), mode="L").save(
        fn.previous_mask_file.path
    )
    result = rclicks_export(study_ids=[a.study.pk, b_study.pk], out_dir=tmp_path / "out")
    assert result.rows == 12 and result.masks == 3


@pytest.mark.django_db
def test_a_second_export_into_the_same_folder_leaves_nothing_stale(small_study, tmp_path):
    rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path, previews=True)
    Click.objects.filter(trial__target__round__number=2).delete()
    result = rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path)
    assert not (tmp_path / "previews.csv").exists()
    assert not (tmp_path / "SUBSEC_MASKS").exists() and result.masks == 0


@pytest.mark.django_db
def test_coco_mval_named_dataset_is_written_coco(tmp_path):
    from collector.models import Dataset

    small = build_small_study(tmp_path, name="COCO_MVal")
    Dataset.objects.filter(pk=small.dataset.pk).update(layout="coco_mval")
    rows = _read_rows(rclicks_export(study_ids=[small.study.pk], out_dir=tmp_path / "out").clicks_csv)
    assert {r["dataset"] for r in rows} == {"COCO"}
    assert (
        tmp_path / "out" / "SUBSEC_MASKS" / "all_benchmark_datasets" / "fn_fp" / "x_sample_mivos_fn.png"
    ).is_file()


@pytest.mark.django_db
def test_progress_bar_goes_to_stderr(small_study, tmp_path, capsys):
    rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path, progress=True)
    captured = capsys.readouterr()
    assert "clicks.csv" in captured.err and "11/11" in captured.err
    assert captured.out == ""


@pytest.mark.dataset
@pytest.mark.django_db
def test_grabcut_round_trip_with_real_images_masks_and_ignore_band(grabcut_root, tmp_path):
    """Real GrabCut: import, clicks on every object, fn/fp targets; the benchmark reads it all back."""
    from collector.services.datasets import dataset_import

    dataset = dataset_import(path=grabcut_root, layout="grabcut").dataset
    assert dataset.name == "GrabCut"
    study = make_study(dataset, publish=True)
    first = list(Target.objects.filter(round__study=study).select_related("instance__image"))
    assert len(first) == 21

    def centre(target) -> tuple[float, float]:
        inst = target.instance
        return (inst.bbox_x0 + inst.bbox_x1) / 2 + 0.3, (inst.bbox_y0 + inst.bbox_y1) / 2 + 0.6

    make_clicked_session(study, device="pc", clicks=[(t, *centre(t)) for t in first[:10]])
    make_clicked_session(study, device="mobile", clicks=[(t, *centre(t)) for t in first[10:]])
    round_2 = make_correction_round(study)
    with_band = next(t for t in first if t.instance.ignore_area > 0)
    chosen = with_band.instance
    with PILImage.open(chosen.mask_file.path) as image:
        gt = np.asarray(image) > 127
    half = gt.copy()
    half[:, (chosen.bbox_x0 + chosen.bbox_x1) // 2 :] = False  # the previous mask misses the right half
    grown = gt.copy()
    grown[chosen.bbox_y0 : chosen.bbox_y1 + 1, max(chosen.bbox_x0 - 15, 0) : chosen.bbox_x1 + 1] = True
    fn = make_correction_target(round_2, instance=chosen, click_type="fn", model_type="sam", previous_mask=half,
                                source_device="pc", source_index=0)  # fmt: skip
    fp = make_correction_target(round_2, instance=chosen, click_type="fp", model_type="sam", previous_mask=grown,
                                source_device="mobile", source_index=1)  # fmt: skip
    make_clicked_session(
        study, round=round_2, clicks=[(fn, chosen.bbox_x1 - 2.5, centre(with_band)[1]), (fp, 1.0, 1.0)]
    )

    out = tmp_path / "out"
    result = rclicks_export(study_ids=[study.pk], out_dir=out, verify_mask_values=True)
    assert result.rows == 23 and result.masks == 2
    frame = read_clicks_csv(out / "clicks.csv")
    assert set(frame["dataset"]) == {"GrabCut"} and set(frame["object_stem"]) == {""}
    opened = open_dataset(grabcut_root, "grabcut")
    masks_dir = out / "SUBSEC_MASKS" / "all_benchmark_datasets" / "fn_fp"
    tasks = {t.full_stem: t for t in group_tasks(frame, opened, prev_masks_dir=masks_dir)}
    assert len(tasks) == 23
    samples = {s.key: s for s in opened.samples}
    for target in first:
        task = tasks[target.full_stem]
        x, y = centre(target)
        assert task.clicks_xy.tolist() == [[float(int(x)), float(int(y))]]  # no rescale: w, h = loaded size
    obj, ignore = samples[tasks[fn.full_stem].key].load_masks()
    assert ignore.any()  # GrabCut's 128 band is there and is kept out of the error regions
    assert np.array_equal(
        error_mask(tasks[fn.full_stem], samples[tasks[fn.full_stem].key], masks_dir), obj & ~half & ~ignore
    )
    assert np.array_equal(
        error_mask(tasks[fp.full_stem], samples[tasks[fp.full_stem].key], masks_dir), ~obj & grown & ~ignore
    )


def _png(array: np.ndarray, **options) -> bytes:
    buffer = io.BytesIO()
    PILImage.fromarray(array).save(buffer, format="PNG", **options)
    return buffer.getvalue()


def test_png_header_reader_accepts_only_8_bit_grey_png():
    from exports.rclicks import png_grey8_size

    assert png_grey8_size(_png(np.zeros((7, 11), dtype=np.uint8))) == (11, 7)
    assert png_grey8_size(_png(np.zeros((7, 11, 3), dtype=np.uint8))) is None  # RGB
    assert png_grey8_size(_png(np.zeros((7, 11), dtype=np.uint16))) is None  # 16-bit
    assert png_grey8_size(_png(np.zeros((7, 11), dtype=bool))) is None  # 1-bit
    jpeg = io.BytesIO()
    PILImage.fromarray(np.zeros((7, 11), dtype=np.uint8)).save(jpeg, format="JPEG")
    assert png_grey8_size(jpeg.getvalue()) is None
    assert png_grey8_size(b"") is None


@pytest.mark.django_db
def test_the_manifest_names_who_made_each_previous_mask_and_the_rule_of_its_error_regions(
    small_study, tmp_path
):
    corrections = list(Target.objects.filter(round__study=small_study.study).exclude(click_type="first"))
    for target in corrections:
        Target.objects.filter(pk=target.pk).update(
            model_id=f"ritm:hrnet18_cocolvis:zoom400s1:flip1:limNone#{target.pk}",
            model_variant="hrnet18_cocolvis",
            checkpoint_sha256=f"{target.pk:064x}",
        )
    result = rclicks_export(study_ids=[small_study.study.pk], out_dir=tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["columns"] == [*CLICKS_COLUMNS, "model_name"]
    with open(result.clicks_csv, newline="") as handle:
        assert next(csv.reader(handle)) == [*CLICKS_COLUMNS, "model_name"]
    provenance = manifest["prev_mask_provenance"]
    assert len(provenance) == result.masks
    for target in corrections:
        assert provenance[f"{target.full_stem}.png"] == {
            "model_name": target.model_type,
            "model_type": target.model_type if target.model_type in ("sam", "mivos") else "",
            "model_id": f"ritm:hrnet18_cocolvis:zoom400s1:flip1:limNone#{target.pk}",
            "model_variant": "hrnet18_cocolvis",
            "checkpoint_sha256": f"{target.pk:064x}",
            "min_error_area_px": small_study.study.min_error_area_px,
        }


@pytest.mark.django_db
def test_the_manifest_names_the_dataset_its_content_hash_and_the_rules_of_the_rounds(small_study, tmp_path):
    from benchmark.datasets import dataset_content_hash

    study = small_study.study
    type(study).objects.filter(pk=study.pk).update(min_error_area_px=37, next_round_segmenter="embedded")
    rclicks_export(study_ids=[study.pk], out_dir=tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    # the hash the web app computes from what the import stored is the one the benchmark computes from the folder
    folder_hash = dataset_content_hash(open_dataset(small_study.folder, "folder", name="whatever"))
    assert manifest["datasets"] == [
        {"name": "Mixed stems", "layout": "folder", "content_hash": folder_hash, "studies": [study.pk]}
    ]
    assert manifest["prev_masks_dirs"] == {"Mixed stems": "SUBSEC_MASKS/Mixed stems/fn_fp"}
    rules = manifest["studies"][0]["round_rules"]
    assert rules["min_error_area_px"] == 37 and rules["next_round_segmenter"] == "embedded"
    assert sorted(model["model_name"] for model in rules["models"]) == ["embedded", "mivos", "sam"]
    assert {m["model_name"]: m["model_type"] for m in rules["models"]} == {
        "embedded": "",
        "mivos": "mivos",
        "sam": "sam",
    }
    assert {p["min_error_area_px"] for p in manifest["prev_mask_provenance"].values()} == {37}


@pytest.mark.django_db
def test_two_studies_that_built_one_task_with_other_error_rules_are_refused(small_study, tmp_path):
    other = make_study(small_study.dataset, publish=True, name="second study")
    type(other).objects.filter(pk=other.pk).update(min_error_area_px=small_study.study.min_error_area_px + 1)
    round_2 = make_correction_round(other)
    target = small_study.targets["x_sample_mivos_fn"]
    twin = make_correction_target(round_2, instance=target.instance, click_type="fn", model_type="mivos")
    make_clicked_session(
        other, round=round_2, device="pc", clicks=[(twin, 100.0, 70.0)]
    )  # the same default mask
    with pytest.raises(
        ExportError, match=r"x_sample_mivos_fn.png: studies \d+ and \d+ share this task.*min_error_area_px"
    ):
        rclicks_export(study_ids=[small_study.study.pk, other.pk], out_dir=tmp_path / "out")


@pytest.mark.django_db
def test_a_study_without_a_finished_session_says_how_many_run_and_expired(tmp_path):
    from tests.factories import make_dataset

    study = make_study(make_dataset(tmp_path, n_images=2), publish=True)
    target = Target.objects.filter(round__study=study).first()
    make_clicked_session(study, status="started", validity="pending", clicks=[(target, 1.0, 1.0)])
    for _ in range(2):
        make_clicked_session(study, status="expired", validity="pending", clicks=[(target, 1.0, 1.0)])
    result = rclicks_export(study_ids=[study.pk], out_dir=tmp_path / "out")
    assert result.rows == 0 and "no session finished (1 still running, 2 expired)" in result.messages[0]
