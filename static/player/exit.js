/** The server's exit page (/platform-exit/<session token>/, templates/annotation_ui/platform_exit.html): the
 *  players' end screen for a finished session, with their Copy button and their finish step (the code first;
 *  a redirect only to a platform that answers; MTurk's form post). */
import { bindCopyButton, runFinishAction } from "./ui.js";

const payload = JSON.parse(document.getElementById("exit-payload").textContent);
// Read-only view for the browser tests: `redirectFailed` once the platform did not answer.
const state = {};
window.clicklabExit = state;
bindCopyButton();
runFinishAction(payload.finish, state, { redirectDelayMs: payload.redirect_delay_ms });
