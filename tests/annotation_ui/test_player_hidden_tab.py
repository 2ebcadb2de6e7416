"""A worker switching to another tab mid-trial: the real headless Chromium hides the player's tab, the
player flags that trial, and validation refuses its click (issue 3: "flagged invalid if the tab is hidden").

Driven over the DevTools protocol directly (``tests/support/cdp.py``) because Playwright keeps its pages
visible. The click and START are trusted mouse events; the tab really becomes hidden (asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.models import Click, Session
from collector.services.tokens import session_token_read
from collector.services.validation import session_validate
from tests.annotation_ui.driver import entry_url
from tests.conftest import CHROMIUM_ARGS, CHROMIUM_PATH, chromium_missing_message
from tests.factories import make_dataset, make_study
from tests.support.cdp import raw_chromium

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PHASE = "window.clicklabPlayer && window.clicklabPlayer.position === {position} && window.clicklabPlayer.phase === '{phase}'"


def _play_to_click(tab, position: int) -> None:
    tab.wait(PHASE.format(position=position, phase="D"), what=f"trial {position} phase D")
    tab.click_element("#canvas")


def test_switching_tabs_during_a_trial_flags_it_and_its_click_is_invalid(player_server, tmp_path):
    if not Path(CHROMIUM_PATH).exists():
        pytest.fail(chromium_missing_message())
    # Ellipses centred in their images: a click at the canvas centre is inside the object.
    dataset = make_dataset(tmp_path, n_images=3, size=(320, 240))
    study = make_study(dataset, publish=True, batch_size=3, image_ms=1200, target_ms=600, blocked_ms=400)
    with raw_chromium(CHROMIUM_PATH, CHROMIUM_ARGS, tmp_path / "profile") as browser:
        first = browser.tabs()[0]
        tab = browser.attach(first)
        try:
            tab.send("Page.navigate", url=entry_url(player_server.url, study))
            tab.wait("location.pathname.startsWith('/a/')", what="the player page")
            token = tab.evaluate("location.pathname").rstrip("/").rsplit("/", 1)[-1]
            tab.wait("!document.getElementById('start-button').disabled", what="START enabled")
            assert tab.evaluate("document.visibilityState") == "visible"
            tab.click_element("#start-button")

            # Trial 0: the worker opens another tab while the image is shown, then comes back.
            tab.wait(PHASE.format(position=0, phase="A"), what="trial 0 phase A")
            other = browser.new_tab()
            tab.wait("document.visibilityState === 'hidden'", what="the player's tab hidden by the new tab")
            browser.activate(first["id"])
            browser.close_tab(other["id"])
            tab.wait("document.visibilityState === 'visible'", what="the player's tab visible again")
            _play_to_click(tab, 0)
            # Trials 1 and 2: the worker stays on the page.
            _play_to_click(tab, 1)
            _play_to_click(tab, 2)
            tab.wait("window.clicklabPlayer.finished === true", what="the batch finished", timeout_s=60)
        finally:
            tab.close()

    session = Session.objects.get(pk=session_token_read(token=token))
    trials = {trial.position: trial for trial in session.trials.all()}
    assert "visibility_hidden" in trials[0].flags, trials[0].flags
    assert trials[1].flags == [] and trials[2].flags == [], (trials[1].flags, trials[2].flags)

    session_validate(session_id=session.pk)
    clicks = {click.trial.position: click for click in Click.objects.filter(trial__session=session)}
    assert len(clicks) == 3
    assert clicks[0].is_valid is False and clicks[0].invalid_reason == Click.InvalidReason.TRIAL_FLAGGED
    assert clicks[1].is_valid and clicks[2].is_valid  # the same click on an unflagged trial counts
    session.refresh_from_db()
    assert "tab_hidden" in {flag["code"] for flag in session.quality_flags}, session.quality_flags
