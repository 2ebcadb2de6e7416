"""Driving the real player page in Chromium (shared by the browser tests and bench/bench_player_*.py).

Everything goes through the page as a worker would use it: the entry link, the START button, mouse
clicks or touchscreen taps on the canvas. The page exposes ``window.clicklabPlayer`` (phase, position,
startEnabledAt) read-only, so the driver knows when a phase is on screen.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

from collector.services.tokens import study_link_token_make

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
SCREENSHOT_DIR = PROJECT_ROOT / "var" / "screenshots"

DESKTOP = {"viewport": {"width": 1920, "height": 1080}}
PHONE = {
    "viewport": {"width": 390, "height": 844},
    "device_scale_factor": 3,
    "is_mobile": True,
    "has_touch": True,
    "user_agent": (
        "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/130.0.0.0 Mobile Safari/537.36"
    ),
}
LAYOUTS = {"desktop": DESKTOP, "phone": PHONE}


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): connections to it are refused, as to a
    platform that cannot be reached."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class ClickPlan:
    """Where the driver clicks in phase D: a fraction of the canvas's displayed width/height."""

    fx: float
    fy: float


@dataclass
class ClickDone:
    position: int
    client_x: float
    client_y: float
    rect: dict  # the canvas's getBoundingClientRect() at the click, CSS px


def entry_url(live_url: str, study, device: str = "") -> str:
    return f"{live_url}/s/{study_link_token_make(study_id=study.pk, device=device)}/"


def open_player(page, url: str, *, timeout_ms: float = 30_000) -> str:
    """Open an entry link and wait for the player page; returns the player URL."""
    page.goto(url)
    page.wait_for_url("**/a/**", timeout=timeout_ms)
    return page.url


def wait_start_enabled(page, *, timeout_ms: float = 60_000) -> None:
    page.wait_for_function(
        "() => !document.getElementById('start-button').disabled", timeout=timeout_ms, polling=50
    )


def press_start(page) -> None:
    page.click("#start-button")


def wait_phase(page, position: int, phase: str, *, timeout_ms: float = 30_000) -> None:
    page.wait_for_function(
        "([position, phase]) => window.clicklabPlayer.position === position && window.clicklabPlayer.phase === phase",
        arg=[position, phase],
        timeout=timeout_ms,
        polling="raf",
    )


def canvas_rect(page) -> dict:
    return page.evaluate(
        "() => { const r = document.getElementById('canvas').getBoundingClientRect();"
        " return {left: r.left, top: r.top, width: r.width, height: r.height}; }"
    )


def press(page, x: float, y: float, *, touch: bool) -> None:
    if touch:
        page.touchscreen.tap(x, y)
    else:
        page.mouse.click(x, y)


def play_trial(
    page,
    position: int,
    plan: ClickPlan,
    *,
    touch: bool,
    blocked_in: tuple[str, ...] = ("B",),
    screenshot_prefix: str | None = None,
) -> ClickDone:
    """Play one trial: press once on the canvas in each phase of ``blocked_in`` (these must be ignored),
    then click at ``plan`` in phase D. Optionally screenshot every phase (which costs frames)."""
    for phase in ("A", "B", "C"):
        if phase in blocked_in or screenshot_prefix:
            wait_phase(page, position, phase)
            if screenshot_prefix:
                SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOT_DIR / f"{screenshot_prefix}-{phase}.png"), scale="css")
            if phase in blocked_in:
                rect = canvas_rect(page)
                press(
                    page, rect["left"] + rect["width"] * 0.3, rect["top"] + rect["height"] * 0.3, touch=touch
                )
    wait_phase(page, position, "D")
    if screenshot_prefix:
        page.screenshot(path=str(SCREENSHOT_DIR / f"{screenshot_prefix}-D.png"), scale="css")
    rect = canvas_rect(page)
    x = round(rect["left"] + plan.fx * rect["width"])
    y = round(rect["top"] + plan.fy * rect["height"])
    press(page, x, y, touch=touch)
    return ClickDone(position=position, client_x=x, client_y=y, rect=rect)


def wait_finished(page, *, timeout_ms: float = 60_000) -> None:
    page.wait_for_function("() => window.clicklabPlayer.finished === true", timeout=timeout_ms, polling=100)


def expected_canonical(done: ClickDone, width: int, height: int) -> tuple[float, float]:
    """Canonical pixel of a click: its offset in the displayed canvas rect, scaled to the image size."""
    rect = done.rect
    return (
        (done.client_x - rect["left"]) / rect["width"] * width,
        (done.client_y - rect["top"]) / rect["height"] * height,
    )


def wait_for(predicate, *, timeout_s: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


# An observer of what the page puts on screen, independent of the player's code and stamps: added before
# the page's own scripts, its requestAnimationFrame loop re-registers first thing in each callback, so in
# every frame it runs before any callback the player adds. It reads back the pixels of the canvas on top
# (an 8x8 thumbnail) and whether the "Click now" hint is shown, i.e. the picture the previous frame sent to the
# screen, and logs the frame's timestamp whenever that changes: [timestamp, fingerprint, hint shown].
SCREEN_OBSERVER = """
(() => {
  const log = [];
  window.clicklabScreenLog = log;
  let thumb = null, last = '';
  function tick(timestamp) {
    requestAnimationFrame(tick);
    const screen = document.getElementById('screen-trial');
    if (!screen || screen.hidden) { return; }
    // The picture on top: of the stage's visible canvases (not hidden, and opaque enough to change an
    // 8-bit pixel), the highest z-index, then the last in document order (later siblings paint over).
    let canvas = null, top = -Infinity;
    for (const c of document.querySelectorAll('#stage canvas')) {
      const style = getComputedStyle(c);
      if (!c.width || style.visibility === 'hidden' || style.display === 'none' || Number(style.opacity) * 255 < 0.5) { continue; }
      const z = Number(style.zIndex) || 0;
      if (z >= top) { top = z; canvas = c; }
    }
    if (!canvas) { return; }
    if (!thumb) { thumb = document.createElement('canvas'); thumb.width = 8; thumb.height = 8; }
    const context = thumb.getContext('2d', { willReadFrequently: true });
    context.drawImage(canvas, 0, 0, 8, 8);
    const pixels = context.getImageData(0, 0, 8, 8).data;
    let fingerprint = '';
    for (let i = 0; i < pixels.length; i += 4) { fingerprint += pixels[i] + ',' + pixels[i + 1] + ',' + pixels[i + 2] + ';'; }
    if (fingerprint.split(';').every((pixel, i, all) => pixel === all[0] || !pixel)) { return; }  // blank: no picture yet
    const hint = document.getElementById('hint').textContent === 'Click now';
    const state = fingerprint + (hint ? 'D' : '');
    if (state !== last) { last = state; log.push([timestamp, fingerprint, hint]); }
  }
  requestAnimationFrame(tick);
})();
"""


def screen_phase_durations(log: list, trials: int) -> list[dict]:
    """On-screen onsets and durations of phases A, B, C of the first ``trials`` trials from a
    SCREEN_OBSERVER log: A is a new picture, B a different one, C the A picture again, D the same picture
    with the hint. Between trials the last picture may stay (hint gone) until A replaces it."""
    found, at, previous = [], 0, None
    for _ in range(trials):
        while at < len(log) and (log[at][1] == previous or log[at][2]):
            at += 1
        run = log[at : at + 4]
        ok = (
            len(run) == 4
            and not run[1][2]
            and run[1][1] != run[0][1]
            and run[2][1] == run[0][1]
            and not run[2][2]
            and run[3][1] == run[0][1]
            and run[3][2]
        )
        assert ok, (
            f"trial {len(found)}: screen changes do not follow A, B, C, D: {[(r[0], r[2]) for r in run]}"
        )
        onsets = {phase: run[index][0] for index, phase in enumerate("ABCD")}
        found.append(
            {
                "onsets": onsets,
                "A": onsets["B"] - onsets["A"],
                "B": onsets["C"] - onsets["B"],
                "C": onsets["D"] - onsets["C"],
            }
        )
        previous, at = run[0][1], at + 4
    return found
