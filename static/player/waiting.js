/**
 * The "no task available for now" page (annotation_ui.views._message with ``retry``): the remaining images
 * are in other workers' batches, and some come back when a worker leaves. The page counts down and posts the
 * study link's entry again by itself (the form's ``data-retry-after`` seconds), so a worker who keeps it open
 * gets the first batch that frees up; the button asks at once. Without JavaScript the button is all there is.
 */

const form = document.getElementById("wait-form");
const countdown = document.getElementById("wait-countdown");

if (form) {
  const seconds = Math.max(1, Number(form.dataset.retryAfter) || 30);
  const due = Date.now() + seconds * 1000;
  let sent = false;
  const send = () => {
    if (sent) { return; }
    sent = true;
    form.submit();
  };
  form.addEventListener("submit", () => { sent = true; });
  const tick = () => {
    const left = Math.max(0, Math.ceil((due - Date.now()) / 1000));
    if (countdown) { countdown.textContent = String(left); }
    if (left === 0) { send(); return; }
    setTimeout(tick, Math.min(1000, due - Date.now()));
  };
  tick();
}
