"""The researcher API exposes a study's kind and corrective-campaign settings (issue 17)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_a_campaign_is_created_over_the_api_with_its_settings(api_for, alice, dataset):
    client = api_for(alice)
    created = client.post(
        "/api/researcher/studies/",
        {"name": "API campaign", "dataset": dataset.pk, "batch_size": 3, "min_valid_per_session": 2,
         "kind": "corrective", "corrective_rounds": 4, "corrective_clicks_per_round": 2},
        format="json",
    )  # fmt: skip
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["kind"], body["corrective_init"], body["corrective_rounds"], body["corrective_clicks_per_round"]) == (
        "corrective", "box", 4, 2,
    )  # fmt: skip
    timed = client.post(
        "/api/researcher/studies/",
        {"name": "timed", "dataset": dataset.pk, "batch_size": 3, "min_valid_per_session": 2},
        format="json",
    ).json()
    assert timed["kind"] == "timed" and timed["corrective_rounds"] == 3
    bad = client.post(
        "/api/researcher/studies/",
        {"name": "x", "dataset": dataset.pk, "batch_size": 3, "min_valid_per_session": 2, "kind": "nope"},
        format="json",
    )
    assert bad.status_code == 400 and bad.json()["field"] == "kind"
