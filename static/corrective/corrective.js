/*
 * Clicklab corrective-click player (issue 17, seed 001): the picture with the model's current mask (translucent
 * fill + outline, hide toggle) and the object's dashed box; positive / negative clicks by mouse button (left /
 * right) or, on touch, by the two-state toggle; undo, "Update mask" (ends the round: the model updates the mask
 * between rounds), "Mask is fine" (skip), "Done"; the round's click budget is always visible.
 *
 * Every write goes into one ordered outbox persisted in localStorage and is sent with its idempotency key (clicks,
 * undos) or its round (submits), the same approach as the timed player's click outbox, so no click is lost and a
 * reload resumes: the page drains what is left, then asks the server for the state. There is no time limit;
 * the time per instance, per round and of each click (since the instance was shown) is sent with the writes.
 * Coordinates are canonical image pixels (x = column, y = row), as everywhere in Clicklab.
 *
 * An ES module, like the timed player's: the end screens, their Copy button and the platform's finish step are
 * the timed player's own (static/player/ui.js).
 */
import { bindCopyButton, gettext, runFinishAction, show } from "../player/ui.js";

var payload = JSON.parse(document.getElementById("corrective-payload").textContent);
var api = payload.api;
var FINISHED = { done: true, skipped: true, failed: true };

function $(id) { return document.getElementById(id); }
function sleep(ms) { return new Promise(function (resolve) { setTimeout(resolve, ms); }); }
function backoffMs(attempt) { return Math.min(8000, 250 * Math.pow(2, attempt)) * (0.6 + 0.4 * Math.random()); }
function uuid4() {
  if (window.crypto && crypto.randomUUID) { return crypto.randomUUID(); }
  var bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  bytes[6] = (bytes[6] & 0x0f) | 0x40; bytes[8] = (bytes[8] & 0x3f) | 0x80;
  return Array.prototype.map.call(bytes, function (b) { return ("0" + b.toString(16)).slice(-2); }).join("");
}

function request(method, url, body, timeoutMs) {
  var controller = window.AbortController ? new AbortController() : null;
  var timer = controller ? setTimeout(function () { controller.abort(); }, timeoutMs || 15000) : null;
  return fetch(url, {
    method: method,
    headers: body ? { "Content-Type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
    credentials: "omit",
    cache: "no-store",
    signal: controller ? controller.signal : undefined,
  }).then(function (response) {
    if (timer) { clearTimeout(timer); }
    return response.json().catch(function () { return {}; }).then(function (data) {
      return { status: response.status, ok: response.ok, data: data };
    });
  }, function (error) { if (timer) { clearTimeout(timer); } throw error; });
}

// ------------------------------------------------------------------------------------------------
// Outbox: every write, in order, until the server answers it (2xx, or a 4xx that retrying cannot change).

var outboxKey = "clicklab.corrective.outbox." + payload.session.id;
var outbox = { items: [], sending: false, waiters: [], memoryOnly: false };
try { outbox.items = JSON.parse(window.localStorage.getItem(outboxKey) || "[]"); } catch { outbox.memoryOnly = true; }
if (!Array.isArray(outbox.items)) { outbox.items = []; }

function outboxSave() {
  if (outbox.memoryOnly) { return; }
  try {
    if (outbox.items.length) { window.localStorage.setItem(outboxKey, JSON.stringify(outbox.items)); }
    else { window.localStorage.removeItem(outboxKey); }
  } catch { outbox.memoryOnly = true; }
}
function outboxAdd(url, body) { outbox.items.push({ url: url, body: body }); outboxSave(); outboxPump(); }
function outboxDrain() {
  if (!outbox.items.length) { return Promise.resolve(); }
  outboxPump();
  return new Promise(function (resolve) { outbox.waiters.push(resolve); });
}
function pendingFor(itemId) { return outbox.items.some(function (entry) { return entry.body.item === itemId; }); }
function outboxPump() {
  if (outbox.sending) { return; }
  outbox.sending = true;
  var attempt = 0;
  function next() {
    if (!outbox.items.length) {
      outbox.sending = false;
      $("net-status").textContent = "";
      var waiters = outbox.waiters; outbox.waiters = [];
      waiters.forEach(function (resolve) { resolve(); });
      return;
    }
    var entry = outbox.items[0];
    request("POST", entry.url, entry.body, 15000).then(function (result) {
      var final = result.ok || (result.status >= 400 && result.status < 500 && result.status !== 408 && result.status !== 429);
      if (!final) { throw new Error("HTTP " + result.status); }
      outbox.items.shift();
      outboxSave();
      attempt = 0;
      $("net-status").textContent = "";
      if (!result.ok) { refused(entry, result); }
      else if (result.data.item && !pendingFor(result.data.item.id)) { adopt(result.data.item); }
      next();
    }).catch(function () {
      attempt += 1;
      $("net-status").textContent = gettext("Reconnecting…");
      sleep(backoffMs(attempt)).then(next);
    });
  }
  next();
}

/** Tell the server about a refusal shown to the worker (POST .../problem, as the timed player does); best
 *  effort: a failure to report changes nothing for the worker. */
function reportProblem(endpoint, status, message, itemId) {
  if (!api.problem) { return; }
  var at = itemId === undefined ? -1 : byId(itemId);
  var body = { status: status, endpoint: "corrective/" + endpoint, message: String(message).slice(0, 500),
    position: at >= 0 ? items[at].position : null };
  request("POST", api.problem, body, 10000).catch(function () {});
}

/** The server refused a write: it is not retried; say why, report it, and take the server's state. */
function refused(entry, result) {
  var message = (result.data && result.data.message) || ("HTTP " + result.status);
  if (window.console) { console.warn("refused", result.status, message); }
  if (current() && entry.body.item === current().id) { showError(message); }
  reportProblem(entry.url.split("/").pop(), result.status, message, entry.body.item);
  refreshState();
}

// ------------------------------------------------------------------------------------------------
// State

var items = payload.items;
var index = 0;
var positive = true;
var maskHidden = false;
var shownAt = null;     // performance.now() when the current item was shown
var roundStart = null;  // ... when its current round became clickable
var polling = false;
var shownFor = null;    // id of the item shownAt belongs to

function current() { return items[index]; }
function byId(id) { for (var i = 0; i < items.length; i++) { if (items[i].id === id) { return i; } } return -1; }

function adopt(serverItem) {
  var i = byId(serverItem.id);
  if (i < 0) { return; }
  var before = items[i];
  var local = items[i] = serverItem;
  if (local.localDone) { return; }
  if (before && before.localDone) { local.localDone = true; }
  if (i === index) {
    if (!before || before.round !== local.round || before.state !== local.state) { roundStart = performance.now(); }
    render();
  }
}

function refreshState() {
  return request("GET", api.state).then(function (result) {
    if (!result.ok) { return; }
    result.data.items.forEach(function (serverItem) { if (!pendingFor(serverItem.id)) { adopt(serverItem); } });
    advanceIfFinished();
  });
}

function locallyFinished(item) { return FINISHED[item.state] || item.localDone; }

function advanceIfFinished() {
  while (index < items.length && locallyFinished(items[index])) { index += 1; }
  if (index >= items.length) { finishSession(); return; }
  if (shownFor !== items[index].id) {
    shownFor = items[index].id;
    shownAt = performance.now() - (items[index].active_ms || 0);
    roundStart = performance.now();
  }
  render();
  if (current().state === "updating") { pollUpdates(); }
}

function pollUpdates() {
  if (polling) { return; }
  polling = true;
  (function loop() {
    var item = current();
    if (!item || item.state !== "updating") { polling = false; return; }
    outboxDrain().then(function () { return request("GET", api.state); }).then(function (result) {
      if (result.ok) {
        result.data.items.forEach(function (serverItem) { if (!pendingFor(serverItem.id)) { adopt(serverItem); } });
      }
    }, function () {}).then(function () {
      var now = current();
      if (now && now.state === "updating") { sleep(600).then(loop); }
      else { polling = false; advanceIfFinished(); }
    });
  })();
}

// ------------------------------------------------------------------------------------------------
// Drawing: picture, box, mask (fill + outline), clicks

var canvas = $("canvas");
var context = canvas.getContext("2d");
var pictures = {};   // item id -> HTMLImageElement
var overlays = {};   // mask url -> canvas (canonical size) with the translucent fill and outline
var frame = { x: 0, y: 0, w: 1, h: 1 }; // where the picture is drawn, CSS px within the canvas

function loadImage(url) {
  return new Promise(function (resolve, reject) {
    var image = new Image();
    image.onload = function () { resolve(image); };
    image.onerror = function () { reject(new Error(interpolate(gettext("could not load %s"), [url]))); };
    image.src = url;
  });
}

function picture(item) {
  if (!pictures[item.id]) { pictures[item.id] = loadImage(item.image_url); }
  return pictures[item.id];
}

function overlay(item) {
  var url = item.mask_url;
  if (!url) { return Promise.resolve(null); }
  if (!overlays[url]) {
    overlays[url] = loadImage(url).then(function (mask) {
      var width = item.width, height = item.height;
      var scratch = document.createElement("canvas");
      scratch.width = width; scratch.height = height;
      var ctx = scratch.getContext("2d");
      ctx.drawImage(mask, 0, 0, width, height);
      var pixels = ctx.getImageData(0, 0, width, height);
      var data = pixels.data;
      var inside = new Uint8Array(width * height);
      for (var p = 0; p < width * height; p++) { inside[p] = data[p * 4] > 127 ? 1 : 0; }
      for (var y = 0; y < height; y++) {
        for (var x = 0; x < width; x++) {
          var k = y * width + x, o = k * 4;
          if (!inside[k]) { data[o + 3] = 0; continue; }
          var edge = x === 0 || y === 0 || x === width - 1 || y === height - 1 ||
            !inside[k - 1] || !inside[k + 1] || !inside[k - width] || !inside[k + width];
          data[o] = edge ? 255 : 60; data[o + 1] = edge ? 235 : 220; data[o + 2] = edge ? 59 : 90;
          data[o + 3] = edge ? 255 : 95;
        }
      }
      ctx.putImageData(pixels, 0, 0);
      return scratch;
    });
  }
  return overlays[url];
}

function layout() {
  var stage = $("stage");
  var ratio = window.devicePixelRatio || 1;
  var width = stage.clientWidth, height = stage.clientHeight;
  canvas.style.width = width + "px"; canvas.style.height = height + "px";
  canvas.width = Math.round(width * ratio); canvas.height = Math.round(height * ratio);
  context.setTransform(ratio, 0, 0, ratio, 0, 0);
  var item = current();
  if (!item) { return; }
  var scale = Math.min(width / item.width, height / item.height);
  frame = { w: item.width * scale, h: item.height * scale };
  frame.x = (width - frame.w) / 2; frame.y = (height - frame.h) / 2;
}

var drawToken = 0;
function draw() {
  var item = current();
  if (!item) { return; }
  var token = ++drawToken;
  Promise.all([picture(item), maskHidden ? null : overlay(item)]).then(function (loaded) {
    if (token !== drawToken) { return; }
    layout();
    var sx = frame.w / item.width;
    context.clearRect(0, 0, canvas.width, canvas.height);
    context.drawImage(loaded[0], frame.x, frame.y, frame.w, frame.h);
    if (loaded[1]) { context.drawImage(loaded[1], frame.x, frame.y, frame.w, frame.h); }
    var box = item.box;
    context.save();
    context.setLineDash([6, 4]); context.strokeStyle = "#ffd54f"; context.lineWidth = 2;
    context.strokeRect(frame.x + box[0] * sx, frame.y + box[1] * sx, (box[2] - box[0] + 1) * sx, (box[3] - box[1] + 1) * sx);
    context.restore();
    item.clicks.forEach(function (click) {
      context.beginPath();
      context.arc(frame.x + click.x * sx, frame.y + click.y * sx, 7, 0, 2 * Math.PI);
      context.fillStyle = click.positive ? "#4caf50" : "#e53935";
      context.fill();
      context.lineWidth = 2; context.strokeStyle = "#ffffff"; context.stroke();
    });
  }, function (error) { showError(String(error.message || error)); });
}

function render() {
  var item = current();
  if (!item) { return; }
  var used = item.clicks.length;
  $("item-counter").textContent = interpolate(gettext("Picture %s of %s"), [index + 1, items.length]);
  var roundText = item.first_click
    ? gettext("First click: click on the object")
    : interpolate(gettext("Round %s of %s"), [item.round, item.rounds]);
  $("budget").textContent = roundText + " · " + interpolate(gettext("clicks %s / %s"), [used, item.budget]);
  $("budget").dataset.used = String(used);
  $("budget").dataset.budget = String(item.budget);
  var clicking = item.state === "clicking" && !item.localDone;
  $("updating").hidden = item.state !== "updating";
  $("undo-button").disabled = !clicking || used === 0;
  $("submit-button").disabled = !clicking || used === 0;
  $("skip-button").disabled = !clicking || !item.mask_url;
  $("done-button").disabled = !clicking || (!item.mask_url && used === 0);
  $("sign-toggle").disabled = !clicking || item.first_click;
  canvas.dataset.state = item.state;
  canvas.dataset.item = String(item.id);
  draw();
}

function interpolate(text, values) {
  if (window.interpolate) { return window.interpolate(text, values); }
  var i = 0;
  return text.replace(/%s/g, function () { return String(values[i++]); });
}

function showError(message) {
  $("item-error").textContent = message;
  $("item-error").hidden = !message;
}

// ------------------------------------------------------------------------------------------------
// Input

function place(event, isPositive) {
  var item = current();
  if (!item || item.state !== "clicking" || item.localDone) { return; }
  if (item.clicks.length >= item.budget) {
    showError(gettext("This round's clicks are used up: undo one, or press “Update mask”."));
    return;
  }
  var rect = canvas.getBoundingClientRect();
  var cssX = event.clientX - rect.left - frame.x, cssY = event.clientY - rect.top - frame.y;
  if (cssX < 0 || cssY < 0 || cssX >= frame.w || cssY >= frame.h) { return; } // beside the picture
  var x = cssX / frame.w * item.width, y = cssY / frame.h * item.height;
  if (item.first_click) { isPositive = true; }
  var key = uuid4();
  item.clicks.push({ key: key, x: x, y: y, positive: isPositive });
  showError("");
  outboxAdd(api.click, {
    item: item.id, idempotency_key: key, x: x, y: y, positive: isPositive,
    pointer_type: event.pointerType || "", item_ms: performance.now() - shownAt,
  });
  render();
}

canvas.addEventListener("contextmenu", function (event) { event.preventDefault(); });
canvas.addEventListener("pointerdown", function (event) {
  event.preventDefault();
  if (event.pointerType === "mouse") {
    if (event.button !== 0 && event.button !== 2) { return; }
    place(event, event.button === 0);
  } else {
    place(event, positive);
  }
});

$("sign-toggle").addEventListener("click", function () {
  positive = !positive;
  var button = $("sign-toggle");
  button.classList.toggle("positive", positive);
  button.classList.toggle("negative", !positive);
  button.setAttribute("aria-pressed", positive ? "true" : "false");
  button.dataset.positive = positive ? "true" : "false";
  button.textContent = positive ? gettext("+ object") : gettext("− background");
});

$("hide-button").addEventListener("click", function () {
  maskHidden = !maskHidden;
  $("hide-button").setAttribute("aria-pressed", maskHidden ? "true" : "false");
  $("hide-button").textContent = maskHidden ? gettext("Show mask") : gettext("Hide mask");
  draw();
});

$("undo-button").addEventListener("click", function () {
  var item = current();
  if (!item || !item.clicks.length) { return; }
  var click = item.clicks.pop();
  outboxAdd(api.undo, { item: item.id, idempotency_key: click.key });
  render();
});

function roundMs() { return roundStart === null ? null : performance.now() - roundStart; }

$("submit-button").addEventListener("click", function () {
  var item = current();
  if (!item || !item.clicks.length || item.state !== "clicking") { return; }
  outboxAdd(api.submit, { item: item.id, round: item.round, round_ms: roundMs() });
  item.state = "updating";
  render();
  pollUpdates();
});

$("skip-button").addEventListener("click", function () {
  var item = current();
  if (!item || item.state !== "clicking") { return; }
  outboxAdd(api.skip, { item: item.id, round_ms: roundMs() });
  item.state = "skipped";
  advanceIfFinished();
});

$("done-button").addEventListener("click", function () {
  var item = current();
  if (!item || item.state !== "clicking") { return; }
  outboxAdd(api.done, { item: item.id, round_ms: roundMs() });
  if (item.clicks.length && !item.first_click) { item.localDone = true; } else { item.state = "done"; }
  advanceIfFinished();
});

window.addEventListener("resize", function () { render(); });

// Read-only view for tests and benches: where the picture is drawn and where the worker is.
window.clicklabCorrective = {
  get frame() { return { x: frame.x, y: frame.y, w: frame.w, h: frame.h }; },
  get item() {
    var item = current();
    return item ? { id: item.id, state: item.state, round: item.round, clicks: item.clicks.length, budget: item.budget,
      width: item.width, height: item.height, box: item.box, mask_round: item.mask_round } : null;
  },
  get index() { return index; },
  get finished() { return finishing && $("screen-done").hidden === false; },
  get qualification() { return $("screen-qualification").hidden ? null : $("qualification-text").textContent; },
  get pending() { return outbox.items.length; },
  get redirectFailed() { return finishState.redirectFailed === true; },
};
window.addEventListener("online", function () { outboxPump(); });

// ------------------------------------------------------------------------------------------------
// Finish: every write stored, every update applied, then the completion step.

// A qualification test (issue 17): a passed worker continues to the real tasks, a failed one is told so.
function runQualificationResult(action) {
  show("screen-qualification");
  $("qualification-text").textContent = action.message || "";
  var button = $("continue-button");
  $("continue-row").hidden = !action.passed || !action.continue_url;
  if ($("continue-row").hidden) { return; }
  button.onclick = function () {
    button.disabled = true;
    $("qualification-detail").textContent = gettext("Preparing your task…");
    request("POST", action.continue_url, {}, 20000).then(function (result) {
      if (result.ok && result.data.player_url) { window.location.href = result.data.player_url; return; }
      $("qualification-detail").textContent = result.data.message || ("HTTP " + result.status);
      button.disabled = false;
    }, function () {
      $("qualification-detail").textContent = gettext("Reconnecting…");
      button.disabled = false;
    });
  };
}

// A qualification test's end is this player's own; every other end is the platform's finish step, shown and
// done as in the timed player (the code first; a redirect only to a platform that answers; MTurk's post).
var finishState = {};
function finishActionRun(action) {
  if (action.kind === "qualification") { runQualificationResult(action); return; }
  runFinishAction(action, finishState);
}

bindCopyButton();

var finishing = false;
function finishSession() {
  if (finishing) { return; }
  finishing = true;
  show("screen-saving");
  (function attempt(tries) {
    outboxDrain().then(function () { return request("POST", api.finish, {}, 20000); }).then(function (result) {
      if (result.ok) { finishActionRun(result.data.finish || {}); return; }
      var waiting = result.status === 409 && result.data.code === "items_unfinished";
      if (!waiting && result.status >= 400 && result.status < 500 && result.status !== 408 && result.status !== 429) {
        // final (the session is closed or expired, the link is not valid): say so, report it, stop
        var message = result.data.message || ("HTTP " + result.status);
        $("saving-detail").textContent = message;
        reportProblem("finish", result.status, message);
        return;
      }
      $("saving-detail").textContent = gettext("Waiting for the last mask updates…");
      return sleep(Math.min(3000, 500 + tries * 250)).then(function () { attempt(tries + 1); });
    }, function () {
      $("saving-detail").textContent = gettext("Reconnecting…");
      return sleep(backoffMs(tries)).then(function () { attempt(tries + 1); });
    });
  })(0);
}

// ------------------------------------------------------------------------------------------------
// Start (a reload resumes: what is left in the outbox is sent first, then the server's state is taken)

$("start-button").addEventListener("click", function () {
  show("screen-item");
  outboxDrain().then(refreshState).then(function () { advanceIfFinished(); });
});
if (payload.finish) {
  finishActionRun(payload.finish);
} else if (outbox.items.length || payload.started) {
  // Resuming a batch already started: skip the instructions.
  show("screen-item");
  outboxDrain().then(refreshState).then(function () { advanceIfFinished(); });
}
