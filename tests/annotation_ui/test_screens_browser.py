"""The study's own screens in a real Chromium (issue 32 item 5): consent and instructions as the researcher
wrote them, in English and in Russian, the default text where they wrote none for a language, and a batch
with a practice trial and a control trial played to the end. Screenshots: var/screenshots/screens-*.png."""

from __future__ import annotations

import json

import pytest

from collector.models import Session, Trial
from collector.services.validation import session_validate
from exports.full import full_export
from exports.rclicks import rclicks_export
from tests.annotation_ui.driver import (
    LAYOUTS,
    SCREENSHOT_DIR,
    ClickPlan,
    entry_url,
    open_player,
    play_trial,
    press_start,
    wait_finished,
    wait_phase,
    wait_start_enabled,
)
from tests.factories import make_dataset, make_study

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHORT = {"image_ms": 300, "target_ms": 300, "blocked_ms": 300}
CONSENT = {
    "en": "You take part in the Clicklab test study.\n\nYour clicks are kept for ten years.",
    "ru": "Вы участвуете в тестовом исследовании Clicklab.\n\nВаши клики хранятся десять лет.",
}
#: Instructions in Russian only: an English browser gets the default steps.
INSTRUCTIONS = {"ru": "Смотрите на объект, потом кликните по нему один раз."}


def _study(tmp_path, **fields):
    dataset = make_dataset(tmp_path, n_images=6, size=(320, 240))
    screens = {"consent_enabled": True, "consent_texts": CONSENT, "instructions_texts": INSTRUCTIONS}
    return make_study(
        dataset, publish=True, batch_size=3, min_valid_per_session=2, **{**SHORT, **screens, **fields}
    )


def _shot(page, name: str) -> None:
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOT_DIR / f"screens-{name}.png"
    page.screenshot(path=str(path))
    assert path.stat().st_size > 5_000, f"{path} looks empty"


def _session(page) -> Session:
    from collector.services.tokens import session_token_read

    return Session.objects.get(pk=session_token_read(token=page.url.rstrip("/").rsplit("/", 1)[-1]))


@pytest.mark.parametrize("language", ["en", "ru"])
def test_consent_and_instructions_in_the_browsers_language(chromium, player_server, tmp_path, language):
    study = _study(tmp_path)
    context = chromium.new_context(**LAYOUTS["desktop"], locale={"en": "en-US", "ru": "ru-RU"}[language])
    page = context.new_page()
    open_player(page, entry_url(player_server.url, study))
    assert page.get_attribute("html", "lang") == language
    assert page.is_visible("#screen-consent") and not page.is_visible("#screen-instructions")
    paragraphs = page.locator("#consent-text p").all_inner_texts()
    assert paragraphs == CONSENT[language].split("\n\n"), paragraphs
    assert page.inner_text("#consent-agree") == {"en": "I agree", "ru": "Я согласен(на)"}[language]
    _shot(page, f"consent-{language}")
    page.click("#consent-agree")
    page.wait_for_selector("#screen-instructions", state="visible")
    instructions = page.locator("#instructions-text")
    if language == "ru":
        assert instructions.get_attribute("data-source") == "study"
        assert instructions.inner_text().strip() == INSTRUCTIONS["ru"]
    else:  # no English text: the default steps, with this study's timings
        assert instructions.get_attribute("data-source") == "default"
        steps = page.locator("#instructions-text li").all_inner_texts()
        assert len(steps) == 4 and "shown for 0.3 seconds" in steps[1] and "process 3 images" in steps[3]
    _shot(page, f"instructions-{language}")
    wait_start_enabled(page)
    session = _session(page)
    context.close()

    # the client report says what was shown and when the worker agreed
    info = Session.objects.get(pk=session.pk).client_info
    assert info["screens_language"] == language and info["consent_source"] == "study"
    assert info["instructions_source"] == ("study" if language == "ru" else "default")
    assert info["consent_agreed_at"].endswith("Z")


def test_a_batch_with_a_practice_and_a_control_trial(chromium, player_server, tmp_path):
    study = _study(tmp_path, practice_trials=1, control_trials=1, control_min_inside=1, consent_texts={})
    context = chromium.new_context(**LAYOUTS["desktop"], locale="ru-RU")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    reports: list[str] = []
    page.on(
        "request",
        lambda r: reports.append(r.url) if r.method == "POST" and r.url.endswith("/presented") else None,
    )
    open_player(page, entry_url(player_server.url, study))
    # no Russian consent of its own (none at all): the shipped default, in Russian
    assert page.get_attribute("#consent-text", "data-source") == "default"
    assert "научного исследования" in page.inner_text("#consent-text")
    page.click("#consent-agree")
    wait_start_enabled(page)
    session = _session(page)
    roles = list(session.trials.order_by("position").values_list("role", flat=True))
    assert roles[0] == "practice" and sorted(roles[1:]) == ["control", "task", "task", "task"]
    press_start(page)

    inside = ClickPlan(0.5, 0.5)  # every synthetic object covers the centre of its image
    wait_phase(page, 0, "D")  # phase D waits for the click: time for a screenshot
    assert page.inner_text("#trial-counter") == "Тренировка 1 из 1"
    _shot(page, "practice-trial")
    play_trial(page, 0, inside, touch=False, blocked_in=())
    page.wait_for_function("() => window.clicklabPlayer.phase === 'practice-done'")
    assert page.is_visible("#screen-practice-done") and "4 изображения" in page.inner_text(
        "#screen-practice-done"
    )
    _shot(page, "practice-done")
    page.click("#practice-continue")
    for n, position in enumerate(range(1, 5), start=1):
        wait_phase(page, position, "A")
        assert page.inner_text("#trial-counter") == f"Изображение {n} из 4"  # a control trial counts as any
        play_trial(page, position, inside, touch=False, blocked_in=())
    wait_finished(page)
    context.close()
    assert errors == []

    session = session_validate(session_id=session.pk)
    assert session.validity == Session.Validity.COUNTED, session.rejection_reason
    assert (session.valid_clicks, session.control_inside, session.control_passed) == (3, 1, True)
    trials = list(session.trials.select_related("click").order_by("position"))
    assert all(trial.click and len(trial.presentations) == 1 for trial in trials)
    # the first task trial reports itself once the practice screen is left, not on the practice click before
    # it (which would date its showing before the worker read that screen); the others ride on clicks
    assert len(reports) == 2, reports
    for target_id, role in ((t.target_id, t.role) for t in trials):
        target = Trial.objects.get(session=session, target_id=target_id).target
        assert target.valid_pc == (1 if role == "task" else 0)

    rclicks = rclicks_export(study_ids=[study.pk], out_dir=tmp_path / "rclicks", previews=False)
    assert len(rclicks.clicks_csv.read_text().splitlines()) == 1 + 3, "the task clicks only"
    full = full_export(study_ids=[study.pk], out_path=tmp_path / "full.jsonl")
    rows = [json.loads(line) for line in full.path.read_text().splitlines()]
    assert [row["trial_role"] for row in rows] == roles
    screens = rows[0]["session_screens"]
    assert screens["language"] == "ru" and screens["consent"]["source"] == "default"
    assert screens["consent"]["agreed_at"] and screens["instructions"]["text"] == INSTRUCTIONS["ru"]
