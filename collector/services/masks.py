"""Reading the stored pictures of a dataset as arrays: an image as RGB, an instance's object mask and ignore
band, any stored 0/255 mask by its storage name. One module for the next-round build, the corrective model
updates and their simulated annotators, and the qualification score (they imported the next round's private
readers before). No Django model is written here and no other service is imported, so every service can
use it without an import cycle.

Conventions: arrays at the image's canonical size, (H, W) row-major; masks bool (a stored pixel > 127 is
inside); images (H, W, 3) uint8 RGB.
"""

from __future__ import annotations

import numpy as np
from django.core.files.storage import default_storage
from PIL import Image as PILImage

from collector.models import Image, Instance


class MaskFileError(Exception):
    """A stored image or mask is missing from the media storage or does not fit its image; the message names
    the file and says what to do (re-import the dataset)."""


def read_gray(name: str, *, what: str) -> np.ndarray:
    """The stored picture ``name`` as (H, W) uint8 gray; ``what`` names it in the error."""
    try:
        with default_storage.open(name, "rb") as handle:
            picture: PILImage.Image = PILImage.open(handle)
            picture.load()
    except FileNotFoundError:
        raise MaskFileError(
            f"{what} file {name!r} is missing from the media storage; re-import the dataset."
        ) from None
    return np.asarray(picture.convert("L"))


def read_mask(name: str) -> np.ndarray:
    """A stored 0/255 mask (a corrective item's, a round's) as bool (H, W), at the size it was stored."""
    with default_storage.open(name, "rb") as handle:
        return np.asarray(PILImage.open(handle).convert("L")) > 127


def read_image(image: Image) -> np.ndarray:
    """(H, W, 3) uint8 RGB at the image's canonical size (``image.height``, ``image.width``)."""
    try:
        with image.file.open("rb") as handle:
            picture: PILImage.Image = PILImage.open(handle)
            picture.load()
    except FileNotFoundError:
        raise MaskFileError(
            f"image file {image.file.name!r} of {image} is missing from the media storage; re-import the dataset."
        ) from None
    picture = picture.convert("RGB")
    if picture.size != (image.width, image.height):
        picture = picture.resize((image.width, image.height), PILImage.Resampling.LANCZOS)
    return np.asarray(picture)


def instance_masks(instance: Instance) -> tuple[np.ndarray, np.ndarray | None]:
    """(object bool (H, W), ignore bool (H, W) or None) at the image's canonical size.

    Raises:
      MaskFileError: a file is missing, or a mask's size is not the image's.
    """
    shape = (instance.image.height, instance.image.width)
    mask = read_gray(instance.mask_file.name, what=f"mask of {instance}") > 127
    ignore = None
    if instance.ignore_file:
        ignore = read_gray(instance.ignore_file.name, what=f"ignore band of {instance}") > 127
    for name, array in (("mask", mask), ("ignore band", ignore)):
        if array is not None and array.shape != shape:
            raise MaskFileError(
                f"{name} of {instance} is {array.shape[1]}x{array.shape[0]}, the image is {shape[1]}x{shape[0]}; "
                "re-import the dataset."
            )
    return mask, ignore
