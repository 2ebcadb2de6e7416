// Live numbers without a reload: every element with data-live-url is refreshed every data-live-ms by
// polling that URL. The answer is {"html": {"<element id>": "<inner HTML>"}, "state": "<study state>"}:
// the server renders the same templates as the page, so there is one way to draw each part. An answer with
// "done": true (a finished dataset import) is the last: polling stops.
// Polling (not server-sent events) keeps each refresh a short request; see collector.researcher.views.study_live.
(function () {
  "use strict";
  document.querySelectorAll("[data-live-url]").forEach(function (root) {
    var url = root.dataset.liveUrl;
    var every = Math.max(1000, parseInt(root.dataset.liveMs, 10) || 5000);
    var busy = false;

    // Charts are PNGs drawn by the server (matplotlib): redrawn after the numbers changed, at most every
    // data-chart-ms, so an open page does not keep a web worker busy drawing. A change that comes sooner is
    // remembered (chartsStale) and drawn by a later poll: the charts catch up with the numbers.
    var chartEvery = Math.max(every, parseInt(root.dataset.chartMs, 10) || 10000);
    var chartsAt = Date.now();
    var chartsStale = false;
    function refreshCharts() {
      if (!chartsStale || Date.now() - chartsAt < chartEvery) { return; }
      chartsStale = false;
      chartsAt = Date.now();
      document.querySelectorAll("img.chart").forEach(function (img) {
        img.src = img.src.split("?")[0] + "?at=" + chartsAt;
      });
    }

    function words(element) { return element.textContent.replace(/\s+/g, " ").trim(); }

    function refresh() {
      if (busy || document.hidden) { return; }
      busy = true;
      fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (body) {
          if (!body) { return; }
          var changed = false;
          Object.keys(body.html || {}).forEach(function (id) {
            var element = document.getElementById(id);
            if (element && element.dataset.liveHtml !== body.html[id]) {
              // The first answer is compared by its text with what the server rendered with the page.
              var before = element.dataset.liveHtml === undefined ? words(element) : null;
              element.innerHTML = body.html[id];
              changed = changed || before === null || before !== words(element);
              element.dataset.liveHtml = body.html[id];
            }
          });
          if (changed) { chartsStale = true; }
          refreshCharts();
          var badge = document.getElementById("study-state");
          if (badge && body.state && badge.textContent !== body.state) {
            badge.textContent = body.state;
            badge.className = "state state-" + body.state;
          }
          var stamp = document.getElementById("live-updated");
          if (stamp && body.at) { stamp.textContent = body.at.slice(11, 19); }
          if (body.done === true) { window.clearInterval(timer); }  // a finished import changes no more
        })
        .catch(function () { /* offline for a moment: the next poll tries again */ })
        .then(function () { busy = false; });
    }

    var timer = window.setInterval(refresh, every);
    document.addEventListener("visibilitychange", function () { if (!document.hidden) { refresh(); } });
  });
})();
