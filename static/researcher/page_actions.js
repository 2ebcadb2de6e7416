// What inline handlers used to do on the researcher pages, here because the Content-Security-Policy runs no
// inline code: a click on a link field (input.link-url) selects the whole address for copying, and a form with
// data-confirm asks before it is sent. Delegated from the document, so rows that live.js redraws keep both.
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    var field = event.target;
    if (field instanceof HTMLInputElement && field.classList.contains("link-url")) { field.select(); }
  });
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
    }
  });
})();
