"""collector.admin: the provenance of previous masks and failed next-round builds, as an admin sees them."""

from __future__ import annotations

import pytest

from collector.models import Round, Target
from collector.services.next_round import round_build_fail
from tests.factories import make_rect_dataset, make_study

pytestmark = pytest.mark.django_db


def test_a_failed_build_is_listed_and_retried_from_the_round_admin(
    admin_client, tmp_path, settings, django_capture_on_commit_callbacks
):
    settings.MEDIA_ROOT = tmp_path / "media"
    study = make_study(make_rect_dataset(tmp_path, n_images=1), publish=True)
    round_1 = study.rounds.get(number=1)
    round_build_fail(round_id=round_1.pk, reason="predictor 'simpleclick' cannot run here: install mmcv")
    page = admin_client.get(f"/admin/collector/round/{round_1.pk}/change/").content.decode()
    assert "predictor &#x27;simpleclick&#x27; cannot run here: install mmcv" in page
    with django_capture_on_commit_callbacks() as sent:
        response = admin_client.post(
            "/admin/collector/round/",
            {"action": "retry_build", "_selected_action": [round_1.pk]},
            follow=True,
        )
    assert "build sent again" in response.content.decode() and len(sent) == 1
    assert Round.objects.get(pk=round_1.pk).build_error == ""


def test_target_provenance_is_shown_and_cannot_be_edited(admin_client, tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    study = make_study(make_rect_dataset(tmp_path, n_images=1), publish=True)
    first = study.rounds.get(number=1).targets.select_related("instance").get()
    target = Target.objects.create(
        round=Round.objects.create(study=study, number=2), instance=first.instance, click_type="fn",
        model_type="sam", full_stem=f"{first.full_stem}_sam_fn_pc_1", model_id="sam:vit_b:0123:mm1",
        model_variant="vit_b", checkpoint_sha256="e" * 64, source_device="pc", source_index=1,
    )  # fmt: skip
    listing = admin_client.get("/admin/collector/target/", {"q": "e" * 64}).content.decode()
    assert target.full_stem in listing and "vit_b" in listing
    page = admin_client.get(f"/admin/collector/target/{target.pk}/change/").content.decode()
    assert "sam:vit_b:0123:mm1" in page and "e" * 64 in page
    assert 'name="checkpoint_sha256"' not in page and 'name="model_id"' not in page  # read-only
