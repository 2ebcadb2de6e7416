/**
 * The phase machine of one trial: (A) the image, (B) the target, (C) the image with clicks blocked, (D) the
 * image until the click. Pure: the player calls ``frame`` in every requestAnimationFrame callback and does
 * what it returns.
 *
 * What is drawn in a callback reaches the screen with the frame after it, so a phase's picture is prepared
 * (``show``) on one callback and its onset is the timestamp of the next callback (``present``): the
 * presented onset, the first frame on which it is on screen. The phase lasts its full duration counted from
 * that onset: the next picture is shown on the callback whose following frame is closest to the end of
 * the phase. ``scheduled`` keeps the timestamp of the callback that showed each phase (what the player
 * stamped before it knew when the picture was on screen).
 */
export const PHASES = ["A", "B", "C", "D"];

export class PhaseClock {
  /** ``durations``: {A, B, C} in ms (D lasts until the click); ``timed`` false (preview): no timers. */
  constructor(durations, timed = true) {
    this.durations = durations;
    this.timed = timed;
    this.shown = "";      // the phase whose picture was last put up
    this.phase = "";      // the phase on screen (presented)
    this.onsets = {};     // presented onsets
    this.scheduled = {};  // the callbacks that put each picture up
  }

  /** One animation frame at ``timestamp`` with the measured frame ``interval``. Returns
   *  ``{present, show}``: the phase that is on screen from this frame on (or ""), and the phase whose
   *  picture to put up now (or ""). */
  frame(timestamp, interval) {
    let present = "";
    let show = "";
    if (this.shown && this.shown !== this.phase) {
      present = this.shown;
      this.phase = present;
      this.onsets[present] = timestamp;
    }
    if (!this.shown) {
      show = "A";
    } else if (this.timed && this.phase === this.shown && this.phase !== "D") {
      const due = this.onsets[this.phase] + this.durations[this.phase];
      if (timestamp + interval + interval / 2 >= due) { show = PHASES[PHASES.indexOf(this.phase) + 1]; }
    }
    if (show) {
      this.shown = show;
      this.scheduled[show] = timestamp;
    }
    return { present, show };
  }

  /** Preview: go to the next phase at once (no timers, nothing measured). */
  advance(timestamp) {
    const next = this.shown ? PHASES[PHASES.indexOf(this.shown) + 1] : "A";
    this.shown = next;
    this.phase = next;
    this.scheduled[next] = timestamp;
    this.onsets[next] = timestamp;
    return next;
  }

  /** Whether the frame loop must go on: until phase D is on screen. */
  running() { return this.phase !== "D"; }

  /** Whether a press at ``eventTimestamp`` may be the trial's click (phase D on screen by then). */
  clickable(eventTimestamp) { return this.phase === "D" && eventTimestamp >= this.onsets.D; }
}
