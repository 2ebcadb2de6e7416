"""The researcher's preview before publishing (annotation_ui.views.preview, its trial list) and the
validity feedback endpoint ``POST /researcher/studies/<id>/preview/check``."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from collector.models import Session, Study, Target
from tests.factories import make_dataset, make_rect_dataset, make_study

pytestmark = pytest.mark.django_db


def _payload(response) -> dict:
    return response.context["payload"]


def _target_id(study, trial: dict) -> int:
    """The target a preview trial shows: its stimulus URLs are /preview/<study>/stimulus/<target>/…"""
    prefix = f"/preview/{study.pk}/stimulus/"
    assert trial["display_url"].startswith(prefix)
    return int(trial["display_url"][len(prefix) :].split("/")[0])


@pytest.fixture
def crowded_draft(tmp_path, settings, alice):
    """A draft whose 4 images hold 3 objects each, ids in image order (like the demo's astronaut)."""
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=4, objects_per_image=3, size=(120, 90))
    return make_study(dataset, owner=alice, batch_size=4, min_valid_per_session=2, quota_pc=2, quota_mobile=2)


def test_a_draft_is_previewed_with_a_real_batch(client, alice, crowded_draft):
    client.force_login(alice)
    response = client.get(f"/preview/{crowded_draft.pk}/?device=mobile")
    assert response.status_code == 200  # not 409 "publish it first" any more
    payload = _payload(response)
    assert payload["mode"] == "preview" and len(payload["trials"]) == 4
    ids = [_target_id(crowded_draft, trial) for trial in payload["trials"]]
    targets = Target.objects.select_related("instance").in_bulk(ids)
    assert len({targets[target_id].instance.image_id for target_id in ids}) == 4  # never one image twice
    assert Study.objects.get(pk=crowded_draft.pk).state == Study.State.DRAFT
    assert not Session.objects.exists()  # nothing stored for the researcher
    orders = {
        tuple(
            t["display_url"]
            for t in _payload(client.get(f"/preview/{crowded_draft.pk}/?batch={n}"))["trials"]
        )
        for n in range(5)
    }
    assert len(orders) > 1  # "another batch" shows another order


@pytest.mark.parametrize("batch", ["9" * 5000, "\u00b2", "12345678901234", "-3", "x"])
def test_a_batch_number_the_preview_cannot_use_shows_the_first_batch(client, alice, crowded_draft, batch):
    client.force_login(alice)
    response = client.get(f"/preview/{crowded_draft.pk}/", {"batch": batch})
    assert response.status_code == 200  # a 4,301-digit or superscript number was a 500
    first = client.get(f"/preview/{crowded_draft.pk}/")
    assert _payload(response)["trials"] == _payload(first)["trials"]


def test_the_preview_needs_a_researcher_who_may_see_the_study(client, bob, crowded_draft):
    assert client.get(f"/preview/{crowded_draft.pk}/").status_code == 302  # to the login
    client.force_login(bob)
    assert client.get(f"/preview/{crowded_draft.pk}/").status_code == 404
    client.force_login(User.objects.create_user("annotator", password="pw-for-tests-1"))
    assert client.get(f"/preview/{crowded_draft.pk}/").status_code == 404


@pytest.fixture
def rect_study(tmp_path, settings, alice):
    settings.MEDIA_ROOT = tmp_path / "media"
    return make_study(
        make_rect_dataset(tmp_path, n_images=2), owner=alice, batch_size=2, min_valid_per_session=1
    )


def _check(client, study, body, **extra):
    return client.post(
        f"/researcher/studies/{study.pk}/preview/check",
        data=json.dumps(body),
        content_type="application/json",
        **extra,
    )


def test_check_says_whether_a_click_would_count(client, alice, rect_study):
    client.force_login(alice)
    target_id = _target_id(rect_study, _payload(client.get(f"/preview/{rect_study.pk}/"))["trials"][0])
    inside = _check(client, rect_study, {"target_id": target_id, "x": 160.2, "y": 110.9})
    assert inside.status_code == 200
    assert inside.json() == {
        "valid": True, "distance_px": 0.0, "radius_px": 5.0, "reason": "", "message": "Counts: inside the object.",
    }  # fmt: skip
    near = _check(client, rect_study, {"target_id": target_id, "x": 147.0, "y": 150})  # 3 px left of it
    assert near.json()["valid"] is True and near.json()["distance_px"] == 3.0
    far = _check(client, rect_study, {"target_id": target_id, "x": 20, "y": 20}).json()
    assert far["valid"] is False and far["reason"] == "outside_region" and far["distance_px"] > 5


def test_check_refuses_what_it_cannot_answer(client, alice, bob, rect_study, tmp_path):
    target = Target.objects.create(
        round=Study.objects.get(pk=rect_study.pk).rounds.get_or_create(number=1)[0],
        instance=rect_study.dataset.images.first().instances.first(),
        full_stem="manual",
    )
    assert _check(Client(), rect_study, {"target_id": target.pk, "x": 1, "y": 1}).status_code == 401
    client.force_login(alice)
    for body, text in (
        ({"target_id": "1", "x": 1, "y": 1}, "target_id='1' must be an integer"),
        ({"target_id": target.pk, "x": "a", "y": 1}, "x='a' must be a finite number"),
        ({"target_id": target.pk, "x": 1}, "y=None must be a finite number"),
    ):
        response = _check(client, rect_study, body)
        assert response.status_code == 400 and text in response.json()["message"], body
    assert _check(client, rect_study, [1, 2]).status_code == 400
    other = make_study(make_rect_dataset(tmp_path, n_images=1, name="other"), owner=alice, batch_size=1,
                       min_valid_per_session=1, publish=True)  # fmt: skip
    foreign = other.rounds.get().targets.get()
    assert _check(client, rect_study, {"target_id": foreign.pk, "x": 1, "y": 1}).status_code == 404
    client.force_login(bob)
    assert _check(client, rect_study, {"target_id": target.pk, "x": 1, "y": 1}).status_code == 404
    client.force_login(User.objects.create_user("annotator", password="pw-for-tests-1"))
    assert _check(client, rect_study, {"target_id": target.pk, "x": 1, "y": 1}).status_code == 403
