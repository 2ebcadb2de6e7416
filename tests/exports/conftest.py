"""Fixtures of the export tests: a private media root and a small study covering every kind of row."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.factories import (
    draw_dataset_folder,
    make_clicked_session,
    make_correction_round,
    make_correction_target,
    make_study,
)


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path) -> Path:
    """A media root per test (plain-http settings come from the root conftest)."""
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@dataclass
class SmallStudy:
    """The golden study: rows as the player, the validation and the next-round build leave them."""

    study: object
    dataset: object
    folder: Path
    targets: dict  # full_stem -> Target


def build_small_study(tmp_path: Path, *, owner=None, name: str = "Mixed stems") -> SmallStudy:
    """Images ``single one.v2`` (one object), ``multi_x`` (two objects), ``x_sample`` (one object), 160x120.

    Round 1 targets (4) and round 2 targets: fn with a pc source click, fp with a mobile source click on
    the second object of ``multi_x``, fn without a source suffix (mivos-like). Sessions: pc and mobile
    counted round-1 batches, a rejected batch, counted round-2 batches on pc and mobile. Counted sessions
    also hold one invalid click each, which the default export leaves out.
    """
    from collector.models import Target
    from collector.services.datasets import dataset_import

    folder = tmp_path / "dataset"
    draw_dataset_folder(folder, stems=["single one.v2", "x_sample"], seed=1)
    draw_dataset_folder(folder, stems=["multi_x"], objects_per_image=2, seed=2)
    dataset = dataset_import(path=folder, layout="folder", name=name).dataset
    study = make_study(dataset, publish=True, owner=owner, name="golden study")
    first = {t.full_stem: t for t in Target.objects.filter(round__study=study)}
    assert sorted(first) == ["multi_x_______1", "multi_x_______2", "single one.v2", "x_sample"]

    pc_1 = make_clicked_session(
        study,
        device="pc",
        clicks=[
            (first["multi_x_______1"], 40.7, 60.2),
            (first["multi_x_______2"], 160.0, 119.999),  # on the far edges: floor gives 160 -> clipped 159
            (first["single one.v2"], 80.5, 45.25),
            (first["x_sample"], 79.0, 75.9),
            (first["x_sample"], 3.0, 3.0, False),
        ],
    )
    make_clicked_session(
        study,
        device="mobile",
        clicks=[
            (first["single one.v2"], 81.999, 46.0),
            (first["multi_x_______2"], 105.3, 59.7),
            (first["x_sample"], -0.4, 74.2),  # a hair left of the image: clipped to 0
        ],
    )
    make_clicked_session(
        study,
        device="pc",
        validity="rejected",
        rejection_reason="fewer than 7 of 10 clicks valid",
        clicks=[(first["single one.v2"], 5.0, 5.0, False), (first["x_sample"], 6.0, 6.0)],
    )
    round_2 = make_correction_round(study)
    source = pc_1.trials.get(position=2).click
    fn_pc = make_correction_target(
        round_2,
        instance=first["single one.v2"].instance,
        click_type="fn",
        model_type="embedded",
        source_click=source,
        source_device="pc",
        source_index=0,
    )
    fp_mobile = make_correction_target(
        round_2,
        instance=first["multi_x_______2"].instance,
        click_type="fp",
        model_type="sam",
        source_device="mobile",
        source_index=3,
    )
    fn_plain = make_correction_target(
        round_2, instance=first["x_sample"].instance, click_type="fn", model_type="mivos"
    )
    make_clicked_session(
        study,
        round=round_2,
        device="pc",
        clicks=[
            (fn_pc, 90.0, 50.0),
            (fp_mobile, 30.5, 100.5),
            (fn_plain, 100.0, 70.0),
            (fn_plain, 1.0, 1.0, False),
        ],
    )
    make_clicked_session(study, round=round_2, device="mobile", clicks=[(fn_pc, 91.2, 52.8)])
    targets = {t.full_stem: t for t in Target.objects.filter(round__study=study)}
    return SmallStudy(study=study, dataset=dataset, folder=folder, targets=targets)


@pytest.fixture
def small_study(db, tmp_path) -> SmallStudy:
    return build_small_study(tmp_path)
