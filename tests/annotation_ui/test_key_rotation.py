"""Issue 35 item 4 over HTTP: an annotator link signed before a SECRET_KEY rotation keeps working while the old
key is in SECRET_KEY_FALLBACKS (the player page, its state and a click) and is refused
once the old key is dropped."""

from __future__ import annotations

import json

import pytest
from django.test import Client, override_settings

from collector.models import Click
from collector.services import tokens
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make
from tests.factories import make_dataset, make_study, make_worker, present_trials

OLD_KEY = "old-" + "o" * 60
NEW_KEY = "new-" + "n" * 60


@pytest.fixture(autouse=True)
def fresh_memory():
    tokens._session_token_signed.cache_clear()
    yield
    tokens._session_token_signed.cache_clear()


def _click(position: int) -> str:
    return json.dumps(
        {"position": position, "idempotency_key": f"k-{position}", "x": 5.5, "y": 7.25, "shown_width": 640,
         "shown_height": 480, "pointer_type": "mouse", "reaction_ms": 400, "event_timestamp_ms": 9000.5,
         "phase_onsets_ms": {"A": 1, "B": 2, "C": 3, "D": 4}, "blocked_clicks": 0, "flags": [],
         "refresh_hz": 60}
    )  # fmt: skip


@pytest.mark.django_db
def test_an_annotator_link_survives_a_rotation_while_the_old_key_is_a_fallback(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    study = make_study(make_dataset(tmp_path, n_images=4, size=(64, 48)), publish=True, batch_size=3)
    with override_settings(SECRET_KEY=OLD_KEY, SECRET_KEY_FALLBACKS=[]):
        session = session_start(study=study, worker=make_worker(), device="pc")
        token = session_token_make(session_id=session.pk)
        assert Client().get(f"/api/annotator/{token}/state").status_code == 200
    present_trials(session)

    with override_settings(SECRET_KEY=NEW_KEY, SECRET_KEY_FALLBACKS=[OLD_KEY]):
        client = Client()
        assert client.get(f"/a/{token}/").status_code == 200
        assert client.get(f"/api/annotator/{token}/state").status_code == 200
        click = client.post(f"/api/annotator/{token}/click", data=_click(0), content_type="application/json")
        assert click.status_code == 201, click.content
    assert Click.objects.filter(trial__session=session).count() == 1

    with override_settings(SECRET_KEY=NEW_KEY, SECRET_KEY_FALLBACKS=[]):
        client = Client()
        state = client.get(f"/api/annotator/{token}/state")
        assert state.status_code == 404 and b"not valid" in state.content
        click = client.post(f"/api/annotator/{token}/click", data=_click(1), content_type="application/json")
        assert click.status_code == 404 and b"not valid" in click.content
        assert client.get(f"/a/{token}/").status_code in (403, 404)
        # a link made under the new key works
        fresh = session_token_make(session_id=session.pk)
        assert client.get(f"/api/annotator/{fresh}/state").status_code == 200
    assert Click.objects.filter(trial__session=session).count() == 1
