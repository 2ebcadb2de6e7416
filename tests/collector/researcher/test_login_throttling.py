"""Issue 35 item 6: the researcher login is throttled (django-axes). 40 wrong passwords in a burst lock the
account out from that address for the configured time with a message that says so; the right password is
refused until the cool-off has passed, then logs in; another address is not locked."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.test import Client

from tests.factories import make_researcher
from tests.support.researcher_login import PASSWORD

LOGIN = "/researcher/login/"


def _log_in(client: Client, username: str, password: str, *, address: str = "203.0.113.7"):
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.mark.django_db
def test_forty_wrong_passwords_lock_the_account_out_until_the_cool_off(settings):
    settings.AXES_FAILURE_LIMIT = 10
    settings.AXES_COOLOFF_TIME = timedelta(hours=1)  # longer than any burst takes, however slow the machine
    make_researcher("carol")
    client = Client()
    answers = [_log_in(client, "carol", f"wrong-{n}") for n in range(40)]
    statuses = [answer.status_code for answer in answers]
    assert statuses[:9] == [200] * 9  # the form again, "did not match"
    assert b"did not match" in answers[0].content
    assert statuses[9:] == [429] * 31, statuses  # the 10th wrong password locks, and every later try
    page = answers[-1].content.decode()
    assert "Login locked" in page and "Too many wrong passwords" in page and "carol" in page
    assert "1:00:00" in page  # how long, from the setting
    assert "axes_reset_username carol" in page  # what an administrator can do

    right = _log_in(client, "carol", PASSWORD)
    assert right.status_code == 429 and "Login locked" in right.content.decode()  # refused although right
    assert client.get("/researcher/").status_code == 302  # not logged in

    # another address is not locked out of the same account
    other = Client()
    assert _log_in(other, "carol", PASSWORD, address="198.51.100.9").status_code == 302

    # the cool-off has passed (made 1 s now; axes measures it from the failures' stored times at each try)
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    time.sleep(1.5)
    after = _log_in(client, "carol", PASSWORD)
    assert after.status_code == 302 and after["Location"] == "/researcher/"
    assert client.get("/researcher/").status_code == 200


@pytest.mark.django_db
def test_the_lock_applies_to_the_admin_login_too(settings):
    settings.AXES_FAILURE_LIMIT = 3
    make_researcher("dave", staff=True)
    client = Client()
    codes = [
        client.post(
            "/admin/login/", {"username": "dave", "password": "nope"}, REMOTE_ADDR="203.0.113.8"
        ).status_code
        for _ in range(4)
    ]
    assert codes == [200, 200, 429, 429]
    assert _log_in(client, "dave", PASSWORD, address="203.0.113.8").status_code == 429


def test_the_limits_come_from_the_registry():
    from django.conf import settings

    assert settings.AXES_FAILURE_LIMIT == 10
    assert settings.AXES_COOLOFF_TIME.total_seconds() == 900
