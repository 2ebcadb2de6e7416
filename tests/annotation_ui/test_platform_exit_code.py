"""Prolific's finish shows the completion code before any redirect: in the finish payload the player gets,
and on the server's exit page (``/platform-exit/<token>/``), so a failed redirect never leaves the
participant without a code."""

from __future__ import annotations

import pytest
from django.test import Client

from annotation_ui.payloads import finish_payload
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make
from tests.factories import complete_session, make_dataset, make_study, make_worker

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(tmp_path, player_settings):
    study = make_study(make_dataset(tmp_path, n_images=3, size=(64, 48)), publish=True, platform="prolific",
                       batch_size=3, min_valid_per_session=2,
                       platform_config={"prolific_completion_code": "C1A2B3C4"})  # fmt: skip
    session = session_start(study=study, worker=make_worker(platform="prolific"), device="pc",
                            platform_assignment_id="sub-1")  # fmt: skip
    return complete_session(session)


def test_the_finish_payload_carries_the_code_with_the_redirect(finished):
    action = finish_payload(finished)
    assert action["kind"] == "redirect" and action["code"] == "C1A2B3C4"
    assert action["url"].endswith("/submissions/complete?cc=C1A2B3C4")


def test_the_exit_page_shows_the_code_then_redirects(finished):
    response = Client().get(f"/platform-exit/{session_token_make(session_id=finished.pk)}/")
    page = response.content.decode()
    assert response.status_code == 200  # a page, not a bare 303: the code is on screen first
    # the players' end screen (the shared include, their stylesheet and script), shown without any script
    assert '<section id="screen-done" class="screen centered">' in page
    assert '<code id="completion-code">C1A2B3C4</code>' in page and 'id="copy-code"' in page
    assert "player/player.css" in page and "player/exit.js" in page
    assert "You are taken back to the platform in a few seconds" in page
    assert 'content="5;url=https://app.prolific.com/submissions/complete?cc=C1A2B3C4"' in page
    assert 'href="https://app.prolific.com/submissions/complete?cc=C1A2B3C4"' in page
    assert "no-store" in response["Cache-Control"]
