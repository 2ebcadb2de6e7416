"""Driving the real player page in Chromium (shared by the browser tests and bench/bench_player_*.py).

Everything goes through the page as a worker would use it: the entry link, the START button, mouse
clicks or touchscreen taps on the canvas. The page exposes ``window.clicklabPlayer`` (phase, position,
startEnabledAt) read-only, so the driver knows when a phase is on screen.
"""

from __future__ import annotations

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
