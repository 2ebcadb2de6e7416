"""Prolific and MTurk entry and exit in a real Chromium against the live server.

MTurk runs inside a real iframe of a parent page served from another origin (127.0.0.1:<port> vs the
player_server's localhost:<port>), which also receives the externalSubmit POST (it plays MTurk's part).
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from collector.models import Session
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make, session_token_read
from tests.annotation_ui.driver import closed_port
from tests.factories import complete_session, make_dataset, make_study, make_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


class FakeMTurk:
    """Parent page with an iframe (``/parent?src=...``) and the ``/mturk/externalSubmit`` endpoint."""

    def __init__(self):
        self.posts: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                src = parse_qs(urlsplit(self.path).query).get("src", [""])[0]
                body = f'<!doctype html><title>HIT</title><iframe id="hit" src="{src}" width="900" height="700"></iframe>'
                self._send(body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                fields = {k: v[-1] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                owner.posts.append({"path": self.path, "fields": fields})
                self._send("<!doctype html><p>HIT submitted</p>")

            def _send(self, body: str):
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_mturk():
    server = FakeMTurk()
    yield server
    server.close()


@pytest.fixture
def pages(tmp_path, player_settings):
    """Plain-http pages and a media root per test (tests/annotation_ui/conftest.py)."""
    return tmp_path


def _study(tmp_path, platform, **config):
    dataset = make_dataset(tmp_path, n_images=3, size=(64, 48))
    return make_study(dataset, publish=True, platform=platform, batch_size=3, min_valid_per_session=2,
                      quota_pc=2, quota_mobile=2, platform_config=config)  # fmt: skip


def _session_from_url(url: str) -> Session:
    token = urlsplit(url).path.split("/a/")[1].strip("/")
    return Session.objects.get(pk=session_token_read(token=token))


def test_prolific_entry_and_redirect_exit(chromium, player_server, pages):
    study = _study(pages, "prolific", prolific_study_id="ps-1", prolific_completion_code="C1A2B3C4")
    context = chromium.new_context()
    seen = []

    def prolific(route):
        seen.append(route.request.url)
        route.fulfill(status=200, content_type="text/html", body="<p>Prolific: submission complete</p>")

    context.route("https://app.prolific.com/**", prolific)
    page = context.new_page()
    page.goto(f"{player_server.url}/prolific/{study.pk}/pc/?PROLIFIC_PID=pp-1&STUDY_ID=ps-1&SESSION_ID=sub-1")
    assert "/a/" in page.url
    session = _session_from_url(page.url)
    assert (session.worker.platform, session.worker.external_id) == ("prolific", "pp-1")
    assert (session.platform_assignment_id, session.platform_batch_id, session.device) == (
        "sub-1",
        "ps-1",
        "pc",
    )

    complete_session(session)
    page.reload()
    page.wait_for_url("https://app.prolific.com/**", timeout=15000)
    # first whether Prolific answers at all (its front page, no cookies), then the completion redirect
    assert seen == ["https://app.prolific.com/", "https://app.prolific.com/submissions/complete?cc=C1A2B3C4"]
    assert "submission complete" in page.content()
    context.close()


def test_prolific_unreachable_keeps_the_code_on_screen(chromium, player_server, pages, settings):
    """Prolific's completion URL cannot be reached: the participant is not sent to a browser error page
    but stays with the code, which the page says to copy and enter on Prolific; the player and the
    server's exit page alike."""
    from tests.annotation_ui.driver import SCREENSHOT_DIR

    dead = f"http://127.0.0.1:{closed_port()}/submissions/complete"
    settings.PROLIFIC_COMPLETE_URL = dead
    study = _study(pages, "prolific", prolific_study_id="ps-1", prolific_completion_code="C1A2B3C4")
    context = chromium.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=player_server.url)
    page = context.new_page()
    page.goto(
        f"{player_server.url}/prolific/{study.pk}/mobile/?PROLIFIC_PID=pp-1&STUDY_ID=ps-1&SESSION_ID=sub-1"
    )
    player_url = page.url
    session = _session_from_url(player_url)
    complete_session(session)
    page.reload()
    page.wait_for_function("() => window.clicklabPlayer.redirectFailed === true", timeout=20000)
    assert page.url == player_url  # still here, not on chrome-error://
    assert page.is_visible("#completion-code") and page.inner_text("#completion-code") == "C1A2B3C4"
    assert "could not be reached" in page.inner_text("#done-text")
    assert page.get_attribute("#done-link", "href") == f"{dead}?cc=C1A2B3C4" and page.is_visible("#done-link")
    page.click("#copy-code")
    page.wait_for_function("() => document.getElementById('copy-code').textContent === 'Copied'")
    assert page.evaluate("() => navigator.clipboard.readText()") == "C1A2B3C4"
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT_DIR / "player-prolific-unreachable.png"))

    exit_page = f"{player_server.url}/platform-exit/{session_token_make(session_id=session.pk)}/"
    page.goto(exit_page)
    page.wait_for_function("() => window.clicklabExit.redirectFailed === true", timeout=20000)
    assert page.url == exit_page and page.inner_text("#completion-code") == "C1A2B3C4"
    assert "could not be reached" in page.inner_text("#done-text")
    assert page.get_attribute("#done-link", "href") == f"{dead}?cc=C1A2B3C4" and page.is_visible("#done-link")
    page.screenshot(path=str(SCREENSHOT_DIR / "platform-exit-prolific-unreachable.png"))
    context.close()


#: What a page looks like without ``navigator.clipboard`` (plain http on a LAN): the Copy button's fallback.
NO_CLIPBOARD_API = "Object.defineProperty(Navigator.prototype, 'clipboard', {get: () => undefined});"


@pytest.mark.parametrize(
    ("size", "clipboard_api"),
    [({"width": 1280, "height": 800}, True), ({"width": 360, "height": 640}, False)],
    ids=["desktop", "phone"],
)
def test_the_exit_page_is_the_players_end_screen(
    chromium, player_server, pages, settings, size, clipboard_api
):
    """The server's exit page looks like the player's end screen (its stylesheet, the code in large type with
    a Copy button that works, its words) on a desktop and on a 360 px phone, with nothing wider than the
    screen; where the browser has no clipboard API the button selects the code for a copy by hand."""
    from tests.annotation_ui.driver import SCREENSHOT_DIR

    settings.PROLIFIC_COMPLETE_URL = f"http://127.0.0.1:{closed_port()}/submissions/complete"
    study = _study(pages, "prolific", prolific_study_id="ps-1", prolific_completion_code="C1A2B3C4")
    session = complete_session(
        session_start(
            study=study, worker=make_worker(platform="prolific"), device="pc", platform_assignment_id="sub-1"
        )  # fmt: skip
    )
    phone = size["width"] < 600
    context = chromium.new_context(viewport=size, is_mobile=phone, has_touch=phone)
    if clipboard_api:
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=player_server.url)
    else:
        context.add_init_script(NO_CLIPBOARD_API)
    page = context.new_page()
    page.goto(f"{player_server.url}/platform-exit/{session_token_make(session_id=session.pk)}/")
    assert page.is_visible("#screen-done") and page.inner_text("#completion-code") == "C1A2B3C4"
    assert page.evaluate("() => getComputedStyle(document.body).backgroundColor") == "rgb(31, 32, 35)"
    code_px = page.evaluate(
        "() => parseFloat(getComputedStyle(document.getElementById('completion-code')).fontSize)"
    )
    assert code_px >= 1.5 * 16  # large type: player.css's 1.6rem
    page.wait_for_function("() => window.clicklabExit.redirectFailed === true", timeout=20000)

    page.click("#copy-code")
    if clipboard_api:
        page.wait_for_function("() => document.getElementById('copy-code').textContent === 'Copied'")
        assert page.evaluate("() => navigator.clipboard.readText()") == "C1A2B3C4"
    else:
        assert page.evaluate("() => navigator.clipboard") is None
        assert page.evaluate("() => window.getSelection().toString()") == "C1A2B3C4"

    overflow = page.evaluate(
        """() => {
          const width = document.documentElement.clientWidth;
          const wide = [...document.querySelectorAll("#screen-done, #screen-done *")].filter((element) => {
            const box = element.getBoundingClientRect();
            return box.width > 0 && (box.left < 0 || box.right > width + 0.5);
          });
          return {scroll: document.documentElement.scrollWidth - width, wide: wide.map((e) => e.id || e.tagName)};
        }"""
    )
    assert overflow == {"scroll": 0, "wide": []}
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT_DIR / f"platform-exit-{'phone' if phone else 'desktop'}.png"))
    context.close()


def test_mturk_in_a_cross_origin_iframe_without_cookies(chromium, player_server, pages, fake_mturk, settings):
    settings.MTURK_FRAME_ANCESTORS = [fake_mturk.origin]
    settings.MTURK_SUBMIT_ORIGINS = [fake_mturk.origin]
    study = _study(pages, "mturk")
    context = chromium.new_context()
    page = context.new_page()
    entry = f"{player_server.url}/mturk/{study.pk}/pc/"

    # Preview: no session, a preview page inside the frame.
    preview = f"{entry}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE%26hitId=H1"
    page.goto(f"{fake_mturk.origin}/parent?src={preview}")
    frame = page.frame_locator("#hit")
    assert "Preview" in frame.locator("h1").inner_text(timeout=10000)
    assert Session.objects.count() == 0

    # Accepted HIT: the entry starts a session and hands over to the player, inside the frame.
    params = f"assignmentId=A1%26hitId=H1%26workerId=W1%26turkSubmitTo={fake_mturk.origin}"
    page.goto(f"{fake_mturk.origin}/parent?src={entry}?{params}")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any("/a/" in f.url for f in page.frames):
        time.sleep(0.1)
    (player,) = [f for f in page.frames if "/a/" in f.url]
    session = _session_from_url(player.url)
    assert (session.worker.external_id, session.platform_assignment_id) == ("W1", "A1")
    assert session.platform_state["turk_submit_to"] == fake_mturk.origin

    complete_session(session)
    player.goto(player.url)  # the player page of a finished session runs the finish action: auto-post
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not fake_mturk.posts:
        time.sleep(0.1)
    assert fake_mturk.posts == [
        {
            "path": "/mturk/externalSubmit",
            "fields": {
                "assignmentId": "A1",
                "completion_code": Session.objects.get(pk=session.pk).completion_code,
            },
        }
    ]
    # The server's exit page, in the frame too, shows the code and then makes the same post. First let the
    # frame finish the post above (the fake records it before the frame has moved), and do not wait for the
    # exit page's load event: on a slow machine its own post, 5 s after its script starts, can come first.
    player.wait_for_url("**/mturk/externalSubmit", timeout=15_000)
    player.goto(
        f"{player_server.url}/platform-exit/{session_token_make(session_id=session.pk)}/", wait_until="commit"
    )
    player.wait_for_selector("#completion-code", timeout=15_000)
    assert player.inner_text("#completion-code") == fake_mturk.posts[0]["fields"]["completion_code"]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(fake_mturk.posts) < 2:
        time.sleep(0.1)
    assert fake_mturk.posts[1] == fake_mturk.posts[0]
    assert context.cookies() == []  # nothing inside the frame set (or needed) a cookie
    context.close()


def test_frame_from_an_origin_not_allowed_is_blocked(chromium, player_server, pages, fake_mturk, settings):
    settings.MTURK_FRAME_ANCESTORS = ["https://www.mturk.com"]
    study = _study(pages, "mturk")
    context = chromium.new_context()
    page = context.new_page()
    preview = f"{player_server.url}/mturk/{study.pk}/pc/?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE"
    page.goto(f"{fake_mturk.origin}/parent?src={preview}")
    page.wait_for_timeout(1500)
    (child,) = page.main_frame.child_frames
    assert "Preview" not in child.content()  # Chromium refused to render it (frame-ancestors)

    # The same page opened top-level renders (only framing is refused).
    page.goto(preview)
    assert "Preview" in page.locator("h1").inner_text()
    context.close()
