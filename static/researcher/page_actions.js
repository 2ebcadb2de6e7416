// What inline handlers used to do on the researcher pages, here because the Content-Security-Policy runs no
// inline code: a click on a link field (input.link-url) selects the whole address for copying, a form with
// data-confirm asks before it is sent, and a form with data-prompt asks for a text that goes into its field
// named by data-prompt-field (sent only when one is given). Delegated from the document, so rows that live.js redraws keep both.
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
      return;
    }
    if (form instanceof HTMLFormElement && form.dataset.prompt) {
      var answer = window.prompt(form.dataset.prompt);
      if (!answer) { event.preventDefault(); return; }
      form.elements[form.dataset.promptField || "reason"].value = answer;
    }
  });
})();
