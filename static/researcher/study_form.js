// Study form: a looping preview of one trial (phases A-D with the chosen durations), a live budget
// estimate (the server's one formula, collector.selectors.budget), only the chosen kind's settings on
// screen, defaults that fit the chosen dataset, and the error summary's links to the fields. Phase B is
// the server's rendering of the player's own picture for one instance of the chosen dataset.
(function () {
  "use strict";
  const form = document.getElementById("study-form");
  if (!form) return;
  const datasets = JSON.parse(document.getElementById("datasets-data").textContent);
  const batchRule = JSON.parse(document.getElementById("batch-rule-data").textContent);
  const urls = document.getElementById("study-form-urls").dataset;
  const field = (name) => form.elements.namedItem(name);
  const image = document.getElementById("preview-image");
  const text = document.getElementById("preview-text");
  const dot = document.getElementById("preview-click");
  const stage = document.getElementById("preview-stage");
  const caption = document.getElementById("preview-caption");
  const phaseSpans = document.querySelectorAll("#phase-bar span");
  const previewUrl = (instanceId, mode) =>
    urls.previewUrl.replace("/0/", "/" + instanceId + "/").replace("MODE", mode);

  const pictures = { A: null, B: null };
  let timer = null;

  function currentDataset() {
    const id = parseInt(field("dataset").value, 10);
    return datasets.find((d) => d.id === id) || null;
  }

  function durationMs(name, fallback) {
    const value = parseInt(field(name).value, 10);
    return Number.isFinite(value) && value >= 0 ? value : fallback;
  }

  function loadPictures() {
    const dataset = currentDataset();
    const mode = field("display_mode").value;
    if (!dataset || !dataset.sample_instance) {
      pictures.A = pictures.B = null;
      caption.textContent = dataset ? "This dataset has no objects yet." : "Choose a dataset to see its first object.";
      return;
    }
    pictures.A = previewUrl(dataset.sample_instance, "image");
    pictures.B = previewUrl(dataset.sample_instance, mode);
    new Image().src = pictures.A;  // preload both so the loop never shows a blank frame
    new Image().src = pictures.B;
    caption.textContent = dataset.name + ": " + dataset.instances + " objects; showing the first one.";
  }

  function show(phase) {
    phaseSpans.forEach((span) => span.classList.toggle("active", span.dataset.phase === phase));
    stage.dataset.phase = phase;
    dot.style.display = "none";
    text.textContent = "";
    if (!pictures.A) { image.removeAttribute("src"); return; }
    image.src = phase === "B" ? pictures.B : pictures.A;
    if (phase === "C") text.textContent = "clicking blocked";
    if (phase === "D") text.textContent = "click the object now";
  }

  function loop() {
    clearTimeout(timer);
    const isText = field("display_mode").value === "Text_Description";
    const steps = [
      ["A", durationMs("image_ms", 1500)],
      ["B", isText ? durationMs("text_ms", 2500) : durationMs("target_ms", 2000)],
      ["C", durationMs("blocked_ms", 1500)],
      ["D", 1200],
    ];
    let index = 0;
    const next = () => {
      const [phase, ms] = steps[index];
      show(phase);
      if (phase === "D") {
        setTimeout(() => { dot.style.display = "block"; }, ms / 2);
      }
      index = (index + 1) % steps.length;
      timer = setTimeout(next, Math.max(ms, 50));
    };
    next();
  }

  let estimateTimer = null;
  function refreshEstimate() {
    clearTimeout(estimateTimer);
    estimateTimer = setTimeout(async () => {
      const dataset = currentDataset();
      if (!dataset) return;
      const params = new URLSearchParams({
        dataset: dataset.id,
        quota_pc: field("quota_pc").value,
        quota_mobile: field("quota_mobile").value,
        batch_size: field("batch_size").value,
        reward: field("reward_per_batch").value,
        currency: field("currency").value,
        platform: field("platform").value,
      });
      const response = await fetch(urls.estimateUrl + "?" + params, { credentials: "same-origin" });
      const body = await response.json();
      if (!response.ok) {
        document.getElementById("est-total").textContent = body.message || "cannot estimate";
        return;
      }
      const paid = (device) => (body.devices[device] ? body.devices[device].assignments : 0);
      document.getElementById("est-targets").textContent = body.targets;
      document.getElementById("est-batches").textContent = paid("pc") + " / " + paid("mobile");
      document.getElementById("est-total").textContent = Number(body.total).toFixed(2) + " " + body.currency;
      document.getElementById("est-source").textContent = body.formula + "; " + body.note;
    }, 200);
  }

  // Only the chosen kind's settings are on screen (the server ignores the others: StudyForm).
  // The error summary keeps the errors of the fields on screen (a field of the other kind does not apply).
  function showKind() {
    const kind = field("kind").value || "timed";
    document.querySelectorAll("[data-kind]").forEach((element) => { element.hidden = element.dataset.kind !== kind; });
    const summary = document.getElementById("error-summary");
    if (!summary) return;
    let shown = 0;
    summary.querySelectorAll("li").forEach((item) => {
      const link = item.querySelector("a[data-field]");
      const target = link && document.getElementById(link.dataset.field);
      item.hidden = Boolean(target && target.closest("[hidden]"));
      if (!item.hidden) shown += 1;
    });
    summary.hidden = shown === 0;
    summary.querySelector("h2").textContent =
      shown + " setting" + (shown === 1 ? "" : "s") + " to fix: the study was not created";
  }

  // The batch the dataset can give (forms.batch_defaults: RClicks' 10 trials and 7 valid clicks, scaled down
  // for a smaller dataset; practice and control trials take images of their own), until the researcher
  // types a batch size or a valid-click count.
  const edited = new Set(form.dataset.bound === "true" ? ["batch_size", "min_valid_per_session"] : []);
  function fitDefaults() {
    const dataset = currentDataset();
    if (!dataset || edited.has("batch_size") || edited.has("min_valid_per_session")) return;
    const screens = (parseInt(field("practice_trials").value, 10) || 0) + (parseInt(field("control_trials").value, 10) || 0);
    const batch = Math.max(1, Math.min(batchRule.batch_size, dataset.images - screens));
    field("batch_size").value = String(batch);
    field("min_valid_per_session").value = String(Math.ceil(batchRule.valid_share * batch - 1e-9));
  }

  // The error summary's links focus their field (a plain anchor would only scroll to it).
  const summary = document.getElementById("error-summary");
  if (summary) {
    summary.addEventListener("click", (event) => {
      const link = event.target.closest("a[data-field]");
      const target = link && document.getElementById(link.dataset.field);
      if (!target) return;
      event.preventDefault();
      (target.closest("label") || target).scrollIntoView({ block: "center" });
      target.focus({ preventScroll: true });
    });
    summary.focus();
  }

  form.addEventListener("change", (event) => {
    if (["dataset", "display_mode"].includes(event.target.name)) loadPictures();
    if (["dataset", "practice_trials", "control_trials"].includes(event.target.name)) fitDefaults();
    if (event.target.name === "kind") showKind();
    loop();
    refreshEstimate();
  });
  form.addEventListener("input", (event) => {
    if (["batch_size", "min_valid_per_session"].includes(event.target.name) && event.isTrusted) edited.add(event.target.name);
    refreshEstimate();
  });
  if (!field("dataset").value && datasets.length) {
    field("dataset").value = String(datasets[0].id);
    fitDefaults();
  }
  showKind();
  loadPictures();
  loop();
  refreshEstimate();
})();
