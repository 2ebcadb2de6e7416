import assert from "node:assert/strict";
import { test } from "node:test";

import { PhaseClock } from "../../static/player/phases.js";

const FRAME = 1000 / 60;

/** Run a clock on a vsync grid; ``late`` maps a frame number to extra delay of that frame (a stall). */
function run(durations, { frame = FRAME, late = {}, frames = 400 } = {}) {
  const clock = new PhaseClock(durations);
  const log = [];
  let t = 1000;
  for (let n = 0; n < frames && clock.running(); n += 1) {
    t += frame + (late[n] || 0);
    const step = clock.frame(t, frame);
    log.push({ n, t, ...step });
  }
  return { clock, log };
}

test("a picture put up on one frame is presented on the next", () => {
  const { log } = run({ A: 100, B: 100, C: 100 });
  const shownA = log.find((step) => step.show === "A");
  const presentedA = log.find((step) => step.present === "A");
  assert.equal(presentedA.n, shownA.n + 1);
});

test("presented durations are whole frames within half a frame of the target", () => {
  const durations = { A: 310, B: 405, C: 290 };
  for (const frame of [1000 / 60, 1000 / 120, 1000 / 144]) {
    const { clock } = run(durations, { frame, frames: 2000 });
    const o = clock.onsets;
    for (const [phase, next] of [["A", "B"], ["B", "C"], ["C", "D"]]) {
      assert.ok(Math.abs(o[next] - o[phase] - durations[phase]) <= frame / 2 + 1e-9, `${phase} at ${frame}`);
    }
  }
});

test("a stall on the frame that puts A up does not shorten A", () => {
  // Frame 0 puts A up and takes 50 ms more: A is on screen only from the late frame, and lasts 1500 ms from there.
  const { clock } = run({ A: 1500, B: 2000, C: 1500 }, { late: { 1: 50 } });
  assert.ok(Math.abs(clock.onsets.B - clock.onsets.A - 1500) <= FRAME / 2);
  assert.ok(clock.scheduled.A < clock.onsets.A - FRAME);
});

test("clicks count only once phase D is on screen", () => {
  const { clock } = run({ A: 50, B: 50, C: 50 });
  assert.equal(clock.phase, "D");
  assert.equal(clock.clickable(clock.onsets.D - 1), false);
  assert.equal(clock.clickable(clock.onsets.D + 1), true);
  const fresh = new PhaseClock({ A: 50, B: 50, C: 50 });
  assert.equal(fresh.clickable(1e9), false);
});

test("untimed (preview) clock moves only when told", () => {
  const clock = new PhaseClock({ A: 1, B: 1, C: 1 }, false);
  clock.frame(10, FRAME);
  clock.frame(30, FRAME);
  clock.frame(5000, FRAME);
  assert.equal(clock.phase, "A");
  assert.equal(clock.advance(6000), "B");
  assert.equal(clock.phase, "B");
});
