/** Refresh rate: the median of recent requestAnimationFrame intervals (robust to the odd dropped frame),
 *  never an assumed 60 Hz once five intervals are known. */
export class RefreshMeter {
  constructor() { this.deltas = []; this.last = null; }

  /** Feed the timestamp of a frame; a gap (pause, hidden tab) is not taken as an interval. */
  sample(timestamp) {
    if (this.last !== null) { this.add(timestamp - this.last); }
    this.last = timestamp;
  }

  add(delta) {
    if (delta > 2 && delta < 250) {
      this.deltas.push(delta);
      if (this.deltas.length > 240) { this.deltas.shift(); }
    }
  }

  /** The next sample starts a new run (no interval across the pause). */
  pause() { this.last = null; }

  intervalMs() {
    if (this.deltas.length < 5) { return 1000 / 60; }
    const sorted = this.deltas.slice().sort((a, b) => a - b);
    return sorted[Math.floor(sorted.length / 2)];
  }

  hz() { return 1000 / this.intervalMs(); }
}
