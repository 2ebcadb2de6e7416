"""The RClicks ``full_stem`` grammar (``../shared/spec/rclicks-protocol.md`` §1.1), built and checked.

Round 1: ``<image_stem>`` for a single-object mask, ``<image_stem>_______<object_stem>`` (seven
underscores) for a multi-object one. Later rounds: ``<round-1 stem>_<model>_<fn|fp>``, followed by
``_<device>_<k>`` when the previous mask came from one first-round click (device, index k).

Pure Python, no Django: the next-round build (``collector.services.next_round``) names its targets with
:func:`full_stem_build`, the RClicks export (``exports.rclicks``) checks the stored keys with
:func:`full_stem_check`, and a researcher can name masks of their own the same way. Nobody cuts a
``full_stem`` apart (protocol §8 item 8): the explicit columns come from the database or the CSV; the grammar
is only used to build a key and to check that a stored key matches them.
"""

from __future__ import annotations

OBJECT_SEPARATOR = "_______"
ERROR_CLICK_TYPES = ("fn", "fp")
CLICK_TYPES = ("first", *ERROR_CLICK_TYPES)
DEVICES = ("pc", "mobile")
#: The ``model_type`` values of the RClicks clicks CSV (protocol §1.1): the methods of its previous masks. Its
#: readers find a task's image by cutting ``full_stem`` at ``_ritm``, ``_sam``, ``_simple`` or ``_mivos``.
RCLICKS_MODEL_TYPES = ("ritm", "sam", "simple", "mivos")


def rclicks_model_type(model: str) -> str:
    """The ``model_type`` cell of the RClicks CSV for a previous mask made by ``model`` (our token): the token
    itself when it is one of :data:`RCLICKS_MODEL_TYPES`, else "" (the method is not one RClicks knows; the
    export names it in its ``model_name`` column and manifest instead)."""
    return model if model in RCLICKS_MODEL_TYPES else ""


class FullStemError(ValueError):
    """A ``full_stem`` does not follow the RClicks grammar; the message names the target and the fix."""


def full_stem_build(
    *,
    image_stem: str,
    object_stem: str = "",
    click_type: str = "first",
    model_type: str = "",
    source_device: str = "",
    source_index: int | None = None,
) -> str:
    """The ``full_stem`` of one task.

    Args:
      image_stem: image file name without extension (may hold spaces, dots and underscores).
      object_stem: "" for a single-object mask, else the object id as text.
      click_type: "first", "fn" or "fp".
      model_type: segmenter of the previous mask ("" for "first"; required for fn/fp).
      source_device, source_index: the first-round click (device "pc"/"mobile", index k) the previous
        mask was predicted from; both or neither.

    Raises:
      FullStemError: an argument combination RClicks cannot express.
    """
    if not image_stem:
        raise FullStemError("image_stem is empty: every full_stem starts with the image stem.")
    if click_type not in CLICK_TYPES:
        raise FullStemError(f"click_type {click_type!r} is not one of {list(CLICK_TYPES)}.")
    base = f"{image_stem}{OBJECT_SEPARATOR}{object_stem}" if object_stem else image_stem
    if click_type == "first":
        if model_type or source_device or source_index is not None:
            raise FullStemError(
                f"first-round task {base!r} has model_type={model_type!r}, source_device={source_device!r}, "
                f"source_index={source_index!r}; a first click has no previous mask, so leave them empty."
            )
        return base
    if not model_type or "_" in model_type:
        raise FullStemError(
            f"{click_type} task of {base!r}: model_type {model_type!r} must be a non-empty name without "
            "underscores (it is a token of the full_stem, e.g. 'ritm', 'sam', 'simple')."
        )
    stem = f"{base}_{model_type}_{click_type}"
    if not source_device and source_index is None:
        return stem
    if source_device not in DEVICES or source_index is None or source_index < 0:
        raise FullStemError(
            f"{click_type} task {stem!r}: source_device={source_device!r}, source_index={source_index!r}; give "
            f"both (device one of {list(DEVICES)}, index >= 0) or neither."
        )
    return f"{stem}_{source_device}_{source_index}"


def full_stem_check(
    *,
    full_stem: str,
    image_stem: str,
    object_stem: str,
    click_type: str,
    model_type: str,
    source_device: str,
    source_index: int | None,
    what: str,
) -> None:
    """Raise :class:`FullStemError` when ``full_stem`` is not the grammar's key for the other fields.

    ``what`` names the row at fault in the message (e.g. ``"target 12 of study 3"``).
    """
    try:
        expected = full_stem_build(
            image_stem=image_stem,
            object_stem=object_stem,
            click_type=click_type,
            model_type=model_type,
            source_device=source_device,
            source_index=source_index,
        )
    except FullStemError as exc:
        raise FullStemError(f"{what}: {exc}") from None
    if full_stem != expected:
        raise FullStemError(
            f"{what}: full_stem {full_stem!r} does not follow the RClicks grammar for image_stem={image_stem!r}, "
            f"object_stem={object_stem!r}, click_type={click_type!r}, model_type={model_type!r}, "
            f"source=({source_device!r}, {source_index!r}); expected {expected!r}. Fix the target's full_stem "
            "(it is built by the round services) before exporting."
        )
