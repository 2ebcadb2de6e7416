import assert from "node:assert/strict";
import { test } from "node:test";

import { fitSize, rotateWouldHelp, toCanonical } from "../../static/player/geometry.js";
import { BundleParser } from "../../static/player/loader.js";
import { classify, Outbox } from "../../static/player/outbox.js";
import { RefreshMeter } from "../../static/player/refresh.js";

test("fitSize letterboxes and toCanonical inverts it exactly", () => {
  assert.deepEqual(fitSize(1920, 1044, 640, 480), { width: 1392, height: 1044 });
  assert.deepEqual(fitSize(390, 800, 640, 480), { width: 390, height: 292 });
  const rect = { left: 264, top: 36, width: 1392, height: 1044 };
  const point = toCanonical(264 + 1392 * 0.25, 36 + 1044 * 0.75, rect, 640, 480);
  assert.ok(Math.abs(point.x - 160) < 1e-9 && Math.abs(point.y - 360) < 1e-9);
});

test("the rotate hint is for landscape pictures on portrait touch screens only", () => {
  assert.equal(rotateWouldHelp(390, 800, 640, 480, true), true);
  assert.equal(rotateWouldHelp(390, 800, 480, 640, true), false);
  assert.equal(rotateWouldHelp(800, 390, 640, 480, true), false);
  assert.equal(rotateWouldHelp(390, 800, 640, 480, false), false);
});

test("refresh meter: median interval, gaps ignored, 60 Hz only until measured", () => {
  const meter = new RefreshMeter();
  assert.equal(meter.intervalMs(), 1000 / 60);
  let t = 0;
  for (let i = 0; i < 30; i += 1) { t += 1000 / 120; meter.sample(t); }
  meter.sample(t + 900);  // a hidden tab: not an interval
  assert.ok(Math.abs(meter.hz() - 120) < 0.01);
});

function bundle(files) {
  const encoder = new TextEncoder();
  const index = files.map((f, i) => ({ position: i, kind: "display", name: `f${i}.webp`, type: "image/webp", length: f.length }));
  const head = encoder.encode(JSON.stringify(index));
  const out = new Uint8Array(4 + head.length + files.reduce((n, f) => n + f.length, 0));
  new DataView(out.buffer).setUint32(0, head.length, false);
  out.set(head, 4);
  let at = 4 + head.length;
  files.forEach((f) => { out.set(f, at); at += f.length; });
  return out;
}

test("bundle parser hands each file over as soon as its last byte arrives", () => {
  const files = [new Uint8Array([1, 2, 3]), new Uint8Array(5000).fill(7), new Uint8Array([9])];
  const body = bundle(files);
  const seen = [];
  const parser = new BundleParser((entry, bytes) => seen.push([entry.position, bytes.length, parser.received]), 16);
  for (let at = 0; at < body.length; at += 700) { parser.push(body.subarray(at, Math.min(body.length, at + 700))); }
  assert.deepEqual(seen.map((s) => s.slice(0, 2)), [[0, 3], [1, 5000], [2, 1]]);
  assert.ok(seen[0][2] < body.length, "the first file came before the body ended");
  assert.deepEqual(parser.finish(), []);
});

test("a truncated bundle reports its missing files", () => {
  const body = bundle([new Uint8Array(10), new Uint8Array(10)]);
  const parser = new BundleParser(() => {});
  parser.push(body.subarray(0, body.length - 3));
  assert.deepEqual(parser.finish().map((e) => e.position), [1]);
});

test("classify: 2xx stored, 4xx refused except 408/429, the rest retried", () => {
  assert.equal(classify(201), "stored");
  assert.equal(classify(409), "refused");
  assert.equal(classify(400), "refused");
  assert.equal(classify(408), "retry");
  assert.equal(classify(429), "retry");
  assert.equal(classify(503), "retry");
});

test("outbox: retries 5xx, drops and reports a 4xx once, keeps order, persists", async () => {
  const store = new Map();
  const storage = { getItem: (k) => store.get(k) ?? null, setItem: (k, v) => store.set(k, v), removeItem: (k) => store.delete(k) };
  const answers = [503, 201, 409, 201];
  const sent = [];
  const refused = [];
  const outbox = new Outbox({
    key: "k", storage,
    send: async (item) => { sent.push(item.position); return { status: answers.shift(), data: { error: "too early" } }; },
    onRefused: (item, result) => refused.push([item.position, result.status]),
    wait: async () => {}, backoff: () => 0,
  });
  outbox.add({ position: 0 });
  outbox.add({ position: 1 });
  outbox.add({ position: 2 });
  assert.ok(store.has("k"));
  await outbox.drain();
  assert.deepEqual(sent, [0, 0, 1, 2]);
  assert.deepEqual(refused, [[1, 409]]);
  assert.equal(store.has("k"), false);
  const reloaded = new Outbox({ key: "k", storage, send: async () => ({ status: 201 }) });
  assert.deepEqual(reloaded.positions(), []);
});

test("outbox: heartbeats retry like clicks, keep their place, and only the newest waiting one is sent", async () => {
  const answers = [503, 200, 201, 200];
  const sent = [];
  let release;
  const gate = new Promise((resolve) => { release = resolve; });
  const outbox = new Outbox({
    key: "hb", storage: null,
    send: async (item) => {
      sent.push(item.kind || `click ${item.position}`);
      if (sent.length === 1) { await gate; }
      return { status: answers.shift(), data: {} };
    },
    wait: async () => {}, backoff: () => 0,
  });
  outbox.add({ kind: "heartbeat", visibility: "visible" });  // in flight: stays
  outbox.add({ position: 4 });
  outbox.add({ kind: "heartbeat", visibility: "hidden" });
  outbox.add({ kind: "heartbeat", visibility: "visible" });  // replaces the waiting "hidden" one
  assert.deepEqual(outbox.positions(), [4], "heartbeats carry no position");
  assert.deepEqual(outbox.items.map((item) => item.kind || item.position), ["heartbeat", 4, "heartbeat"]);
  release();
  await outbox.drain();
  assert.deepEqual(sent, ["heartbeat", "heartbeat", "click 4", "heartbeat"]);
  assert.equal(outbox.items.length, 0);
});
