"""The researcher area in a real Chromium against the live server: pages render their key elements,
the trial preview animates, pictures load. Screenshots go to var/screenshots/researcher-*.png."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import make_validated_batch
from tests.support.researcher_login import researcher_log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(__file__).resolve().parents[3] / "var" / "screenshots"


def _shot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"researcher-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, f"{path} looks empty"
    return path


def _images_loaded(page, selector: str) -> list[int]:
    page.wait_for_function(
        "sel => [...document.querySelectorAll(sel)].every(img => img.complete)", arg=selector, timeout=30_000
    )
    return page.eval_on_selector_all(selector, "imgs => imgs.map(img => img.naturalWidth)")


@pytest.fixture
def page(chromium, live_server, alice):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    researcher_log_in(page, live_server.url, "alice")
    yield page
    context.close()


def test_study_list_and_detail_with_progress_and_charts(page, live_server, alice_study, bob_study):
    make_validated_batch(alice_study, device="pc", reaction_ms=380.0)
    make_validated_batch(alice_study, device="mobile", valid_positions={0}, reaction_ms=90.0)
    page.reload()
    rows = page.inner_text("#study-list")
    assert "Alice's study" in rows and "Bob's study" not in rows
    _shot(page, "study-list")
    page.click("text=Alice's study")
    page.wait_for_selector("#quota-progress")
    assert page.inner_text("#study-state") == "published"
    progress = page.inner_text("#quota-progress")
    assert "3 / 75" in progress  # pc: one counted batch of 3 valid clicks against 3 targets × 25
    assert "0 / 75" in progress  # mobile: the batch was rejected
    assert "1" in page.inner_text("#rejection-reasons")
    assert "Spent" in page.inner_text("#money")
    widths = _images_loaded(page, "#charts img")
    assert len(widths) == 3 and all(w > 400 for w in widths), widths
    assert page.is_visible("#study-actions button:has-text('Pause')")
    _shot(page, "study-detail")


def test_target_page_shows_heatmap_and_click_table(page, live_server, alice_study):
    make_validated_batch(alice_study, device="pc")
    make_validated_batch(alice_study, device="mobile", valid_positions=set())
    page.goto(f"{live_server.url}/researcher/studies/{alice_study.pk}/targets/")
    page.wait_for_selector("#target-list")
    page.click("#target-list tbody tr:first-child a")
    page.wait_for_selector("#heatmap-image")
    assert _images_loaded(page, "#heatmap-image") == [900]
    table = page.inner_text("#click-table")
    assert "outside_region" in table and "mobile" in table and "pc" in table
    assert page.locator("#click-table tr.invalid").count() == 1
    _shot(page, "target")
    page.goto(f"{live_server.url}/researcher/studies/{alice_study.pk}/workers/")
    assert page.locator("#worker-table tbody tr").count() == 2
    _shot(page, "workers")


def test_create_form_previews_the_trial_and_estimates_the_budget(page, live_server, dataset):
    page.goto(f"{live_server.url}/researcher/studies/new/")
    page.wait_for_selector("#trial-preview")
    page.select_option("select[name=dataset]", str(dataset.pk))
    page.select_option("select[name=display_mode]", "Silhouette_Mask")
    for name, value in (("image_ms", "300"), ("target_ms", "300"), ("blocked_ms", "300")):
        page.fill(f"input[name={name}]", value)
    page.fill("input[name=reward_per_batch]", "0.05")
    page.dispatch_event("input[name=reward_per_batch]", "change")
    seen = set()
    for _ in range(40):
        seen.add(page.get_attribute("#preview-stage", "data-phase"))
        if seen >= {"A", "B", "C", "D"}:
            break
        page.wait_for_timeout(100)
    assert seen >= {"A", "B", "C", "D"}, seen
    page.fill("input[name=batch_size]", "3")
    page.fill("input[name=min_valid_per_session]", "2")
    page.dispatch_event("input[name=batch_size]", "change")
    page.wait_for_function("() => document.getElementById('est-total').textContent === '3.50 USD'")
    # 3 targets × 25 / (3 × 0.9) = 27.8 → 28 sessions, ⌈28 / 0.8⌉ = 35 paid batches per device; 70 × 0.05
    assert "0.9 valid clicks" in page.inner_text("#est-source")
    page.wait_for_function(
        "() => document.querySelector('#preview-stage').dataset.phase === 'B'", timeout=5000
    )
    assert "Silhouette_Mask" in page.get_attribute("#preview-image", "src")
    _shot(page, "create-form")
    page.fill("input[name=name]", "Made in Chromium")
    page.click("#study-form button[type=submit]")
    page.wait_for_selector("#quota-progress")
    assert page.inner_text("#study-state") == "draft"
    page.click("#study-actions button:has-text('Publish')")
    page.wait_for_selector("#study-state:has-text('published')")
    assert "0 / 75" in page.inner_text("#quota-progress")
    _shot(page, "published")


# --- issue 32 item 8: the error summary, only the chosen kind's fields, the player's outline, trial pictures ---


def test_the_form_summarises_its_errors_and_shows_only_the_chosen_kind(page, live_server, dataset):
    page.goto(f"{live_server.url}/researcher/studies/new/")
    page.wait_for_selector("#trial-preview")
    # the defaults fit the dataset's 3 images: a batch of 3 needing 3 valid clicks
    assert page.input_value("input[name=batch_size]") == "3"
    assert page.input_value("input[name=min_valid_per_session]") == "3"
    assert page.is_visible("#timing-settings") and not page.is_visible("#corrective-settings")
    assert page.is_visible("#screen-settings") and page.is_visible("input[name=min_valid_per_session]")

    page.fill("input[name=name]", "Has problems")
    page.fill("input[name=batch_size]", "10")
    page.fill("input[name=image_ms]", "0")
    page.click("#study-form button[type=submit]")
    page.wait_for_selector("#error-summary")
    assert page.evaluate("document.activeElement.id") == "error-summary", "the summary takes the focus"
    box = page.locator("#error-summary").bounding_box()
    assert box["y"] < 200, f"the summary sits at the top of the page: {box}"
    links = page.locator("#error-summary a")
    assert links.count() == 2 and "2 settings to fix" in page.inner_text("#error-summary h2")
    _shot(page, "form-error-summary")
    page.click("#error-summary a[data-field=id_batch_size]")
    assert page.evaluate("document.activeElement.id") == "id_batch_size"
    assert page.locator("input[name=batch_size]").is_visible()

    page.select_option("select[name=kind]", "corrective")
    assert page.is_visible("#corrective-settings")
    # the summary keeps what still applies: the batch size, not the timed phase a campaign does not have
    assert page.locator("#error-summary li:visible").all_inner_texts() == [links.nth(1).inner_text()]
    assert "1 setting to fix" in page.inner_text("#error-summary h2")
    for hidden in (
        "#timing-settings",
        "#screen-settings",
        "#trial-preview",
        "input[name=min_valid_per_session]",
    ):
        assert not page.is_visible(hidden), hidden
    visible = page.eval_on_selector_all(
        "#corrective-settings label.field", "labels => labels.filter(l => l.offsetParent !== null).length"
    )
    assert visible == 7
    _shot(page, "form-corrective")
    # a campaign of batches of 3: no 7-of-10 rule, no timed phase (the 0 ms left in the hidden field) applies
    page.fill("input[name=batch_size]", "3")
    page.click("#study-form button[type=submit]")
    page.wait_for_selector("#quota-progress")
    assert page.inner_text("#study-state") == "draft"

    page.goto(f"{live_server.url}/researcher/studies/new/")
    page.select_option("select[name=kind]", "corrective")
    page.select_option("select[name=kind]", "timed")
    assert page.is_visible("#timing-settings") and not page.is_visible("#corrective-settings")


def test_the_forms_highlighted_instance_has_the_players_green_outline(page, live_server, dataset):
    page.goto(f"{live_server.url}/researcher/studies/new/")
    page.select_option("select[name=display_mode]", "Highlighted_Instance")
    page.wait_for_function(
        "() => document.querySelector('#preview-stage').dataset.phase === 'B' && document.getElementById('preview-image').complete",
        timeout=10_000,
    )
    green = page.evaluate(
        """() => { const img = document.getElementById('preview-image'); const c = document.createElement('canvas');
        c.width = img.naturalWidth; c.height = img.naturalHeight; const g = c.getContext('2d'); g.drawImage(img, 0, 0);
        const d = g.getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 0; i < d.length; i += 4) { if (d[i] === 0 && d[i + 1] === 255 && d[i + 2] === 0) n += 1; } return n; }"""
    )
    assert green > 100, f"{green} pure-green pixels on the preview"
    _shot(page, "form-highlighted")


def test_the_session_page_pictures_each_trial(page, live_server, alice_study):
    session = make_validated_batch(alice_study, device="pc", valid_positions={0, 2})
    page.goto(f"{live_server.url}/researcher/studies/{alice_study.pk}/sessions/{session.pk}/")
    widths = _images_loaded(page, "#trial-pictures img")
    assert widths == [160, 160, 160], widths
    captions = page.locator("#trial-pictures figcaption").all_inner_texts()
    assert [c.rsplit("— ", 1)[-1] for c in captions] == ["valid", "outside_region", "valid"]
    assert all("·" not in c or "_______" not in c for c in captions)
    _shot(page, "session-pictures")
