"""On-screen phase-duration error of the player in real headless Chromium, desktop and phone emulation,
against a plain requestAnimationFrame page measured the same way in the same run.

For each layout, ``--trials`` trials (default 100, i.e. 10 sessions of 10) are played through the real
pages (entry link, START, a click in phase D) against a live server on a throw-away database with the
GrabCut images. Each phase's duration is measured three ways:

* on screen: by an observer outside the player (``tests.annotation_ui.driver.SCREEN_OBSERVER``) that reads
  the shown canvas back every frame and logs the frame on which the picture (or the "Click now" hint)
  changed; the error is that duration minus the study's;
* by the player's own stamps: the stored presented onsets (``phase_onsets_ms``) and the scheduled ones
  (``scheduled_onsets_ms``, the callback that put the picture up: what the player stamped before).

The baseline is a page of the same two pictures per trial and the same phases whose requestAnimationFrame
loop switches on the first frame at least the phase's duration after the frame that switched to it (the
plain way to time phases with rAF), measured by the same observer in the same browser: what the machine
and the browser give any page. Its error shows how loaded the machine was; the player's error over it is
the player's own share.

Printed per layout and phase: mean/p95/max |error| in ms and in frames of the measured refresh interval,
and the ratio player / baseline of the on-screen mean and p95. Goal (issue 14): p95 on-screen error <=
1 frame for every phase on a quiet machine. Durations default to 300/400/300 ms so 2 x 100 trials finish in
minutes; ``--real`` uses the RClicks 1500/2000/1500 ms. The browser tests assert only what the player
controls (tests/annotation_ui/driver.py ``phase_bookkeeping``); this is where the durations are a figure.
Usage::

    .venv/bin/python bench/bench_player_timing.py [--trials 100] [--real]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_player_setup import (  # noqa: E402
    bench_environment,
    chromium,
    grabcut_study,
    live_server,
    percentile,
)

from collector.models import Session  # noqa: E402
from collector.services.tokens import session_token_read  # noqa: E402
from tests.annotation_ui.driver import (  # noqa: E402
    LAYOUTS,
    SCREEN_OBSERVER,
    ClickPlan,
    entry_url,
    observed,
    open_player,
    play_trial,
    press_start,
    screen_phase_durations,
    wait_finished,
    wait_start_enabled,
)

PHASE_PAIRS = (("A", "B"), ("B", "C"), ("C", "D"))


def ours(browser, base_url: str, study, layout: str, trials: int) -> dict:
    """|error| (ms) per phase and source ("screen", "presented", "scheduled") and the frame interval."""
    errors = {(phase, source): [] for phase in "ABC" for source in ("screen", "presented", "scheduled")}
    frames = []
    wanted = {"A": study.image_ms, "B": study.phase_b_ms(), "C": study.blocked_ms}
    sessions = math.ceil(trials / study.batch_size)
    touch = layout == "phone"
    for _ in range(sessions):
        context = browser.new_context(**LAYOUTS[layout])
        context.add_init_script(SCREEN_OBSERVER)
        page = context.new_page()
        url = open_player(page, entry_url(base_url, study))
        session = Session.objects.get(pk=session_token_read(token=url.rstrip("/").rsplit("/", 1)[-1]))
        wait_start_enabled(page)
        press_start(page)
        count = session.trials.count()
        scheduled = []
        page.on(
            "request",
            lambda request, out=scheduled: (
                out.append(request.post_data_json.get("scheduled_onsets_ms"))
                if request.url.endswith("/click")
                else None
            ),
        )
        for position in range(count):
            play_trial(page, position, ClickPlan(0.5, 0.5), touch=touch, blocked_in=())
        wait_finished(page)
        screen = screen_phase_durations(page.evaluate("() => window.clicklabScreenLog"), count)
        context.close()
        for trial, seen, stamps in zip(session.trials.order_by("position"), screen, scheduled, strict=True):
            frames.append(1000.0 / trial.refresh_hz)
            for phase, following in PHASE_PAIRS:
                errors[phase, "screen"].append(abs(seen[phase] - wanted[phase]))
                onsets = trial.phase_onsets_ms
                errors[phase, "presented"].append(abs(onsets[following] - onsets[phase] - wanted[phase]))
                if stamps:
                    errors[phase, "scheduled"].append(abs(stamps[following] - stamps[phase] - wanted[phase]))
    return {key: values[:trials] for key, values in errors.items()}, sorted(frames)[len(frames) // 2]


# The baseline page: the observer's elements (#screen-trial, #stage canvases, #hint) and a trial loop of
# A (picture 1), B (picture 2 on top), C (picture 1), D (picture 1 and "Click now") timed the plain way: switch
# on the first rAF callback at least the phase's duration after the callback that switched to it. D lasts
# ``D_MS`` (no one clicks); every trial draws new pictures so the observer tells trials apart.
D_MS = 150
BASELINE_PAGE = """<!doctype html><html><body style="margin:0;background:#808080">
<div id="screen-trial"><div id="stage" style="position:relative;width:640px;height:480px">
<canvas id="one" width="320" height="240" style="position:absolute;width:640px;height:480px"></canvas>
<canvas id="two" width="320" height="240" style="position:absolute;width:640px;height:480px;visibility:hidden"></canvas>
</div><p id="hint"></p></div>
<script>
const durations = {A: %(A)d, B: %(B)d, C: %(C)d, D: %(D)d};
const one = document.getElementById('one'), two = document.getElementById('two');
const hint = document.getElementById('hint');
let trial = 0, phase = '', since = 0;
function paint(canvas, seed) {
  const context = canvas.getContext('2d');
  for (let i = 0; i < 8; i += 1) {
    context.fillStyle = `rgb(${(seed * 37 + i * 71) %% 256},${(seed * 91 + i * 13) %% 256},${(seed * 17 + i * 151) %% 256})`;
    context.fillRect(i * 40, 0, 40, 240);
  }
}
function enter(next, timestamp) {
  phase = next; since = timestamp;
  if (next === 'A') { paint(one, 2 * trial + 1); paint(two, 2 * trial + 2); hint.textContent = ''; }
  two.style.visibility = next === 'B' ? 'visible' : 'hidden';
  if (next === 'D') { hint.textContent = 'Click now'; }
}
function tick(timestamp) {
  if (!phase) { enter('A', timestamp); }
  else if (timestamp - since >= durations[phase]) {
    if (phase === 'D') { trial += 1; if (trial >= %(trials)d) { window.baselineDone = true; hint.textContent = ''; return; } enter('A', timestamp); }
    else { enter({A: 'B', B: 'C', C: 'D'}[phase], timestamp); }
  }
  requestAnimationFrame(tick);
}
requestAnimationFrame(tick);
</script></body></html>"""


def baseline(browser, base_url: str, layout: str, trials: int, wanted: dict) -> tuple[dict, float]:
    """|error| (ms) per phase of the plain rAF page on screen, and its median frame interval."""
    context = browser.new_context(**LAYOUTS[layout])
    context.add_init_script(SCREEN_OBSERVER)
    page = context.new_page()
    html = BASELINE_PAGE % {**wanted, "D": D_MS, "trials": trials}
    page.route(f"{base_url}/bench-baseline", lambda route: route.fulfill(body=html, content_type="text/html"))
    page.goto(f"{base_url}/bench-baseline")
    page.wait_for_function("() => window.baselineDone === true", timeout=trials * 5_000, polling=200)
    seen = observed(page, trials)
    context.close()
    deltas = sorted(b - a for a, b in zip(seen.frames, seen.frames[1:], strict=False) if 2 < b - a < 250)
    errors = {phase: [abs(trial[phase] - wanted[phase]) for trial in seen.screen] for phase in "ABC"}
    return errors, deltas[len(deltas) // 2]


def summary(errors_ms: list[float], frame_ms: float) -> str:
    if not errors_ms:
        return "no data"
    late = sum(1 for e in errors_ms if e > frame_ms) / len(errors_ms)
    mean, p95, worst = statistics.fmean(errors_ms), percentile(errors_ms, 95), max(errors_ms)
    return (
        f"mean {mean:6.2f} ms ({mean / frame_ms:.2f} fr)  p95 {p95:6.2f} ms ({p95 / frame_ms:.2f} fr)  "
        f"max {worst:6.2f} ms ({worst / frame_ms:.2f} fr)  {100 * late:4.1f}% > 1 frame"
    )


def ratio(ours_ms: list[float], base_ms: list[float]) -> str:
    """Player / baseline of the mean and the p95 (a zero baseline, a frame-exact page, gives no ratio)."""
    parts = []
    for name, ours_value, base_value in (
        ("mean", statistics.fmean(ours_ms), statistics.fmean(base_ms)),
        ("p95", percentile(ours_ms, 95), percentile(base_ms, 95)),
    ):
        parts.append(
            f"{name} {ours_value / base_value:.2f}x" if base_value > 0.05 else f"{name} n/a (baseline 0)"
        )
    return "  ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100, help="trials per layout (>= 100 for the report)")
    parser.add_argument("--real", action="store_true", help="RClicks durations 1500/2000/1500 ms")
    args = parser.parse_args()
    timing = (
        {"image_ms": 1500, "target_ms": 2000, "blocked_ms": 1500}
        if args.real
        else {"image_ms": 300, "target_ms": 400, "blocked_ms": 300}
    )
    durations = {"A": timing["image_ms"], "B": timing["target_ms"], "C": timing["blocked_ms"]}
    with bench_environment("player_timing"), live_server() as base_url, chromium() as browser:
        study = grabcut_study(quota_pc=1000, quota_mobile=1000, **timing)
        print(
            f"phase durations A/B/C = {durations['A']}/{durations['B']}/{durations['C']} ms, {args.trials} trials per layout"
        )
        for layout in ("desktop", "phone"):
            started = time.monotonic()
            errors, frame_ms = ours(browser, base_url, study, layout, args.trials)
            base_errors, base_frame_ms = baseline(browser, base_url, layout, args.trials, durations)
            label = {
                "screen": "on screen",
                "presented": "stamps: presented",
                "scheduled": "stamps: scheduled",
            }
            for phase in "ABC":
                for source in ("screen", "presented", "scheduled"):
                    print(
                        f"{layout:7s} phase {phase} {label[source]:18s} {summary(errors[phase, source], frame_ms)}"
                    )
                print(
                    f"{layout:7s} phase {phase} {'baseline on screen':18s} {summary(base_errors[phase], base_frame_ms)}"
                )
                print(
                    f"{layout:7s} phase {phase} {'ratio on screen':18s} {ratio(errors[phase, 'screen'], base_errors[phase])}"
                )
            goal = all(percentile(errors[phase, "screen"], 95) <= frame_ms for phase in "ABC")
            print(
                f"{layout:7s} goal p95 on-screen error <= 1 frame in every phase: {goal} ({time.monotonic() - started:.0f} s)"
            )


if __name__ == "__main__":
    main()
