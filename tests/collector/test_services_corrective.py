"""collector.services.corrective: a corrective campaign's items, clicks, rounds, model updates (run inline here;
the Celery path is tests/tasks/test_corrective.py), bad input and finishing."""

from __future__ import annotations

import numpy as np
import pytest
from django.core.files.storage import default_storage
from PIL import Image as PILImage

from benchmark.metrics import iou
from collector.models import CorrectiveClick, CorrectiveItem, CorrectiveMask, Session, Target
from collector.selectors.corrective import study_corrective_summary
from collector.services.corrective import (
    CorrectiveRefused,
    corrective_click_record,
    corrective_click_undo,
    corrective_item_done,
    corrective_item_skip,
    corrective_items_ensure,
    corrective_round_submit,
    corrective_session_finish,
    corrective_update_apply,
    corrective_update_fail,
)
from collector.services.session_start import session_start
from tests.factories import make_dataset, make_study, make_worker

pytestmark = pytest.mark.django_db


@pytest.fixture
def dataset(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    return make_dataset(tmp_path, n_images=3, size=(120, 90))


def _campaign(dataset, **fields):
    fields = {"kind": "corrective", "batch_size": 2, "quota_pc": 1, "quota_mobile": 1, **fields}
    return make_study(dataset, publish=True, **fields)


def _session(study, device="pc"):
    return session_start(study=study, worker=make_worker(), device=device)


def _read(name):
    with default_storage.open(name, "rb") as handle:
        return np.asarray(PILImage.open(handle).convert("L"))


def _inside(item):
    """A point well inside the item's object (the synthetic objects are ellipses around the box centre)."""
    instance = item.trial.target.instance
    return (instance.bbox_x0 + instance.bbox_x1) / 2, (instance.bbox_y0 + instance.bbox_y1) / 2


def _click(session, item, x, y, *, positive=True, key=None):
    key = key or f"k-{item.pk}-{CorrectiveClick.objects.count()}"
    return corrective_click_record(
        session=session,
        item_id=item.pk,
        idempotency_key=key,
        x=x,
        y=y,
        is_positive=positive,
        pointer_type="mouse",
    )


def _refresh(item):
    return CorrectiveItem.objects.select_related("trial__target__instance__image", "current_mask").get(
        pk=item.pk
    )


def test_a_new_study_is_timed_and_a_corrective_one_has_the_seeds_4x3_defaults(dataset):
    timed = make_study(dataset)
    assert timed.kind == "timed" and not timed.is_corrective
    study = _campaign(dataset)
    assert (study.corrective_init, study.corrective_rounds, study.corrective_clicks_per_round) == (
        "box",
        3,
        4,
    )


def test_box_campaign_runs_three_rounds_with_provenance_then_finishes_counted(dataset):
    study = _campaign(dataset)
    session = _session(study)
    items = corrective_items_ensure(session=session)
    assert len(items) == 2 and corrective_items_ensure(session=session) == items  # made once
    assert all(item.state == "updating" and item.round == 0 for item in items)
    first, second = (_refresh(item) for item in items)

    # The box start: round-0 mask by GrabCut from the box, recorded with its IoU against the object.
    result = corrective_update_apply(item_id=first.pk, round_number=0)
    assert result.stored
    assert corrective_update_apply(item_id=first.pk, round_number=0).stored is False  # a redelivery: no-op
    first = _refresh(first)
    assert (first.state, first.round, first.current_mask.round) == ("clicking", 1, 0)
    assert first.current_mask.predictor == "grabcut-box" and first.current_mask.model_id.startswith("opencv")
    gt = _read(first.trial.target.instance.mask_file.name) > 127
    stored = _read(first.current_mask.file.name) == 255
    assert first.current_mask.iou == pytest.approx(iou(stored, gt, None))

    x, y = _inside(first)
    for round_number in (1, 2, 3):
        click, created = _click(first.session, first, x + round_number, y, key=f"r{round_number}")
        assert created and (click.round, click.order) == (round_number, 0)
        again, created = _click(first.session, first, x + round_number, y, key=f"r{round_number}")
        assert not created and again.pk == click.pk  # a retried upload stores the click once
        corrective_round_submit(session=session, item_id=first.pk, round_number=round_number, round_ms=1500)
        # A repeated submit of the same round (the outbox retrying) changes nothing.
        corrective_round_submit(session=session, item_id=first.pk, round_number=round_number)
        assert CorrectiveItem.objects.get(pk=first.pk).state == "updating"
        assert corrective_update_apply(item_id=first.pk, round_number=round_number).stored
    first = _refresh(first)
    assert (first.state, first.current_mask.round) == ("done", 3)
    masks = list(CorrectiveMask.objects.filter(item=first).order_by("round"))
    assert [m.round for m in masks] == [0, 1, 2, 3]
    assert {m.predictor for m in masks[1:]} == {"embedded"} and all(m.model_id for m in masks[1:])
    assert all(m.checkpoint_sha256 == "" for m in masks)  # the embedded default has no weights
    assert [m.clicks_used for m in masks] == [0, 1, 2, 3]  # all clicks so far go to each update
    assert first.round_ms == {"1": 1500.0, "2": 1500.0, "3": 1500.0} and first.active_ms == 4500.0

    with pytest.raises(CorrectiveRefused, match="still has unfinished item"):
        corrective_session_finish(session_id=session.pk)
    corrective_update_apply(item_id=second.pk, round_number=0)
    corrective_item_skip(session=session, item_id=second.pk)
    finished = corrective_session_finish(session_id=session.pk)
    assert finished.status == "finished" and finished.validity == "counted" and finished.completion_code
    assert corrective_session_finish(session_id=session.pk).completion_code == finished.completion_code
    targets = Target.objects.filter(pk__in=[first.trial.target_id, second.trial.target_id])
    assert [(t.valid_pc, t.inflight_pc) for t in targets] == [(1, 0), (1, 0)]

    summary = study_corrective_summary(study=study)
    assert summary["states"]["done"] == 1 and summary["states"]["skipped"] == 1 and summary["clicks"] == 3
    assert [row["round"] for row in summary["per_round"]] == [0, 1, 2, 3]


def test_first_click_start_needs_one_positive_click_before_the_first_mask(dataset):
    study = _campaign(
        dataset, corrective_init="first_click", corrective_rounds=1, corrective_clicks_per_round=2
    )
    session = _session(study)
    item = _refresh(corrective_items_ensure(session=session)[0])
    assert (item.state, item.round, item.current_mask) == ("clicking", 0, None)
    x, y = _inside(item)
    with pytest.raises(CorrectiveRefused, match="first click must be positive") as refused:
        _click(session, item, x, y, positive=False)
    assert refused.value.status == 400
    with pytest.raises(CorrectiveRefused, match="no mask yet"):
        corrective_item_skip(session=session, item_id=item.pk)
    _click(session, item, x, y)
    with pytest.raises(CorrectiveRefused, match="already has its 1 click"):
        _click(session, item, x + 1, y)
    corrective_round_submit(session=session, item_id=item.pk, round_number=0)
    corrective_update_apply(item_id=item.pk, round_number=0)
    item = _refresh(item)
    assert (item.state, item.round, item.current_mask.predictor) == ("clicking", 1, "embedded")
    assert item.current_mask.iou > 0.5
    # "Done" with a click pending: the click is applied, then the item ends.
    _click(session, item, x, y - 2, key="pending")
    corrective_item_done(session=session, item_id=item.pk)
    assert CorrectiveItem.objects.get(pk=item.pk).state == "updating"
    corrective_update_apply(item_id=item.pk, round_number=1)
    assert CorrectiveItem.objects.get(pk=item.pk).state == "done"


def test_bad_clicks_are_refused_with_a_reason_and_change_nothing(dataset):
    study = _campaign(dataset, corrective_clicks_per_round=2)
    session, other = _session(study), _session(study, device="mobile")
    item, skipped = (_refresh(i) for i in corrective_items_ensure(session=session))
    other_item = corrective_items_ensure(session=other)[0]
    for each in (item, skipped, other_item):
        corrective_update_apply(item_id=each.pk, round_number=0)
    image = item.trial.target.instance.image
    cases = [
        (lambda: _click(session, item, image.width, 5), 400, "outside the image"),
        (lambda: _click(session, item, 5, -0.5), 400, "outside the image"),
        (lambda: _click(session, item, float("nan"), 5), 400, "not a finite number"),
        (lambda: _click(session, other_item, 5, 5), 404, "not part of this task"),
    ]
    corrective_item_skip(session=session, item_id=skipped.pk)
    cases.append((lambda: _click(session, skipped, 5, 5), 409, "skipped"))
    for call, status, message in cases:
        with pytest.raises(CorrectiveRefused, match=message) as refused:
            call()
        assert refused.value.status == status
    assert not CorrectiveClick.objects.exists()

    first, _ = _click(session, item, 10, 10, key="a")
    _click(session, item, 11, 11, key="b")
    with pytest.raises(CorrectiveRefused, match="already has its 2 click") as refused:
        _click(session, item, 12, 12, key="c")
    assert refused.value.status == 409
    with pytest.raises(CorrectiveRefused, match="only the latest click"):
        corrective_click_undo(session=session, item_id=item.pk, idempotency_key="a")
    corrective_click_undo(session=session, item_id=item.pk, idempotency_key="b")
    corrective_click_undo(session=session, item_id=item.pk, idempotency_key="b")  # repeated: no-op
    third, created = _click(session, item, 12, 12, key="c")  # the undone click freed its slot
    assert created and third.order == 2
    assert list(CorrectiveClick.objects.filter(item=item).values_list("idempotency_key", "undone")) == [
        ("a", False),
        ("b", True),
        ("c", False),
    ]
    with pytest.raises(CorrectiveRefused, match="used by another item"):
        _click(session, skipped, 5, 5, key="a")


def test_a_failed_update_keeps_the_previous_mask_and_tells_the_researcher_why(dataset):
    study = _campaign(dataset)
    session = _session(study)
    item = _refresh(corrective_items_ensure(session=session)[0])
    corrective_update_apply(item_id=item.pk, round_number=0)
    before = _refresh(item).current_mask_id
    _click(session, item, *_inside(item))
    corrective_round_submit(session=session, item_id=item.pk, round_number=1)
    assert corrective_update_fail(
        item_id=item.pk, round_number=1, reason="OSError: disk full (after 3 attempts)"
    )
    assert not corrective_update_fail(item_id=item.pk, round_number=1, reason="again")  # once only
    item = _refresh(item)
    assert (item.state, item.current_mask_id) == ("failed", before)
    assert (
        corrective_update_apply(item_id=item.pk, round_number=1).stored is False
    )  # a late retry stores nothing
    summary = study_corrective_summary(study=study)
    assert summary["failed"][0]["error"] == "OSError: disk full (after 3 attempts)"
    with pytest.raises(CorrectiveRefused, match="model update failed"):
        _click(session, item, 5, 5)


def test_a_timed_study_has_no_corrective_items(dataset):
    study = make_study(dataset, publish=True, batch_size=2)
    session = _session(study)
    with pytest.raises(CorrectiveRefused, match="not a corrective campaign"):
        corrective_items_ensure(session=session)
    assert study_corrective_summary(study=study) is None
    assert Session.objects.filter(pk=session.pk, status="started").exists()


# --------------------------------------------------------------------------------------------------
# A study whose model is SAM (a tiny random-initialised one): the mask the worker corrected goes in as SAM's
# mask_input (issue 34.2)


@pytest.fixture
def tiny_sam(tmp_path, settings):
    """``test-tiny-sam``: the SAM adapter on a tiny random-initialised SAM, registered for the study to choose."""
    from segmenters.registry import register, unregister
    from segmenters.sam import SamPredictor
    from tests.segmenters.conftest import TINY_SAM, write_tiny_sam_checkpoint

    checkpoint = write_tiny_sam_checkpoint(tmp_path / "tiny_sam.pth", seed=0)

    class TinySam(SamPredictor):
        name = "test-tiny-sam"

        def __init__(self, *, variant="vit_b", checkpoint_dir=None, **options):
            super().__init__(checkpoint=checkpoint, variant=variant, architecture=TINY_SAM, device="cpu")

    register("test-tiny-sam")(TinySam)
    yield TinySam
    unregister("test-tiny-sam")


def test_a_sam_round_takes_the_corrected_mask_as_its_mask_input(dataset, tiny_sam):
    from collector.services.corrective import _PREDICTORS, corrective_predictor
    from collector.services.masks import read_mask

    study = _campaign(dataset, next_round_segmenter="test-tiny-sam")
    session = _session(study)
    item = corrective_items_ensure(session=session)[0]
    corrective_update_apply(item_id=item.pk, round_number=0)  # the box start (GrabCut from the box)
    item = _refresh(item)
    box_mask = read_mask(item.current_mask.file.name)
    _click(session, item, *_inside(item), positive=False)
    corrective_round_submit(session=session, item_id=item.pk, round_number=1)
    predictor = corrective_predictor(study)
    seen: list = []
    hook = predictor.model.prompt_encoder.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append((kwargs["points"], kwargs["masks"])), with_kwargs=True
    )
    try:
        result = corrective_update_apply(item_id=item.pk, round_number=1)
    finally:
        hook.remove()
        _PREDICTORS.pop("test-tiny-sam", None)
    assert result.stored, "the update ran (a stored bool mask used to be refused as SAM's mask_input)"
    stored = CorrectiveMask.objects.get(pk=result.mask_id)
    assert (stored.round, stored.predictor) == (1, "test-tiny-sam")
    ((points, masks),) = seen  # one click this round: one decoder run
    embedding = predictor.encode(
        np.asarray(PILImage.open(item.trial.target.instance.image.file.path).convert("RGB"))
    )
    np.testing.assert_array_equal(masks.numpy(), predictor.prior_from_mask(embedding, box_mask))
    labels = points[1][0].tolist()
    assert labels == [1, 0], "the anchor on the box mask's object, then the worker's negative click"
