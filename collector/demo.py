"""The demo dataset: photos that ship with scikit-image, with instance masks this project draws.

No file is copied from elsewhere: images come from ``skimage.data`` (bundled in the pip package) and
masks are computed here (OpenCV GrabCut from a rectangle we chose per object, with a fixed seed; coins by
thresholding and labelling). The result is a ``folder``-layout dataset with a ``descriptions.csv`` for
Text Description mode.
"""

from __future__ import annotations

import csv
from pathlib import Path

import cv2
import numpy as np
from PIL import Image as PILImage
from scipy import ndimage as ndi

DEMO_DATASET_NAME = "Clicklab demo"

#: image stem -> (loader name in skimage.data, [(object stem, GrabCut rectangle x, y, w, h, description)])
_GRABCUT_OBJECTS = {
    "astronaut": (
        "astronaut",
        [
            ("person", (140, 20, 300, 492), "the astronaut in the orange suit"),
            ("helmet", (350, 300, 162, 212), "the black space helmet in the lower right corner"),
            ("shuttle", (395, 0, 80, 280), "the space shuttle model behind her"),
        ],
    ),
    "coffee": ("coffee", [("cup", (150, 30, 320, 330), "the red coffee cup on its saucer")]),
    "rocket": ("rocket", [("rocket", (240, 50, 120, 380), "the rocket on the launch pad")]),
    "camera": ("camera", [("cameraman", (90, 40, 250, 440), "the man with the camera on a tripod")]),
}


def _as_rgb(image: np.ndarray) -> np.ndarray:
    return np.stack([image] * 3, axis=-1) if image.ndim == 2 else image[:, :, :3]


def _grabcut(image: np.ndarray, rect: tuple[int, int, int, int]) -> np.ndarray:
    cv2.setRNGSeed(0)
    labels = np.zeros(image.shape[:2], np.uint8)
    cv2.grabCut(
        cv2.cvtColor(image, cv2.COLOR_RGB2BGR), labels, rect, np.zeros((1, 65)), np.zeros((1, 65)), 5,
        cv2.GC_INIT_WITH_RECT,
    )  # fmt: skip
    mask = np.isin(labels, (cv2.GC_FGD, cv2.GC_PR_FGD))
    # keep the largest component, holes filled: an object, not speckle
    components, count = ndi.label(mask)
    if count > 1:
        sizes = ndi.sum(mask, components, range(1, count + 1))
        mask = components == (int(np.argmax(sizes)) + 1)
    return ndi.binary_fill_holes(mask)


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


def build_demo_dataset(folder: Path) -> Path:
    """Write the demo dataset into ``folder`` (images/, masks/<stem>_<object>.png, descriptions.csv)."""
    import skimage.data

    (folder / "images").mkdir(parents=True, exist_ok=True)
    (folder / "masks").mkdir(parents=True, exist_ok=True)
    rows = []
    for stem, (loader, objects) in _GRABCUT_OBJECTS.items():
        image = _as_rgb(getattr(skimage.data, loader)())
        PILImage.fromarray(image).save(folder / "images" / f"{stem}.png")
        for object_stem, rect, description in objects:
            mask = _grabcut(image, rect)
            PILImage.fromarray(np.where(mask, 255, 0).astype(np.uint8), mode="L").save(
                folder / "masks" / f"{stem}_{object_stem}.png"
            )
            rows.append((stem, object_stem, description))
    coins = skimage.data.coins()
    PILImage.fromarray(_as_rgb(coins)).save(folder / "images" / "coins.png")
    for object_stem, mask, description in _coins(coins):
        PILImage.fromarray(np.where(mask, 255, 0).astype(np.uint8), mode="L").save(
            folder / "masks" / f"coins_{object_stem}.png"
        )
        rows.append(("coins", object_stem, description))
    with open(folder / "descriptions.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image_stem", "object_stem", "description"])
        writer.writerows(rows)
    return folder
