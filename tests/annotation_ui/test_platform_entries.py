"""Platform entry views without a browser: framing headers, cookies, exit page; and the researcher commands."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from collector.models import Session
from collector.services.tokens import session_token_make
from tests.conftest import FAKE_TOLOKA_TOKEN
from tests.factories import complete_session, make_dataset, make_study

pytestmark = pytest.mark.django_db


def _study(tmp_path, platform, **config):
    dataset = make_dataset(tmp_path, n_images=3, size=(64, 48))
    return make_study(dataset, publish=True, platform=platform, batch_size=3, min_valid_per_session=2,
                      quota_pc=2, quota_mobile=2, platform_config=config)  # fmt: skip


def test_only_mturk_pages_may_be_framed_and_set_no_cookies(tmp_path, settings):
    settings.MTURK_FRAME_ANCESTORS = ["https://www.mturk.com", "https://workersandbox.mturk.com"]
    mturk, prolific = _study(tmp_path, "mturk"), _study(tmp_path, "prolific")
    client = Client()
    entry = client.get(
        f"/mturk/{mturk.pk}/pc/?assignmentId=A1&hitId=H&workerId=W1&turkSubmitTo=https://www.mturk.com"
    )
    assert entry.status_code == 303 and "/a/" in entry["Location"]
    assert "X-Frame-Options" not in entry
    # the site's policy (django-csp) with the platform's hosts as frame-ancestors
    assert "frame-ancestors 'self' https://www.mturk.com https://workersandbox.mturk.com" in (
        entry["Content-Security-Policy"].split("; ")
    )
    assert "default-src 'self'" in entry["Content-Security-Policy"]
    assert not entry.cookies
    player = client.get(entry["Location"])
    assert player.status_code == 200 and "X-Frame-Options" not in player
    assert "frame-ancestors 'self' https://www.mturk.com" in player["Content-Security-Policy"]
    assert not player.cookies

    other = client.get(f"/prolific/{prolific.pk}/pc/?PROLIFIC_PID=p&STUDY_ID=s&SESSION_ID=x")
    assert other.status_code == 303 and other["X-Frame-Options"] == "DENY"
    assert client.get(other["Location"])["X-Frame-Options"] == "DENY"
    assert client.get("/")["X-Frame-Options"] == "DENY"


def test_exit_page_performs_the_finish_action(tmp_path):
    study = _study(tmp_path, "mturk")
    client = Client()
    client.get(
        f"/mturk/{study.pk}/pc/?assignmentId=A9&hitId=H&workerId=W9&turkSubmitTo=https://www.mturk.com"
    )
    session = Session.objects.get(platform_assignment_id="A9")
    token = session_token_make(session_id=session.pk)
    assert client.get(f"/platform-exit/{token}/").status_code == 409  # not finished yet
    session = complete_session(session)
    page = client.get(f"/platform-exit/{token}/")
    html = page.content.decode()
    assert 'action="https://www.mturk.com/mturk/externalSubmit"' in html  # the form without JavaScript
    assert f'name="completion_code" value="{session.completion_code}"' in html
    assert 'name="assignmentId" value="A9"' in html
    assert "frame-ancestors" in page["Content-Security-Policy"]


def test_commands_launch_sync_close_show_status_and_money(tmp_path, settings, fake_toloka):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=3, size=(64, 48))
    study = make_study(dataset, platform="toloka", batch_size=3, quota_pc=1, quota_mobile=0)
    out = io.StringIO()
    call_command("launch_study", str(study.pk), "--estimate-only", stdout=out)
    assert '"total"' in out.getvalue() and not fake_toloka.state()["pools"]
    call_command("launch_study", str(study.pk), stdout=out)
    assert '"state": "open"' in out.getvalue()
    call_command("sync_study", str(study.pk), stdout=out)
    assert '"spent": "0.00"' in out.getvalue()
    call_command("close_study", str(study.pk), stdout=out)
    assert '"state": "closed"' in out.getvalue()
    assert {p["status"] for p in fake_toloka.state()["pools"].values()} == {"CLOSED"}
    assert FAKE_TOLOKA_TOKEN not in out.getvalue()
    settings.TOLOKA_TOKEN = "AQAAAAwrongTokenValue9876543210abc"
    with pytest.raises(CommandError, match="TOLOKA_TOKEN"):
        call_command("sync_study", str(study.pk), stdout=out)
