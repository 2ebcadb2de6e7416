"""Issue 35 item 6: a Content-Security-Policy (django-csp) on every page, inline scripts and styles allowed by
the response's nonce only, and Referrer-Policy so the player's address (its session token) reaches no other
site; in Chromium the player and the researcher pages run under it with no violation."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from collector.services.session_start import session_start
from collector.services.tokens import session_token_make, study_link_token_make
from tests.annotation_ui.driver import entry_url, open_player, wait_start_enabled
from tests.factories import make_dataset, make_researcher, make_study, make_worker
from tests.support.researcher_login import researcher_log_in


def _policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in header.split(";") if part.strip()}


@pytest.fixture
def study(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    return make_study(
        make_dataset(tmp_path, n_images=3, size=(64, 48)),
        publish=True,
        batch_size=3,
        owner=make_researcher("erin"),
    )


@pytest.mark.django_db
def test_every_page_has_the_policy_and_its_inline_scripts_carry_the_nonce(study):
    researcher = study.owner
    session = session_start(study=study, worker=make_worker(), device="pc")
    token = session_token_make(session_id=session.pk)
    visitor, logged_in = Client(), Client()
    logged_in.force_login(researcher)
    pages = {
        "player": visitor.get(f"/a/{token}/"),
        "study link entry": visitor.get(f"/s/{study_link_token_make(study_id=study.pk)}/"),
        "home": visitor.get("/"),
        "researcher login": visitor.get("/researcher/login/"),
        "admin login": visitor.get("/admin/login/"),
        "study list": logged_in.get("/researcher/"),
        "study page": logged_in.get(f"/researcher/studies/{study.pk}/"),
        "annotator API": visitor.get(f"/api/annotator/{token}/state"),
    }
    nonces = set()
    for name, response in pages.items():
        assert response.status_code == 200, (name, response.status_code)
        policy = _policy(response)
        assert policy["default-src"] == ["'self'"], name
        assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'none'"], name
        assert policy["frame-ancestors"] == ["'none'"], name  # as X-Frame-Options DENY
        assert response["Referrer-Policy"] == "same-origin", name
        assert "'unsafe-inline'" not in policy["script-src"] and "'unsafe-eval'" not in policy["script-src"]
        html = response.content.decode() if "html" in response["Content-Type"] else ""
        inline = re.findall(r"<(script|style)(?![^>]*\bsrc=)([^>]*)>", html)
        announced = [
            v.removeprefix("'nonce-").rstrip("'") for v in policy["script-src"] if v.startswith("'nonce-")
        ]
        for tag, attributes in inline:
            if 'type="application/json"' in attributes:  # data, never run: needs no nonce
                continue
            found = re.search(r'nonce="([^"]+)"', attributes)
            assert found and announced == [found.group(1)], (name, tag, attributes, policy["script-src"])
            nonces.add(found.group(1))
    assert len(nonces) >= 2  # the player and the entry page each had their own
    assert '<meta name="referrer" content="no-referrer">' in pages["player"].content.decode()


@pytest.mark.django_db
def test_a_framed_platform_page_keeps_the_policy_with_the_platform_s_frame_ancestors(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.MTURK_FRAME_ANCESTORS = ["https://www.mturk.com"]
    mturk = make_study(make_dataset(tmp_path, n_images=3, size=(64, 48)), publish=True, platform="mturk",
                       batch_size=3, min_valid_per_session=2, quota_pc=2, quota_mobile=2)  # fmt: skip
    client = Client()
    entry = client.get(
        f"/mturk/{mturk.pk}/pc/?assignmentId=A1&hitId=H&workerId=W1&turkSubmitTo=https://www.mturk.com"
    )
    player = client.get(entry["Location"])
    for response in (entry, player):
        policy = _policy(response)
        assert policy["frame-ancestors"] == ["'self'", "https://www.mturk.com"]
        assert policy["default-src"] == ["'self'"] and "X-Frame-Options" not in response


def _csp_watch(page) -> list[str]:
    """Violations Chromium reports on the page (the event and the console's "Refused to ..." lines)."""
    found: list[str] = []
    page.on(
        "console",
        lambda message: found.append(message.text) if "Content Security Policy" in message.text else None,
    )
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => "
        "console.error('Content Security Policy violation: ' + e.violatedDirective + ' ' + e.blockedURI));"
    )
    return found


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_player_and_the_researcher_pages_run_under_the_policy_in_chromium(
    chromium, live_server, tmp_path, settings
):
    settings.MEDIA_ROOT = tmp_path / "media"
    frank = make_researcher("frank")
    study = make_study(
        make_dataset(tmp_path, n_images=4, size=(320, 240)), publish=True, batch_size=3, owner=frank
    )
    context = chromium.new_context()
    page = context.new_page()
    violations = _csp_watch(page)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    open_player(page, entry_url(live_server.url, study))  # the entry page's inline script posts the start
    wait_start_enabled(page)  # the player's modules ran, its stimuli loaded (blob: images)
    assert page.evaluate("() => window.clicklabFrames.length > 0")  # the player page's inline script ran
    researcher_log_in(page, live_server.url, "frank")
    page.goto(f"{live_server.url}/researcher/studies/{study.pk}/")
    page.wait_for_load_state("networkidle")
    # what the inline handlers did, now static/researcher/page_actions.js: a link field selects its address,
    # and the Close button asks first (dismissed: nothing happens; accepted: the study is closed)
    field = page.locator("input.link-url").first
    field.click()
    assert page.evaluate("() => window.getSelection().toString() || document.activeElement.value.substring("
                         "document.activeElement.selectionStart, document.activeElement.selectionEnd)") == (
        field.input_value()
    )  # fmt: skip
    asked: list[str] = []

    def answer(dialog, accept: bool):
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", lambda dialog: answer(dialog, False))
    page.click("button[value=close]")
    page.wait_for_timeout(500)
    study.refresh_from_db()
    assert asked == ["Close this study for good?"] and study.state != "closed"
    page.once("dialog", lambda dialog: answer(dialog, True))
    with page.expect_navigation():
        page.click("button[value=close]")
    study.refresh_from_db()
    assert len(asked) == 2 and study.state == "closed"
    context.close()
    assert not violations, "\n".join(violations)
    assert errors == []
