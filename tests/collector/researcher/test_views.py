"""collector.researcher.views through Django's test client: access rules, set-up and steering."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from PIL import Image as PILImage

from collector.models import DisplayMode, Instance, Study
from tests.factories import make_validated_batch

pytestmark = pytest.mark.django_db


def _study_urls(study, target_id):
    return [
        reverse("researcher:study_detail", args=[study.pk]),
        reverse("researcher:target_list", args=[study.pk]),
        reverse("researcher:target_detail", args=[study.pk, target_id]),
        reverse("researcher:target_heatmap", args=[study.pk, target_id]),
        reverse("researcher:worker_table", args=[study.pk]),
        reverse("researcher:study_chart", args=[study.pk, "reaction-times"]),
    ]


def test_anonymous_visitors_are_sent_to_login(client, alice_study):
    response = client.get(reverse("researcher:study_list"))
    assert response.status_code == 302 and response["Location"].startswith("/researcher/login/")


def test_logged_in_non_researcher_gets_403(client, alice_study):
    client.force_login(User.objects.create_user("annotator", password="pw-for-tests-1"))
    assert client.get(reverse("researcher:study_list")).status_code == 403
    assert client.get(reverse("researcher:study_detail", args=[alice_study.pk])).status_code == 403


def test_researcher_b_cannot_see_researcher_as_study(client, bob, alice_study, bob_study):
    target = alice_study.rounds.get().targets.first()
    client.force_login(bob)
    listing = client.get(reverse("researcher:study_list")).content.decode()
    assert "Bob&#x27;s study" in listing and "Alice" not in listing
    for url in _study_urls(alice_study, target.pk):
        assert client.get(url).status_code == 404, url
    response = client.post(reverse("researcher:study_pause", args=[alice_study.pk]))
    assert response.status_code == 404
    assert Study.objects.get(pk=alice_study.pk).state == Study.State.PUBLISHED


def test_owner_sees_every_page_with_its_data(client, alice, alice_study):
    make_validated_batch(alice_study, device="pc", valid_positions={0}, reaction_ms=120.0)
    target = alice_study.rounds.get().targets.first()
    client.force_login(alice)
    for url in _study_urls(alice_study, target.pk):
        response = client.get(url)
        assert response.status_code == 200, url
    detail = client.get(reverse("researcher:study_detail", args=[alice_study.pk])).content.decode()
    assert 'id="quota-progress"' in detail and "Rejection reasons" in detail and "Spent" in detail
    heatmap = client.get(reverse("researcher:target_heatmap", args=[alice_study.pk, target.pk]))
    assert heatmap["Content-Type"] == "image/png"
    assert PILImage.open(io.BytesIO(heatmap.content)).size[0] == 900
    workers = client.get(reverse("researcher:worker_table", args=[alice_study.pk])).content.decode()
    worker = alice_study.sessions.get().worker
    assert worker.pseudonym in workers and worker.external_id not in workers


def test_a_shared_researcher_may_look_but_not_steer(client, bob, alice_study):
    alice_study.researchers.add(bob)
    client.force_login(bob)
    assert client.get(reverse("researcher:study_detail", args=[alice_study.pk])).status_code == 200
    assert client.post(reverse("researcher:study_close", args=[alice_study.pk])).status_code == 403
    assert Study.objects.get(pk=alice_study.pk).state == Study.State.PUBLISHED


def test_create_publish_pause_close(client, alice, dataset):
    client.force_login(alice)
    form = client.get(reverse("researcher:study_create"))
    assert form.status_code == 200 and 'id="trial-preview"' in form.content.decode()
    response = client.post(
        reverse("researcher:study_create"),
        {
            "name": "Set up in the browser",
            "dataset": dataset.pk,
            "display_mode": DisplayMode.SILHOUETTE_MASK,
            "image_ms": 1000, "target_ms": 1800, "text_ms": 2500, "blocked_ms": 900,
            "batch_size": 10, "quota_pc": 5, "quota_mobile": 4, "radius_fraction": 0.02,
            "min_valid_per_session": 7, "min_reaction_ms": 150, "session_timeout_s": 1800,
            "platform": "link", "reward_per_batch": "0.05", "currency": "EUR",
        },
    )  # fmt: skip
    study = Study.objects.get(name="Set up in the browser")
    assert response.status_code == 302 and response["Location"].endswith(f"/researcher/studies/{study.pk}/")
    assert (study.owner, study.state, study.quota_mobile, study.blocked_ms) == (alice, "draft", 4, 900)
    client.post(reverse("researcher:study_publish", args=[study.pk]))
    study.refresh_from_db()
    assert study.state == "published" and study.rounds.get().targets.count() == 3
    client.post(reverse("researcher:study_pause", args=[study.pk]))
    assert Study.objects.get(pk=study.pk).state == "paused"
    client.post(reverse("researcher:study_close", args=[study.pk]))
    assert Study.objects.get(pk=study.pk).state == "closed"
    page = client.post(reverse("researcher:study_publish", args=[study.pk]), follow=True).content.decode()
    assert "closed study cannot be published" in page


def test_form_refuses_an_unreachable_validity_rule(client, alice, dataset):
    client.force_login(alice)
    response = client.post(
        reverse("researcher:study_create"),
        {"name": "bad", "dataset": dataset.pk, "display_mode": "Object_CutOut", "image_ms": 1, "target_ms": 1,
         "text_ms": 1, "blocked_ms": 1, "batch_size": 5, "quota_pc": 1, "quota_mobile": 1,
         "radius_fraction": 0.01, "min_valid_per_session": 7, "min_reaction_ms": 1, "session_timeout_s": 60,
         "platform": "link", "reward_per_batch": "0.01", "currency": "USD"},
    )  # fmt: skip
    assert response.status_code == 200 and "cannot be reached in a batch of 5" in response.content.decode()
    assert not Study.objects.filter(name="bad").exists()


def test_preview_and_estimate_endpoints(client, alice, dataset):
    instance = Instance.objects.filter(image__dataset=dataset).first()
    client.force_login(alice)
    for mode in [*DisplayMode.values, "image"]:
        response = client.get(reverse("researcher:instance_preview", args=[instance.pk, mode]))
        assert response.status_code == 200, mode
        assert PILImage.open(io.BytesIO(response.content)).size == (160, 120)
    silhouette = PILImage.open(
        io.BytesIO(
            client.get(reverse("researcher:instance_preview", args=[instance.pk, "Silhouette_Mask"])).content
        )
    ).convert("L")
    assert silhouette.getpixel((0, 0)) == 0 and silhouette.getpixel((80, 60 - 15)) == 255
    assert client.get(reverse("researcher:instance_preview", args=[instance.pk, "Nope"])).status_code == 404
    estimate = client.get(
        reverse("researcher:budget_estimate"),
        {"dataset": dataset.pk, "quota_pc": 25, "quota_mobile": 25, "batch_size": 10, "reward": "0.05"},
    ).json()
    # 3 targets × 25 / 10 = 7.5 → 8 batches per device; 16 × 0.05
    assert (estimate["batches"], estimate["total"]) == (16, "0.80")
    client.logout()
    assert client.get(reverse("researcher:instance_preview", args=[instance.pk, "image"])).status_code == 302
