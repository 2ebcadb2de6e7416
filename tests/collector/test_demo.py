"""The demo dataset's masks against points picked by hand on the real photos.

Every point was read off the photos at 2-3x zoom with a pixel grid drawn over them (x = column, y = row,
canonical pixels). ``inside`` points lie well inside the object the description names, ``outside`` points
well outside it (on the background or on another object), never within a few pixels of an outline, so a
mask passes only when it covers what the description says. Overlays of every mask are written to
``var/screenshots/demo-mask-<name>.png`` for a person to look at.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage

from collector.demo import build_demo_dataset

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"

#: mask name -> (description must contain, inside points, outside points)
HAND_PICKED = {
    "astronaut_person": (
        "astronaut in the orange suit",
        [(225, 105), (230, 40), (225, 200), (90, 330), (170, 380), (330, 300), (60, 480), (200, 500)],
        [(20, 100), (100, 60), (340, 150), (400, 150), (400, 440), (480, 300), (130, 140)],
    ),
    "astronaut_helmet": (
        "helmet",
        [(400, 440), (450, 372), (330, 470), (480, 430)],
        [(250, 420), (480, 320), (225, 110), (340, 340)],
    ),
    "astronaut_shuttle": (
        "shuttle",
        [(415, 40), (398, 150), (445, 120), (370, 215), (420, 265)],
        [(360, 100), (470, 150), (300, 300), (420, 320), (225, 110)],
    ),
    "camera_cameraman": (
        "man in the black coat",
        [(235, 150), (205, 85), (50, 300), (60, 450), (200, 270), (120, 250), (125, 400)],
        [(300, 50), (100, 80), (290, 160), (292, 400), (400, 400), (112, 500), (245, 470), (15, 200)],
    ),
    "coffee_cup": (
        "coffee cup",
        [(290, 130), (200, 80), (225, 265), (330, 240), (290, 30)],
        [(120, 250), (500, 50), (365, 300), (300, 340), (420, 100)],
    ),
    "rocket_rocket": (
        "rocket",
        [(322, 140), (322, 250), (322, 390)],
        [(290, 250), (350, 250), (322, 418), (200, 250), (322, 100)],
    ),
    "coins_coin-left": ("left coin", [(45, 125)], [(105, 125), (45, 60), (45, 190)]),
    "coins_coin-middle": ("middle coin", [(206, 124)], [(145, 125), (270, 120), (206, 60)]),
    "coins_coin-right": ("right coin", [(336, 124)], [(270, 120), (345, 190), (336, 50)]),
}


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory) -> Path:
    return build_demo_dataset(tmp_path_factory.mktemp("demo") / "dataset")


def _overlay(image: np.ndarray, mask: np.ndarray, points, name: str) -> None:
    picture = image.astype(np.float32)
    picture[mask] = picture[mask] * 0.45 + np.array([0, 255, 0]) * 0.55
    picture[~mask] *= 0.5
    picture = picture.astype(np.uint8)
    for (x, y), colour in points:
        picture[max(0, y - 2) : y + 3, max(0, x - 2) : x + 3] = colour
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    PILImage.fromarray(picture).save(SCREENSHOTS / f"demo-mask-{name}.png")


def test_every_mask_has_hand_picked_points(demo_folder):
    names = {path.stem for path in (demo_folder / "masks").glob("*.png")}
    assert names == set(HAND_PICKED), "add hand-picked points for every new demo mask"


@pytest.mark.parametrize("name", sorted(HAND_PICKED))
def test_mask_covers_what_its_description_names(demo_folder, name):
    phrase, inside, outside = HAND_PICKED[name]
    image_stem, object_stem = name.split("_", 1)
    with open(demo_folder / "descriptions.csv", encoding="utf-8") as handle:
        descriptions = {
            (row["image_stem"], row["object_stem"]): row["description"] for row in csv.DictReader(handle)
        }
    assert phrase in descriptions[(image_stem, object_stem)]
    mask = np.asarray(PILImage.open(demo_folder / "masks" / f"{name}.png")) > 127
    image = np.asarray(PILImage.open(demo_folder / "images" / f"{image_stem}.png").convert("RGB"))
    assert mask.shape == image.shape[:2]
    _overlay(image, mask, [(p, (0, 0, 255)) for p in inside] + [(p, (255, 0, 0)) for p in outside], name)
    missed = [(x, y) for x, y in inside if not mask[y, x]]
    spilled = [(x, y) for x, y in outside if mask[y, x]]
    assert not missed and not spilled, (
        f"{name}: inside points not covered {missed}, outside points covered {spilled}"
    )


def test_masks_are_deterministic(demo_folder):
    """The same photo and outline give the same mask bytes again (GrabCut is seeded)."""
    import skimage.data

    from collector.demo import _TRACED_OBJECTS, traced_mask

    loader, objects = _TRACED_OBJECTS["astronaut"]
    image = np.asarray(getattr(skimage.data, loader)())
    for obj in objects:
        again = traced_mask(image, obj)
        stored = np.asarray(PILImage.open(demo_folder / "masks" / f"astronaut_{obj.stem}.png")) > 127
        assert np.array_equal(again, stored), obj.stem
