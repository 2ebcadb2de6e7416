"""Creating, publishing, pausing and closing studies."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from collector.models import Dataset, Instance, Round, Study, Target
from collector.services.outbox import task_intent_add
from tasks import names as task_names

logger = logging.getLogger(__name__)


class StudyStateError(Exception):
    """The study is not in a state that allows the action; the message says which state it needs."""


def study_create(*, name: str, dataset: Dataset, owner=None, **settings_fields) -> Study:
    """A draft study of ``dataset``; ``settings_fields`` are Study fields (display_mode, quotas, ...)."""
    unknown = set(settings_fields) - {f.name for f in Study._meta.get_fields()}
    if unknown:
        raise ValueError(f"unknown study setting(s): {', '.join(sorted(unknown))}")
    study = Study(name=name, dataset=dataset, owner=owner, **settings_fields)
    study.full_clean(exclude=["owner"])
    study.save()
    return study


def round_create_first(*, study: Study) -> Round:
    """Round 1: one ``first`` target per instance of the study's dataset. Call inside a transaction."""
    round_1 = Round.objects.create(study=study, number=1)
    instances = Instance.objects.filter(image__dataset=study.dataset).select_related("image")
    Target.objects.bulk_create(
        [
            Target(
                round=round_1,
                instance=instance,
                click_type=Target.ClickType.FIRST,
                full_stem=instance.first_round_full_stem,
            )
            for instance in instances
        ]
    )
    return round_1


def study_platform_config_update(*, study_id: int, values: dict) -> Study:
    """Set keys of the study's ``platform_config`` (the platform settings form); a value of None or ""
    removes the key, so the platform's default applies again. Values are JSON-ready (checked by the form)."""
    with transaction.atomic():
        # NO KEY UPDATE (docs/architecture.md): sessions of the study may still be inserted meanwhile
        study = Study.objects.select_for_update(no_key=True).get(pk=study_id)
        config = dict(study.platform_config or {})
        for key, value in values.items():
            if value is None or value == "" or value == []:
                config.pop(key, None)
            else:
                config[key] = value
        study.platform_config = config
        study.save(update_fields=["platform_config"])
    return study


def study_publish(*, study_id: int) -> Study:
    """draft → published (creating round 1 and enqueueing its stimuli), or paused → published."""
    with transaction.atomic():
        study = Study.objects.select_for_update(no_key=True).get(pk=study_id)
        if study.state == Study.State.PUBLISHED:
            return study
        if study.state == Study.State.CLOSED:
            raise StudyStateError(f"study {study.pk} is closed; a closed study cannot be published again.")
        if study.state == Study.State.DRAFT:
            if not Instance.objects.filter(image__dataset=study.dataset).exists():
                raise StudyStateError(
                    f"dataset {study.dataset} has no instances; import images and masks first."
                )
            # A preview may have prepared round 1 already (study_preview_round); it is used as it is.
            round_1 = study.rounds.filter(number=1).first() or round_create_first(study=study)
            study.published_at = timezone.now()
            task_intent_add(name=task_names.STIMULI_RENDER_ROUND_STIMULI, args=[round_1.pk])
        study.state = Study.State.PUBLISHED
        study.save(update_fields=["state", "published_at"])
    if study.published_at is not None:
        from collector.services.bots import bots_end_running

        bots_end_running(study_id=study.pk)  # a test run's bots still playing give their slots back
    logger.info("study published", extra={"study_id": study.pk})
    return study


def study_pause(*, study_id: int) -> Study:
    with transaction.atomic():
        study = Study.objects.select_for_update(no_key=True).get(pk=study_id)
        if study.state != Study.State.PUBLISHED:
            raise StudyStateError(f"study {study.pk} is {study.state}; only a published study can be paused.")
        study.state = Study.State.PAUSED
        study.save(update_fields=["state"])
    return study


def study_close(*, study_id: int) -> Study:
    with transaction.atomic():
        study = Study.objects.select_for_update(no_key=True).get(pk=study_id)
        if study.state != Study.State.CLOSED:
            study.state = Study.State.CLOSED
            study.closed_at = timezone.now()
            study.save(update_fields=["state", "closed_at"])
    return study


def study_open_round(*, study: Study) -> Round | None:
    """The round workers currently get targets from (the highest open one), or None."""
    return study.rounds.filter(state=Round.State.OPEN).order_by("-number").first()


def study_preview_round(*, study_id: int) -> Round:
    """The round a researcher's preview shows: the open round, else the latest one; for a draft without
    rounds, round 1 made now (one target per object, exactly what publishing would make; publishing then
    uses it), so a study can be previewed before it is published. Sessions cannot start on it while the
    study is a draft (``session_start`` needs a published study).

    Raises StudyStateError when the dataset has no objects."""
    with transaction.atomic():
        # The lock makes two previews opened at once make round 1 once.
        study = Study.objects.select_for_update(no_key=True).get(pk=study_id)
        existing = study_open_round(study=study) or study.rounds.order_by("-number").first()
        if existing is not None:
            return existing
        if not Instance.objects.filter(image__dataset=study.dataset).exists():
            raise StudyStateError(f"dataset {study.dataset} has no instances; import images and masks first.")
        round_1 = round_create_first(study=study)
    logger.info("round 1 prepared for a preview", extra={"study_id": study_id, "round_id": round_1.pk})
    return round_1
