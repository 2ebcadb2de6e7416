/** The player's screens, messages and finish step (DOM only; the timing lives elsewhere). */

export const gettext = (text) => (globalThis.gettext ? globalThis.gettext(text) : text);

export function interpolate(format, values) {
  if (globalThis.interpolate) { return globalThis.interpolate(format, values, true); }
  return format.replace(/%\((\w+)\)s/g, (_, key) => String(values[key]));
}

const $ = (id) => document.getElementById(id);

/** Shows the screen ``id`` and hides the page's other ``.screen`` sections (each page has its own set: the
 *  timed player, the corrective player, the exit page). */
export function show(id) {
  document.querySelectorAll(".screen").forEach((screen) => { screen.hidden = screen.id !== id; });
}

export function fail(message) {
  $("error-text").textContent = message;
  show("screen-error");
}

/** A message that stays until replaced (e.g. an answer the server did not accept). */
export function notice(text) {
  const element = $("notice");
  element.textContent = text;
  element.hidden = !text;
}

function wrapLines(context, text, maxWidth) {
  const lines = [];
  let line = "";
  text.split(/\s+/).forEach((word) => {
    const candidate = line ? `${line} ${word}` : word;
    if (context.measureText(candidate).width > maxWidth && line) { lines.push(line); line = word; }
    else { line = candidate; }
  });
  if (line) { lines.push(line); }
  return lines;
}

/** Text Description: the text drawn once on a gray picture of the display size, then decoded. */
export function textBitmap(text, width, height) {
  const canvas = document.createElement("canvas");
  canvas.width = width;
  canvas.height = height;
  const context = canvas.getContext("2d");
  context.fillStyle = "#808080";
  context.fillRect(0, 0, width, height);
  const size = Math.max(16, Math.round(Math.min(width, height) / 9));
  context.font = `700 ${size}px system-ui, sans-serif`;
  context.fillStyle = "#ffffff";
  context.textAlign = "center";
  context.textBaseline = "middle";
  const lines = wrapLines(context, text.toUpperCase(), width * 0.86);
  const top = height / 2 - (lines.length - 1) * size * 0.6;
  lines.forEach((line, index) => context.fillText(line, width / 2, top + index * size * 1.2));
  return globalThis.createImageBitmap ? createImageBitmap(canvas) : Promise.resolve(canvas);
}

function showCode(code) {
  $("done-code").hidden = !code;
  $("completion-code").textContent = code || "";
}

/** The end screen's Copy button (templates/annotation_ui/_end_screens.html) puts the code on the clipboard.
 *  Plain http on a LAN has no navigator.clipboard: then the code is selected and copied the old way, and
 *  stays selected for the participant's own copy. */
export function bindCopyButton() {
  $("copy-code").addEventListener("click", () => {
    const element = $("completion-code");
    const copied = () => { $("copy-code").textContent = gettext("Copied"); };
    const byHand = () => {
      window.getSelection().selectAllChildren(element);
      try { if (document.execCommand("copy")) { copied(); } } catch { /* selected: copy by hand */ }
    };
    if (navigator.clipboard) { navigator.clipboard.writeText(element.textContent).then(copied, byHand); } else { byHand(); }
  });
}

/** Whether the server of ``url`` answers at all: an opaque request to its origin (no cookies, nothing
 *  read back), so no submission is touched. A refused connection, a DNS failure or no answer within
 *  ``timeoutMs`` is false. */
export async function platformReachable(url, timeoutMs) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    await fetch(`${new URL(url).origin}/`, {
      mode: "no-cors", credentials: "omit", cache: "no-store", signal: controller.signal,
    });
    return true;
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

/** The platform's finish step. The completion code is on screen before any redirect or form post, and a
 *  redirect happens only once the platform answers: a participant whose platform cannot be reached stays
 *  on this page with the code and is told what to do, instead of landing on a browser error page. */
export function runFinishAction(action, state, { redirectDelayMs = 2500, probeTimeoutMs = 8000 } = {}) {
  state.finished = true;
  state.finishAction = action;
  show("screen-done");
  showCode(action.code);
  if (action.kind === "redirect" && action.url) {
    $("done-text").textContent = gettext(
      "Copy your code now. You are taken back to the platform in a few seconds; if that does not work, enter the code there.");
    const link = $("done-link");
    link.href = action.url;
    link.hidden = false;
    setTimeout(async () => {
      if (await platformReachable(action.url, probeTimeoutMs)) {
        window.location.href = action.url;
        return;
      }
      state.redirectFailed = true;
      $("done-text").textContent = gettext(
        "The platform could not be reached, so you stay on this page. Copy the code above and enter it on the platform, or use the link on this page once your connection works.");
    }, redirectDelayMs);
  } else if (action.kind === "auto_post" && action.url) {
    $("done-text").textContent = gettext("Submitting your work…");
    const form = document.createElement("form");
    form.method = "POST";
    form.action = action.url;
    Object.entries(action.fields || {}).forEach(([name, value]) => {
      const input = document.createElement("input");
      input.type = "hidden";
      input.name = name;
      input.value = value;
      form.appendChild(input);
    });
    document.body.appendChild(form);
    setTimeout(() => form.submit(), redirectDelayMs);
  } else {
    $("done-text").textContent = action.code ? gettext("Enter this code where the task asks for it.") : "";
  }
}
