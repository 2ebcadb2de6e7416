/**
 * Loading: the batch's pictures in one streamed response (see annotation_ui.views.stimuli_bundle), handed
 * over file by file as their bytes arrive, so the first trial can start while the rest still download.
 *
 * Bundle layout: uint32 N (big-endian), N bytes of JSON index [{position, kind, name, type, length}],
 * then the files back to back in index (= play) order.
 */

/** Incremental parser: ``push`` chunks (Uint8Array) as they arrive; ``onFile(entry, bytes)`` is called
 *  for each file once all its bytes are in. ``finish`` throws when the body ended early. */
export class BundleParser {
  constructor(onFile, expectedLength = 0) {
    this.onFile = onFile;
    this.data = new Uint8Array(Math.max(expectedLength, 1024));
    this.received = 0;
    this.index = null;
    this.next = 0;
    this.offset = 0;
  }

  push(chunk) {
    if (this.received + chunk.length > this.data.length) {
      const grown = new Uint8Array(Math.max(this.data.length * 2, this.received + chunk.length));
      grown.set(this.data.subarray(0, this.received));
      this.data = grown;
    }
    this.data.set(chunk, this.received);
    this.received += chunk.length;
    this.parse();
  }

  parse() {
    if (this.index === null) {
      if (this.received < 4) { return; }
      const length = new DataView(this.data.buffer, 0, 4).getUint32(0, false);
      if (this.received < 4 + length) { return; }
      this.index = JSON.parse(new TextDecoder().decode(this.data.subarray(4, 4 + length)));
      this.offset = 4 + length;
    }
    while (this.next < this.index.length && this.received >= this.offset + this.index[this.next].length) {
      const entry = this.index[this.next];
      this.onFile(entry, this.data.slice(this.offset, this.offset + entry.length));
      this.offset += entry.length;
      this.next += 1;
    }
  }

  /** Files still missing when the body ended ([] when complete); throws on extra bytes. */
  finish() {
    if (this.index === null) { throw new Error("stimuli bundle ended before its index"); }
    if (this.next === this.index.length && this.received !== this.offset) {
      throw new Error("stimuli bundle longer than its index says");
    }
    return this.index.slice(this.next);
  }
}

/** Fetch the bundle at ``url`` and feed a BundleParser; ``onProgress(fraction)`` by bytes. Resolves
 *  with the entries that never arrived (rejects on a network or HTTP error). */
export async function streamBundle(url, onFile, onProgress = () => {}) {
  const response = await fetch(url);
  if (!response.ok) { throw new Error(`HTTP ${response.status}`); }
  const total = Number(response.headers.get("Content-Length")) || 0;
  const parser = new BundleParser(onFile, total);
  if (!response.body || !response.body.getReader) {
    parser.push(new Uint8Array(await response.arrayBuffer()));
    return parser.finish();
  }
  const reader = response.body.getReader();
  for (;;) {
    const step = await reader.read();
    if (step.done) { break; }
    parser.push(step.value);
    if (total) { onProgress(Math.min(1, parser.received / total)); }
  }
  const missing = parser.finish();
  if (missing.length) { throw new Error(`stimuli bundle truncated: ${missing.length} files missing`); }
  return missing;
}

export function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

/** Exponential backoff with jitter, capped at 8 s. */
export function backoffMs(attempt, random = Math.random) {
  return Math.min(8000, 250 * 2 ** attempt) * (0.6 + 0.4 * random());
}

export function decodeBlob(blob) {
  if (globalThis.createImageBitmap) { return createImageBitmap(blob); }
  const image = new Image();
  image.src = URL.createObjectURL(blob);
  return image.decode().then(() => image);
}

/** One picture by its own URL (the fallback when the bundle fails), decoded; retried with backoff. */
export async function loadBitmap(url) {
  for (let attempt = 1; ; attempt += 1) {
    try {
      const response = await fetch(url);
      if (!response.ok) { throw new Error(`HTTP ${response.status}`); }
      return await decodeBlob(await response.blob());
    } catch (error) {
      if (attempt > 12) { throw error; }
      await sleep(backoffMs(attempt));
    }
  }
}

/** A settable promise: the trial's pictures, resolved when decoded; ``value`` once there. */
export function deferred() {
  let resolve, reject;
  const promise = new Promise((ok, no) => { resolve = ok; reject = no; });
  const handle = { promise, value: null, settled: false };
  handle.resolve = (value) => { if (!handle.settled) { handle.settled = true; handle.value = value; resolve(value); } };
  handle.reject = (error) => { if (!handle.settled) { handle.settled = true; reject(error); } };
  return handle;
}
