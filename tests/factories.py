"""Factories for test rows. Shared by every test module: append new functions, do not change others'.

Datasets are made the way users make them: image and mask files written into a folder layout, then
imported through ``collector.services.datasets.dataset_import``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

_counter = itertools.count(1)


def draw_dataset_folder(
    root: Path,
    *,
    n_images: int = 3,
    size: tuple[int, int] = (160, 120),
    objects_per_image: int = 1,
    stems: list[str] | None = None,
    ignore_band: bool = False,
    seed: int = 0,
) -> Path:
    """Write a ``folder``-layout dataset: textured RGB images and rectangle/ellipse object masks.

    ``size`` is (width, height). With ``objects_per_image > 1`` masks are ``<stem>_<k>.png``. With
    ``ignore_band`` each mask gets a 2-px band of value 128 around the object.
    """
    rng = np.random.default_rng(seed)
    width, height = size
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(parents=True, exist_ok=True)
    stems = stems or [f"img{i:02d}" for i in range(n_images)]
    yy, xx = np.mgrid[0:height, 0:width]
    for index, stem in enumerate(stems):
        image = (rng.integers(0, 60, (height, width, 3)) + np.array([40, 80, 120])).astype(np.uint8)
        for k in range(objects_per_image):
            cx = width * (k + 1) / (objects_per_image + 1)
            cy = height / 2 + (index % 3 - 1) * height / 8
            rx, ry = width / (3 * (objects_per_image + 1)), height / 4
            inside = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1.0
            image[inside] = np.array([200, 60 + 40 * k, 50], dtype=np.uint8)
            mask = np.where(inside, 255, 0).astype(np.uint8)
            if ignore_band:
                grown = ((xx - cx) / (rx + 2)) ** 2 + ((yy - cy) / (ry + 2)) ** 2 <= 1.0
                mask[grown & ~inside] = 128
            name = f"{stem}.png" if objects_per_image == 1 else f"{stem}_{k + 1}.png"
            PILImage.fromarray(mask, mode="L").save(root / "masks" / name)
        PILImage.fromarray(image).save(root / "images" / f"{stem}.jpg", quality=92)
    return root


def make_dataset(tmp_path: Path, *, name: str | None = None, **folder_options):
    """Draw a folder dataset under ``tmp_path`` and import it; returns the Dataset row."""
    from collector.services.datasets import dataset_import

    name = name or f"synthetic-{next(_counter)}"
    folder = draw_dataset_folder(tmp_path / name, **folder_options)
    return dataset_import(path=folder, layout="folder", name=name).dataset


def make_study(dataset, *, publish: bool = False, name: str | None = None, owner=None, **fields):
    """A study of ``dataset`` (draft, or published with round 1 when ``publish``)."""
    from collector.models import Study
    from collector.services.studies import study_create, study_publish

    study = study_create(name=name or f"study-{next(_counter)}", dataset=dataset, owner=owner, **fields)
    if publish:
        study_publish(study_id=study.pk)
        study = Study.objects.get(pk=study.pk)
    return study


def make_worker(*, platform: str = "link", external_id: str | None = None):
    from collector.services.workers import worker_get_or_create

    return worker_get_or_create(platform=platform, external_id=external_id or f"worker-{next(_counter)}")


def make_researcher(username: str | None = None, *, staff: bool = True, password: str = "pw-for-tests-1"):
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user(username=username or f"researcher{next(_counter)}", password=password)
    user.is_staff = staff
    user.save()
    group, _ = Group.objects.get_or_create(name="researchers")
    user.groups.add(group)
    return user
