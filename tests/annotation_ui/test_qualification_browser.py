"""The qualification test of a corrective campaign (issue 17 item 4) in real Chromium with a real Celery worker
doing the model updates: a worker whose first click lands on the object passes, presses "Continue to the task"
and is in the campaign's real batch; a worker who clicks on the background is told politely that they did not
qualify, and opening the study link again (same browser, same link worker) gives them no task."""

from __future__ import annotations

import pytest

from collector.models import CorrectiveQualification, Session
from tests.factories import make_dataset, make_study

from .driver import DESKTOP, entry_url, open_player
from .test_corrective_browser import UPDATE_TIMEOUT_MS, _centre, _client_point, _wait_clicking

pytestmark = [pytest.mark.browser, pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def _qualification_text(page) -> str:
    page.wait_for_selector("#screen-qualification:not([hidden])", timeout=UPDATE_TIMEOUT_MS)
    return page.locator("#qualification-text").inner_text()


def _first_click_and_finish(page, *, on_object: bool) -> None:
    """The test's one picture: the first click (on the object's centre or in the corner), "Update mask",
    then "Mask is fine"."""
    assert page.locator("#qualification-note").is_visible()
    page.click("#start-button")
    view = _wait_clicking(page, round_number=0, index=0)
    x, y = _centre(view) if on_object else (3.5, 3.5)
    page.mouse.click(*_client_point(page, view, x, y))
    page.wait_for_function("() => document.getElementById('budget').textContent.includes('1 / 1')")
    page.click("#submit-button")
    _wait_clicking(page, round_number=1, index=0)
    page.click("#skip-button")


def test_a_worker_passes_and_continues_and_one_who_fails_is_told_and_not_let_in(
    chromium, player_server, models_worker, tmp_path
):
    dataset = make_dataset(tmp_path, n_images=3, size=(160, 120))
    study = make_study(
        dataset,
        publish=True,
        kind="corrective",
        corrective_init="first_click",
        corrective_rounds=1,
        batch_size=2,
        quota_pc=2,
        quota_mobile=0,
        qualification_enabled=True,
        qualification_instances=1,
    )
    link = entry_url(player_server.url, study, "pc")

    # --- passes --------------------------------------------------------------------------------------------
    good = chromium.new_context(**DESKTOP).new_page()
    test_url = open_player(good, link)
    _first_click_and_finish(good, on_object=True)
    assert "You passed the qualification test" in _qualification_text(good)
    good.screenshot(path=str(tmp_path / "qualification-passed.png"))
    good.click("#continue-button")
    good.wait_for_url(lambda url: "/a/" in url and url != test_url, timeout=30_000)
    good.wait_for_selector("#start-button", state="visible")
    assert good.locator("#qualification-note").count() == 0  # the real batch's instructions
    good.click("#start-button")
    _wait_clicking(good, round_number=0, index=0)
    good_sessions = Session.objects.filter(study=study, is_qualification=False)
    assert good_sessions.count() == 1 and good_sessions.get().trials.count() == 2

    # --- fails ---------------------------------------------------------------------------------------------
    bad_context = chromium.new_context(**DESKTOP)
    bad = bad_context.new_page()
    open_player(bad, link)
    _first_click_and_finish(bad, on_object=False)
    text = _qualification_text(bad)
    assert "did not meet this task's quality bar" in text
    assert (
        bad.locator("#continue-row").is_hidden()
        and bad.locator("#continue-button").is_hidden()
        and bad.locator("#completion-code").inner_text() == ""
    )
    bad.screenshot(path=str(tmp_path / "qualification-failed.png"))

    again = bad_context.new_page()  # the same browser (its link-worker cookie): the same worker
    again.goto(link)
    again.wait_for_selector("text=did not meet this task's quality bar", timeout=30_000)
    assert "/a/" not in again.url

    results = {r.passed: r for r in CorrectiveQualification.objects.filter(study=study)}
    assert set(results) == {True, False}
    assert results[True].placement == 1.0 and results[False].placement == 0.0
    assert Session.objects.filter(study=study, worker=results[False].worker).count() == 1
