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
    then click at ``plan`` in phase D. Optionally screenshot every phase (which costs frames).

    A press meant for a blocked phase that a loaded machine delivers after phase D is on screen is the
    trial's click, as the rule says: then that press is returned (the tests check every press's verdict
    against the phase it was handled in, driver.press_verdicts)."""
    pressed: ClickDone | None = None
    for phase in ("A", "B", "C"):
        if phase in blocked_in or screenshot_prefix:
            wait_phase(page, position, phase)
            if screenshot_prefix:
                SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOT_DIR / f"{screenshot_prefix}-{phase}.png"), scale="css")
            if phase in blocked_in:
                rect = canvas_rect(page)
                x, y = rect["left"] + rect["width"] * 0.3, rect["top"] + rect["height"] * 0.3
                press(page, x, y, touch=touch)
                pressed = ClickDone(position=position, client_x=x, client_y=y, rect=rect)
    if pressed is not None:
        # Phase D of this trial on screen, or the last press already ended the trial (the next one, or the
        # end of the batch: no phase).
        page.wait_for_function(
            "(position) => window.clicklabPlayer.position !== position || ['D', ''].includes(window.clicklabPlayer.phase)",
            arg=position,
            timeout=30_000,
            polling="raf",
        )
        state = page.evaluate("() => [window.clicklabPlayer.position, window.clicklabPlayer.phase]")
        if state != [position, "D"]:
            return pressed
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
# screen, and logs the frame's timestamp whenever that changes: [timestamp, fingerprint, hint shown]. It also
# logs every frame's timestamp (``clicklabObservedFrames``: the frames the player's callbacks ran in too) and,
# ahead of the player's own listener, every press with the trial and phase on screen when the page handled it
# (``clicklabPresses``: [event.timeStamp, position, phase]).
SCREEN_OBSERVER = """
(() => {
  const log = [];
  const frames = [];
  const presses = [];
  window.clicklabScreenLog = log;
  window.clicklabObservedFrames = frames;
  window.clicklabPresses = presses;
  window.addEventListener('pointerdown', (event) => {
    if (!event.isPrimary || (event.pointerType === 'mouse' && event.button !== 0)) { return; }
    const player = window.clicklabPlayer || {};
    presses.push([event.timeStamp, player.position, player.phase]);
  }, true);
  let thumb = null, last = '';
  function tick(timestamp) {
    requestAnimationFrame(tick);
    frames.push(timestamp);
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
    // Blank before the first picture: nothing drawn yet. Later a uniform thumbnail is a picture (a text on a
    // plain background, say).
    if (!log.length && fingerprint.split(';').every((pixel, i, all) => pixel === all[0] || !pixel)) { return; }
    const hint = document.getElementById('hint').textContent === 'Click now';
    const state = fingerprint + (hint ? 'D' : '');
    if (state !== last) { last = state; log.push([timestamp, fingerprint, hint]); }
  }
  requestAnimationFrame(tick);
})();
"""


@dataclass
class Observed:
    """What SCREEN_OBSERVER saw of a page: per trial the on-screen onsets and durations of its phases
    (``screen_phase_durations``), every frame's timestamp, and every press with the trial and phase it was
    handled in."""

    screen: list[dict]
    frames: list[float]
    presses: list[list]


def observed(page, trials: int) -> Observed:
    """Read SCREEN_OBSERVER's logs off ``page`` (after the batch, before the context closes)."""
    logs = page.evaluate(
        "() => [window.clicklabScreenLog, window.clicklabObservedFrames, window.clicklabPresses]"
    )
    return Observed(screen=screen_phase_durations(logs[0], trials), frames=logs[1], presses=logs[2])


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


# Stored onsets come from the same rAF timestamps the observer logs: equal up to the JSON round trip.
SAME_FRAME_MS = 0.05
# The phase machine decides with the refresh interval measured at that frame; the trial stores the one at the
# click (a median of the last 240 intervals, which moves little within a trial). This much drift is allowed.
INTERVAL_DRIFT_MS = 1.0


def phase_bookkeeping(trial, seen: dict, frames: list[float], durations: dict) -> list[str]:
    """What the player controls about a trial's timing, checked against the observer (no duration of the
    machine's frames is asserted): the problems found, [] when none.

    * each stored (presented) onset is the frame on which the observer saw that picture reach the screen;
    * each picture was put up (``scheduled_onsets_ms``) on a frame, and reached the screen on the next one;
    * the phase machine's rule (static/player/phases.js): phase P ends on the first frame ``t`` with
      ``t + 1.5 x interval >= onset(P) + duration(P)``: the frame that put the next picture up satisfies it
      and the frame before it did not. With frames on time this makes every phase last its duration within
      half a frame; a frame the loaded machine delivers late lengthens it, which is the browser's doing (a
      figure of bench/bench_player_timing.py, not a test).
    """
    problems = []
    onsets, scheduled = trial.phase_onsets_ms, trial.scheduled_onsets_ms
    interval = 1000.0 / trial.refresh_hz
    where = f"trial {trial.position}"
    for phase in "ABCD":
        if abs(onsets[phase] - seen["onsets"][phase]) > SAME_FRAME_MS:
            problems.append(
                f"{where} phase {phase}: stored onset {onsets[phase]} ms is not the frame it reached the screen "
                f"({seen['onsets'][phase]} ms)"
            )
    for phase, following in (("A", "B"), ("B", "C"), ("C", "D")):
        put_up = scheduled.get(following)
        at = _frame_index(frames, put_up)
        if at is None or at == 0 or at + 1 >= len(frames):
            problems.append(
                f"{where}: phase {following}'s picture was put up at {put_up} ms, not on a frame seen"
            )
            continue
        if abs(frames[at + 1] - onsets[following]) > SAME_FRAME_MS:
            problems.append(
                f"{where}: phase {following} put up on the frame at {put_up} ms reached the screen at "
                f"{onsets[following]} ms, not on the next frame ({frames[at + 1]} ms)"
            )
        due = onsets[phase] + durations[phase]
        slack = 1.5 * INTERVAL_DRIFT_MS
        if put_up + 1.5 * interval < due - slack:
            problems.append(
                f"{where} phase {phase}: ended early: the frame at {put_up} ms put up {following} although its "
                f"next frame ({put_up} + {interval:.2f} ms) was more than half a frame before the end at {due} ms"
            )
        before = frames[at - 1]
        if before >= onsets[phase] and before + 1.5 * interval >= due + slack:
            problems.append(
                f"{where} phase {phase}: ended late: the frame at {before} ms already had its next frame within "
                f"half a frame of the end at {due} ms, yet {following} was put up only at {put_up} ms"
            )
    return problems


def _frame_index(frames: list[float], timestamp) -> int | None:
    if timestamp is None:
        return None
    for index, frame in enumerate(frames):
        if abs(frame - timestamp) <= SAME_FRAME_MS:
            return index
    return None


def press_verdicts(trial, presses: list[list]) -> tuple[int, float | None]:
    """The presses of ``trial`` (SCREEN_OBSERVER's, with the phase each was handled in) as the rule says
    they count: (how many were blocked, the timestamp of the one that is the click). A press is blocked
    while phase D is not on screen: handled in phase A, B or C, or in D but made before D's onset. Presses
    between trials (no phase yet) count for nothing."""
    onset_d = trial.phase_onsets_ms["D"]
    blocked, click = 0, None
    for timestamp, position, phase in presses:
        if position != trial.position or not phase:
            continue
        if phase != "D" or timestamp < onset_d:
            blocked += 1
        elif click is None:
            click = timestamp
    return blocked, click


def refresh_problems(trial, frames: list[float]) -> list[str]:
    """The refresh rate the trial stores is the one of the frames the page got (median interval, 15%)."""
    deltas = sorted(b - a for a, b in zip(frames, frames[1:], strict=False) if 2 < b - a < 250)
    if not deltas:
        return [f"trial {trial.position}: the observer saw no frame intervals"]
    median = deltas[len(deltas) // 2]
    if abs(1000.0 / trial.refresh_hz - median) > 0.15 * median:
        return [
            f"trial {trial.position}: stored refresh {trial.refresh_hz} Hz, but the page's frames came every "
            f"{median:.2f} ms (median)"
        ]
    return []
