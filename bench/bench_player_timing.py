"""Phase-duration error of the player in real headless Chromium, desktop and phone emulation.

For each layout, ``--trials`` trials (default 100, i.e. 10 sessions of 10) are played through the real
pages (entry link, START, a click in phase D) against a live server on a throw-away database with the
GrabCut images; the error of every phase A, B, C is its measured duration (difference of the stored
rAF onsets) minus the study's duration, in ms and in frames of the session's measured refresh interval.

Baseline, same run and same browser: a naive setTimeout player (what jsPsych's core plugins do) that
switches the canvas picture from timers; its onsets are taken the same way (the rAF timestamp of the
frame that carries the new picture). Printed: p50/p95/max |error| for both, and the ratio naive/ours.

Durations default to 300/400/300 ms so 2 x 100 trials finish in minutes (the mechanism does not depend on
the duration); ``--real`` uses the RClicks 1500/2000/1500 ms. Usage::

    .venv/bin/python bench/bench_player_timing.py [--trials 100] [--real]
"""

from __future__ import annotations

import argparse
import math
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
    ClickPlan,
    entry_url,
    open_player,
    play_trial,
    press_start,
    wait_finished,
    wait_start_enabled,
)

NAIVE_PLAYER = """
async ([trials, durations]) => {
  const canvas = document.createElement('canvas');
  canvas.width = 640; canvas.height = 480;
  canvas.style.width = '100vw'; canvas.style.height = '100vh';
  document.body.style.margin = '0';
  document.body.appendChild(canvas);
  const context = canvas.getContext('2d');
  const colours = {A: '#3366aa', B: '#808080', C: '#3366aa', D: '#3366aa'};
  const errors = [];
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  for (let trial = 0; trial < trials; trial++) {
    const onsets = {};
    await new Promise((resolve) => {
      const phases = ['A', 'B', 'C', 'D'];
      function show(index) {
        const name = phases[index];
        context.fillStyle = colours[name];
        context.fillRect(0, 0, canvas.width, canvas.height);
        requestAnimationFrame((timestamp) => { onsets[name] = timestamp; if (name === 'D') { resolve(); } });
        if (index < 3) { setTimeout(() => show(index + 1), durations[name]); }
      }
      show(0);
    });
    errors.push([onsets.B - onsets.A - durations.A, onsets.C - onsets.B - durations.B, onsets.D - onsets.C - durations.C]);
    await sleep(150);  // about what a click takes before the next trial
  }
  const deltas = [];
  await new Promise((resolve) => {
    let last = null;
    function tick(timestamp) { if (last !== null) { deltas.push(timestamp - last); } last = timestamp;
      if (deltas.length < 120) { requestAnimationFrame(tick); } else { resolve(); } }
    requestAnimationFrame(tick);
  });
  deltas.sort((a, b) => a - b);
  return {errors, frame_ms: deltas[Math.floor(deltas.length / 2)]};
}
"""


def ours(browser, base_url: str, study, layout: str, trials: int) -> tuple[list[float], list[float]]:
    """|error| per phase in ms and in frames, over ``trials`` trials played through the real player."""
    errors_ms, errors_frames = [], []
    wanted = {"A": study.image_ms, "B": study.phase_b_ms(), "C": study.blocked_ms}
    sessions = math.ceil(trials / study.batch_size)
    touch = layout == "phone"
    for _ in range(sessions):
        context = browser.new_context(**LAYOUTS[layout])
        page = context.new_page()
        url = open_player(page, entry_url(base_url, study))
        session = Session.objects.get(pk=session_token_read(token=url.rstrip("/").rsplit("/", 1)[-1]))
        wait_start_enabled(page)
        press_start(page)
        for position in range(session.trials.count()):
            play_trial(page, position, ClickPlan(0.5, 0.5), touch=touch, blocked_in=())
        wait_finished(page)
        context.close()
        for trial in session.trials.order_by("position"):
            onsets, frame_ms = trial.phase_onsets_ms, 1000.0 / trial.refresh_hz
            for phase, following in (("A", "B"), ("B", "C"), ("C", "D")):
                error = abs(onsets[following] - onsets[phase] - wanted[phase])
                errors_ms.append(error)
                errors_frames.append(error / frame_ms)
    return errors_ms[: trials * 3], errors_frames[: trials * 3]


def naive(browser, layout: str, trials: int, durations: dict) -> tuple[list[float], list[float]]:
    context = browser.new_context(**LAYOUTS[layout])
    page = context.new_page()
    page.set_content("<!doctype html><html><body></body></html>")
    result = page.evaluate(NAIVE_PLAYER, [trials, durations])
    context.close()
    errors_ms = [abs(e) for row in result["errors"] for e in row]
    return errors_ms, [e / result["frame_ms"] for e in errors_ms]


def summary(errors_ms, errors_frames) -> str:
    off = sum(1 for e in errors_frames if e >= 0.5) / len(errors_frames)
    return (
        f"mean {sum(errors_ms) / len(errors_ms):5.2f} ms  {100 * off:4.1f}% >= half a frame off  p50 {percentile(errors_ms, 50):6.2f} ms ({percentile(errors_frames, 50):.2f} fr)  "
        f"p95 {percentile(errors_ms, 95):6.2f} ms ({percentile(errors_frames, 95):.2f} fr)  "
        f"max {max(errors_ms):6.2f} ms ({max(errors_frames):.2f} fr)"
    )


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
            ours_ms, ours_frames = ours(browser, base_url, study, layout, args.trials)
            naive_ms, naive_frames = naive(browser, layout, args.trials, durations)
            print(f"{layout:7s} rAF player  (n={len(ours_ms)} phases): {summary(ours_ms, ours_frames)}")
            print(f"{layout:7s} setTimeout  (n={len(naive_ms)} phases): {summary(naive_ms, naive_frames)}")
            p95_ours, p95_naive = percentile(ours_ms, 95), percentile(naive_ms, 95)
            ratio = p95_naive / p95_ours if p95_ours > 0 else float("inf")
            mean_ratio = (sum(naive_ms) / len(naive_ms)) / max(sum(ours_ms) / len(ours_ms), 1e-9)
            print(
                f"{layout:7s} error ratio setTimeout/rAF: p95 {ratio:.1f}x, mean {mean_ratio:.1f}x; p95 <= 1 frame: "
                f"{percentile(ours_frames, 95) <= 1.0} ({time.monotonic() - started:.0f} s)"
            )


if __name__ == "__main__":
    main()
