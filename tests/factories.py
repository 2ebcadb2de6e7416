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


# --- rounds, correction targets, sessions with clicks (EXPORTERS) ----------------------------------


def make_correction_round(study, *, number: int = 2):
    """Round ``number`` (>= 2) of ``study``, open, with no targets yet."""
    from collector.models import Round

    return Round.objects.create(study=study, number=number)


def make_correction_target(
    round,
    *,
    instance,
    click_type: str,
    model_type: str = "embedded",
    previous_mask=None,
    source_click=None,
    source_device: str = "",
    source_index: int | None = None,
    full_stem: str | None = None,
):
    """An fn/fp target as the next-round build makes it: full_stem by the RClicks grammar, the previous
    mask (bool (H, W) array, default: the left half of the image) saved as a 0/255 PNG in media storage."""
    import io

    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage

    from benchmark.stems import full_stem_build
    from collector.models import Target

    image = instance.image
    stem = full_stem or full_stem_build(
        image_stem=image.stem,
        object_stem=instance.object_stem,
        click_type=click_type,
        model_type=model_type,
        source_device=source_device,
        source_index=source_index,
    )
    if previous_mask is None:
        previous_mask = np.zeros((image.height, image.width), dtype=bool)
        previous_mask[:, : image.width // 2] = True
    buffer = io.BytesIO()
    PILImage.fromarray(np.where(previous_mask, 255, 0).astype(np.uint8), mode="L").save(buffer, format="PNG")
    name = default_storage.save(f"rounds/{round.pk}/previous/{stem}.png", ContentFile(buffer.getvalue()))
    return Target.objects.create(
        round=round,
        instance=instance,
        click_type=click_type,
        model_type=model_type,
        full_stem=stem,
        previous_mask_file=name,
        source_click=source_click,
        source_device=source_device,
        source_index=source_index,
    )


def make_clicked_session(
    study,
    *,
    clicks: list,
    device: str = "pc",
    worker=None,
    round=None,
    status: str = "finished",
    validity: str = "counted",
    rejection_reason: str = "",
    client_info: dict | None = None,
    pointer_type: str | None = None,
):
    """A session of ``study`` with one trial and one click per entry of ``clicks``.

    An entry is ``(target, x, y)`` or ``(target, x, y, is_valid)`` (x, y float canonical pixels; is_valid
    defaults to True, False gets reason ``outside_region``). Rows are written directly, as the player
    and the validation would leave them."""
    from datetime import timedelta

    from django.utils import timezone

    from collector.models import Click, Session, Trial

    worker = worker or make_worker()
    round = round or clicks[0][0].round
    now = timezone.now()
    session = Session.objects.create(
        study=study,
        round=round,
        worker=worker,
        device=device,
        user_agent="Mozilla/5.0 (test)",
        client_info=client_info if client_info is not None else {"viewport_width": 1280, "viewport_height": 720,
                                                                 "devicePixelRatio": 2.0, "refresh_hz": 60.0},
        status=status,
        validity=validity,
        valid_clicks=sum(1 for entry in clicks if (entry[3] if len(entry) > 3 else True)),
        rejection_reason=rejection_reason,
        expires_at=now + timedelta(minutes=30),
        finished_at=now if status == "finished" else None,
    )  # fmt: skip
    for position, entry in enumerate(clicks):
        target, x, y = entry[:3]
        is_valid = entry[3] if len(entry) > 3 else True
        trial = Trial.objects.create(
            session=session,
            target=target,
            position=position,
            phase_onsets_ms={"A": 100.0 + position, "B": 1600.0, "C": 3600.0, "D": 5100.0},
            refresh_hz=59.94,
        )
        Click.objects.create(
            trial=trial,
            idempotency_key=f"click-{session.pk}-{position}-{next(_counter)}",
            x=x,
            y=y,
            shown_width=target.instance.image.width,
            shown_height=target.instance.image.height,
            pointer_type=pointer_type or ("mouse" if device == "pc" else "touch"),
            reaction_ms=420.0 + position,
            event_timestamp_ms=5520.0 + position,
            is_valid=is_valid,
            distance_px=0.0 if is_valid else 25.0,
            invalid_reason="" if is_valid else "outside_region",
        )
    return session


# --- batches through the real services (DASHBOARD) ------------------------------------------------


def present_trials(session, *, seconds_ago: float = 30.0, positions=None) -> None:
    """Record each trial of ``session`` (or those at ``positions``) as presented ``seconds_ago`` seconds ago,
    as the player's ``presented`` report would have, so a click sent now is neither too early nor flagged
    ``not_presented`` (collector.services.presentations)."""
    from datetime import timedelta

    from django.utils import timezone

    from collector.models import Trial

    at = (timezone.now() - timedelta(seconds=seconds_ago)).isoformat()
    trials = Trial.objects.filter(session=session)
    if positions is not None:
        trials = trials.filter(position__in=positions)
    for trial in trials:
        trial.presentations = [{"id": f"factory-{trial.pk}", "at": at}]
        trial.save(update_fields=["presentations"])


def make_validated_batch(
    study,
    *,
    device: str = "pc",
    worker=None,
    valid_positions=None,
    reaction_ms: float = 480.0,
    phase_onsets_ms: dict | None = None,
    validate: bool = True,
):
    """One batch done the way a worker does it: ``session_start``, one ``click_record`` per trial (at the
    centre of the target's bounding box for positions in ``valid_positions`` — default all — else at the
    image's top-left corner), ``session_finish`` and, with ``validate``, ``session_validate``.

    Returns the session re-read from the database. Needs a published study with an open round."""
    from collector.models import Session
    from collector.services.clicks import click_record
    from collector.services.session_finish import session_finish
    from collector.services.session_start import session_start
    from collector.services.validation import session_validate

    worker = worker or make_worker()
    session = session_start(study=study, worker=worker, device=device, user_agent="Mozilla/5.0 (test)")
    onsets = phase_onsets_ms or {"A": 0.0, "B": 1500.0, "C": 3500.0, "D": 5000.0}
    present_trials(session)
    for trial in session.trials.select_related("target__instance__image").order_by("position"):
        instance = trial.target.instance
        if valid_positions is None or trial.position in valid_positions:
            x, y = (instance.bbox_x0 + instance.bbox_x1) / 2, (instance.bbox_y0 + instance.bbox_y1) / 2
        else:
            x, y = 0.5, 0.5
        click_record(
            session=session,
            position=trial.position,
            idempotency_key=f"batch-{session.pk}-{trial.position}",
            x=x,
            y=y,
            shown_width=float(instance.image.width),
            shown_height=float(instance.image.height),
            pointer_type="mouse" if device == "pc" else "touch",
            reaction_ms=reaction_ms + trial.position,
            event_timestamp_ms=onsets["D"] + reaction_ms,
            phase_onsets_ms=onsets,
            refresh_hz=60.0,
        )
    session_finish(session_id=session.pk)
    if validate:
        session_validate(session_id=session.pk)
    return Session.objects.get(pk=session.pk)


# --- exact geometry for validation tests (ALLOCATION) ---------------------------------------------


def make_rect_dataset(
    tmp_path: Path,
    *,
    n_images: int = 10,
    size: tuple[int, int] = (400, 300),
    rect: tuple[int, int, int, int] = (150, 100, 249, 199),
    ignore_width: int = 0,
    name: str | None = None,
):
    """A folder dataset whose every object is the axis-aligned rectangle ``rect`` = (x0, y0, x1, y1),
    inclusive pixel bounds, optionally ringed by an ignore band (value 128) ``ignore_width`` px wide
    (Chebyshev distance). ``size`` (width, height) = (400, 300) makes the diagonal exactly 500 px, so a
    1 % radius is exactly 5 px."""
    from collector.services.datasets import dataset_import

    name = name or f"rects-{next(_counter)}"
    root = tmp_path / name
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(parents=True, exist_ok=True)
    width, height = size
    x0, y0, x1, y1 = rect
    rng = np.random.default_rng(7)
    for index in range(n_images):
        mask = np.zeros((height, width), dtype=np.uint8)
        if ignore_width:
            mask[
                max(0, y0 - ignore_width) : y1 + ignore_width + 1,
                max(0, x0 - ignore_width) : x1 + ignore_width + 1,
            ] = 128
        mask[y0 : y1 + 1, x0 : x1 + 1] = 255
        image = rng.integers(0, 255, (height, width, 3)).astype(np.uint8)
        stem = f"rect{index:02d}"
        PILImage.fromarray(mask, mode="L").save(root / "masks" / f"{stem}.png")
        PILImage.fromarray(image).save(root / "images" / f"{stem}.png")
    return dataset_import(path=root, layout="folder", name=name).dataset


def complete_session(session, *, valid_clicks: int | None = None):
    """PLATFORMS: click every trial of ``session`` through ``click_record`` (the first ``valid_clicks``
    on the centre of the target instance's bounding box, the rest on the image corner far from it;
    all of them when None), finish it with ``session_finish`` and validate it with ``session_validate``.
    Returns the refreshed Session (completion_code, validity set)."""
    import uuid

    from collector.models import Session, Trial
    from collector.services.clicks import click_record
    from collector.services.session_finish import session_finish
    from collector.services.validation import session_validate

    trials = list(
        Trial.objects.filter(session=session).select_related("target__instance__image").order_by("position")
    )
    present_trials(session)
    for index, trial in enumerate(trials):
        instance, image = trial.target.instance, trial.target.instance.image
        if valid_clicks is None or index < valid_clicks:
            x = (instance.bbox_x0 + instance.bbox_x1) / 2 + 0.5
            y = (instance.bbox_y0 + instance.bbox_y1) / 2 + 0.5
        else:
            far_right = (instance.bbox_x0 + instance.bbox_x1) / 2 < image.width / 2
            x, y = (image.width - 0.5 if far_right else 0.5), 0.5
        click_record(
            session=session, position=trial.position, idempotency_key=uuid.uuid4().hex, x=x, y=y,
            shown_width=float(image.width), shown_height=float(image.height), pointer_type="mouse",
            reaction_ms=650.0, event_timestamp_ms=10000.0 + index,
            phase_onsets_ms={"A": 0.0, "B": 1500.0, "C": 3500.0, "D": 5000.0, "click": 5650.0},
            blocked_clicks=0, flags=[], refresh_hz=60.0,
        )  # fmt: skip
    session_finish(session_id=session.pk)
    session_validate(session_id=session.pk)
    return Session.objects.get(pk=session.pk)
