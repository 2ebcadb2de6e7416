"""The demo dataset: photos that ship with scikit-image, with instance masks this project draws.

No file is copied from elsewhere: images come from ``skimage.data`` (bundled in the pip package) and the
masks are made here, deterministically:

* photos: a polygon traced by hand on the photo (coordinates below, canonical pixels, x = column,
  y = row), refined by OpenCV GrabCut in a narrow band around its outline only (``REFINE_BAND_PX`` each
  side; ``cv2.setRNGSeed(0)``). Deep inside the polygon is sure object, far outside is sure background, and
  ``exclude`` polygons (another object in front, e.g. the helmet the astronaut holds) are sure background,
  so the refinement snaps the outline to the photo's edges but can never move it by more than the band.
  Rectangle-initialised GrabCut, the first version, took the astronaut's head for the whole person and
  the black helmet for background.
* coins: Otsu threshold and connected components (three coins of the second row).

``tests/collector/test_demo.py`` checks every mask against points picked by hand on the photos (points
that must be inside and points that must be outside). ``DEMO_MASKS_VERSION`` names the drawing: the
demo command builds ``var/demo/dataset-v<version>`` and imports it as ``DEMO_DATASET_NAME``, so an older
demo folder (with the old masks) is left alone rather than re-imported under the same name.

The result is a ``folder``-layout dataset with a ``descriptions.csv`` for Text Description mode.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from PIL import Image as PILImage
from scipy import ndimage as ndi

DEMO_MASKS_VERSION = 2
DEMO_DATASET_NAME = f"Clicklab demo v{DEMO_MASKS_VERSION}"
#: GrabCut may move a traced outline by at most this many pixels (each side).
REFINE_BAND_PX = 4
GRABCUT_ITERATIONS = 5

Polygon = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class DemoObject:
    """One object of a photo: ``outline`` traced by hand, ``exclude`` polygons of things in front of it."""

    stem: str
    description: str
    outline: Polygon
    exclude: tuple[Polygon, ...] = field(default=())


_HELMET: Polygon = (
    (279, 512), (281, 473), (288, 443), (299, 417), (316, 390), (336, 370), (356, 355), (373, 347),
    (399, 343), (429, 348), (456, 360), (476, 377), (489, 397), (494, 420), (497, 453), (512, 455),
    (512, 512),
)  # fmt: skip

#: image stem -> (loader name in skimage.data, objects)
_TRACED_OBJECTS: dict[str, tuple[str, tuple[DemoObject, ...]]] = {
    "astronaut": (
        "astronaut",
        (
            DemoObject(
                "person",
                "the astronaut in the orange suit",
                (
                    # hair, from the top, clockwise
                    (228, 13), (255, 15), (280, 25), (296, 45), (302, 70), (301, 100), (294, 118),
                    (282, 132), (270, 140), (266, 160), (268, 176),
                    # neck ring and right shoulder
                    (288, 190), (300, 205), (306, 222), (316, 240), (333, 257), (344, 270), (353, 287),
                    (358, 310), (363, 333), (366, 348),
                    # along the helmet she holds, then the bottom edge
                    (356, 355), (336, 370), (316, 390), (299, 417), (288, 443), (281, 473), (279, 512),
                    (23, 512),
                    # left arm up to the shoulder
                    (20, 437), (18, 393), (23, 360), (30, 327), (37, 300), (42, 270), (50, 250), (67, 237),
                    (97, 218), (112, 205),
                    # neck ring, left of the neck, then the hair
                    (115, 190), (125, 175), (140, 162), (160, 153), (178, 150), (182, 140), (176, 125),
                    (165, 112), (155, 90), (153, 65), (160, 45), (175, 30), (195, 20),
                ),
                exclude=(_HELMET,),
            ),
            DemoObject(
                "helmet",
                "the black space helmet in the lower right corner",
                _HELMET,
            ),
            DemoObject(
                "shuttle",
                "the space shuttle model behind her",
                (
                    (402, 0), (428, 0), (431, 20), (434, 45), (440, 42), (447, 40), (452, 46), (454, 60),
                    (455, 200), (457, 215), (458, 225), (460, 240), (462, 275), (440, 280), (420, 282),
                    (395, 282), (378, 278), (376, 250), (380, 225), (355, 224), (352, 216), (365, 205),
                    (380, 190), (383, 150), (383, 50), (386, 42), (392, 40), (397, 45), (398, 20),
                ),
            ),
        ),
    ),
    "coffee": (
        "coffee",
        (
            DemoObject(
                "cup",
                "the red and white coffee cup (not the saucer or the spoon)",
                (
                    (290, 18), (330, 22), (360, 32), (385, 48), (400, 70), (407, 95), (408, 120),
                    (404, 155), (396, 185), (385, 210), (370, 233), (352, 250), (337, 265), (317, 280),
                    (290, 284), (262, 278), (258, 272), (250, 290), (237, 301), (215, 300), (203, 292),
                    (197, 268), (202, 245), (212, 232), (200, 214), (188, 190), (178, 150), (175, 110),
                    (180, 85), (195, 60), (215, 40), (245, 25),
                ),
            ),
        ),
    ),
    "rocket": (
        "rocket",
        (
            DemoObject(
                "rocket",
                "the white rocket in the middle (not the towers)",
                (
                    (322, 126), (327, 128), (331, 136), (333, 150), (334, 170), (335, 400), (310, 400),
                    (310, 170), (311, 150), (313, 136), (317, 128),
                ),
            ),
        ),
    ),
    "camera": (
        "camera",
        (
            DemoObject(
                "cameraman",
                "the man in the black coat (not the camera or the tripod)",
                (
                    # hair and face, from the top, clockwise
                    (200, 64), (225, 67), (245, 78), (258, 93), (265, 110), (268, 128), (262, 140),
                    (257, 155), (254, 165), (250, 176), (243, 183), (240, 195),
                    # sleeve and glove under the camera
                    (246, 205), (265, 207), (285, 207), (300, 212), (303, 235), (297, 248), (288, 255),
                    # coat: elbow, hem, legs (the gap between the legs is background)
                    (287, 290), (267, 305), (232, 300), (207, 293), (192, 317), (177, 340), (160, 360),
                    (143, 380), (145, 413), (148, 447), (150, 480), (152, 512), (130, 512), (100, 447),
                    (95, 512), (0, 512),
                    # back of the coat up to the collar
                    (0, 250), (3, 247), (17, 220), (33, 197), (53, 173), (77, 147), (100, 130), (137, 120),
                    (157, 107), (163, 97), (175, 80), (190, 68),
                ),
            ),
        ),
    ),
}  # fmt: skip


def _as_rgb(image: np.ndarray) -> np.ndarray:
    return np.stack([image] * 3, axis=-1) if image.ndim == 2 else image[:, :, :3]


def polygon_mask(polygon: Polygon, *, shape: tuple[int, int]) -> np.ndarray:
    """Bool (H, W) mask of a polygon given in pixel coordinates (x = column, y = row)."""
    canvas = np.zeros(shape, np.uint8)
    points = np.clip(np.asarray(polygon, np.int32), 0, [shape[1] - 1, shape[0] - 1])
    cv2.fillPoly(canvas, [points], 1)
    return canvas.astype(bool)


def traced_mask(image: np.ndarray, obj: DemoObject, *, band_px: int = REFINE_BAND_PX) -> np.ndarray:
    """The object's mask: its traced polygon, refined by GrabCut within ``band_px`` of the outline.

    ``image``: (H, W, 3) uint8 RGB. Returns bool (H, W). Deterministic (OpenCV's RNG seeded)."""
    shape = image.shape[:2]
    traced = polygon_mask(obj.outline, shape=shape)
    excluded = np.zeros(shape, bool)
    for polygon in obj.exclude:
        excluded |= polygon_mask(polygon, shape=shape)
    traced &= ~excluded
    inner = ndi.binary_erosion(traced, iterations=band_px)
    outer = ndi.binary_dilation(traced, iterations=band_px)
    labels = np.full(shape, cv2.GC_BGD, np.uint8)
    labels[outer & ~traced] = cv2.GC_PR_BGD
    labels[traced] = cv2.GC_PR_FGD
    labels[inner] = cv2.GC_FGD
    labels[excluded] = cv2.GC_BGD
    cv2.setRNGSeed(0)
    # (0, 0, 0, 0): the rect, unused when GrabCut starts from the mask (it is what None converts to)
    cv2.grabCut(
        cv2.cvtColor(image, cv2.COLOR_RGB2BGR), labels, (0, 0, 0, 0), np.zeros((1, 65)), np.zeros((1, 65)),
        GRABCUT_ITERATIONS, cv2.GC_INIT_WITH_MASK,
    )  # fmt: skip
    mask = np.isin(labels, (cv2.GC_FGD, cv2.GC_PR_FGD))
    # One object, not speckle: the component holding the sure part, holes filled.
    components, count = ndi.label(mask)
    if count > 1:
        sizes = ndi.sum(mask, components, range(1, count + 1))
        mask = components == (int(np.argmax(sizes)) + 1)
    return ndi.binary_fill_holes(mask) & ~excluded


def _coins(image: np.ndarray) -> list[tuple[str, np.ndarray, str]]:
    """Three coins of the middle row, by Otsu threshold and connected components."""
    from skimage.filters import threshold_otsu

    binary = ndi.binary_opening(ndi.binary_fill_holes(image > threshold_otsu(image)), iterations=2)
    labels, count = ndi.label(binary)
    height, width = image.shape
    coins = []
    for label in range(1, count + 1):
        ys, xs = np.nonzero(labels == label)
        touches_border = ys.min() == 0 or xs.min() == 0 or ys.max() == height - 1 or xs.max() == width - 1
        if not touches_border and 900 < ys.size < 4000 and height * 0.3 < ys.mean() < height * 0.6:
            coins.append((xs.mean(), labels == label))
    coins.sort(key=lambda item: item[0])
    picked = [coins[0], coins[len(coins) // 2], coins[-1]]
    names = ("left", "middle", "right")
    return [
        (f"coin-{name}", mask, f"the {name} coin of the second row")
        for name, (_, mask) in zip(names, picked, strict=True)
    ]


def _save_mask(mask: np.ndarray, path: Path) -> None:
    PILImage.fromarray(np.where(mask, 255, 0).astype(np.uint8), mode="L").save(path)


def build_demo_dataset(folder: Path) -> Path:
    """Write the demo dataset into ``folder`` (images/, masks/<stem>_<object>.png, descriptions.csv)."""
    import skimage.data

    (folder / "images").mkdir(parents=True, exist_ok=True)
    (folder / "masks").mkdir(parents=True, exist_ok=True)
    rows = []
    for stem, (loader, objects) in _TRACED_OBJECTS.items():
        image = _as_rgb(getattr(skimage.data, loader)())
        PILImage.fromarray(image).save(folder / "images" / f"{stem}.png")
        for obj in objects:
            _save_mask(traced_mask(image, obj), folder / "masks" / f"{stem}_{obj.stem}.png")
            rows.append((stem, obj.stem, obj.description))
    coins = skimage.data.coins()
    PILImage.fromarray(_as_rgb(coins)).save(folder / "images" / "coins.png")
    for object_stem, mask, description in _coins(coins):
        _save_mask(mask, folder / "masks" / f"coins_{object_stem}.png")
        rows.append(("coins", object_stem, description))
    with open(folder / "descriptions.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image_stem", "object_stem", "description"])
        writer.writerows(rows)
    return folder
