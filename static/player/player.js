/*
 * Clicklab annotator player (plain JS, no build step).
 *
 * One batch of trials. Each trial: (A) the image, (B) the target in the study's display mode, (C) the
 * image with clicking blocked, (D) the image until the one click. Phases change inside
 * requestAnimationFrame callbacks, using the measured refresh interval (never an assumed 60 Hz); every
 * stimulus is fetched and decoded to an ImageBitmap before START, so a phase change is one drawImage
 * on a canvas and never shows a blank frame. The rAF timestamp of each phase onset and the click's
 * event.timeStamp (same performance.now() clock) are stored with the trial.
 *
 * Clicks: Pointer Events on the canvas, mapped to canonical image pixels through the canvas's displayed
 * rectangle (so CSS scaling, letterboxing, devicePixelRatio, resize and orientation are all accounted
 * for). Each click goes into a localStorage outbox first and is sent at once with its idempotency key,
 * then retried with backoff until the server acknowledges; a reload resumes at the next trial without a
 * click. The batch finishes only when the server holds every click; then the platform's FinishAction runs.
 */
(function () {
  "use strict";

  var gettext = window.gettext || function (text) { return text; };
  var interpolate = window.interpolate || function (fmt, obj) {
    return fmt.replace(/%\((\w+)\)s/g, function (_, key) { return String(obj[key]); });
  };
  var payload = JSON.parse(document.getElementById("player-payload").textContent);
  var PREVIEW = payload.mode === "preview";
  var PHASES = ["A", "B", "C", "D"];
  var $ = function (id) { return document.getElementById(id); };

  // ------------------------------------------------------------------------------------------------
  // Geometry: the canvas is letterboxed into the stage; clicks map back through its displayed rect.

  function fitSize(boxWidth, boxHeight, imageWidth, imageHeight) {
    var scale = Math.min(boxWidth / imageWidth, boxHeight / imageHeight);
    return { width: Math.max(1, Math.floor(imageWidth * scale)), height: Math.max(1, Math.floor(imageHeight * scale)) };
  }

  function toCanonical(clientX, clientY, rect, imageWidth, imageHeight) {
    return {
      x: (clientX - rect.left) / rect.width * imageWidth,
      y: (clientY - rect.top) / rect.height * imageHeight,
    };
  }

  // ------------------------------------------------------------------------------------------------
  // Refresh rate: the median of recent rAF deltas (robust to the odd dropped frame).

  function RefreshMeter() { this.deltas = []; this.last = null; }
  RefreshMeter.prototype.sample = function (timestamp) {
    if (this.last !== null) {
      var delta = timestamp - this.last;
      if (delta > 2 && delta < 250) {
        this.deltas.push(delta);
        if (this.deltas.length > 240) { this.deltas.shift(); }
      }
    }
    this.last = timestamp;
  };
  RefreshMeter.prototype.pause = function () { this.last = null; };
  RefreshMeter.prototype.intervalMs = function () {
    if (this.deltas.length < 5) { return 1000 / 60; }
    var sorted = this.deltas.slice().sort(function (a, b) { return a - b; });
    return sorted[Math.floor(sorted.length / 2)];
  };
  RefreshMeter.prototype.hz = function () { return 1000 / this.intervalMs(); };

  var meter = new RefreshMeter();

  /** Resolves once the meter holds ``frames`` intervals, counting those the page head already sampled. */
  function measureRefresh(frames) {
    (window.clicklabFrames || []).forEach(function (delta) {
      if (delta > 2 && delta < 250) { meter.deltas.push(delta); }
    });
    return new Promise(function (resolve) {
      function tick(timestamp) {
        meter.sample(timestamp);
        if (meter.deltas.length < frames) { requestAnimationFrame(tick); } else { meter.pause(); resolve(meter.hz()); }
      }
      requestAnimationFrame(tick);
    });
  }

  // ------------------------------------------------------------------------------------------------
  // Network helpers

  function sleep(ms) { return new Promise(function (resolve) { setTimeout(resolve, ms); }); }
  function backoffMs(attempt) { return Math.min(8000, 250 * Math.pow(2, attempt)) * (0.6 + 0.4 * Math.random()); }

  function postJson(url, body, timeoutMs) {
    var controller = window.AbortController ? new AbortController() : null;
    var timer = controller ? setTimeout(function () { controller.abort(); }, timeoutMs || 15000) : null;
    return fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
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
  // Outbox: clicks persist in localStorage until the server acknowledges them.

  function Outbox(storageKey, url, onStatus) {
    this.key = storageKey;
    this.url = url;
    this.onStatus = onStatus;
    this.items = [];
    this.sending = false;
    this.waiters = [];
    this.memoryOnly = false;
    try {
      var stored = window.localStorage.getItem(storageKey);
      this.items = stored ? JSON.parse(stored) : [];
    } catch (error) { this.memoryOnly = true; }
    if (!Array.isArray(this.items)) { this.items = []; }
  }
  Outbox.prototype.save = function () {
    if (this.memoryOnly) { return; }
    try {
      if (this.items.length) { window.localStorage.setItem(this.key, JSON.stringify(this.items)); }
      else { window.localStorage.removeItem(this.key); }
    } catch (error) { this.memoryOnly = true; }
  };
  Outbox.prototype.positions = function () { return this.items.map(function (item) { return item.position; }); };
  Outbox.prototype.add = function (item) { this.items.push(item); this.save(); this.pump(); };
  Outbox.prototype.drain = function () {
    var self = this;
    if (!this.items.length) { return Promise.resolve(); }
    this.pump();
    return new Promise(function (resolve) { self.waiters.push(resolve); });
  };
  Outbox.prototype.pump = function () {
    var self = this;
    if (this.sending) { return; }
    this.sending = true;
    var attempt = 0;
    function next() {
      if (!self.items.length) {
        self.sending = false;
        self.onStatus("");
        var waiters = self.waiters; self.waiters = [];
        waiters.forEach(function (resolve) { resolve(); });
        return;
      }
      var item = self.items[0];
      postJson(self.url, item, 15000).then(function (result) {
        // 2xx: stored (or already stored under this key). 4xx other than 408/429: the server will never
        // take this click (e.g. the trial already has one), so retrying cannot help.
        var final = result.ok || (result.status >= 400 && result.status < 500 && result.status !== 408 && result.status !== 429);
        if (!final) { throw new Error("HTTP " + result.status); }
        if (!result.ok && window.console) { console.warn("click refused", result.status, result.data); }
        self.items.shift();
        self.save();
        attempt = 0;
        next();
      }).catch(function () {
        attempt += 1;
        self.onStatus(gettext("Reconnecting…"));
        sleep(backoffMs(attempt)).then(next);
      });
    }
    next();
  };

  function uuid4() {
    if (window.crypto && crypto.randomUUID) { return crypto.randomUUID(); }
    var bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    bytes[6] = (bytes[6] & 0x0f) | 0x40; bytes[8] = (bytes[8] & 0x3f) | 0x80;
    var hex = Array.prototype.map.call(bytes, function (b) { return (b + 0x100).toString(16).slice(1); }).join("");
    return hex.slice(0, 8) + "-" + hex.slice(8, 12) + "-" + hex.slice(12, 16) + "-" + hex.slice(16, 20) + "-" + hex.slice(20);
  }

  // ------------------------------------------------------------------------------------------------
  // Loading: fetch and decode every stimulus before START.

  function decodeBlob(blob) {
    if (window.createImageBitmap) { return createImageBitmap(blob); }
    var url = URL.createObjectURL(blob);
    var image = new Image();
    image.src = url;
    return image.decode().then(function () { return image; });
  }

  function loadBitmap(url) {
    var attempt = 0;
    function tryOnce() {
      // Same request mode as the <link rel="preload" as="fetch" crossorigin> in the page head, so the
      // browser reuses the preloaded response instead of downloading it twice.
      return fetch(url).then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.blob();
      }).then(decodeBlob).catch(function (error) {
        attempt += 1;
        if (attempt > 12) { throw error; }
        return sleep(backoffMs(attempt)).then(tryOnce);
      });
    }
    return tryOnce();
  }

  function wrapLines(context, text, maxWidth) {
    var words = text.split(/\s+/), lines = [], line = "";
    words.forEach(function (word) {
      var candidate = line ? line + " " + word : word;
      if (context.measureText(candidate).width > maxWidth && line) { lines.push(line); line = word; }
      else { line = candidate; }
    });
    if (line) { lines.push(line); }
    return lines;
  }

  /** Text Description: the text drawn once on a gray picture of the display size, then decoded. */
  function textBitmap(text, width, height) {
    var canvas = document.createElement("canvas");
    canvas.width = width; canvas.height = height;
    var context = canvas.getContext("2d");
    context.fillStyle = "#808080";
    context.fillRect(0, 0, width, height);
    var size = Math.max(16, Math.round(Math.min(width, height) / 9));
    context.font = "700 " + size + "px system-ui, sans-serif";
    context.fillStyle = "#ffffff";
    context.textAlign = "center";
    context.textBaseline = "middle";
    var lines = wrapLines(context, text.toUpperCase(), width * 0.86);
    var top = height / 2 - (lines.length - 1) * size * 0.6;
    lines.forEach(function (line, index) { context.fillText(line, width / 2, top + index * size * 1.2); });
    return window.createImageBitmap ? createImageBitmap(canvas) : Promise.resolve(canvas);
  }

  /** The batch's pictures in one response (see views.stimuli_bundle): uint32 N, N bytes of JSON index,
   *  then the files back to back. Resolves to {"<position>:<kind>": Blob}; reports byte progress. */
  function fetchBundle(url, onProgress) {
    return fetch(url).then(function (response) {
      if (!response.ok) { throw new Error("HTTP " + response.status); }
      var total = Number(response.headers.get("Content-Length")) || 0;
      if (!response.body || !response.body.getReader) { return response.arrayBuffer(); }
      var reader = response.body.getReader(), chunks = [], received = 0;
      function pump() {
        return reader.read().then(function (step) {
          if (step.done) {
            var all = new Uint8Array(received), at = 0;
            chunks.forEach(function (chunk) { all.set(chunk, at); at += chunk.length; });
            return all.buffer;
          }
          chunks.push(step.value);
          received += step.value.length;
          if (total) { onProgress(Math.min(1, received / total)); }
          return pump();
        });
      }
      return pump();
    }).then(function (buffer) {
      var length = new DataView(buffer).getUint32(0, false);
      var index = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 4, length)));
      var offset = 4 + length, files = {};
      index.forEach(function (entry) {
        files[entry.position + ":" + entry.kind] = {
          name: entry.name, blob: new Blob([new Uint8Array(buffer, offset, entry.length)], { type: entry.type })
        };
        offset += entry.length;
      });
      if (offset !== buffer.byteLength) { throw new Error("stimuli bundle truncated"); }
      return files;
    });
  }

  /** A trial's {display, target} bitmaps; ``bitmapOf(kind, url)`` fetches and decodes one picture
   *  (the Text Description target is drawn from the display image's size). */
  function loadTrialAssets(trial, bitmapOf, onAsset) {
    function counted(bitmap) { onAsset(); return bitmap; }
    var display = bitmapOf("display", trial.display_url).then(counted);
    var target = (trial.target_url ? bitmapOf("target", trial.target_url) : display.then(function (image) {
      return textBitmap(trial.text, image.width, image.height);
    })).then(counted);
    return Promise.all([display, target]).then(function (pair) { return { display: pair[0], target: pair[1] }; });
  }

  /** ``bitmapOf`` over the bundle's files; rejects when a file is missing or not the one expected. */
  function bundledBitmaps(trial, files) {
    return function (kind, url) {
      var file = files[trial.position + ":" + kind];
      if (!file || url.slice(-file.name.length) !== file.name) { return Promise.reject(new Error("bundle lacks " + url)); }
      return decodeBlob(file.blob);
    };
  }

  // ------------------------------------------------------------------------------------------------
  // Screens

  function show(id) {
    ["screen-instructions", "screen-trial", "screen-saving", "screen-done", "screen-error"].forEach(function (name) {
      $(name).hidden = name !== id;
    });
  }

  function fail(message) { $("error-text").textContent = message; show("screen-error"); }

  // ------------------------------------------------------------------------------------------------
  // The player

  var canvas = $("canvas");
  var context = canvas.getContext("2d", { alpha: false });
  var stage = $("stage");
  var outbox = PREVIEW ? null : new Outbox("clicklab.outbox." + payload.session.id, payload.api.click, function (text) {
    $("net-status").textContent = text;
    $("saving-detail").textContent = text;
  });
  var durations = {
    A: payload.study.image_ms, B: payload.study.target_ms, C: payload.study.blocked_ms, D: Infinity,
  };
  var queue = [];          // trials still to run, in position order
  var assets = {};         // position -> {display, target}
  var current = null;      // the running trial
  var total = payload.trials.length;

  // Exposed for tests and benchmarks (read-only use).
  var api = window.clicklabPlayer = {
    phase: "", position: null, startEnabledAt: null, results: [], finished: false,
    refreshHz: function () { return meter.hz(); },
  };

  function layout(trial) {
    var box = stage.getBoundingClientRect();
    var size = fitSize(box.width, box.height, trial.width, trial.height);
    var ratio = window.devicePixelRatio || 1;
    canvas.style.width = size.width + "px";
    canvas.style.height = size.height + "px";
    var backingWidth = Math.min(4096, Math.round(size.width * ratio));
    var backingHeight = Math.min(4096, Math.round(size.height * ratio));
    if (canvas.width !== backingWidth || canvas.height !== backingHeight) {
      canvas.width = backingWidth; canvas.height = backingHeight;
    }
    context.imageSmoothingEnabled = true;
    context.imageSmoothingQuality = "high";
  }

  function draw(bitmap) {
    context.drawImage(bitmap, 0, 0, canvas.width, canvas.height);
    if (current && current.marker) {
      context.fillStyle = "#ff1744";
      context.beginPath();
      context.arc(current.marker.x / current.trial.width * canvas.width, current.marker.y / current.trial.height * canvas.height,
        Math.max(4, canvas.width / 120), 0, 2 * Math.PI);
      context.fill();
    }
  }

  function bitmapFor(phase) { return phase === "B" ? current.assets.target : current.assets.display; }

  function setPhase(phase, timestamp) {
    current.phase = phase;
    current.onsets[phase] = timestamp;
    api.phase = phase;
    draw(bitmapFor(phase));
    if (phase === "D") { $("hint").textContent = PREVIEW ? "" : gettext("Click now"); }
    if (PREVIEW) {
      $("hint").textContent = interpolate(gettext("Preview: phase %(phase)s — tap to continue"), { phase: phase }, true);
    }
  }

  function frame(timestamp) {
    if (!current) { return; }
    meter.sample(timestamp);
    if (!current.phase) {
      layout(current.trial);
      setPhase("A", timestamp);
    } else if (!PREVIEW && current.phase !== "D") {
      var phase = current.phase;
      // Switch on the frame closest to the target: the new picture appears one refresh after this
      // callback either way, so durations measured between onsets are whole frames within half a frame.
      if (timestamp - current.onsets[phase] + meter.intervalMs() / 2 >= durations[phase]) {
        setPhase(PHASES[PHASES.indexOf(phase) + 1], timestamp);
      }
    }
    if (current && current.phase !== "D" && !PREVIEW) { requestAnimationFrame(frame); } else { meter.pause(); }
  }

  function startTrial() {
    if (!queue.length) { current = null; api.phase = ""; finishBatch(); return; }
    var trial = queue.shift();
    current = {
      trial: trial, assets: assets[trial.position], phase: "", onsets: {}, blocked: 0, flags: {}, clicked: false,
    };
    api.phase = "";  // the new trial's phase A starts on the next frame
    api.position = trial.position;
    var done = total - queue.length;
    $("trial-counter").textContent = interpolate(gettext("Image %(n)s of %(total)s"), { n: done, total: total }, true);
    $("hint").textContent = "";
    requestAnimationFrame(frame);
  }

  function flag(reason) { if (current && !current.clicked) { current.flags[reason] = true; } }

  function onPointerDown(event) {
    if (!event.isPrimary || (event.pointerType === "mouse" && event.button !== 0)) { return; }
    event.preventDefault();
    if (!current || !current.phase) { return; }
    if (PREVIEW) { return previewPointer(event); }
    if (current.phase !== "D") { current.blocked += 1; return; }
    if (current.clicked) { return; }
    current.clicked = true;
    var rect = canvas.getBoundingClientRect();
    var point = toCanonical(event.clientX, event.clientY, rect, current.trial.width, current.trial.height);
    var onsets = {};
    PHASES.forEach(function (phase) { onsets[phase] = current.onsets[phase]; });
    onsets.click = event.timeStamp;
    var record = {
      position: current.trial.position,
      idempotency_key: uuid4(),
      x: point.x,
      y: point.y,
      shown_width: rect.width,
      shown_height: rect.height,
      pointer_type: event.pointerType || "",
      reaction_ms: event.timeStamp - current.onsets.D,
      event_timestamp_ms: event.timeStamp,
      phase_onsets_ms: onsets,
      blocked_clicks: current.blocked,
      flags: Object.keys(current.flags),
      refresh_hz: Math.round(meter.hz() * 100) / 100,
    };
    api.results.push(record);
    outbox.add(record);
    startTrial();
  }

  function previewPointer(event) {
    if (current.phase !== "D") {
      setPhase(PHASES[PHASES.indexOf(current.phase) + 1], performance.now());
    } else if (!current.marker) {
      var rect = canvas.getBoundingClientRect();
      current.marker = toCanonical(event.clientX, event.clientY, rect, current.trial.width, current.trial.height);
      draw(current.assets.display);
      $("hint").textContent = interpolate(gettext("Preview: clicked at x=%(x)s, y=%(y)s — tap to continue"),
        { x: current.marker.x.toFixed(1), y: current.marker.y.toFixed(1) }, true);
    } else {
      startTrial();
    }
  }

  function onViewportChange() {
    flag("viewport_changed");
    if (current && current.phase) { layout(current.trial); draw(bitmapFor(current.phase)); }
  }

  canvas.addEventListener("pointerdown", onPointerDown, { passive: false });
  canvas.addEventListener("contextmenu", function (event) { event.preventDefault(); });
  document.addEventListener("dblclick", function (event) { event.preventDefault(); }, { passive: false });
  document.addEventListener("gesturestart", function (event) { event.preventDefault(); }, { passive: false });
  document.addEventListener("touchmove", function (event) {
    if (!event.target.closest || !event.target.closest(".scrollable")) { event.preventDefault(); }
  }, { passive: false });
  document.addEventListener("visibilitychange", function () { if (document.hidden) { flag("visibility_hidden"); } });
  window.addEventListener("blur", function () { flag("focus_lost"); });
  window.addEventListener("resize", onViewportChange);
  window.addEventListener("orientationchange", onViewportChange);
  if (window.visualViewport) { window.visualViewport.addEventListener("resize", onViewportChange); }

  // ------------------------------------------------------------------------------------------------
  // Finish

  function runFinishAction(action) {
    api.finished = true;
    api.finishAction = action;
    if (action.kind === "redirect" && action.url) {
      show("screen-done");
      $("done-text").textContent = gettext("Returning you to the platform…");
      window.location.href = action.url;
    } else if (action.kind === "auto_post" && action.url) {
      show("screen-done");
      $("done-text").textContent = gettext("Submitting your work…");
      var form = document.createElement("form");
      form.method = "POST";
      form.action = action.url;
      Object.keys(action.fields || {}).forEach(function (name) {
        var input = document.createElement("input");
        input.type = "hidden"; input.name = name; input.value = action.fields[name];
        form.appendChild(input);
      });
      document.body.appendChild(form);
      form.submit();
    } else {
      show("screen-done");
      $("done-code").hidden = !action.code;
      $("completion-code").textContent = action.code || "";
      $("done-text").textContent = gettext("Enter this code where the task asks for it.");
    }
  }

  /** How many more times this page may reload to replay missing trials (guards against a loop). */
  function replaysLeft() {
    var key = "clicklab.replays." + payload.session.id;
    try {
      var used = parseInt(window.sessionStorage.getItem(key) || "0", 10);
      window.sessionStorage.setItem(key, String(used + 1));
      return 2 - used;
    } catch (error) { return 0; }
  }

  function finishBatch() {
    if (PREVIEW) {
      show("screen-done");
      $("done-text").textContent = gettext("End of the preview.");
      api.finished = true;
      return;
    }
    show("screen-saving");
    var attempt = 0;
    function tryFinish() {
      return postJson(payload.api.finish, {}, 20000).then(function (result) {
        if (result.ok) { return runFinishAction(result.data.finish); }
        if (result.status === 409 && result.data.missing && result.data.missing.length && replaysLeft() > 0) {
          // The server lacks clicks we no longer hold (e.g. storage was cleared): play those trials again.
          return outbox.drain().then(function () { window.location.reload(); });
        }
        if (result.status >= 400 && result.status < 500 && result.status !== 408 && result.status !== 429) {
          return fail(result.data.error || gettext("This task cannot be finished."));
        }
        throw new Error("HTTP " + result.status);
      }).catch(function () {
        attempt += 1;
        $("saving-detail").textContent = gettext("Connection problem, retrying…");
        return sleep(backoffMs(attempt)).then(tryFinish);
      });
    }
    outbox.drain().then(tryFinish);
  }

  // ------------------------------------------------------------------------------------------------
  // Start-up

  function clientInfo() {
    var uaData = navigator.userAgentData || null;
    var coarse = window.matchMedia("(pointer: coarse)").matches;
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

  function reportClient() {
    var info = clientInfo();
    var body = { client_info: info, detected_device: detectedDevice(info) };
    var attempt = 0;
    function send() {
      return postJson(payload.api.client, body, 15000).then(function (result) {
        if (!result.ok && result.status >= 500) { throw new Error("HTTP " + result.status); }
      }).catch(function () {
        attempt += 1;
        if (attempt < 6) { return sleep(backoffMs(attempt)).then(send); }
      });
    }
    send();
  }

  function boot() {
    if (payload.finish) { runFinishAction(payload.finish); return; }
    var pending = outbox ? outbox.positions() : [];
    queue = payload.trials.filter(function (trial) { return !trial.done && pending.indexOf(trial.position) < 0; });
    if (outbox && pending.length) { outbox.pump(); }
    if (!queue.length) { finishBatch(); return; }
    var totalAssets = queue.length * 2, loaded = 0;
    function onAsset() {
      loaded += 1;
      $("progress-bar").style.width = Math.round(100 * loaded / totalAssets) + "%";
      $("loading-text").textContent = interpolate(gettext("Loading images… %(done)s of %(total)s"),
        { done: loaded, total: totalAssets }, true);
    }
    function onBytes(fraction) {
      $("progress-bar").style.width = Math.round(100 * fraction) + "%";
      $("loading-text").textContent = interpolate(gettext("Loading images… %(percent)s%"),
        { percent: Math.round(100 * fraction) }, true);
    }
    function loadAll(bitmapsFor, counter) {
      return Promise.all(queue.map(function (trial) {
        return loadTrialAssets(trial, bitmapsFor(trial), counter).then(function (pair) { assets[trial.position] = pair; });
      }));
    }
    function loadEach() {
      loaded = 0;
      return loadAll(function () { return function (kind, url) { return loadBitmap(url); }; }, onAsset);
    }
    var refresh = measureRefresh(60);
    // One request for the whole batch (progress by bytes); should it fail in any way, the per-file URLs.
    var loading = !payload.bundle_url ? loadEach() : fetchBundle(payload.bundle_url, onBytes).then(function (files) {
      return loadAll(function (trial) { return bundledBitmaps(trial, files); }, function () {});
    }).catch(loadEach);
    Promise.all([loading, refresh]).then(function () {
      if (!PREVIEW) { reportClient(); }
      $("loading-text").textContent = gettext("Ready.");
      $("start-button").disabled = false;
      api.startEnabledAt = performance.now();
    }, function () {
      fail(gettext("The images could not be loaded. Check your connection and reload the page."));
    });
  }

  $("start-button").addEventListener("click", function () {
    show("screen-trial");
    startTrial();
  });
  $("copy-code").addEventListener("click", function () {
    var code = $("completion-code").textContent;
    if (navigator.clipboard) { navigator.clipboard.writeText(code).then(function () { $("copy-code").textContent = gettext("Copied"); }); }
  });
  window.addEventListener("online", function () { if (outbox) { outbox.pump(); } });

  api.geometry = { fitSize: fitSize, toCanonical: toCanonical };
  boot();
})();
