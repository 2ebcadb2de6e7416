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
    page.wait_for_function("document.getElementById('est-total').textContent === '3.50 USD'")
    # 3 targets × 25 / (3 × 0.9) = 27.8 → 28 sessions, ⌈28 / 0.8⌉ = 35 paid batches per device; 70 × 0.05
    assert "0.9 valid clicks" in page.inner_text("#est-source")
    page.wait_for_function("document.querySelector('#preview-stage').dataset.phase === 'B'", timeout=5000)
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
