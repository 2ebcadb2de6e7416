"""collector.api.views: token auth, per-study permissions and the data each endpoint serves."""

from __future__ import annotations

import io

import pytest
from PIL import Image as PILImage
from rest_framework.test import APIClient

from collector.models import Round, Study, Target
from collector.services.next_round import round_build_fail
from collector.services.tokens import session_token_make
from segmenters.checkpoints import parse_checkpoint_table
from tests.factories import make_validated_batch

pytestmark = pytest.mark.django_db

API = "/api/researcher"


def _study_paths(study, target_id):
    base = f"{API}/studies/{study.pk}"
    return [
        f"{base}/",
        f"{base}/progress/",
        f"{base}/budget/",
        f"{base}/targets/",
        f"{base}/targets/{target_id}/",
        f"{base}/targets/{target_id}/heatmap.png",
        f"{base}/charts/devices.png",
        f"{base}/workers/",
    ]


def test_an_annotator_session_token_cannot_read_researcher_endpoints(alice_study):
    session = make_validated_batch(alice_study, device="pc")
    token = session_token_make(session_id=session.pk)
    target = alice_study.rounds.get().targets.first()
    for credentials in (
        {"HTTP_AUTHORIZATION": f"Token {token}"},
        {"HTTP_AUTHORIZATION": f"Bearer {token}"},
        {},
    ):
        client = APIClient()
        client.credentials(**credentials)
        for path in [f"{API}/studies/", f"{API}/datasets/", *_study_paths(alice_study, target.pk)]:
            for url in (path, f"{path}?token={token}", f"{path}?session_token={token}"):
                response = client.get(url)
                assert response.status_code == 401, (url, credentials, response.status_code)
        assert client.post(f"{API}/studies/{alice_study.pk}/close/").status_code == 401
    assert Study.objects.get(pk=alice_study.pk).state == Study.State.PUBLISHED


def test_researcher_b_cannot_see_researcher_as_study(api_for, bob, alice_study, bob_study):
    target = alice_study.rounds.get().targets.first()
    client = api_for(bob)
    listing = client.get(f"{API}/studies/").json()
    assert [row["id"] for row in listing["results"]] == [bob_study.pk]
    for path in _study_paths(alice_study, target.pk):
        assert client.get(path).status_code == 404, path
    for action in ("publish", "pause", "close"):
        assert client.post(f"{API}/studies/{alice_study.pk}/{action}/").status_code == 404
    # a target of Alice's study asked for under Bob's study is not found either
    assert client.get(f"{API}/studies/{bob_study.pk}/targets/{target.pk}/").status_code == 404
    assert Study.objects.get(pk=alice_study.pk).state == Study.State.PUBLISHED


def test_a_non_researcher_token_is_refused(api_for, alice_study):
    from django.contrib.auth.models import User

    plain = User.objects.create_user("plain", password="pw-for-tests-1")
    response = api_for(plain).get(f"{API}/studies/")
    assert response.status_code == 403 and "researchers" in response.json()["message"]


def test_create_and_steer_a_study(api_for, alice, bob, dataset):
    client = api_for(alice)
    datasets = client.get(f"{API}/datasets/").json()["results"]
    assert [(d["id"], d["images"], d["instances"]) for d in datasets] == [(dataset.pk, 3, 3)]
    created = client.post(
        f"{API}/studies/",
        {"name": "API study", "dataset": dataset.pk, "quota_pc": 2, "quota_mobile": 3, "batch_size": 3,
         "min_valid_per_session": 2, "display_mode": "Highlighted_Instance", "reward_per_batch": "0.10"},
        format="json",
    )  # fmt: skip
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["owner"], body["state"], body["quota_mobile"], body["reward_per_batch"]) == (
        "alice", "draft", 3, "0.1000",
    )  # fmt: skip
    study_id = body["id"]
    bad = client.post(
        f"{API}/studies/", {"name": "x", "dataset": dataset.pk, "batch_size": 5, "min_valid_per_session": 7}
    )
    assert bad.status_code == 400 and "min_valid_per_session" in {
        error["field"] for error in bad.json().get("errors", [bad.json()])
    }
    assert client.post(f"{API}/studies/{study_id}/pause/").status_code == 409
    assert client.post(f"{API}/studies/{study_id}/publish/").json()["state"] == "published"
    Study.objects.get(pk=study_id).researchers.add(bob)
    assert api_for(bob).post(f"{API}/studies/{study_id}/pause/").status_code == 403
    assert api_for(bob).get(f"{API}/studies/{study_id}/").status_code == 200
    assert client.post(f"{API}/studies/{study_id}/pause/").json()["state"] == "paused"
    assert client.post(f"{API}/studies/{study_id}/close/").json()["state"] == "closed"
    conflict = client.post(f"{API}/studies/{study_id}/publish/")
    assert conflict.status_code == 409 and "closed" in conflict.json()["message"]


def test_progress_targets_workers_and_pictures(api_for, alice, alice_study):
    counted = make_validated_batch(alice_study, device="mobile", reaction_ms=650.0)
    make_validated_batch(alice_study, device="pc", valid_positions=set())
    client = api_for(alice)
    progress = client.get(f"{API}/studies/{alice_study.pk}/progress/").json()
    assert progress["rounds"][0]["devices"]["mobile"]["valid"] == 3
    assert progress["rounds"][0]["devices"]["pc"]["valid"] == 0
    assert progress["sessions"]["counts"]["all"]["rejected"] == 1
    assert progress["money"]["owed"] == "0.0200"  # one counted batch, no platform review recorded yet
    targets = client.get(f"{API}/studies/{alice_study.pk}/targets/", {"round": 1}).json()
    assert targets["count"] == 3 and {t["clicks_total"] for t in targets["results"]} == {2}
    assert client.get(f"{API}/studies/{alice_study.pk}/targets/", {"round": "x"}).status_code == 400
    target_id = targets["results"][0]["id"]
    detail = client.get(f"{API}/studies/{alice_study.pk}/targets/{target_id}/").json()
    assert sorted((c["device"], c["is_valid"]) for c in detail["clicks"]) == [("mobile", True), ("pc", False)]
    assert {c["invalid_reason"] for c in detail["clicks"]} == {"", "outside_region"}
    workers = client.get(f"{API}/studies/{alice_study.pk}/workers/").json()
    assert counted.worker.pseudonym in {w["pseudonym"] for w in workers}
    assert counted.worker.external_id not in str(workers)
    heatmap = client.get(
        f"{API}/studies/{alice_study.pk}/targets/{target_id}/heatmap.png", HTTP_ACCEPT="image/png"
    )
    assert heatmap.status_code == 200 and PILImage.open(io.BytesIO(heatmap.content)).format == "PNG"
    for kind in ("reaction-times", "phase-timing", "devices"):
        chart = client.get(f"{API}/studies/{alice_study.pk}/charts/{kind}.png")
        assert chart.status_code == 200 and chart["Content-Type"] == "image/png", kind
    assert client.get(f"{API}/studies/{alice_study.pk}/charts/nope.png").status_code == 404
    budget = client.get(f"{API}/studies/{alice_study.pk}/budget/").json()
    # 3 targets × 25 / (3 × 0.9) → 28 sessions, 35 paid batches per device: 70 × 0.02
    assert (budget["batches"], budget["total"], budget["devices"]["pc"]["assignments"]) == (70, "1.40", 35)
    assert "valid clicks" in budget["formula"]


def test_segmenter_choice_build_failure_and_mask_provenance_over_the_api(
    api_for, alice, alice_study, settings
):
    settings.SEGMENTER_CHECKPOINTS = parse_checkpoint_table("sam:vit_h=sam_vit_h_4b8939.pth")
    client = api_for(alice)
    base = {
        "name": "API choice",
        "dataset": alice_study.dataset.pk,
        "batch_size": 3,
        "min_valid_per_session": 2,
    }
    refused = client.post(f"{API}/studies/", {**base, "next_round_segmenter": "sam:vit_x"}, format="json")
    assert refused.status_code == 400
    assert (
        refused.json()["field"] == "next_round_segmenter"
        and "'sam:vit_x' is neither an entry of the checkpoint table" in refused.json()["message"]
    )
    created = client.post(f"{API}/studies/", {**base, "next_round_segmenter": "sam:vit_h"}, format="json")
    assert created.status_code == 201 and created.json()["next_round_segmenter"] == "sam:vit_h"

    round_1 = alice_study.rounds.get(number=1)
    round_build_fail(round_id=round_1.pk, reason="predictor 'sam' cannot run here: ...")
    progress = client.get(f"{API}/studies/{alice_study.pk}/progress/").json()
    assert progress["rounds"][0]["build_error"] == "predictor 'sam' cannot run here: ..."
    assert progress["rounds"][0]["build_failed_at"]

    first = round_1.targets.select_related("instance").first()
    Target.objects.create(
        round=Round.objects.create(study=alice_study, number=2), instance=first.instance, click_type="fn",
        model_type="sam", full_stem=f"{first.full_stem}_sam_fn_pc_1", model_id="sam:vit_h:abc:mm1",
        model_variant="vit_h", checkpoint_sha256="cd" * 32, source_device="pc", source_index=1,
    )  # fmt: skip
    (row,) = client.get(f"{API}/studies/{alice_study.pk}/targets/", {"round": 2}).json()["results"]
    assert (row["model_id"], row["model_variant"], row["checkpoint_sha256"]) == (
        "sam:vit_h:abc:mm1",
        "vit_h",
        "cd" * 32,
    )


def test_a_body_nested_too_deep_for_the_decoder_is_a_400_not_a_server_error(api_for, alice):
    """Issue 20: 15,000 '[' made DRF's JSONParser raise RecursionError (a 500); now a 400 saying so."""
    response = api_for(alice).post(
        "/api/researcher/studies/", data="[" * 15_000, content_type="application/json"
    )
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == "invalid_json" and "more than 8 deep" in response.json()["message"]
