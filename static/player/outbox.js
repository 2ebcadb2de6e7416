/**
 * Outbox: clicks persist (localStorage) until the server acknowledges them; sent in order, retried with
 * backoff on network errors, 5xx, 408 and 429. Any other 4xx is final: the server will never take that
 * item, so it leaves the outbox, the annotator is told (``onRefused``) and it is not retried.
 *
 * Heartbeats (items with ``kind: "heartbeat"``: the page is open, and each visibility change) travel the same
 * way, so they retry like clicks; only the newest waiting one is kept (a heartbeat already being sent stays).
 */
import { backoffMs, sleep } from "./loader.js";

/** "stored" (2xx), "refused" (a 4xx the server means), or "retry". */
export function classify(status) {
  if (status >= 200 && status < 300) { return "stored"; }
  if (status >= 400 && status < 500 && status !== 408 && status !== 429) { return "refused"; }
  return "retry";
}

/** POST JSON (no cookies unless ``credentials`` says so); resolves {status, ok, data} for any HTTP answer, rejects on a network error. */
export async function postJson(url, body, timeoutMs = 15000, credentials = "omit") {
  const controller = globalThis.AbortController ? new AbortController() : null;
  const timer = controller ? setTimeout(() => controller.abort(), timeoutMs) : null;
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      credentials,
      cache: "no-store",
      signal: controller ? controller.signal : undefined,
    });
    const data = await response.json().catch(() => ({}));
    return { status: response.status, ok: response.ok, data: data || {} };
  } finally {
    if (timer) { clearTimeout(timer); }
  }
}

export class Outbox {
  /** ``storage``: a localStorage-like object (or null); ``send(item)`` -> {status, data}; callbacks
   *  ``onStatus(text)`` (retrying or ""), ``onRefused(item, result)``. */
  constructor({ key, storage, send, onStatus = () => {}, onRefused = () => {}, wait = sleep, backoff = backoffMs }) {
    Object.assign(this, { key, storage, send, onStatus, onRefused, wait, backoff });
    this.items = [];
    this.sending = false;
    this.waiters = [];
    try {
      const stored = storage ? storage.getItem(key) : null;
      this.items = stored ? JSON.parse(stored) : [];
    } catch { this.storage = null; }
    if (!Array.isArray(this.items)) { this.items = []; }
  }

  save() {
    if (!this.storage) { return; }
    try {
      if (this.items.length) { this.storage.setItem(this.key, JSON.stringify(this.items)); }
      else { this.storage.removeItem(this.key); }
    } catch { this.storage = null; }
  }

  /** Positions of the clicks waiting (heartbeats carry none). */
  positions() { return this.items.filter((item) => !item.kind).map((item) => item.position); }

  add(item) {
    if (item.kind === "heartbeat") {
      // the one in flight (items[0] while sending) stays; an older waiting heartbeat says nothing more
      this.items = this.items.filter((queued, index) => queued.kind !== "heartbeat" || (this.sending && index === 0));
    }
    this.items.push(item);
    this.save();
    this.pump();
  }

  /** Resolves when every item has left the outbox (stored or refused). */
  drain() {
    if (!this.items.length) { return Promise.resolve(); }
    this.pump();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  async pump() {
    if (this.sending) { return; }
    this.sending = true;
    let attempt = 0;
    while (this.items.length) {
      const item = this.items[0];
      let verdict, result = null;
      try {
        result = await this.send(item);
        verdict = classify(result.status);
      } catch { verdict = "retry"; }
      if (verdict === "retry") {
        attempt += 1;
        this.onStatus("retrying");
        await this.wait(this.backoff(attempt));
        continue;
      }
      this.items.shift();
      this.save();
      attempt = 0;
      if (verdict === "refused") { this.onRefused(item, result); }
    }
    this.sending = false;
    this.onStatus("");
    const waiters = this.waiters;
    this.waiters = [];
    waiters.forEach((resolve) => resolve());
  }
}
