"""Practice, control and filler trials of a timed study's batch (issue 32 items 2 and 5).

A study may ask for ``practice_trials`` at the start of a worker's first batch and ``control_trials`` in every
batch. Both are ordinary trials of the session (the player shows them with the study's own phases, the click
and presented rules are the same), told apart by ``Trial.role``:

* practice trials come first (positions 0..p-1) and the player labels them; they are never data.
* control trials are mixed in among the batch's task trials at random positions and look like any other
  trial. They show objects whose masks are known (every imported object has one, as Toloka's control tasks
  have known answers); the validation counts how many control clicks landed inside their object and the
  study's ``control_min_inside`` decides whether the batch counts (``collector.services.validation``).

* filler trials (``Study.short_batches`` ``pad``) fill a batch up to the batch size at a round's tail, when
  fewer wanted images are left for the worker than a batch holds: images whose targets need nothing more (or
  ones the worker has seen), so the last wanted images go out in full batches that can meet the batch rule
  instead of waiting for a worker who could get a full batch of them (who never comes). They look like any
  other trial and their clicks are judged like any other; they count toward the batch rule, never toward a
  quota.

None takes an in-flight slot nor adds to a quota; the RClicks export, the next rounds and the target pages
leave them out; the full export keeps them with their role.

Which objects: a trial's target is the round-1 target of an object whose image is not among the batch's task
images (a batch never shows an image twice), preferring images the worker has already seen in this study
(earlier batches: nothing is lost by showing them again), then images the worker has not seen (these then
count as seen, so that worker gets no task trial on them later; the allocation reads every trial of the
worker). Of an image, its largest object: the one least open to doubt. When the dataset has too few other
images the batch gets fewer screen trials (control trials first); the study form refuses settings where
that can happen for a full batch (``rule_screen_trials_fit``).
"""

from __future__ import annotations

import logging
import random

from django.db.models import F

from collector.models import Image, Instance, Session, Study, Target, Trial
from collector.models.studies import StudyKind

logger = logging.getLogger(__name__)


def _screen_images(*, session: Session, batch_image_ids: set[int], count: int | None) -> list[int]:
    """Up to ``count`` (None: all) image ids for the screen trials: seen-before images first, each group
    shuffled."""
    seen = set(
        Trial.objects.filter(session__study_id=session.study_id, session__worker_id=session.worker_id)
        .exclude(session_id=session.pk)
        .values_list("target__instance__image_id", flat=True)
    )
    candidates = set(
        Image.objects.filter(dataset_id=session.study.dataset_id, instances__isnull=False).values_list(
            "id", flat=True
        )
    )
    candidates -= batch_image_ids
    before = sorted(candidates & seen)
    unseen = sorted(candidates - seen)
    random.shuffle(before)
    random.shuffle(unseen)
    return (before + unseen)[:count] if count is not None else before + unseen


def _largest_object_targets(*, study: Study, image_ids: list[int]) -> list[Target]:
    """For each image id (in order), the round-1 target of its largest object."""
    largest: dict[int, int] = {}
    for instance_id, image_id in (
        Instance.objects.filter(image_id__in=image_ids).order_by("-area", "id").values_list("id", "image_id")
    ):
        largest.setdefault(image_id, instance_id)
    by_instance = {
        target.instance_id: target
        for target in Target.objects.filter(
            round__study=study,
            round__number=1,
            click_type=Target.ClickType.FIRST,
            instance_id__in=list(largest.values()),
        )
    }
    return [by_instance[largest[image_id]] for image_id in image_ids if largest.get(image_id) in by_instance]


def session_filler_trials_add(*, session: Session, count: int) -> int:
    """Fill ``session``, a batch just allocated with fewer than ``count`` task trials (its positions 0..n-1),
    up to ``count`` trials with filler trials, mixed among the task trials at random positions. Returns how
    many were added (fewer when the dataset has too few other images: the caller decides whether the batch
    may start). Call inside ``session_start``'s transaction, before ``session_screen_trials_add``.

    A filler's target is a target of the session's round (what this round shows: a first click, or an error
    mask of a later round) on an image not in the batch, one per image, images the worker has already seen
    first (as the screen trials: nothing is lost by showing them again), then unseen ones. The allocation has
    just taken every wanted target of an unseen image it could, so an unseen image left here has no target
    this device still needs."""
    task_trials = list(Trial.objects.filter(session=session).order_by("position"))
    wanted = count - len(task_trials)
    if wanted <= 0:
        return 0
    batch_images = set(
        Target.objects.filter(pk__in=[trial.target_id for trial in task_trials]).values_list(
            "instance__image_id", flat=True
        )
    )
    image_ids = _screen_images(session=session, batch_image_ids=batch_images, count=None)
    by_image: dict[int, list[int]] = {}
    for target_id, image_id in Target.objects.filter(
        round_id=session.round_id, instance__image_id__in=image_ids
    ).values_list("id", "instance__image_id"):
        by_image.setdefault(image_id, []).append(target_id)
    chosen = [random.choice(by_image[image_id]) for image_id in image_ids if image_id in by_image][:wanted]
    if not chosen:
        return 0
    mixed: list[Trial | int] = [*task_trials, *chosen]
    random.shuffle(mixed)
    Trial.objects.filter(session=session).update(position=F("position") + len(mixed))  # out of the way
    moved, fillers = [], []
    for position, item in enumerate(mixed):
        if isinstance(item, Trial):
            item.position = position
            moved.append(item)
        else:
            fillers.append(Trial(session=session, target_id=item, position=position, role=Trial.Role.FILLER))
    Trial.objects.bulk_update(moved, ["position"])
    Trial.objects.bulk_create(fillers)
    logger.info("filler trials added", extra={"session_id": session.pk, "filler": len(fillers)})
    return len(fillers)


def session_screen_trials_add(*, session: Session) -> tuple[int, int]:
    """Add the study's practice and control trials to ``session``, a batch just allocated (its task trials
    at positions 0..n-1), and lay the batch out: practice first, then the task and control trials in a random
    order. Returns (practice, control) trials added. Call inside ``session_start``'s transaction, after the
    allocation; does nothing for corrective studies, qualification tests and studies without screen trials.

    Practice trials go only into the worker's first batch of the study. The task trials keep their targets
    and their relative order; only their positions move (two UPDATEs, through positions no trial holds, so the
    unique (session, position) constraint never sees two trials on one position)."""
    study = session.study
    if study.kind != StudyKind.TIMED or session.is_qualification:
        return 0, 0
    first_batch = (
        not Session.objects.filter(study=study, worker_id=session.worker_id).exclude(pk=session.pk).exists()
    )
    practice_wanted = study.practice_trials if first_batch else 0
    control_wanted = study.control_trials
    if not practice_wanted and not control_wanted:
        return 0, 0
    task_trials = list(Trial.objects.filter(session=session).order_by("position"))
    batch_images = set(
        Target.objects.filter(pk__in=[trial.target_id for trial in task_trials]).values_list(
            "instance__image_id", flat=True
        )
    )
    image_ids = _screen_images(
        session=session, batch_image_ids=batch_images, count=control_wanted + practice_wanted
    )
    targets = _largest_object_targets(study=study, image_ids=image_ids)
    # Too few images: the control trials first, they decide whether the batch counts.
    controls, practices = targets[:control_wanted], targets[control_wanted : control_wanted + practice_wanted]
    if not controls and not practices:
        return 0, 0

    # Practice first; task and control trials shuffled after it (a control trial must not be told by its place).
    mixed: list[Trial | Target] = [*task_trials, *controls]
    random.shuffle(mixed)
    total = len(practices) + len(mixed)
    Trial.objects.filter(session=session).update(position=F("position") + total)  # out of the way
    moved = []
    new_trials = [
        Trial(session=session, target=target, position=index, role=Trial.Role.PRACTICE)
        for index, target in enumerate(practices)
    ]
    for offset, item in enumerate(mixed, start=len(practices)):
        if isinstance(item, Trial):
            item.position = offset
            moved.append(item)
        else:
            new_trials.append(Trial(session=session, target=item, position=offset, role=Trial.Role.CONTROL))
    Trial.objects.bulk_update(moved, ["position"])
    Trial.objects.bulk_create(new_trials)
    logger.info(
        "screen trials added",
        extra={"session_id": session.pk, "practice": len(practices), "control": len(controls)},
    )
    return len(practices), len(controls)
