"""The researcher's pages on a phone (390 × 844 CSS px) in a real Chromium (issue 21): the preview's verdict
wraps on screen, and wide tables scroll inside their card instead of widening the page. Screenshots:
var/screenshots/researcher-phone-*.png."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.annotation_ui.driver import PHONE, canvas_rect, press_start, wait_phase, wait_start_enabled
from tests.factories import make_validated_batch
from tests.support.researcher_login import researcher_log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(__file__).resolve().parents[3] / "var" / "screenshots"

# The innermost element showing ``text``, its box, and the boxes of the ancestors that clip what overflows
# them (overflow other than visible): text cut off by one of those is not on screen.
TEXT_BOX = """text => {
  const holders = [...document.querySelectorAll('body *')].filter(
    e => e.textContent.includes(text) && ![...e.children].some(c => c.textContent.includes(text)));
  if (!holders.length) { return null; }
  const element = holders[0];
  const box = r => ({left: r.left, right: r.right, top: r.top, bottom: r.bottom});
  const clips = [];
  for (let e = element.parentElement; e; e = e.parentElement) {
    const style = getComputedStyle(e);
    if (style.overflowX !== 'visible' || style.overflowY !== 'visible') { clips.push(box(e.getBoundingClientRect())); }
  }
  return {box: box(element.getBoundingClientRect()), clips, width: innerWidth, text: element.textContent};
}"""


def _shot(page, name: str, *, selector: str | None = None) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"researcher-phone-{name}.png"
    if selector:
        page.locator(selector).screenshot(path=str(path))
    else:
        page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def phone(chromium, live_server, alice):
    """A phone's browser logged in as alice."""
    context = chromium.new_context(**PHONE)
    page = context.new_page()
    researcher_log_in(page, live_server.url, "alice")
    yield page
    context.close()


def test_preview_verdict_wraps_within_a_phone_screen(phone, live_server, alice_study):
    page = phone
    page.goto(f"{live_server.url}/preview/{alice_study.pk}/?device=mobile")
    wait_start_enabled(page)
    press_start(page)
    for phase in ("A", "B", "C", "D"):
        wait_phase(page, 0, phase)
        rect = canvas_rect(page)
        # phase D: the top-left corner, far from the test object, so the verdict is the long "Does not count"
        page.touchscreen.tap(rect["left"] + 2, rect["top"] + 2)
    page.wait_for_function("() => (window.clicklabPlayer.previewVerdicts || []).length === 1")
    found = page.evaluate(TEXT_BOX, "Does not count")
    assert found is not None, "the verdict is nowhere on the page"
    box = found["box"]
    assert box["left"] >= 0 and box["right"] <= found["width"], found  # within the 390 px screen
    for clip in found["clips"]:  # and not cut off by a box that hides what overflows it
        assert clip["left"] <= box["left"] and box["right"] <= clip["right"], found
        assert clip["top"] <= box["top"] and box["bottom"] <= clip["bottom"], found
    assert "farther than the" in found["text"] and "Tap to continue" in found["text"]
    _shot(page, "preview-verdict")


@pytest.mark.parametrize(
    "name, path",
    [
        ("study-list", "/researcher/"),
        ("study", "/researcher/studies/{pk}/"),
        ("sessions", "/researcher/studies/{pk}/sessions/"),
        ("workers", "/researcher/studies/{pk}/workers/"),
        ("targets", "/researcher/studies/{pk}/targets/"),
    ],
)
def test_tables_scroll_inside_their_box_not_the_page(phone, live_server, alice_study, name, path):
    make_validated_batch(alice_study, device="mobile")
    page = phone
    page.goto(live_server.url + path.format(pk=alice_study.pk))
    page.wait_for_selector("table.grid")
    widths = page.evaluate(
        """() => ({page: document.documentElement.scrollWidth, screen: innerWidth,
                   tables: [...document.querySelectorAll('table.grid')].map(t => t.scrollWidth)})"""
    )
    assert widths["page"] <= widths["screen"], widths  # no sideways scrolling of the whole page
    assert max(widths["tables"]) > widths["screen"], widths  # the tables are wider: they scroll in their box
    scrollers = page.evaluate(
        """() => [...document.querySelectorAll('table.grid')].every(t => {
             for (let e = t.parentElement; e; e = e.parentElement) {
               if (['auto', 'scroll'].includes(getComputedStyle(e).overflowX)) { return e.clientWidth <= innerWidth; }
             }
             return false; })"""
    )
    assert scrollers, "a table has no box of its own to scroll in"
    _shot(page, name)


def test_platform_settings_on_a_phone_with_a_refusal_beside_its_field(phone, live_server, dataset, alice):
    from tests.factories import make_study

    study = make_study(dataset, name="On Prolific", owner=alice, platform="prolific", reward_per_batch="0.10",
                       batch_size=3, min_valid_per_session=2)  # fmt: skip
    page = phone
    page.goto(f"{live_server.url}/researcher/studies/{study.pk}/")
    assert "not set" in page.inner_text("#platform-settings .setting-prolific_completion_code")
    page.click("#platform-settings summary")
    page.fill("input[name=prolific_completion_code]", "C1 A2!")
    page.click("#platform-settings-form button[type=submit]")
    error = page.locator("#platform-settings-form label.has-error small.error")
    assert "'C1 A2!' is not a code Prolific issues" in error.inner_text()
    assert page.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
    _shot(page, "platform-settings-refused", selector="#platform-settings")
    page.fill("input[name=prolific_completion_code]", "C1A2B3C4")
    page.click("#platform-settings-form button[type=submit]")
    page.wait_for_selector("#platform-settings .setting-prolific_completion_code:has-text('C1A2B3C4')")
    assert "cc=C1A2B3C4" in page.inner_text("#platform-settings")
    assert page.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
    _shot(page, "platform-settings", selector="#platform-settings")
