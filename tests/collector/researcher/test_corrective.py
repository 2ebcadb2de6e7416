"""The researcher area for corrective-click campaigns (issue 17): the form's campaign settings and the study
page's campaign card with the failed model updates and their reasons."""

from __future__ import annotations

import pytest
from django.urls import reverse

from collector.models import Study
from collector.services.corrective import (
    corrective_click_record,
    corrective_items_ensure,
    corrective_round_submit,
    corrective_update_apply,
    corrective_update_fail,
)
from collector.services.session_start import session_start
from tests.factories import make_study, make_worker

pytestmark = pytest.mark.django_db

FORM = {
    "dataset": None, "display_mode": "Object_CutOut", "image_ms": 1500, "target_ms": 2000, "text_ms": 2500,
    "blocked_ms": 1500, "batch_size": 3, "quota_pc": 1, "quota_mobile": 1, "radius_fraction": 0.01,
    "min_valid_per_session": 2, "min_reaction_ms": 150, "session_timeout_s": 1800, "platform": "link",
    "reward_per_batch": "0.05", "currency": "USD",
}  # fmt: skip


def test_the_form_sets_up_a_campaign_and_refuses_a_zero_budget(client, alice, dataset):
    client.force_login(alice)
    page = client.get(reverse("researcher:study_create")).content.decode()
    assert 'name="corrective_clicks_per_round"' in page and 'name="kind"' in page
    fields = {**FORM, "dataset": dataset.pk, "name": "Campaign", "kind": "corrective"}
    fields.update(corrective_init="first_click", corrective_rounds=2, corrective_clicks_per_round=5)
    assert client.post(reverse("researcher:study_create"), fields).status_code == 302
    study = Study.objects.get(name="Campaign")
    assert (study.kind, study.corrective_init, study.corrective_rounds, study.corrective_clicks_per_round) == (
        "corrective", "first_click", 2, 5,
    )  # fmt: skip
    bad = client.post(
        reverse("researcher:study_create"), {**fields, "name": "Bad", "corrective_clicks_per_round": 0}
    )
    assert bad.status_code == 200 and "greater than or equal to 1" in bad.content.decode()
    assert not Study.objects.filter(name="Bad").exists()


def test_the_study_page_shows_a_failed_update_with_its_reason(client, alice, dataset):
    study = make_study(dataset, publish=True, owner=alice, kind="corrective", batch_size=1, quota_pc=1)
    session = session_start(study=study, worker=make_worker(), device="pc")
    (item,) = corrective_items_ensure(session=session)
    corrective_update_apply(item_id=item.pk, round_number=0)
    corrective_click_record(
        session=session, item_id=item.pk, idempotency_key="k", x=60, y=45, is_positive=True
    )
    corrective_round_submit(session=session, item_id=item.pk, round_number=1)
    corrective_update_fail(item_id=item.pk, round_number=1, reason="SegmenterError: checkpoint missing")
    client.force_login(alice)
    page = client.get(reverse("researcher:study_detail", args=[study.pk])).content.decode()
    assert 'id="corrective-failed"' in page and "SegmenterError: checkpoint missing" in page
    assert "failed 1" in page


def test_the_quality_ranking_page_is_a_campaigns_and_says_when_mr_cannot_be_fitted(client, alice, dataset):
    client.force_login(alice)
    timed = make_study(dataset, publish=True, owner=alice)
    assert client.get(reverse("researcher:study_quality", args=[timed.pk])).status_code == 404
    study = make_study(dataset, publish=True, owner=alice, kind="corrective", batch_size=1, quota_pc=1)
    page = client.get(reverse("researcher:study_quality", args=[study.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert 'id="quality-refused"' in text and "has 0 finished instance(s) with ground truth" in text
    assert 'id="corrective-top-form"' in text and 'name="top_percent"' in text
    detail = client.get(reverse("researcher:study_detail", args=[study.pk])).content.decode()
    assert 'id="corrective-download"' in detail and 'id="quality-ranking"' in detail
    assert "1 instances, 3 rounds of up to 4 clicks each" in detail
