"""collector.researcher.views through Django's test client: access rules, set-up and steering."""

from __future__ import annotations

import io

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from PIL import Image as PILImage

from collector.models import DisplayMode, Instance, Round, Study, Target
from collector.selectors.pictures import CLICK_RGB
from collector.services.next_round import round_build_fail
from collector.services.stimuli import HIGHLIGHT_RGB, render_target_picture
from segmenters.checkpoints import parse_checkpoint_table
from tests.factories import make_dataset, make_study, make_validated_batch

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
            "batch_size": 3, "quota_pc": 5, "quota_mobile": 4, "radius_fraction": 0.02,
            "min_valid_per_session": 2, "min_reaction_ms": 150, "session_timeout_s": 1800,
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
    assert client.post(reverse("researcher:study_sync", args=[study.pk]), follow=True).status_code == 200


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
    # 3 targets × 25 / (10 × 0.9) = 8.3 → 9 sessions, ⌈9 / 0.8⌉ = 12 paid batches per device; 24 × 0.05
    assert (estimate["batches"], estimate["total"]) == (24, "1.20")
    prolific = client.get(
        reverse("researcher:budget_estimate"),
        {"dataset": dataset.pk, "quota_pc": 25, "quota_mobile": 0, "batch_size": 10, "reward": "0.05",
         "platform": "prolific"},
    ).json()  # fmt: skip
    # 12 × 0.05 = 0.60, with Prolific's 33.3 % fee 0.7998 → 0.80
    assert (prolific["batches"], prolific["total"], prolific["fee_fraction"]) == (12, "0.80", "0.333")
    assert (
        client.get(
            reverse("researcher:budget_estimate"), {"dataset": dataset.pk, "platform": "x"}
        ).status_code
        == 400
    )
    client.logout()
    assert client.get(reverse("researcher:instance_preview", args=[instance.pk, "image"])).status_code == 302


# --------------------------------------------------------------------------------------------------
# Next-round segmenter choice, build failures and mask provenance


def _form_data(dataset, **extra):
    data = {"name": "Segmenter choice", "dataset": dataset.pk, "display_mode": "Object_CutOut", "image_ms": 1500,
            "target_ms": 2000, "text_ms": 2500, "blocked_ms": 1500, "batch_size": 3, "quota_pc": 1,
            "quota_mobile": 1, "radius_fraction": 0.01, "min_valid_per_session": 2, "min_reaction_ms": 150,
            "session_timeout_s": 1800, "platform": "link", "reward_per_batch": "0.02", "currency": "USD"}  # fmt: skip
    return {**data, **extra}


def test_the_form_offers_the_sites_checkpoints_and_the_study_keeps_the_choice(
    client, alice, dataset, settings
):
    settings.SEGMENTER_CHECKPOINTS = parse_checkpoint_table("sam:vit_h=/nowhere/sam_vit_h_4b8939.pth")
    settings.NEXT_ROUND_SEGMENTERS = ["embedded"]
    client.force_login(alice)
    form = client.get(reverse("researcher:study_create")).content.decode()
    assert 'name="next_round_segmenter"' in form and "Site default (embedded)" in form
    assert "sam:vit_h — sam · vit_h · sam_vit_h_4b8939.pth (file missing)" in form
    refused = client.post(
        reverse("researcher:study_create"), _form_data(dataset, next_round_segmenter="sam:vit_l")
    )
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    response = client.post(
        reverse("researcher:study_create"), _form_data(dataset, next_round_segmenter="sam:vit_h")
    )
    study = Study.objects.get(name="Segmenter choice")
    assert response.status_code == 302 and study.next_round_segmenter == "sam:vit_h"
    detail = client.get(reverse("researcher:study_detail", args=[study.pk])).content.decode()
    assert "sam:vit_h — sam · vit_h · sam_vit_h_4b8939.pth" in detail


def test_a_failed_build_shows_its_reason_and_only_the_owner_may_retry(
    client, alice, bob, alice_study, django_capture_on_commit_callbacks
):
    round_1 = alice_study.rounds.get(number=1)
    Round.objects.filter(pk=round_1.pk).update(state=Round.State.CLOSED)
    reason = "checkpoint for predictor 'sam' (variant 'vit_b') not found at /ckpt/sam_vit_b_01ec64.pth."
    round_build_fail(round_id=round_1.pk, reason=reason)
    alice_study.researchers.add(bob)
    retry = reverse("researcher:round_retry_build", args=[alice_study.pk, round_1.pk])
    client.force_login(bob)
    shared = client.get(reverse("researcher:study_detail", args=[alice_study.pk])).content.decode()
    assert "Building round 2 failed" in shared and "not found at /ckpt/sam_vit_b_01ec64.pth" in shared
    assert retry not in shared and client.post(retry).status_code == 403
    client.force_login(alice)
    assert retry in client.get(reverse("researcher:study_detail", args=[alice_study.pk])).content.decode()
    with django_capture_on_commit_callbacks() as sent:
        page = client.post(retry, follow=True).content.decode()
    assert len(sent) == 1 and "sent again" in page and "Building round 2 failed" not in page
    round_1.refresh_from_db()
    assert (round_1.build_error, round_1.build_failed_at) == ("", None)
    assert "Nothing to retry" in client.post(retry, follow=True).content.decode()
    other = make_study(alice_study.dataset, publish=True, owner=alice)
    wrong_study = reverse("researcher:round_retry_build", args=[other.pk, round_1.pk])
    assert client.post(wrong_study).status_code == 404


def test_study_and_target_pages_say_which_model_made_the_previous_masks(client, alice, alice_study):
    first = alice_study.rounds.get(number=1).targets.select_related("instance").first()
    round_2 = Round.objects.create(study=alice_study, number=2)
    target = Target.objects.create(
        round=round_2, instance=first.instance, click_type="fn", model_type="sam",
        full_stem=f"{first.full_stem}_sam_fn_pc_1", model_id="sam:vit_b:0123456789ab:mm1", model_variant="vit_b",
        checkpoint_sha256="ab" * 32, source_device="pc", source_index=1,
    )  # fmt: skip
    client.force_login(alice)
    detail = client.get(reverse("researcher:study_detail", args=[alice_study.pk])).content.decode()
    assert 'id="mask-provenance"' in detail and "sam:vit_b:0123456789ab:mm1" in detail
    assert f'title="{"ab" * 32}"' in detail
    page = client.get(reverse("researcher:target_detail", args=[alice_study.pk, target.pk])).content.decode()
    assert "sam:vit_b:0123456789ab:mm1" in page and "variant vit_b" in page and "ab" * 32 in page


# --------------------------------------------------------------------------------------------------
# issue 32 item 8: the form's Highlighted Instance as the player draws it, trial pictures, readable names


def _png(response) -> np.ndarray:
    assert response.status_code == 200 and response["Content-Type"] == "image/png"
    return np.asarray(PILImage.open(io.BytesIO(response.content)).convert("RGB"))


def test_the_forms_highlighted_instance_is_the_players_green_outline(client, alice, dataset):
    instance = Instance.objects.filter(image__dataset=dataset).first()
    client.force_login(alice)
    preview = _png(
        client.get(reverse("researcher:instance_preview", args=[instance.pk, "Highlighted_Instance"]))
    )
    with instance.mask_file.open("rb") as handle:
        mask = np.asarray(PILImage.open(handle).convert("L")) > 127
    with instance.image.file.open("rb") as handle:
        image = np.asarray(PILImage.open(handle).convert("RGB"))
    green = np.all(preview == HIGHLIGHT_RGB, axis=2)
    # exactly the player's picture: its outline function's pixels in green, the image everywhere else
    wanted = render_target_picture(display=image, region=mask, mode=DisplayMode.HIGHLIGHTED_INSTANCE)
    assert np.array_equal(preview, wanted)
    assert green.sum() > 100 and not (green & mask).any(), "a green ring around the object, none inside it"
    assert np.array_equal(preview[~green], image[~green]), "not dimmed: the player shows the image as it is"


def test_the_session_page_shows_each_trials_click_and_outline(client, alice, bob, alice_study):
    session = make_validated_batch(alice_study, device="pc", valid_positions={0})
    client.force_login(alice)
    page = client.get(
        reverse("researcher:session_detail", args=[alice_study.pk, session.pk])
    ).content.decode()
    for position in range(3):
        url = reverse("researcher:session_trial_picture", args=[alice_study.pk, session.pk, position])
        assert f'src="{url}"' in page
    trials = list(session.trials.select_related("click", "target__instance__image").order_by("position"))
    for trial in trials:
        picture = _png(
            client.get(
                reverse("researcher:session_trial_picture", args=[alice_study.pk, session.pk, trial.position])
            )
        )
        image = trial.target.instance.image
        assert picture.shape == (image.height, image.width, 3)  # 160x120: below the 480 px cap
        # the click's dot in its verdict's colour, at the click
        x, y = int(trial.click.x), int(trial.click.y)
        dot = tuple(int(v) for v in picture[min(y, image.height - 1), min(x, image.width - 1)])
        assert dot == CLICK_RGB[trial.click.is_valid], (trial.position, dot)
        assert np.all(picture == HIGHLIGHT_RGB, axis=2).sum() > 100, "the region's green outline"
    assert trials[0].click.is_valid and not trials[1].click.is_valid
    # researchers only, and only those who may see the study
    missing = reverse("researcher:session_trial_picture", args=[alice_study.pk, session.pk, 9])
    assert client.get(missing).status_code == 404
    url = reverse("researcher:session_trial_picture", args=[alice_study.pk, session.pk, 0])
    client.force_login(bob)
    assert client.get(url).status_code == 404
    client.logout()
    assert client.get(url).status_code == 302


def test_target_names_read_as_image_and_object(client, alice, tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(
        tmp_path, n_images=2, objects_per_image=2, stems=["coins", "boat"], name="two objects"
    )
    study = make_study(dataset, publish=True, batch_size=2, min_valid_per_session=1, owner=alice)
    target = (
        study.rounds.get(number=1).targets.select_related("instance__image").get(full_stem="coins_______2")
    )
    assert target.display_name == "coins · 2"
    correction = Target(round=target.round, instance=target.instance, click_type="fn", model_type="sam",
                        source_device="pc", source_index=3, full_stem="coins_______2_sam_fn_pc_3")  # fmt: skip
    assert correction.display_name == "coins · 2 · fn of sam (pc click 3)"
    client.force_login(alice)
    listing = client.get(reverse("researcher:target_list", args=[study.pk])).content.decode()
    assert ">coins · 2</a>" in listing and "coins_______2</code>" in listing
    page = client.get(reverse("researcher:target_detail", args=[study.pk, target.pk])).content.decode()
    assert "<h1>coins · 2 <small" in page and '<code id="target-full-stem">coins_______2</code>' in page
