"""Entry link, player page, annotator API and stimulus access through Django's test client."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from collector.models import Click, Session, Study, Target
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make, session_token_read, study_link_token_make
from tests.factories import make_dataset, make_researcher, make_study, make_worker


@pytest.fixture
def study(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=4, size=(64, 48))
    return make_study(dataset, publish=True, batch_size=3)


def _session(study, device="pc"):
    session = session_start(study=study, worker=make_worker(), device=device)
    return session, session_token_make(session_id=session.pk)


def _payload(response) -> dict:
    html = response.content.decode()
    start = html.index('<script id="player-payload" type="application/json">') + len(
        '<script id="player-payload" type="application/json">'
    )
    return json.loads(html[start : html.index("</script>", start)])


def _post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def _click_body(position, key, **extra):
    body = {"position": position, "idempotency_key": key, "x": 5.5, "y": 7.25, "shown_width": 640,
            "shown_height": 480, "pointer_type": "touch", "reaction_ms": 400, "event_timestamp_ms": 9000.5,
            "phase_onsets_ms": {"A": 1, "B": 2, "C": 3, "D": 4}, "blocked_clicks": 1, "flags": [],
            "refresh_hz": 60}  # fmt: skip
    body.update(extra)
    return body


@pytest.mark.django_db
def test_link_get_creates_nothing_and_post_starts_a_session(client, study):
    token = study_link_token_make(study_id=study.pk)
    url = reverse("annotation_ui:study_link", kwargs={"token": token})
    page = client.get(url, HTTP_USER_AGENT="Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile")
    assert page.status_code == 200 and b'value="mobile"' in page.content
    assert not Session.objects.exists()

    response = client.post(url, {"device": "mobile"}, HTTP_USER_AGENT="Phone UA")
    session = Session.objects.get()
    # The player page itself (no redirect round trip), showing the batch's own address.
    assert response.status_code == 200 and _payload(response)["session"]["id"] == session.pk
    # (the token is read back, not rebuilt: a signature made a second later differs in its timestamp)
    shown = re.search(
        r'history\.replaceState\(null, "", "/a/([^/"]+)/"\)',
        response.content.decode().replace("\\u002D", "-"),
    )
    assert shown and session_token_read(token=shown[1]) == session.pk
    assert session.device == "mobile" and session.detected_device == "mobile" and session.trials.count() == 3
    assert session.worker.platform == "link" and session.user_agent == "Phone UA"
    cookie = response.cookies[f"clicklab_link_worker_{study.pk}"]
    assert cookie["httponly"] and cookie["path"] == "/s/" and cookie["samesite"] == "Lax"
    # The same browser again: the same worker, its running batch resumed; another browser: a new worker.
    again = client.post(url, {"device": "mobile"})
    assert again.status_code == 200 and Session.objects.count() == 1
    other = Client()
    other.post(url, {"device": "pc"})
    assert Session.objects.count() == 2 and Session.objects.values("worker").distinct().count() == 2


@pytest.mark.django_db
def test_link_with_a_device_uses_it_and_refusals_are_readable(client, study):
    url = reverse(
        "annotation_ui:study_link", kwargs={"token": study_link_token_make(study_id=study.pk, device="pc")}
    )
    client.post(url, {"device": "mobile"})
    session = Session.objects.get()
    assert (session.device, session.platform_device, session.detected_device) == ("pc", "pc", "mobile")

    Study.objects.filter(pk=study.pk).update(state=Study.State.PAUSED)
    refused = client.post(url, {"device": "pc"})
    assert refused.status_code == 409 and b"not open" in refused.content
    bad = client.get(reverse("annotation_ui:study_link", kwargs={"token": "forged"}))
    assert bad.status_code == 404 and b"not valid" in bad.content


@pytest.mark.django_db
def test_player_page_has_stimulus_urls_and_never_a_mask(client, study):
    session, token = _session(study)
    response = client.get(reverse("annotation_ui:player", kwargs={"token": token}))
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    payload = _payload(response)
    assert [t["position"] for t in payload["trials"]] == [0, 1, 2]
    assert payload["study"] == {"display_mode": "Object_CutOut", "image_ms": 1500, "target_ms": 2000,
                                "blocked_ms": 1500, "batch_size": 3}  # fmt: skip
    text = json.dumps(payload)
    assert "mask" not in text.lower() and "/media/" not in text
    for trial in payload["trials"]:
        assert trial["display_url"].startswith(
            f"/api/annotator/{token}/stimulus/{trial['position']}/display/"
        )
        assert trial["target_url"].startswith(f"/api/annotator/{token}/stimulus/{trial['position']}/target/")
        target = session.trials.get(position=trial["position"]).target
        assert (trial["width"], trial["height"]) == (
            target.instance.image.width,
            target.instance.image.height,
        )
    assert b"After you press START, an image is shown for 1.5 seconds" in response.content
    assert client.get(reverse("annotation_ui:jsi18n")).status_code == 200


@pytest.mark.django_db
def test_player_page_and_catalogue_are_compressed_for_slow_networks(client, study):
    """Every byte before START counts on a slow phone network: the page and its translation catalogue go
    out gzip-compressed to a browser that accepts it, and plain to one that does not."""
    import gzip

    session, token = _session(study)
    url = reverse("annotation_ui:player", kwargs={"token": token})
    plain = client.get(url)
    packed = client.get(url, HTTP_ACCEPT_ENCODING="gzip, deflate")
    assert "Content-Encoding" not in plain
    assert packed["Content-Encoding"] == "gzip" and "Accept-Encoding" in packed["Vary"]
    html = gzip.decompress(packed.content)
    assert b'id="player-payload"' in html and len(packed.content) < len(plain.content) / 2
    catalogue = client.get(reverse("annotation_ui:jsi18n"), HTTP_ACCEPT_ENCODING="gzip")
    assert catalogue["Content-Encoding"] == "gzip" and b"gettext" in gzip.decompress(catalogue.content)


@pytest.mark.django_db
def test_stimuli_are_served_only_to_the_session_holding_the_trial(client, study):
    session, token = _session(study)
    other, other_token = _session(study)
    other_targets = set(other.trials.values_list("target_id", flat=True))
    position = next(t.position for t in session.trials.all() if t.target_id not in other_targets)
    trials = _payload(client.get(reverse("annotation_ui:player", kwargs={"token": token})))["trials"]
    trial = trials[position]
    response = client.get(trial["display_url"])
    assert response.status_code == 200 and response["Content-Type"] == "image/webp"
    assert response["Cache-Control"] == "private, max-age=31536000, immutable"
    assert b"".join(response.streaming_content)[:4] == b"RIFF"

    assert client.get(trial["display_url"].replace(token, other_token)).status_code == 404
    assert client.get(trial["display_url"].replace(token, token[:-2] + "xx")).status_code == 404
    assert client.get(trial["target_url"].replace("/target/", "/mask/")).status_code == 404
    assert client.get(trial["display_url"][:-10] + "0000.webp").status_code == 404


@pytest.mark.django_db
def test_stimulus_files_removed_from_storage_are_rendered_again_not_a_server_error(client, study):
    from django.core.files.storage import default_storage

    from collector.services.stimuli import stimulus_path

    session, token = _session(study)
    payload = _payload(client.get(reverse("annotation_ui:player", kwargs={"token": token})))
    trial = payload["trials"][0]
    first = b"".join(client.get(trial["display_url"]).streaming_content)
    for name in {
        url.rsplit("/", 1)[-1] for t in payload["trials"] for url in (t["display_url"], t["target_url"])
    }:
        default_storage.delete(stimulus_path(name))  # e.g. an operator cleaned the media folder

    again = client.get(trial["display_url"])
    assert again.status_code == 200 and b"".join(again.streaming_content) == first
    bundle = client.get(payload["bundle_url"])
    assert bundle.status_code == 200 and int(bundle["Content-Length"]) == len(
        b"".join(bundle.streaming_content)
    )
    page = _payload(client.get(reverse("annotation_ui:player", kwargs={"token": token})))
    assert page["trials"][0]["display_url"] == trial["display_url"]  # same bytes, same name


@pytest.mark.django_db
def test_the_batch_bundle_holds_exactly_the_per_file_stimuli_and_only_for_its_session(client, study):
    session, token = _session(study)
    other, other_token = _session(study)
    page = client.get(reverse("annotation_ui:player", kwargs={"token": token}))
    payload = _payload(page)
    bundle_url = payload["bundle_url"]
    assert bundle_url.startswith(f"/api/annotator/{token}/stimuli/") and bundle_url.endswith(".bin")
    # The page preloads the bundle, not the twenty files.
    assert page.content.count(b'rel="preload"') == 1 and bundle_url.encode() in page.content

    response = client.get(bundle_url)
    assert response.status_code == 200 and response["Cache-Control"] == "private, max-age=31536000, immutable"
    body = b"".join(response.streaming_content)
    assert int(response["Content-Length"]) == len(body)
    length = int.from_bytes(body[:4], "big")
    index = json.loads(body[4 : 4 + length])
    offset = 4 + length
    expected = []
    for trial in payload["trials"]:
        expected += [(trial["position"], "display", trial["display_url"])]
        expected += [(trial["position"], "target", trial["target_url"])]
    assert [(e["position"], e["kind"]) for e in index] == [(p, k) for p, k, _ in expected]
    for entry, (_, _, url) in zip(index, expected, strict=True):
        single = b"".join(client.get(url).streaming_content)
        assert url.endswith(entry["name"]) and entry["type"] == "image/webp"
        assert body[offset : offset + entry["length"]] == single
        offset += entry["length"]
    assert offset == len(body)

    # Another session's token, a forged token, a stale digest: nothing.
    assert client.get(bundle_url.replace(token, other_token)).status_code == 404
    assert client.get(bundle_url.replace(token, token[:-2] + "xx")).status_code == 404
    assert client.get(bundle_url[:-8] + "0000.bin").status_code == 404
    # A finished or expired batch serves no pictures any more.
    Session.objects.filter(pk=session.pk).update(status=Session.Status.EXPIRED)
    assert client.get(bundle_url).status_code == 404


@pytest.mark.django_db
def test_click_api_stores_once_and_finish_returns_the_code_only_when_complete(client, study):
    session, token = _session(study)
    click_url = reverse("annotation_ui:api_click", kwargs={"token": token})
    finish_url = reverse("annotation_ui:api_finish", kwargs={"token": token})

    first = _post(client, click_url, _click_body(0, "k0"))
    assert first.status_code == 201 and first.json() == {
        "ok": True,
        "created": True,
        "position": 0,
        "missing": [1, 2],
    }
    again = _post(client, click_url, _click_body(0, "k0"))
    assert again.status_code == 200 and again.json()["created"] is False
    other = _post(client, click_url, _click_body(0, "k-other"))
    assert other.status_code == 409 and "already has its click" in other.json()["message"]
    assert _post(client, click_url, {"position": 1}).status_code == 400
    assert client.post(click_url, data="{not json", content_type="application/json").status_code == 400
    assert _post(client, click_url, _click_body("1", "k1")).status_code == 400

    early = _post(client, finish_url, {})
    assert early.status_code == 409 and early.json()["missing"] == [1, 2]
    _post(client, click_url, _click_body(1, "k1"))
    _post(client, click_url, _click_body(2, "k2"))
    done = _post(client, finish_url, {})
    session.refresh_from_db()
    assert done.status_code == 200
    assert done.json()["finish"] == {
        "kind": "show_code",
        "code": session.completion_code,
        "url": "",
        "fields": {},
    }
    assert Click.objects.filter(trial__session=session).count() == 3
    stored = Click.objects.get(idempotency_key="k0")
    assert (stored.x, stored.y, stored.pointer_type, stored.trial.blocked_clicks) == (5.5, 7.25, "touch", 1)

    state = client.get(reverse("annotation_ui:api_state", kwargs={"token": token})).json()
    assert state["finish"]["code"] == session.completion_code and all(t["done"] for t in state["trials"])
    page = _payload(client.get(reverse("annotation_ui:player", kwargs={"token": token})))
    assert page["finish"]["code"] == session.completion_code and "display_url" not in page["trials"][0]


@pytest.mark.django_db
def test_client_report_is_stored(client, study):
    session, token = _session(study)
    url = reverse("annotation_ui:api_client", kwargs={"token": token})
    response = _post(
        client,
        url,
        {"client_info": {"device_pixel_ratio": 3, "webdriver": True}, "detected_device": "mobile"},
    )
    assert response.status_code == 200
    session.refresh_from_db()
    assert session.client_info == {"device_pixel_ratio": 3, "webdriver": True}
    assert session.detected_device == "mobile"
    assert _post(client, url, {"client_info": "nope"}).status_code == 400


@pytest.mark.django_db
def test_preview_needs_a_researcher_who_may_see_the_study(client, study):
    url = reverse("annotation_ui:preview", kwargs={"study_id": study.pk})
    assert client.get(url).status_code == 302
    stranger = make_researcher()
    client.force_login(stranger)
    assert client.get(url).status_code == 404
    owner = make_researcher()
    Study.objects.filter(pk=study.pk).update(owner=owner)
    client.force_login(owner)
    response = client.get(url)
    assert response.status_code == 200
    payload = _payload(response)
    assert payload["mode"] == "preview" and len(payload["trials"]) == 3
    assert payload["api"] == {"preview_check": f"/researcher/studies/{study.pk}/preview/check"}
    targets = set(Target.objects.filter(round__study=study).values_list("pk", flat=True))
    assert {trial["target_id"] for trial in payload["trials"]} <= targets
    image = client.get(payload["trials"][0]["target_url"])
    assert image.status_code == 200 and image["Content-Type"] == "image/webp"
    assert not Session.objects.exists()


@pytest.mark.django_db
def test_player_page_of_an_expired_session_says_so(client, study):
    from django.utils import timezone

    session, token = _session(study)
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now())
    response = client.get(reverse("annotation_ui:player", kwargs={"token": token}))
    assert response.status_code == 410 and b"expired" in response.content


def _instructions(response) -> str:
    html = response.content.decode()
    start = html.index('id="screen-instructions"')
    return " ".join(re.sub(r"<[^>]+>", " ", html[start : html.index("</section>", start)]).split())


@pytest.mark.django_db
def test_a_reloaded_batch_counts_the_images_left_in_its_instructions(client, study):
    """The instructions name the images still to do: a batch of 3 with one click stored says 2 after a
    reload (it said the batch's 3 before issue 32's fix, while 2 were left)."""
    session, token = _session(study)
    player_url = reverse("annotation_ui:player", kwargs={"token": token})
    assert "process 3 images in sequence." in _instructions(client.get(player_url))
    click_url = reverse("annotation_ui:api_click", kwargs={"token": token})
    assert _post(client, click_url, _click_body(0, "k0")).status_code == 201
    assert "process 2 images in sequence." in _instructions(client.get(player_url))
    assert _post(client, click_url, _click_body(1, "k1")).status_code == 201
    assert "process 1 image in sequence." in _instructions(client.get(player_url))
    # what the player reports with its client info is unchanged: the batch's own practice count
    assert _payload(client.get(player_url))["screens"]["practice"] == 0
