"""Study page parts of issue 21 through Django's test client: annotator links and QR codes, live progress
(polling JSON), the study list's progress, and the session pages."""

from __future__ import annotations

import pytest
from django.test import Client

from collector.models import Session
from collector.services.tokens import study_link_token_read
from tests.factories import make_validated_batch

pytestmark = pytest.mark.django_db


def test_a_link_study_shows_per_device_links_with_qr_codes(client, alice, alice_study, settings):
    settings.PUBLIC_BASE_URL = "http://192.168.1.20:8000"
    client.force_login(alice)
    page = client.get(f"/researcher/studies/{alice_study.pk}/").content.decode()
    links = {}
    for device in ("any", "pc", "mobile"):
        start = page.index(f'id="link-{device}"')
        block = page[start : page.index("</figure>", start)]
        assert block.count('<svg role="img" aria-label="QR code: ') == 1, device
        links[device] = block.split('readonly value="')[1].split('"')[0]
    for device, url in links.items():
        assert url.startswith("http://192.168.1.20:8000/s/")
        token = url.rstrip("/").rsplit("/", 1)[1]
        assert study_link_token_read(token=token) == {
            "study": alice_study.pk,
            "device": "" if device == "any" else device,
        }
    assert 'id="links-loopback"' not in page
    settings.PUBLIC_BASE_URL = "http://127.0.0.1:8000"
    assert 'id="links-loopback"' in client.get(f"/researcher/studies/{alice_study.pk}/").content.decode()


def test_the_study_page_refreshes_from_json(client, alice, alice_study):
    client.force_login(alice)
    live = client.get(f"/researcher/studies/{alice_study.pk}/live/")
    assert live.status_code == 200 and live["Cache-Control"].startswith("max-age=0")
    body = live.json()
    assert body["state"] == "published" and "0 / 75" in body["html"]["live"]
    make_validated_batch(alice_study, device="pc")
    body = client.get(f"/researcher/studies/{alice_study.pk}/live/").json()
    assert "3 / 75" in body["html"]["live"] and "#" in body["html"]["live"]  # progress and the new session
    page = client.get(f"/researcher/studies/{alice_study.pk}/").content.decode()
    assert (
        f'data-live-url="/researcher/studies/{alice_study.pk}/live/"' in page and "researcher/live.js" in page
    )


def test_the_study_list_shows_progress_and_refreshes(client, alice, alice_study, bob_study):
    make_validated_batch(alice_study, device="mobile")
    client.force_login(alice)
    page = client.get("/researcher/").content.decode()
    assert "3 / 150" in page and "round 1" in page and "Bob" not in page
    rows = client.get("/researcher/studies/live/").json()["html"]["study-rows"]
    assert (
        "3 / 150" in rows
        and f'data-study="{alice_study.pk}"' in rows
        and f'data-study="{bob_study.pk}"' not in rows
    )


def test_live_endpoints_follow_the_access_rules(alice_study, bob):
    anonymous = Client()
    assert anonymous.get(f"/researcher/studies/{alice_study.pk}/live/").status_code == 302
    client = Client()
    client.force_login(bob)
    assert client.get(f"/researcher/studies/{alice_study.pk}/live/").status_code == 404
    assert (
        f'data-study="{alice_study.pk}"'
        not in client.get("/researcher/studies/live/").json()["html"]["study-rows"]
    )


def test_session_list_and_page(client, alice, alice_study):
    counted = make_validated_batch(alice_study, device="pc")
    rejected = make_validated_batch(alice_study, device="mobile", valid_positions={0})
    waiting = make_validated_batch(alice_study, device="pc", validate=False)
    client.force_login(alice)
    listing = client.get(f"/researcher/studies/{alice_study.pk}/sessions/").content.decode()
    for session in (counted, rejected, waiting):
        assert f"/researcher/studies/{alice_study.pk}/sessions/{session.pk}/" in listing
        assert session.worker.pseudonym in listing and session.worker.external_id not in listing
    only_rejected = client.get(
        f"/researcher/studies/{alice_study.pk}/sessions/?show=rejected"
    ).content.decode()
    assert f"sessions/{rejected.pk}/" in only_rejected and f"sessions/{counted.pk}/" not in only_rejected
    pending = client.get(f"/researcher/studies/{alice_study.pk}/sessions/?show=pending").content.decode()
    assert f"sessions/{waiting.pk}/" in pending and f"sessions/{rejected.pk}/" not in pending

    page = client.get(f"/researcher/studies/{alice_study.pk}/sessions/{rejected.pk}/").content.decode()
    assert "1 of 3 clicks were valid" in page and 'id="review-form"' in page
    # the factory reports each trial as presented once, as the player does
    # two invalid clicks: in the trial table and under their pictures
    assert page.count("outside_region") == 4 and page.count("did not report showing it") == 0
    assert page.count(">1×<") == 3
    assert 'id="session-payment">unpaid' in page
    waiting_page = client.get(f"/researcher/studies/{alice_study.pk}/sessions/{waiting.pk}/").content.decode()
    assert "not validated yet" in waiting_page and "pending" in waiting_page


def test_session_pages_follow_the_access_rules(alice_study, bob, alice, bob_study):
    session = make_validated_batch(alice_study, device="pc")
    client = Client()
    client.force_login(bob)
    assert client.get(f"/researcher/studies/{alice_study.pk}/sessions/{session.pk}/").status_code == 404
    assert client.get(f"/researcher/studies/{bob_study.pk}/sessions/{session.pk}/").status_code == 404
    alice_study.researchers.add(bob)  # shared to look at: the page, but no review form and no review
    page = client.get(f"/researcher/studies/{alice_study.pk}/sessions/{session.pk}/").content.decode()
    assert 'id="review-form"' not in page
    response = client.post(
        f"/researcher/studies/{alice_study.pk}/sessions/{session.pk}/review/", {"decision": "approve"}
    )
    assert response.status_code == 403 and not Session.objects.get(pk=session.pk).reviews.exists()
