"""A researcher's whole day in a real Chromium, without a shell (issue 21): create a study (the form's rules
speak first), preview it before publishing, publish, hand the phone link over by its QR code, watch the
progress refresh by itself while an annotator on a phone does a batch (validated by a real Celery worker),
open the session, and download the export. Screenshots: var/screenshots/researcher-day-*.png."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import cv2
import pytest

from collector.models import Session, Study, Target
from tests.annotation_ui.driver import PHONE, ClickPlan, open_player, play_trial, press_start, wait_finished
from tests.annotation_ui.driver import wait_start_enabled as wait_start
from tests.factories import make_dataset, make_researcher
from tests.support.researcher_login import researcher_log_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.celery,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

SCREENSHOTS = Path(__file__).resolve().parents[3] / "var" / "screenshots"


def _shot(page, name: str, *, selector: str | None = None) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"researcher-day-{name}.png"
    (page.locator(selector) if selector else page).screenshot(
        path=str(path), **({} if selector else {"full_page": True})
    )
    return path


def _decode_qr(path: Path) -> str:
    """What a camera app reads from the screenshot, or "" if nothing decodes it.

    OpenCV's classic detector misses about 3 % of perfectly crisp codes (measured on 300 random link-shaped
    URLs rendered as on the page), so the screenshot is also tried enlarged and with the ArUco-based detector,
    as a phone's decoder tries many scales; with both, 1,000 of 1,000 such codes decoded.
    """
    picture = cv2.imread(str(path))
    picture = cv2.copyMakeBorder(picture, 20, 20, 20, 20, cv2.BORDER_CONSTANT, value=(255, 255, 255))
    for factor in (1, 2, 3):
        scaled = cv2.resize(picture, None, fx=factor, fy=factor, interpolation=cv2.INTER_NEAREST)
        for detector in (cv2.QRCodeDetector(), cv2.QRCodeDetectorAruco()):
            text, _, _ = detector.detectAndDecode(scaled)
            if text:
                return text
    return ""


def test_a_researchers_day_from_the_browser(chromium, live_server, celery_worker, tmp_path, settings):
    settings.PUBLIC_BASE_URL = live_server.url  # the links and QR codes name the server people open
    make_researcher("carol")
    dataset = make_dataset(tmp_path, n_images=3, name="day-dataset")  # 160 × 120 photos, one ellipse each
    desk = chromium.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = desk.new_page()
    researcher_log_in(page, live_server.url, "carol")

    # 1. Create: a batch of 10 on 3 images is refused by the form, with the reason by the field.
    page.click("text=New study")
    page.fill("input[name=name]", "A day in the browser")
    page.select_option("select[name=dataset]", str(dataset.pk))
    for name, value in (("image_ms", "300"), ("target_ms", "300"), ("blocked_ms", "300"), ("batch_size", "10"),
                        ("min_valid_per_session", "2"), ("quota_pc", "2"), ("quota_mobile", "2")):  # fmt: skip
        page.fill(f"input[name={name}]", value)
    page.click("#study-form button[type=submit]")
    error = page.locator("label.has-error small.error").first.inner_text()
    assert "Trials per batch: 10 is more than the 3 image(s)" in error
    _shot(page, "form-rule")
    page.fill("input[name=batch_size]", "3")
    page.click("#study-form button[type=submit]")
    page.wait_for_selector("#study-state:has-text('draft')")
    study = Study.objects.get(name="A day in the browser")
    assert page.is_visible("#annotator-links") and "work once the study is published" in page.inner_text(
        "#annotator-links"
    )

    # 2. Preview before publishing: the real batch (three different images), nothing stored.
    page.click("#preview-mobile")
    page.wait_for_selector("#start-button")
    payload = json.loads(page.inner_text("#player-payload"))
    assert payload["mode"] == "preview" and len(payload["trials"]) == 3
    targets = [int(t["display_url"].split("/stimulus/")[1].split("/")[0]) for t in payload["trials"]]
    assert len({Target.objects.get(pk=pk).instance.image_id for pk in targets}) == 3  # three different images
    verdict = page.evaluate(
        """([url, target]) => fetch(url, {method: "POST", credentials: "same-origin",
             body: JSON.stringify({target_id: target, x: 80.5, y: 60.5})}).then(r => r.json())""",
        [f"/researcher/studies/{study.pk}/preview/check", targets[0]],
    )
    assert verdict["valid"] is True and verdict["radius_px"] == 2.0  # 1 % of the 200 px diagonal
    _shot(page, "preview")
    assert not Session.objects.exists() and Study.objects.get(pk=study.pk).state == "draft"
    page.go_back()

    # 3. Publish, then hand the phone link over by its QR code.
    page.click("#study-actions button:has-text('Publish')")
    page.wait_for_selector("#study-state:has-text('published')")
    assert "Published" in page.inner_text(".messages")
    phone_url = page.input_value("#link-mobile input.link-url")
    assert phone_url.startswith(f"{live_server.url}/s/")
    assert _decode_qr(_shot(page, "qr-phone", selector="#link-mobile svg")) == phone_url
    _shot(page, "published")

    # 4. An annotator on a phone does the batch while the researcher's page stays open.
    phone = chromium.new_context(**PHONE)
    annotator = phone.new_page()
    open_player(annotator, phone_url)
    wait_start(annotator)
    press_start(annotator)
    for position in range(3):
        play_trial(annotator, position, ClickPlan(0.5, 0.5), touch=True, blocked_in=())
    wait_finished(annotator)
    phone.close()
    session = Session.objects.get(study=study)
    assert session.device == "mobile"

    # 5. Watch: the page refreshes itself once the worker has validated the batch (no reload).
    page.wait_for_function(
        "() => document.querySelector('#quota-progress tr.device-mobile').innerText.includes('3 / 6')",
        timeout=90_000,
    )
    assert re.search(
        r"mobile\s+1\s+0\s+1\s+0\s+1\s+0\s+0", page.inner_text("#sessions")
    )  # started … counted 1
    _shot(page, "watching")
    page.goto(f"{live_server.url}/researcher/")
    assert "3 / 12" in page.inner_text(f"#study-rows tr[data-study='{study.pk}']")

    # 6. The session, trial by trial.
    page.goto(f"{live_server.url}/researcher/studies/{study.pk}/sessions/")
    page.click(f"text=#{session.pk}")
    page.wait_for_selector("#trial-table")
    assert page.locator("#trial-table tbody tr").count() == 3 and "counted" in page.inner_text(
        "#session-validity"
    )
    _shot(page, "session")

    # 7. Export the RClicks CSV and masks.
    with page.expect_download() as download:
        page.click("#export-rclicks")
    archive = zipfile.ZipFile(io.BytesIO(Path(download.value.path()).read_bytes()))
    (csv_name,) = [name for name in archive.namelist() if name.endswith(".csv")]
    rows = archive.read(csv_name).decode().strip().splitlines()
    assert len(rows) == 1 + 3, rows  # header + the three valid clicks
    desk.close()


# A fingerprint of what an <img> shows: its pixels drawn on a canvas, summed by channel (same-origin PNG).
CHART_PIXELS = """selector => {
  const img = document.querySelector(selector);
  if (!img || !img.complete || !img.naturalWidth) { return null; }
  const canvas = document.createElement('canvas');
  canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
  const context = canvas.getContext('2d');
  context.drawImage(img, 0, 0);
  const data = context.getImageData(0, 0, canvas.width, canvas.height).data;
  let sum = 0;
  for (let i = 0; i < data.length; i += 1) { sum = (sum + data[i] * (i % 7 + 1)) % 1000000007; }
  return sum;
}"""


def test_live_progress_brings_the_charts_along(chromium, live_server, alice, alice_study):
    """Batches done while the study page is open: the numbers refresh by themselves, and so do the charts
    (they stayed as first drawn while the numbers moved on)."""
    from tests.factories import make_validated_batch

    make_validated_batch(alice_study, device="pc", reaction_ms=380.0)
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    researcher_log_in(page, live_server.url, "alice")
    page.goto(f"{live_server.url}/researcher/studies/{alice_study.pk}/")
    page.locator("#charts").scroll_into_view_if_needed()  # the charts load lazily
    page.wait_for_function(f"sel => ({CHART_PIXELS})(sel) !== null", arg="img.chart-reaction-times")
    before = {
        kind: page.evaluate(CHART_PIXELS, f"img.chart-{kind}") for kind in ("reaction-times", "devices")
    }
    src_before = page.get_attribute("img.chart-reaction-times", "src")
    page.wait_for_function("() => document.getElementById('live').dataset.liveHtml !== undefined")  # one poll

    for _ in range(2):  # while the page is open: two batches on a phone, much faster clicks
        make_validated_batch(alice_study, device="mobile", reaction_ms=90.0)
    page.wait_for_function(
        "() => document.querySelector('#quota-progress tr.device-mobile').innerText.includes('6 / 75')",
        timeout=20_000,
    )
    page.wait_for_function(
        f"([sel, old]) => {{ const now = ({CHART_PIXELS})(sel); return now !== null && now !== old; }}",
        arg=["img.chart-reaction-times", before["reaction-times"]],
        timeout=40_000,
    )
    assert page.get_attribute("img.chart-reaction-times", "src") != src_before
    page.wait_for_function(
        f"([sel, old]) => {{ const now = ({CHART_PIXELS})(sel); return now !== null && now !== old; }}",
        arg=["img.chart-devices", before["devices"]],
        timeout=10_000,
    )
    _shot(page, "charts-caught-up", selector="#charts")
    context.close()
