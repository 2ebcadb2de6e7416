/*
 * Clicklab annotator player: one batch of trials (native ES modules, no build step).
 *
 * Each trial: (A) the image, (B) the target in the study's display mode, (C) the image with clicking
 * blocked, (D) the image until the one click. Pictures are decoded to ImageBitmaps and drawn, before the
 * trial, on canvases of their own (one for the image, one for the target) that stay hidden; a phase change
 * is then only a change of which canvas is visible, done in a requestAnimationFrame callback. The phase's
 * onset is the rAF timestamp of the next frame, the first on which it is on screen (phases.js), and the
 * phase lasts its duration from there, counted in the measured refresh interval (never an assumed 60 Hz).
 *
 * Loading: the batch's pictures stream in one response; START is enabled once the first trial's pictures
 * are decoded and the rest arrive while the trials run. A trial never starts before its own pictures are
 * decoded: it waits on a short message instead, and the wait is sent with its click (``load_wait_ms``).
 * Before phase A the player tells the server the trial is presented; a refusal (409) stops it. The report of
 * the trial that follows a click rides on that click (its ``next_presentation``), so a trial costs one request,
 * not two; when it cannot (the first trial, a click queued behind an unanswered one, no answer in time) the
 * player sends ``presented`` itself, with the same presentation id, which the server counts once.
 *
 * Clicks: Pointer Events on the stage, mapped to canonical image pixels through the shown canvas's
 * displayed rectangle. Each click goes into the outbox (outbox.js) and is sent at once with its
 * idempotency key; a 4xx refusal is shown to the annotator and reported, not retried.
 *
 * Screens (issue 32 item 5): a consent screen first when the study asks for one ("I agree" shows the
 * instructions; the agreement goes out with the client report), the study's own instructions or the default
 * ones, and practice trials (``trial.practice``, at the first positions) with their own counter, followed by
 * a screen saying the task itself starts. Control trials look like any other trial.
 */
import { fitSize, rotateWouldHelp, toCanonical } from "./geometry.js";
import { backoffMs, decodeBlob, deferred, loadBitmap, sleep, streamBundle } from "./loader.js";
import { classify, Outbox, postJson } from "./outbox.js";
import { PHASES, PhaseClock } from "./phases.js";
import { RefreshMeter } from "./refresh.js";
import { bindCopyButton, fail, gettext, interpolate, notice, runFinishAction, show, textBitmap } from "./ui.js";

const payload = JSON.parse(document.getElementById("player-payload").textContent);
const PREVIEW = payload.mode === "preview";
// ``?load=all``: START only once every picture is decoded (the behaviour before issue 14; a baseline).
const LOAD_ALL = new URLSearchParams(window.location.search).get("load") === "all";
// Frame intervals known before START: the median of 20 ignores up to 9 dropped or doubled frames, and the
// estimate keeps being refined on every frame of every trial. The study link's entry page measures too
// (templates/annotation_ui/entry.html), so some of these are in before the player page arrives.
const REFRESH_INTERVALS = 20;
const $ = (id) => document.getElementById(id);
const durations = { A: payload.study.image_ms, B: payload.study.target_ms, C: payload.study.blocked_ms };
const meter = new RefreshMeter();
const stage = $("stage");

/** Resolves once the meter holds ``frames`` intervals, counting those the page head already sampled. */
function measureRefresh(frames) {
  (window.clicklabFrames || []).forEach((delta) => meter.add(delta));
  return new Promise((resolve) => {
    function tick(timestamp) {
      meter.sample(timestamp);
      if (meter.deltas.length < frames) { requestAnimationFrame(tick); } else { meter.pause(); resolve(meter.hz()); }
    }
    requestAnimationFrame(tick);
  });
}

function uuid4() {
  if (globalThis.crypto && crypto.randomUUID) { return crypto.randomUUID(); }
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => (b + 0x100).toString(16).slice(1)).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Tell the server about a refusal (POST .../problem); best effort, a missing endpoint is fine. */
function reportProblem(endpoint, status, message, position) {
  if (!payload.api.problem) { return; }
  const body = { status, endpoint, message: String(message || "").slice(0, 500), position: position ?? null };
  postJson(payload.api.problem, body, 10000).catch(() => {});
}

// Presentation reports carried on clicks: position -> {id, answer} (answer: a deferred of the click answer's
// ``next_presentation``, or null when the click's first sending got no 2xx).
const carried = new Map();

let leaving = false;  // pagehide was sent (the beacon): no more heartbeats unless the page comes back
/** The worker was away past the study's grace period and the batch was given back, then re-reserved (a
 *  heartbeat's ``reclaimed``, or a click or showing refused ``trial_released``): reload, which shows the batch
 *  as re-reserved and replays the interrupted trial from phase A. */
let reloading = false;
function reloadForReturn() {
  if (reloading) { return; }
  reloading = true;
  notice(gettext("Welcome back. Your batch is being restored…"));
  const go = () => window.location.reload();
  (outbox ? Promise.race([outbox.drain(), sleep(5000)]) : Promise.resolve()).then(go, go);
}

function sendHeartbeat(item) {
  const sent = postJson(payload.api.heartbeat, { visibility: item.visibility }, 10000);
  sent.then((result) => { if (result.ok && result.data.reclaimed) { reloadForReturn(); } }, () => {});
  return sent;
}

/** A heartbeat into the outbox (the page is open; ``visibility``: document.visibilityState). */
function heartbeat() {
  if (!outbox || !payload.api.heartbeat || api.finished || leaving) { return; }
  outbox.add({ kind: "heartbeat", visibility: document.hidden ? "hidden" : "visible" });
}

function sendClick(item) {
  if (item.kind === "heartbeat") { return sendHeartbeat(item); }
  const sent = postJson(payload.api.click, item, 15000);
  const next = item.next_presentation;
  const report = next ? carried.get(next.position) : null;
  if (report && report.id === next.presentation_id) {
    sent.then((result) => report.answer.resolve((result.ok && result.data.next_presentation) || null),
      () => report.answer.resolve(null));
  }
  return sent;
}

const outbox = PREVIEW ? null : new Outbox({
  key: `clicklab.outbox.${payload.session.id}`,
  storage: (() => { try { return window.localStorage; } catch { return null; } })(),
  send: sendClick,
  onStatus: (state) => {
    const text = state ? gettext("Reconnecting…") : "";
    $("net-status").textContent = text;
    $("saving-detail").textContent = text;
  },
  onRefused: (item, result) => {
    if (item.kind === "heartbeat") { return; }  // a bad token or a gone session: the next request says so
    if (result.data && result.data.code === "trial_released") { reloadForReturn(); return; }
    const reason = (result.data && result.data.message) || `HTTP ${result.status}`;
    notice(interpolate(gettext("Your answer for image %(n)s was not accepted: %(reason)s"),
      { n: item.position + 1, reason }));
    reportProblem("click", result.status, reason, item.position);
  },
});
// A click left from before a reload no longer carries a report: the reloaded page shows that trial anew.
if (outbox) { outbox.items.forEach((item) => { delete item.next_presentation; }); }

// ----------------------------------------------------------------------------------------------------
// Canvases: two pairs (image, target) used in turn, so the next trial is drawn while this one runs.

function makeCanvas() {
  const canvas = document.createElement("canvas");
  canvas.className = "stimulus";
  canvas.style.visibility = "hidden";
  stage.appendChild(canvas);
  return canvas;
}
const pairs = [0, 1].map(() => ({ display: makeCanvas(), target: makeCanvas(), position: null, layout: "" }));

function layoutKey() {
  const box = stage.getBoundingClientRect();
  return `${box.width}x${box.height}@${window.devicePixelRatio || 1}`;
}

/** Size both canvases of ``pair`` for ``trial`` and draw its pictures (still hidden). */
function prepare(pair, trial, pictures) {
  const box = stage.getBoundingClientRect();
  const size = fitSize(box.width, box.height, trial.width, trial.height);
  const ratio = window.devicePixelRatio || 1;
  const width = Math.min(4096, Math.round(size.width * ratio));
  const height = Math.min(4096, Math.round(size.height * ratio));
  [[pair.display, pictures.display], [pair.target, pictures.target]].forEach(([canvas, bitmap]) => {
    canvas.style.width = `${size.width}px`;
    canvas.style.height = `${size.height}px`;
    if (canvas.width !== width || canvas.height !== height) { canvas.width = width; canvas.height = height; }
    const context = canvas.getContext("2d", { alpha: false });
    context.imageSmoothingEnabled = true;
    context.imageSmoothingQuality = "high";
    context.drawImage(bitmap, 0, 0, width, height);
    context.getImageData(0, 0, 1, 1);  // rasterise now, not on the frame that shows it
  });
  pair.position = trial.position;
  pair.layout = layoutKey();
}

function setVisible(canvas, visible) { canvas.style.visibility = visible ? "visible" : "hidden"; }

/** The running pair: both canvases visible and composited, the target above the image at an opacity of
 *  0.001 (it cannot change an 8-bit pixel: at most 0.26 of a level), so the compositor draws it every frame
 *  and nothing is left to prepare when phase B makes it opaque. */
const UNSEEN = "0.001";
function setTargetOnTop(pair, onTop) { pair.target.style.opacity = onTop ? "1" : UNSEEN; }

// ----------------------------------------------------------------------------------------------------
// The player

let queue = [];        // trials still to run, in position order
const assets = {};     // position -> deferred {display, target}
let current = null;    // the running trial
let previousPair = null;
let lastStarted = null; // the trial started before the current one (a practice one: the practice screen follows)
const practiceTotal = payload.trials.filter((trial) => trial.practice).length;
const taskTotal = payload.trials.length - practiceTotal;
const consented = deferred();  // resolved by "I agree" (at once when the page shows no consent screen)
const coarse = window.matchMedia("(pointer: coarse)").matches;

// Exposed for tests and benchmarks (read-only use).
const api = window.clicklabPlayer = {
  phase: "", position: null, startEnabledAt: null, results: [], finished: false,
  firstTrialReadyAt: null, refreshReadyAt: null, // what START waited for, for bench/bench_player_loading.py
  refreshHz: () => meter.hz(),
  geometry: { fitSize, toCanonical },
};

function pairFor(position) {
  return pairs.find((pair) => pair.position === position && pair !== previousPair)
    || pairs.find((pair) => pair !== previousPair);
}

/** Draw the next queued trial on the pair not in use, when its pictures are there. */
function prepareNext() {
  const trial = queue[0];
  if (!trial || !assets[trial.position].settled || !assets[trial.position].value) { return; }
  const pair = pairs.find((candidate) => current && candidate !== current.pair);
  if (pair && pair.position !== trial.position) { prepare(pair, trial, assets[trial.position].value); }
}

function showPhase(phase) {
  const pair = current.pair;
  if (phase === "A") {
    if (previousPair && previousPair !== pair) {
      setVisible(previousPair.display, false);
      setVisible(previousPair.target, false);
      previousPair.display.removeAttribute("id");
    }
    pair.display.id = "canvas";
    setTargetOnTop(pair, false);
    setVisible(pair.display, true);
    setVisible(pair.target, true);
    const trial = current.trial;
    $("rotate-hint").hidden = !rotateWouldHelp(window.innerWidth, window.innerHeight, trial.width, trial.height, coarse);
    if (PREVIEW) { $("preview-verdict").hidden = true; }
  } else if (phase === "B") {
    setTargetOnTop(pair, true);
  } else if (phase === "C") {
    setTargetOnTop(pair, false);
  }
  if (phase === "D") { $("hint").textContent = PREVIEW ? "" : gettext("Click now"); }
  if (PREVIEW) {
    $("hint").textContent = interpolate(gettext("Preview: phase %(phase)s — tap to continue"), { phase });
  }
}

function frame(timestamp) {
  if (!current) { return; }
  meter.sample(timestamp);
  const clock = current.clock;
  const step = clock.frame(timestamp, meter.intervalMs());
  if (step.present) {
    api.phase = step.present;
    // The next trial's pictures are drawn while this one waits for its click: never during a timed phase.
    if (step.present === "D" && queue.length) {
      const next = queue[0].position;
      setTimeout(() => {
        want(next);
        assets[next].promise.then(() => { if (current && current.clock.phase === "D") { prepareNext(); } }, () => {});
      }, 0);
    }
  }
  if (step.show) { showPhase(step.show); }
  const waiting = clock.shown !== clock.phase;
  if ((PREVIEW && waiting) || (!PREVIEW && clock.running())) { requestAnimationFrame(frame); } else { meter.pause(); }
}

/** The trial at ``position`` is about to be shown: its report rides on the click being sent now. */
function carryPresentation(record, position) {
  const report = { id: uuid4(), answer: deferred() };
  carried.set(position, report);
  record.next_presentation = { position, presentation_id: report.id };
}

/** Report the showing before phase A (carried on the last click, or POST .../presented): true to go on,
 *  false when the server refused the trial. */
async function reportPresented(position) {
  if (PREVIEW || !payload.api.presented) { return true; }
  let presentationId = uuid4();
  const report = carried.get(position);
  if (report) {
    carried.delete(position);
    presentationId = report.id;
    const answer = await Promise.race([report.answer.promise, sleep(4000).then(() => null)]);
    if (answer && answer.ok) { return true; }
    if (answer && answer.code === "trial_released") { reloadForReturn(); return false; }
    if (answer && answer.code && answer.code !== "invalid") {
      const message = answer.message || gettext("This image cannot be shown.");
      reportProblem("presented", 409, message, position);
      fail(message);
      return false;
    }
    // no answer in time, or an invalid report: the player's own report decides (the same id counts once)
  }
  const body = { position, presentation_id: presentationId };
  for (let attempt = 1; attempt <= 3; attempt += 1) {
    try {
      const result = await postJson(payload.api.presented, body, 4000);
      const verdict = classify(result.status);
      if (verdict === "stored") { return true; }
      if (verdict === "refused") {
        if (result.data.code === "trial_released") { reloadForReturn(); return false; }
        const message = result.data.message || gettext("This image cannot be shown.");
        reportProblem("presented", result.status, message, position);
        if (result.status === 409) { fail(message); return false; }
        return true;
      }
    } catch { /* a network error: try again, then go on without the report */ }
    await sleep(backoffMs(attempt));
  }
  return true;
}

/** Between the last practice trial and the first task trial: a screen of its own, until "Continue". */
function practiceFinished() {
  api.phase = "practice-done";
  show("screen-practice-done");
  return new Promise((resolve) => {
    $("practice-continue").addEventListener("click", () => { show("screen-trial"); resolve(); }, { once: true });
  });
}

function counterText(trial) {
  if (trial.practice) {
    return interpolate(gettext("Practice %(n)s of %(total)s"), { n: trial.position + 1, total: practiceTotal });
  }
  return interpolate(gettext("Image %(n)s of %(total)s"), { n: taskTotal - queue.length, total: taskTotal });
}

async function startTrial() {
  if (!queue.length) { current = null; api.phase = ""; finishBatch(); return; }
  if (lastStarted && lastStarted.practice && !queue[0].practice) {
    current = null;
    await practiceFinished();
  }
  const trial = queue.shift();
  lastStarted = trial;
  api.phase = "";  // the new trial's phase A is on screen from a later frame
  api.position = trial.position;
  $("hint").textContent = "";
  $("trial-counter").textContent = counterText(trial);
  $("trial-counter").classList.toggle("practice", Boolean(trial.practice));
  const handle = assets[trial.position];
  want(trial.position);
  const presented = reportPresented(trial.position);
  let loadWaitMs = 0;
  if (!handle.settled) {
    const waitStart = performance.now();
    if (previousPair) { setVisible(previousPair.display, false); setVisible(previousPair.target, false); }
    $("hint").textContent = gettext("Loading the next image…");
    try { await handle.promise; } catch { return; }  // the loader shows the failure
    loadWaitMs = performance.now() - waitStart;
    $("hint").textContent = "";
  }
  if (!(await presented)) { return; }
  const pair = pairFor(trial.position);
  if (pair.position !== trial.position || pair.layout !== layoutKey()) { prepare(pair, trial, handle.value); }
  current = {
    trial, pair, pictures: handle.value, clock: new PhaseClock(durations, !PREVIEW),
    blocked: 0, flags: {}, clicked: false, loadWaitMs,
  };
  requestAnimationFrame(frame);
}

function flag(reason) { if (current && !current.clicked) { current.flags[reason] = true; } }

function onPointerDown(event) {
  if (!event.isPrimary || (event.pointerType === "mouse" && event.button !== 0)) { return; }
  event.preventDefault();
  if (!current || !current.clock.phase) { return; }
  if (PREVIEW) { previewPointer(event); return; }
  // Before phase D is on screen (its picture may be put up but not yet shown) a press is blocked.
  if (!current.clock.clickable(event.timeStamp)) { current.blocked += 1; return; }
  if (current.clicked) { return; }
  current.clicked = true;
  const clock = current.clock;
  const rect = current.pair.display.getBoundingClientRect();
  const point = toCanonical(event.clientX, event.clientY, rect, current.trial.width, current.trial.height);
  const onsets = {};
  const scheduled = {};
  PHASES.forEach((phase) => { onsets[phase] = clock.onsets[phase]; scheduled[phase] = clock.scheduled[phase]; });
  onsets.click = event.timeStamp;
  const record = {
    position: current.trial.position,
    idempotency_key: uuid4(),
    x: point.x,
    y: point.y,
    shown_width: rect.width,
    shown_height: rect.height,
    pointer_type: event.pointerType || "",
    reaction_ms: event.timeStamp - clock.onsets.D,
    event_timestamp_ms: event.timeStamp,
    phase_onsets_ms: onsets,
    scheduled_onsets_ms: scheduled,
    load_wait_ms: Math.round(current.loadWaitMs * 10) / 10,
    blocked_clicks: current.blocked,
    flags: Object.keys(current.flags),
    refresh_hz: Math.round(meter.hz() * 100) / 100,
  };
  // Sent at once only when nothing waits in the outbox; otherwise the next trial reports itself. Not across the
  // practice screen: the first task trial is shown only once the worker has read it.
  const practiceEnds = current.trial.practice && queue.length && !queue[0].practice;
  if (queue.length && !outbox.items.length && payload.api.presented && !practiceEnds) {
    carryPresentation(record, queue[0].position);
  }
  api.results.push(record);
  outbox.add(record);
  previousPair = current.pair;
  startTrial();
}

async function previewCheck(trial, point) {
  if (!payload.api.preview_check || trial.target_id == null) { return ""; }
  try {
    const result = await postJson(payload.api.preview_check,
      { target_id: trial.target_id, x: point.x, y: point.y }, 10000, "same-origin");
    if (!result.ok) { return result.data.message || `HTTP ${result.status}`; }
    return result.data.message || (result.data.valid ? gettext("Counts.") : gettext("Does not count."));
  } catch {
    return gettext("Could not check the click (network).");
  }
}

function previewPointer(event) {
  const clock = current.clock;
  if (clock.phase !== "D") {
    showPhase(clock.advance(performance.now()));
    api.phase = clock.phase;
  } else if (!current.marker) {
    const rect = current.pair.display.getBoundingClientRect();
    const trial = current.trial;
    const marker = toCanonical(event.clientX, event.clientY, rect, trial.width, trial.height);
    current.marker = marker;
    const canvas = current.pair.display;
    const context = canvas.getContext("2d", { alpha: false });
    context.fillStyle = "#ff1744";
    context.beginPath();
    context.arc(marker.x / trial.width * canvas.width, marker.y / trial.height * canvas.height,
      Math.max(4, canvas.width / 120), 0, 2 * Math.PI);
    context.fill();
    const where = interpolate(gettext("Preview: clicked at x=%(x)s, y=%(y)s"),
      { x: marker.x.toFixed(1), y: marker.y.toFixed(1) });
    // The verdict is a sentence: it goes on the stage, where it wraps, not in the one-line bar above it.
    const box = $("preview-verdict");
    box.textContent = `${where} — ${gettext("checking…")}`;
    box.hidden = false;
    const shown = current;
    previewCheck(trial, marker).then((verdict) => {
      if (current === shown) { box.textContent = `${where} — ${verdict} ${gettext("Tap to continue.")}`; }
      api.previewVerdicts = (api.previewVerdicts || []).concat([{ position: trial.position, verdict }]);
    });
  } else {
    previousPair = current.pair;
    current.pair.position = null;  // the marker is drawn on it
    startTrial();
  }
}

/** Before START: say it now if turning the phone would show the pictures larger, so the worker turns it
 *  before the timed trials, not in the middle of one (the hint on the stage says it again per picture). */
function showStartRotateHint() {
  $("rotate-hint-start").hidden = !queue.some((trial) =>
    rotateWouldHelp(window.innerWidth, window.innerHeight, trial.width, trial.height, coarse));
}

function onViewportChange() {
  if (!playing) { showStartRotateHint(); }
  flag("viewport_changed");
  if (current && current.clock.phase) { prepare(current.pair, current.trial, current.pictures); }
}

stage.addEventListener("pointerdown", onPointerDown, { passive: false });
stage.addEventListener("contextmenu", (event) => event.preventDefault());
document.addEventListener("dblclick", (event) => event.preventDefault(), { passive: false });
document.addEventListener("gesturestart", (event) => event.preventDefault(), { passive: false });
document.addEventListener("touchmove", (event) => {
  if (!event.target.closest || !event.target.closest(".scrollable")) { event.preventDefault(); }
}, { passive: false });
document.addEventListener("visibilitychange", () => {
  if (document.hidden) { flag("visibility_hidden"); }
  heartbeat();  // hidden and visible again both tell the server the page is still there
});
// The page going away (the tab closed, a navigation, a reload): a beacon tells the server, so a closed tab's
// unclicked images go back to the study within seconds, not after the grace period. It is not a sign of
// life: a reload is heard from again at once and keeps its batch (collector.services.reservations). It names
// this page (``payload.page``), so a reload's beacon handled after the new page was served is ignored.
window.addEventListener("pagehide", () => {
  if (PREVIEW || !payload.api.heartbeat || api.finished) { return; }
  leaving = true;  // no heartbeat after the beacon (the visibilitychange of a closing tab comes next)
  const body = JSON.stringify({ visibility: "gone", page: Number.isInteger(payload.page) ? payload.page : null });
  const beacon = () => {
    try {
      return Boolean(navigator.sendBeacon
        && navigator.sendBeacon(payload.api.heartbeat, new Blob([body], { type: "application/json" })));
    } catch { return false; }
  };
  if (!beacon()) {
    fetch(payload.api.heartbeat, { method: "POST", body, keepalive: true, credentials: "omit",
      headers: { "Content-Type": "application/json" } }).catch(() => {});
  }
});
// Back from the browser's page cache (the pagehide above was sent): the page is open again.
window.addEventListener("pageshow", (event) => {
  if (event.persisted) { leaving = false; heartbeat(); }
});
window.addEventListener("blur", () => flag("focus_lost"));
window.addEventListener("resize", onViewportChange);
window.addEventListener("orientationchange", onViewportChange);
if (window.visualViewport) { window.visualViewport.addEventListener("resize", onViewportChange); }

// ----------------------------------------------------------------------------------------------------
// Finish

/** How many more times this page may reload to replay missing trials (guards against a loop). */
function replaysLeft() {
  const key = `clicklab.replays.${payload.session.id}`;
  try {
    const used = parseInt(window.sessionStorage.getItem(key) || "0", 10);
    window.sessionStorage.setItem(key, String(used + 1));
    return 2 - used;
  } catch { return 0; }
}

async function finishBatch() {
  if (PREVIEW) {
    show("screen-done");
    $("done-text").textContent = gettext("End of the preview.");
    api.finished = true;
    return;
  }
  show("screen-saving");
  await outbox.drain();
  for (let attempt = 1; ; attempt += 1) {
    try {
      const result = await postJson(payload.api.finish, {}, 20000);
      if (result.ok) { runFinishAction(result.data.finish, api); return; }
      if (result.status === 409 && result.data.missing && result.data.missing.length && replaysLeft() > 0) {
        // The server lacks clicks we no longer hold (e.g. storage was cleared): play those trials again.
        await outbox.drain();
        window.location.reload();
        return;
      }
      if (classify(result.status) === "refused") {
        const message = result.data.message || gettext("This task cannot be finished.");
        reportProblem("finish", result.status, message, null);
        fail(message);
        return;
      }
    } catch { /* network: retry */ }
    $("saving-detail").textContent = gettext("Connection problem, retrying…");
    await sleep(backoffMs(attempt));
  }
}

// ----------------------------------------------------------------------------------------------------
// Start-up

function clientInfo() {
  const uaData = navigator.userAgentData || null;
  return {
    viewport_width: window.innerWidth,
    viewport_height: window.innerHeight,
    screen_width: window.screen ? screen.width : null,
    screen_height: window.screen ? screen.height : null,
    device_pixel_ratio: window.devicePixelRatio || 1,
    refresh_hz: Math.round(meter.hz() * 100) / 100,
    webdriver: navigator.webdriver === true,
    pointer_coarse: coarse,
    any_pointer_coarse: window.matchMedia("(any-pointer: coarse)").matches,
    hover: window.matchMedia("(hover: hover)").matches,
    max_touch_points: navigator.maxTouchPoints || 0,
    ua_mobile: uaData ? uaData.mobile : null,
    ua_platform: uaData ? uaData.platform : null,
    language: navigator.language || "",
    orientation: window.screen && screen.orientation ? screen.orientation.type : "",
  };
}

function detectedDevice(info) {
  if (info.ua_mobile === true) { return "mobile"; }
  return info.pointer_coarse && info.max_touch_points > 0 ? "mobile" : "pc";
}

/** What the worker was shown before the batch (collector.selectors.screens): the language, the sources of
 *  the texts and, after "I agree", when they agreed. Flat client_info names. */
function screensInfo() {
  const screens = payload.screens || {};
  const info = {
    screens_language: screens.language || document.documentElement.lang || "",
    instructions_source: screens.instructions || "",
    practice_trials: screens.practice || 0,
  };
  if (screens.consent) {
    info.consent_source = screens.consent;
    info.consent_agreed_at = api.consentAgreedAt || null;
  }
  return info;
}

async function reportClient() {
  await consented.promise;  // one report, with the agreement in it (two at once could overwrite each other)
  const info = { ...clientInfo(), ...screensInfo() };
  const body = { client_info: info, detected_device: detectedDevice(info) };
  for (let attempt = 1; attempt < 6; attempt += 1) {
    try {
      const result = await postJson(payload.api.client, body, 15000);
      if (result.ok || result.status < 500) { return; }
    } catch { /* retry */ }
    await sleep(backoffMs(attempt));
  }
}

/** Decode a trial's pictures (the Text Description target is drawn at the display image's size). */
async function decodeTrial(trial, display, target) {
  const displayBitmap = await display();
  const targetBitmap = trial.target_url
    ? await target()
    : await textBitmap(trial.text, displayBitmap.width, displayBitmap.height);
  return { display: displayBitmap, target: targetBitmap };
}

// Decoding takes main-thread time: before START every picture is decoded as it arrives; once the trials
// run, a trial's pictures are decoded only when it is next (during the previous trial's phase D, or when
// it starts), never in the middle of a timed phase.
let playing = false;
const decoders = {};      // position -> start decoding its arrived files
const wanted = new Set(); // positions to decode as soon as their files are in

function decode(position) {
  const run = decoders[position];
  if (run) { delete decoders[position]; run(); }
}

function want(position) {
  if (position === undefined) { return; }
  wanted.add(position);
  decode(position);
}

/** Every queued trial's pictures: from the streamed bundle as they arrive; a trial whose files the
 *  bundle did not bring (or that failed to decode) by its own URLs. */
async function loadAll(onBytes) {
  const byPosition = new Map(queue.map((trial) => [trial.position, trial]));
  const files = {};
  const started = new Set();
  const perFile = (trial) => {
    started.add(trial.position);
    return decodeTrial(trial, () => loadBitmap(trial.display_url), () => loadBitmap(trial.target_url))
      .then(assets[trial.position].resolve, assets[trial.position].reject);
  };
  const onFile = (entry, bytes) => {
    const trial = byPosition.get(entry.position);
    const url = trial && (entry.kind === "display" ? trial.display_url : trial.target_url);
    if (!url || !url.endsWith(entry.name) || started.has(trial.position)) { return; }
    const got = files[trial.position] = { ...files[trial.position], [entry.kind]: new Blob([bytes], { type: entry.type }) };
    if (got.display && (got.target || !trial.target_url)) {
      started.add(trial.position);
      decoders[trial.position] = () => decodeTrial(trial, () => decodeBlob(got.display), () => decodeBlob(got.target))
        .then(assets[trial.position].resolve, () => perFile(trial));
      if (!playing || wanted.has(trial.position)) { decode(trial.position); }
    }
  };
  if (payload.bundle_url) {
    try { await streamBundle(payload.bundle_url, onFile, onBytes); } catch { /* the rest per file */ }
  }
  await Promise.all(queue.filter((trial) => !started.has(trial.position)).map(perFile));
}

function boot() {
  if (payload.finish) { runFinishAction(payload.finish, api); return; }
  const pending = outbox ? outbox.positions() : [];
  queue = payload.trials.filter((trial) => !trial.done && !pending.includes(trial.position));
  if (outbox && pending.length) { outbox.pump(); }
  if (!queue.length) { finishBatch(); return; }
  showStartRotateHint();
  queue.forEach((trial) => { assets[trial.position] = deferred(); });
  const onBytes = (fraction) => {
    $("progress-bar").style.width = `${Math.round(100 * fraction)}%`;
    if (api.startEnabledAt === null) {
      $("loading-text").textContent = interpolate(gettext("Loading images… %(percent)s%"),
        { percent: Math.round(100 * fraction) });
    }
  };
  const failLoading = () => fail(gettext("The images could not be loaded. Check your connection and reload the page."));
  loadAll(onBytes).catch(failLoading);
  queue.forEach((trial) => assets[trial.position].promise.catch(failLoading));
  const needed = LOAD_ALL ? queue : queue.slice(0, 1);
  Promise.all(needed.map((trial) => assets[trial.position].promise))
    .then(() => { api.firstTrialReadyAt = performance.now(); }, () => {});
  const refreshed = measureRefresh(REFRESH_INTERVALS).then((hz) => { api.refreshReadyAt = performance.now(); return hz; });
  Promise.all([...needed.map((trial) => assets[trial.position].promise), refreshed]).then(() => {
    if (!PREVIEW) { reportClient(); }
    $("loading-text").textContent = gettext("Ready. The other images load while you work.");
    $("start-button").disabled = false;
    api.startEnabledAt = performance.now();
  }, () => {});
}

const consentButton = $("consent-agree");
if (consentButton) {
  consentButton.addEventListener("click", () => {
    api.consentAgreedAt = new Date().toISOString();
    show("screen-instructions");
    consented.resolve();
  }, { once: true });
} else {
  consented.resolve();
}

$("start-button").addEventListener("click", () => {
  playing = true;
  show("screen-trial");
  startTrial();
});
bindCopyButton();
window.addEventListener("online", () => { if (outbox) { outbox.pump(); } });
// The session stays reserved while this page is open (collector/services/reservations.py).
if (!PREVIEW && payload.heartbeat_s) { setInterval(heartbeat, payload.heartbeat_s * 1000); }

boot();
