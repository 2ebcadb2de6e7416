"""The player in real headless Chromium against a live server: full batches on desktop and an emulated
phone, phase timing, blocked clicks, exact coordinates, reload, failing networks, finish actions."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image as PILImage

from collector.models import Click, Session, Trial
from tests.annotation_ui.driver import (
    LAYOUTS,
    SCREEN_OBSERVER,
    ClickPlan,
    Observed,
    canvas_rect,
    entry_url,
    expected_canonical,
    observed,
    open_player,
    phase_bookkeeping,
    play_trial,
    press_start,
    press_verdicts,
    refresh_problems,
    wait_finished,
    wait_for,
    wait_phase,
    wait_start_enabled,
)
from tests.factories import make_dataset, make_study

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SHORT = {"image_ms": 300, "target_ms": 400, "blocked_ms": 300}
PLANS = [
    ClickPlan(0.5, 0.5),
    ClickPlan(0.1, 0.2),
    ClickPlan(0.9, 0.85),
    ClickPlan(0.33, 0.66),
    ClickPlan(0.75, 0.4),
]


def _study(tmp_path, *, n_images=12, size=(320, 240), **fields):
    dataset = make_dataset(tmp_path, n_images=n_images, size=size)
    return make_study(dataset, publish=True, **{**SHORT, **fields})


def _context(chromium, layout: str, **extra):
    return chromium.new_context(**{**LAYOUTS[layout], **extra})


def _session_of(page_url: str) -> Session:
    from collector.services.tokens import session_token_read

    token = page_url.rstrip("/").rsplit("/", 1)[-1]
    return Session.objects.get(pk=session_token_read(token=token))


def _assert_timing_kept(trials, seen: Observed, durations: dict, *, blocked_in=()) -> None:
    """What the player controls about timing, for every trial against the observer (driver.SCREEN_OBSERVER):
    stored onsets are the frames the pictures reached the screen, each phase ended on the frame its rule
    picks given the frames the browser delivered and the refresh it measured, the refresh is that of the
    page's frames, and presses made before phase D was on screen were blocked while the first one after is
    the click. How long a phase lasted on a loaded machine is not asserted (bench/bench_player_timing.py
    measures it)."""
    wanted = {"A": durations["image_ms"], "B": durations["target_ms"], "C": durations["blocked_ms"]}
    problems = []
    for trial, screen in zip(trials, seen.screen, strict=True):
        problems += phase_bookkeeping(trial, screen, seen.frames, wanted)
        problems += refresh_problems(trial, seen.frames)
        blocked, click_at = press_verdicts(trial, seen.presses)
        if trial.blocked_clicks != blocked:
            problems.append(f"trial {trial.position}: {trial.blocked_clicks} presses blocked, {blocked} were made "
                            f"before phase D was on screen")  # fmt: skip
        stored = trial.phase_onsets_ms.get("click")
        if click_at is None or stored is None or abs(stored - click_at) > 0.05:
            problems.append(f"trial {trial.position}: the click stored at {stored} ms is not the first press after "
                            f"phase D was on screen ({click_at} ms)")  # fmt: skip
    assert not problems, "\n".join(problems)
    # The presses meant for a blocked phase must have been handled in one, or nothing above tested blocking.
    landed = {phase for _, _, phase in seen.presses}
    missed = [phase for phase in blocked_in if phase not in landed]
    assert not missed, (
        f"no press was handled in phase(s) {missed} of {len(seen.screen)} trials (presses: {seen.presses}): "
        "the driver pressed too late to test blocking; lengthen those phases"
    )


def _pump_until(page, predicate, *, what: str, timeout_s: float = 30.0):
    """Wait while letting Playwright deliver events (a plain sleep would not update page.url)."""
    for _ in range(int(timeout_s / 0.2)):
        if predicate():
            return
        page.wait_for_timeout(200)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; page at {page.url}")


@pytest.mark.parametrize("layout", ["desktop", "phone"])
@pytest.mark.embedded_smoke
def test_full_batch_of_ten(chromium, player_server, tmp_path, layout):
    study = _study(tmp_path)
    context = _context(chromium, layout)
    context.add_init_script(SCREEN_OBSERVER)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    posts = []
    page.on("request", lambda request: posts.append(request) if request.method == "POST" else None)
    touch = layout == "phone"
    url = open_player(page, entry_url(player_server.url, study))
    session = _session_of(url)
    assert session.device == ("mobile" if touch else "pc")
    wait_start_enabled(page)
    press_start(page)

    done = []
    rotate_hint = []
    for position in range(10):
        wait_phase(page, position, "A")
        rotate_hint.append(page.is_visible("#rotate-hint"))
        done.append(
            play_trial(page, position, PLANS[position % len(PLANS)], touch=touch, blocked_in=("A", "B", "C"))
        )
    wait_finished(page)
    code = page.inner_text("#completion-code")
    seen = observed(page, 10)
    reports = _presentation_reports(posts)
    context.close()

    session.refresh_from_db()
    assert errors == []
    # 4:3 pictures on a portrait phone: turning it would show them larger, and the player says so.
    assert rotate_hint == [touch] * 10
    assert session.status == Session.Status.FINISHED and code == session.completion_code
    assert session.detected_device == ("mobile" if touch else "pc")
    info = session.client_info
    assert info["device_pixel_ratio"] == (3 if touch else 1) and info["pointer_coarse"] is touch
    assert info["webdriver"] is True and info["refresh_hz"] > 20
    trials = list(session.trials.select_related("click", "target__instance__image").order_by("position"))
    assert len(trials) == 10 and Click.objects.filter(trial__session=session).count() == 10
    for trial, clicked in zip(trials, done, strict=True):
        image = trial.target.instance.image
        click = trial.click
        assert trial.flags == []
        assert len(trial.presentations) == 1, f"trial {trial.position}: reported {trial.presentations}"
        assert click.pointer_type == ("touch" if touch else "mouse")
        x, y = expected_canonical(clicked, image.width, image.height)
        assert click.x == pytest.approx(x, abs=1e-6) and click.y == pytest.approx(y, abs=1e-6)
        assert click.shown_width == pytest.approx(clicked.rect["width"])
        assert click.reaction_ms > 0 and click.event_timestamp_ms == trial.phase_onsets_ms["click"]
    _assert_timing_kept(trials, seen, SHORT, blocked_in=("A", "B", "C"))
    # One request per trial: the first trial's report is a request of its own, every later one rides on the
    # click before it (its next_presentation) unless that click found the outbox busy or its answer did not
    # come in time (the player then reports the trial itself, under the same id).
    required, allowed, sent = reports
    assert required <= sent <= allowed, f"presented sent for {sorted(sent)}, required {sorted(required)}, " \
                                         f"allowed {sorted(allowed)}"  # fmt: skip
    assert sum(1 for request in posts if request.url.endswith("/click")) == 10
    print(f"{layout}: {len(seen.presses)} presses, presented sent for {sorted(sent)}")


# The player waits this long for a click's answer to carry the next trial's report (main.js reportPresented).
CARRY_WAIT_MS = 4000


def _presentation_reports(posts) -> tuple[set, set, set]:
    """From the page's POSTs: the positions whose report the player had to send itself (the first, and any
    whose previous click carried no report), the ones it may have sent itself (also those whose carrying
    click got no usable answer within CARRY_WAIT_MS) and the ones it sent. Read before the context closes."""
    clicks = {}
    for request in posts:
        if request.url.endswith("/click"):
            clicks.setdefault(request.post_data_json["position"], request)
    required, allowed = {0}, {0}
    for position, request in clicks.items():
        carried = request.post_data_json.get("next_presentation")
        if carried is None:
            if position + 1 in clicks:
                required.add(position + 1)
            continue
        response = request.response()
        answer = response.json() if response is not None and response.ok else {}
        timing = request.timing
        late = timing["responseEnd"] < 0 or timing["responseEnd"] > CARRY_WAIT_MS - 500
        if late or not (answer.get("next_presentation") or {}).get("ok"):
            allowed.add(carried["position"])
    sent = {request.post_data_json["position"] for request in posts if request.url.endswith("/presented")}
    return required, allowed | required, sent


@pytest.mark.parametrize("layout", ["desktop", "phone"])
def test_on_screen_durations_measured_from_pixels(chromium, player_server, tmp_path, layout):
    """The RClicks durations (1.5 s / 2 s / 1.5 s) as the screen shows them: an observer outside the player
    reads the canvas back every frame (driver.SCREEN_OBSERVER). The presented onsets the player stores are
    the frames the observer saw each picture reach the screen, every phase ended on the frame the phase
    machine's rule picks from the frames the browser delivered, and a press in each timed phase was blocked.
    The on-screen durations are printed; their error is bench/bench_player_timing.py's figure."""
    real = {"image_ms": 1500, "target_ms": 2000, "blocked_ms": 1500}
    dataset = make_dataset(tmp_path, n_images=3, size=(1600, 1200))
    study = make_study(dataset, publish=True, batch_size=3, **real)
    context = _context(chromium, layout)
    context.add_init_script(SCREEN_OBSERVER)
    page = context.new_page()
    touch = layout == "phone"
    url = open_player(page, entry_url(player_server.url, study))
    wait_start_enabled(page)
    press_start(page)
    for position in range(3):
        play_trial(page, position, PLANS[position], touch=touch, blocked_in=("A", "B", "C"))
    wait_finished(page)
    seen = observed(page, 3)
    context.close()
    wanted = {"A": real["image_ms"], "B": real["target_ms"], "C": real["blocked_ms"]}
    trials = list(_session_of(url).trials.order_by("position"))
    for trial, screen in zip(trials, seen.screen, strict=True):
        errors = {phase: round(screen[phase] - wanted[phase], 1) for phase in "ABC"}
        print(
            f"{layout} trial {trial.position}: on-screen errors {errors} ms (frame {1000 / trial.refresh_hz:.1f} ms)"
        )
    _assert_timing_kept(trials, seen, real, blocked_in=("A", "B", "C"))


@pytest.mark.parametrize(
    ("viewport", "scale"),
    [
        ({"width": 1920, "height": 1080}, 1),
        ({"width": 700, "height": 500}, 2),
        ({"width": 390, "height": 844}, 3),
    ],
    ids=["1920x1080@1", "700x500@2", "390x844@3"],
)
def test_coordinates_are_exact_and_land_on_what_was_shown(chromium, player_server, tmp_path, viewport, scale):
    """Clicks at known canvas positions: the stored canonical pixel equals the offset in the displayed rect
    scaled to the image, and the screen pixel under the click shows the object exactly when the mask says
    the stored pixel is in the object (checked on a screenshot, independent of the mapping formula)."""
    study = _study(tmp_path, n_images=3, size=(300, 200), batch_size=3)
    context = chromium.new_context(viewport=viewport, device_scale_factor=scale)
    page = context.new_page()
    url = open_player(page, entry_url(player_server.url, study))
    wait_start_enabled(page)
    press_start(page)
    session = _session_of(url)
    checks = []
    for position in range(3):
        trial = session.trials.select_related("target__instance__image").get(position=position)
        instance = trial.target.instance
        cx = (instance.bbox_x0 + instance.bbox_x1 + 1) / 2 / instance.image.width
        cy = (instance.bbox_y0 + instance.bbox_y1 + 1) / 2 / instance.image.height
        plan = ClickPlan(cx, cy) if position != 1 else ClickPlan(0.04, 0.06)  # object centre, or background
        wait_phase(page, position, "D")
        rect = canvas_rect(page)
        assert rect["width"] / rect["height"] == pytest.approx(300 / 200, rel=0.01)
        assert rect["left"] >= 0 and rect["left"] + rect["width"] <= viewport["width"] + 0.5
        shot = np.asarray(PILImage.open(__import__("io").BytesIO(page.screenshot())).convert("RGB")).astype(
            int
        )
        done = play_trial(page, position, plan, touch=False, blocked_in=())
        pixel = shot[int(done.client_y * scale), int(done.client_x * scale)]
        checks.append((trial, done, pixel))
    wait_finished(page)
    context.close()
    for trial, done, pixel in checks:
        click = Click.objects.get(trial=trial)
        image = trial.target.instance.image
        x, y = expected_canonical(done, image.width, image.height)
        assert (click.x, click.y) == (pytest.approx(x, abs=1e-6), pytest.approx(y, abs=1e-6))
        with trial.target.instance.mask_file.open("rb") as handle:
            mask = np.asarray(PILImage.open(handle).convert("L")) > 127
        on_object = bool(mask[int(click.y), int(click.x)])
        looks_like_object = abs(pixel[0] - 200) < 30 and abs(pixel[1] - 60) < 30 and abs(pixel[2] - 50) < 30
        assert on_object == looks_like_object == (trial.position != 1), (
            trial.position,
            pixel,
            click.x,
            click.y,
        )


def test_reload_mid_batch_resumes_at_the_next_trial(chromium, player_server, tmp_path):
    study = _study(tmp_path)
    context = _context(chromium, "desktop")
    page = context.new_page()
    url = open_player(page, entry_url(player_server.url, study))
    wait_start_enabled(page)
    press_start(page)
    for position in range(4):
        play_trial(page, position, PLANS[position], touch=False, blocked_in=())
    wait_phase(page, 4, "B")
    session = _session_of(url)
    wait_for(lambda: Click.objects.filter(trial__session=session).count() == 4, what="4 clicks stored")
    page.reload()
    wait_start_enabled(page)
    # the instructions on the screen count the 6 images left, not the batch's 10
    instructions = page.locator("#screen-instructions")
    assert instructions.is_visible()
    assert "process 6 images in sequence." in " ".join(instructions.inner_text().split())
    started = []
    page.on("console", lambda message: started.append(message.text))
    press_start(page)
    wait_phase(page, 4, "A")
    for position in range(4, 10):
        play_trial(page, position, PLANS[position % 5], touch=False, blocked_in=())
    wait_finished(page)
    context.close()
    keys = list(
        Click.objects.filter(trial__session=session)
        .order_by("trial__position")
        .values_list("trial__position", flat=True)
    )
    assert keys == list(range(10))
    assert Session.objects.get(pk=session.pk).status == Session.Status.FINISHED
    # trial 4 was on screen (phase B) when the page reloaded and was shown again: a replay; none other is
    flags = dict(Trial.objects.filter(session=session).values_list("position", "flags"))
    assert flags == {position: (["replayed"] if position == 4 else []) for position in range(10)}


def test_failing_requests_still_store_every_click_exactly_once(chromium, player_server, tmp_path):
    """The click endpoint first drops connections, then answers 503, then loses responses of stored clicks
    (the server has the click, the browser sees a failure); every click still ends up stored once."""
    study = _study(tmp_path)
    context = _context(chromium, "phone")
    page = context.new_page()
    url = open_player(page, entry_url(player_server.url, study))
    wait_start_enabled(page)
    calls = {"n": 0}

    def flaky(route):
        calls["n"] += 1
        n = calls["n"]
        if n <= 4:
            route.abort("connectionreset")
        elif n <= 8:
            route.fulfill(status=503, body="busy")
        elif n <= 14 and n % 2:
            route.fetch()  # reaches the server: the click is stored ...
            route.abort("connectionreset")  # ... but the acknowledgement is lost
        else:
            route.continue_()

    page.route("**/api/annotator/*/click", flaky)
    press_start(page)
    for position in range(10):
        play_trial(page, position, PLANS[position % 5], touch=True, blocked_in=())
    wait_finished(page, timeout_ms=90_000)
    code = page.inner_text("#completion-code")
    context.close()
    session = Session.objects.get(pk=_session_of(url).pk)
    assert calls["n"] > 14
    assert session.status == Session.Status.FINISHED and code == session.completion_code
    assert Click.objects.filter(trial__session=session).count() == 10
    assert sorted(
        Click.objects.filter(trial__session=session).values_list("trial__position", flat=True)
    ) == list(range(10))
    # each showing counted once, whether its report rode on a click that failed, on one whose answer was lost,
    # or came on its own after
    shown = {trial.position: (len(trial.presentations), trial.flags) for trial in session.trials.all()}
    assert shown == {position: (1, []) for position in range(10)}, shown


def test_start_comes_before_the_last_picture_and_no_trial_starts_undecoded(chromium, player_server, tmp_path):
    """Under a throttled network (CDP) START is enabled before the batch's pictures have all arrived (by the
    browser's resource timing), a trial whose pictures are late waits for them (``load_wait_ms`` in its
    click) and each trial's phases are on screen with their pictures (SCREEN_OBSERVER). Then the same
    batch size with the one-request bundle failing: every picture comes by its own URL instead."""
    study = _study(tmp_path, n_images=6, batch_size=3, size=(1600, 1200))
    for bundle_fails in (False, True):
        context = _context(chromium, "desktop")
        context.add_init_script(SCREEN_OBSERVER)
        page = context.new_page()
        requested, bodies = [], []
        page.on("request", lambda request, seen=requested: seen.append(request.url))
        page.on(
            "request",
            lambda request, out=bodies: (
                out.append(request.post_data_json) if request.url.endswith("/click") else None
            ),
        )
        if bundle_fails:
            page.route("**/api/annotator/*/stimuli/*.bin", lambda route: route.abort("connectionreset"))
        else:
            cdp = context.new_cdp_session(page)
            cdp.send("Network.enable")
            slow = {
                "offline": False,
                "latency": 40,
                "downloadThroughput": 60_000,
                "uploadThroughput": 100_000,
            }
            cdp.send("Network.emulateNetworkConditions", slow)
        url = open_player(page, entry_url(player_server.url, study))
        wait_start_enabled(page)
        bundles = [u for u in requested if "/stimuli/" in u and u.endswith(".bin")]
        singles = [u for u in requested if "/stimulus/" in u]
        assert len(bundles) >= 1
        assert len(singles) == (6 if bundle_fails else 0), (bundle_fails, singles)
        press_start(page)
        for position in range(3):
            play_trial(page, position, PLANS[position], touch=False, blocked_in=())
        wait_finished(page)
        seen = observed(page, 3)
        if not bundle_fails:
            start_at, bundle_end = page.evaluate(
                "() => [window.clicklabPlayer.startEnabledAt, performance.getEntriesByType('resource')"
                ".find((entry) => entry.name.endsWith('.bin')).responseEnd]"
            )
            assert start_at < bundle_end, (
                f"START at {start_at} ms, after the last picture arrived ({bundle_end} ms)"
            )
            waits = {body["position"]: body["load_wait_ms"] for body in bodies}
            assert waits[0] == 0 and max(waits.values()) > 0, f"no trial waited for its pictures: {waits}"
        context.close()
        trials = list(_session_of(url).trials.order_by("position"))
        assert Click.objects.filter(trial__session=_session_of(url)).count() == 3
        # Every phase on screen with its pictures from the first frame (screen_phase_durations finds A, B,
        # C, D in order for each trial), at the onsets the player stored, ended by the phase machine's rule.
        _assert_timing_kept(trials, seen, SHORT)


def test_viewport_change_and_focus_loss_flag_the_trial(chromium, player_server, tmp_path):
    study = _study(tmp_path, n_images=3, batch_size=3, image_ms=600, target_ms=600, blocked_ms=600)
    context = _context(chromium, "desktop")
    page = context.new_page()
    url = open_player(page, entry_url(player_server.url, study))
    wait_start_enabled(page)
    press_start(page)
    wait_phase(page, 0, "B")
    page.set_viewport_size({"width": 1200, "height": 800})
    done0 = play_trial(page, 0, ClickPlan(0.5, 0.5), touch=False, blocked_in=())
    wait_phase(page, 1, "A")
    page.evaluate("() => window.dispatchEvent(new Event('blur'))")
    play_trial(page, 1, ClickPlan(0.5, 0.5), touch=False, blocked_in=())
    play_trial(page, 2, ClickPlan(0.5, 0.5), touch=False, blocked_in=())
    wait_finished(page)
    context.close()
    trials = {
        t.position: t for t in _session_of(url).trials.select_related("click", "target__instance__image")
    }
    assert trials[0].flags == ["viewport_changed"]
    assert trials[1].flags == ["focus_lost"]
    assert trials[2].flags == []
    image = trials[0].target.instance.image
    x, y = expected_canonical(done0, image.width, image.height)  # mapped through the new layout
    assert done0.rect["width"] <= 1200 and trials[0].click.x == pytest.approx(x, abs=1e-6)


def test_text_description_mode_runs_with_its_longer_phase(chromium, player_server, tmp_path):
    study = _study(tmp_path, n_images=3, batch_size=3, display_mode="Text_Description", text_ms=500)
    from collector.models import Instance

    Instance.objects.filter(image__dataset=study.dataset).update(text_description="the red ellipse")
    context = _context(chromium, "phone")
    context.add_init_script(SCREEN_OBSERVER)
    page = context.new_page()
    url = open_player(page, entry_url(player_server.url, study))
    assert "short text describing the object" in page.inner_text("#screen-instructions")
    wait_start_enabled(page)
    press_start(page)
    for position in range(3):
        play_trial(page, position, PLANS[position], touch=True, blocked_in=("B",))
    wait_finished(page)
    seen = observed(page, 3)
    context.close()
    trials = list(_session_of(url).trials.order_by("position"))
    # Phase B lasts the text's 500 ms (not the target's 400) by the phase machine's rule.
    _assert_timing_kept(
        trials, seen, {"image_ms": 300, "target_ms": 500, "blocked_ms": 300}, blocked_in=("B",)
    )


def test_finish_redirects_for_prolific(chromium, player_server, tmp_path, player_settings):
    player_settings.PROLIFIC_COMPLETE_URL = f"{player_server.url}/prolific-complete"
    study = _study(tmp_path, n_images=2, batch_size=2, platform="prolific")
    context = _context(chromium, "desktop")
    page = context.new_page()
    page.route(
        "**/prolific-complete*",
        lambda route: route.fulfill(status=200, body="<p>done</p>", content_type="text/html"),
    )
    url = open_player(page, entry_url(player_server.url, study))
    wait_start_enabled(page)
    press_start(page)
    for position in range(2):
        play_trial(page, position, PLANS[position], touch=False, blocked_in=())
    wait_finished(page)
    session = _session_of(url)
    # The code is on screen (with a link) before the redirect, so a failed redirect still leaves it.
    assert "/prolific-complete" not in page.url
    assert page.inner_text("#completion-code") == session.completion_code
    assert page.get_attribute("#done-link", "href").endswith(f"cc={session.completion_code}")
    _pump_until(page, lambda: "/prolific-complete" in page.url, what="the redirect to Prolific")
    assert page.url.endswith(f"cc={session.completion_code}")
    context.close()


def test_finish_auto_posts_for_mturk(chromium, player_server, tmp_path):
    study = _study(tmp_path, n_images=2, batch_size=2, platform="mturk")
    context = _context(chromium, "desktop")
    page = context.new_page()
    url = open_player(page, entry_url(player_server.url, study))
    session = _session_of(url)
    Session.objects.filter(pk=session.pk).update(
        platform_state={"turk_submit_to": player_server.url}, platform_assignment_id="ASSIGN-1"
    )
    posted = []

    def capture(route):
        posted.append((route.request.method, route.request.post_data))
        route.fulfill(status=200, body="<p>submitted</p>", content_type="text/html")

    page.route("**/mturk/externalSubmit", capture)
    wait_start_enabled(page)
    press_start(page)
    for position in range(2):
        play_trial(page, position, PLANS[position], touch=False, blocked_in=())
    _pump_until(page, lambda: posted, what="the POST to MTurk's externalSubmit")
    context.close()
    session.refresh_from_db()
    assert posted and posted[0][0] == "POST"
    assert "assignmentId=ASSIGN-1" in posted[0][1] and session.completion_code in posted[0][1]


# A display refreshing at 120 Hz, which headless Chromium cannot have: requestAnimationFrame (a browser
# API, outside our code) is replaced before the page loads by one that fires on a 120 Hz vsync grid.
FAKE_120HZ = """
(() => {
  const period = 1000 / 120;
  let queue = [];
  function vsync() {
    const now = performance.now();
    const next = (Math.floor(now / period) + 1) * period;
    setTimeout(() => {
      const callbacks = queue; queue = [];
      callbacks.forEach((callback) => callback(next));
      if (queue.length) { vsync(); } else { scheduled = false; }
    }, Math.max(0, next - performance.now()));
  }
  let scheduled = false;
  window.requestAnimationFrame = (callback) => {
    queue.push(callback);
    if (!scheduled) { scheduled = true; vsync(); }
    return queue.length;
  };
})();
"""


def test_phases_are_frame_accurate_at_120_hz(chromium, player_server, tmp_path):
    """On a 120 Hz display the player measures 120 Hz and counts its phases in 120 Hz frames: each phase
    ends on the frame the phase machine's rule picks with the measured interval (8.3 ms, not 16.7)."""
    timing = {"image_ms": 310, "target_ms": 405, "blocked_ms": 290}  # not multiples of either frame
    study = _study(tmp_path, n_images=4, batch_size=4, **timing)
    context = _context(chromium, "desktop")
    context.add_init_script(FAKE_120HZ)
    context.add_init_script(SCREEN_OBSERVER)  # after the fake: it sees the 120 Hz frames the player gets
    page = context.new_page()
    url = open_player(page, entry_url(player_server.url, study))
    wait_start_enabled(page)
    press_start(page)
    for position in range(4):
        play_trial(page, position, PLANS[position], touch=False, blocked_in=())
    wait_finished(page)
    seen = observed(page, 4)
    context.close()
    session = _session_of(url)
    # The fake vsync is driven by setTimeout, which misses grid points on a loaded machine: the frames the
    # page got are on the 120 Hz grid, and their median interval is what the player must have measured.
    grid = 1000 / 120
    assert all(abs(t / grid - round(t / grid)) < 1e-6 for t in seen.frames[-50:]), seen.frames[-50:]
    trials = list(session.trials.order_by("position"))
    _assert_timing_kept(trials, seen, timing)
    print(f"refresh measured {[trial.refresh_hz for trial in trials]} Hz")


SHOWN_PICTURE = """() => {
  let canvas = null;
  for (const c of document.querySelectorAll('#stage canvas')) {
    const style = getComputedStyle(c);
    if (c.width && style.visibility !== 'hidden' && Number(style.opacity) * 255 >= 0.5) { canvas = c; }
  }
  const copy = document.createElement('canvas');
  copy.width = 400; copy.height = Math.round(400 * canvas.height / canvas.width);
  const context = copy.getContext('2d');
  context.imageSmoothingEnabled = false;
  context.drawImage(canvas, 0, 0, copy.width, copy.height);
  return copy.toDataURL('image/png');
}"""


@pytest.mark.dataset
@pytest.mark.parametrize(
    "mode", ["Object_CutOut", "Shifted_CutOut", "Silhouette_Mask", "Highlighted_Instance", "Text_Description"]
)
def test_each_display_mode_on_grabcut_images(chromium, player_server, grabcut_root, mode):
    """Real photographs: phase B shows the mode's picture (screenshots under var/screenshots/ to look at)."""
    from collector.models import Instance
    from collector.services.datasets import dataset_import
    from tests.annotation_ui.driver import SCREENSHOT_DIR

    dataset = dataset_import(path=grabcut_root, layout="grabcut").dataset
    Instance.objects.filter(image__dataset=dataset).update(text_description="the main object")
    # Phase B outlasts a slow screenshot of phase A.
    study = make_study(dataset, publish=True, batch_size=1, display_mode=mode, image_ms=400, target_ms=2000,
                       text_ms=2000, blocked_ms=400)  # fmt: skip
    context = _context(chromium, "desktop")
    page = context.new_page()
    url = open_player(page, entry_url(player_server.url, study))
    wait_start_enabled(page)
    press_start(page)
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    shots = {}
    for phase in ("A", "B"):
        wait_phase(page, 0, phase)
        # The picture on screen, read back from the canvas on top (a page screenshot can outlast a phase).
        png = base64.b64decode(page.evaluate(SHOWN_PICTURE).split(",", 1)[1])
        (SCREENSHOT_DIR / f"grabcut-{mode}-{phase}.png").write_bytes(png)
        shots[phase] = np.asarray(PILImage.open(io.BytesIO(png)).convert("RGB")).astype(int)
    play_trial(page, 0, ClickPlan(0.5, 0.5), touch=False, blocked_in=())
    wait_finished(page)
    context.close()
    assert _session_of(url).status == Session.Status.FINISHED
    changed = np.abs(shots["A"] - shots["B"]).max(axis=2) > 40
    if mode == "Highlighted_Instance":  # the same photo plus a green outline
        green = shots["B"][..., 1] - np.maximum(shots["B"][..., 0], shots["B"][..., 2]) > 80
        assert green.mean() > 0.003 and (changed & ~green).mean() < 0.01, f"{mode}: no green outline"
    else:
        assert changed.mean() > 0.02, f"{mode}: phase B looks like phase A"
    gray = (np.abs(shots["B"] - 128).max(axis=2) <= 3).mean()
    if mode in ("Object_CutOut", "Shifted_CutOut", "Text_Description"):
        assert gray > 0.2, f"{mode}: expected a gray background, {gray:.2f} of the screen is gray"


def test_preview_walks_through_phases_without_storing(chromium, player_server, tmp_path, client):
    from django.conf import settings as django_settings

    from tests.factories import make_researcher

    study = _study(tmp_path, n_images=3, batch_size=2)
    owner = make_researcher()
    study.owner = owner
    study.save()
    client.force_login(owner)
    context = _context(chromium, "phone")
    context.add_cookies([{"name": django_settings.SESSION_COOKIE_NAME,
                          "value": client.cookies[django_settings.SESSION_COOKIE_NAME].value,
                          "url": player_server.url}])  # fmt: skip
    page = context.new_page()
    page.goto(f"{player_server.url}/preview/{study.pk}/")
    assert "Preview" in page.inner_text("#screen-instructions")
    wait_start_enabled(page)
    press_start(page)
    for position in range(2):
        for phase in ("A", "B", "C", "D"):
            wait_phase(page, position, phase)
            page.wait_for_timeout(150 if phase == "A" else 0)  # no timer moves it on
            assert page.evaluate("() => window.clicklabPlayer.phase") == phase
            rect = canvas_rect(page)
            page.touchscreen.tap(rect["left"] + rect["width"] / 2, rect["top"] + rect["height"] / 2)
        assert "clicked at" in page.inner_text("#preview-verdict")
        # The researcher sees whether the click would count (the centre is on each test object).
        page.wait_for_function(
            f"() => (window.clicklabPlayer.previewVerdicts || []).length === {position + 1}"
        )
        assert "Counts: inside the object." in page.inner_text("#preview-verdict")
        rect = canvas_rect(page)
        page.touchscreen.tap(rect["left"] + 5, rect["top"] + 5)
    wait_finished(page)
    context.close()
    assert not Session.objects.exists() and not Click.objects.exists()


def test_demo_study_link_works_end_to_end_on_a_phone(chromium, player_server, tmp_path):
    """What ``make demo`` sets up (its dataset, folder layout, descriptions, batch of 5), played through the
    printed /s/<token>/ link on an emulated phone, ending with the completion code."""
    from collector.demo import build_demo_dataset
    from collector.services.datasets import dataset_import
    from tests.annotation_ui.driver import SCREENSHOT_DIR

    folder = build_demo_dataset(tmp_path / "demo")
    dataset = dataset_import(path=folder, layout="folder", name="demo").dataset
    study = make_study(dataset, publish=True, batch_size=5, min_valid_per_session=4, quota_pc=3, quota_mobile=3,
                       **SHORT)  # fmt: skip
    context = _context(chromium, "phone")
    page = context.new_page()
    url = open_player(page, entry_url(player_server.url, study))
    wait_start_enabled(page)
    press_start(page)
    for position in range(5):
        if position == 0:
            wait_phase(page, 0, "B")
            page.screenshot(path=str(SCREENSHOT_DIR / "demo-phone-B.png"), scale="css")
        play_trial(page, position, ClickPlan(0.5, 0.5), touch=True, blocked_in=())
    wait_finished(page)
    code = page.inner_text("#completion-code")
    context.close()
    session = _session_of(url)
    assert session.status == Session.Status.FINISHED and code == session.completion_code
    assert session.device == "mobile" and Click.objects.filter(trial__session=session).count() == 5


def test_a_refused_click_is_not_retried_is_shown_and_reported(chromium, player_server, tmp_path):
    """Issue 20.4: the batch is finished elsewhere (another tab) while trial 1 runs, so the server refuses
    its click with a 409. The outbox sends it once, shows the annotator the server's reason and reports the
    refusal to POST .../problem, where it is kept on the session."""
    study = _study(tmp_path)
    context = _context(chromium, "desktop")
    page = context.new_page()
    click_requests = []
    page.on("request", lambda r: click_requests.append(r.url) if r.url.endswith("/click") else None)
    url = open_player(page, entry_url(player_server.url, study))
    wait_start_enabled(page)
    press_start(page)
    play_trial(page, 0, PLANS[0], touch=False, blocked_in=())
    session = _session_of(url)
    wait_for(lambda: Click.objects.filter(trial__session=session).count() == 1, what="the first click stored")
    wait_phase(page, 1, "B")
    Session.objects.filter(pk=session.pk).update(status=Session.Status.FINISHED)
    play_trial(page, 1, PLANS[1], touch=False, blocked_in=())
    page.wait_for_function(
        "() => !document.getElementById('notice').hidden"
        " && document.getElementById('notice').textContent.includes('was not accepted')",
        timeout=30_000,
    )
    notice = page.inner_text("#notice")
    assert "image 2" in notice
    wait_for(lambda: Session.objects.get(pk=session.pk).problems, what="the refusal reported")
    # what the worker reads is the server's own message (the envelope's "message"), not a bare status
    shown = [p["message"] for p in Session.objects.get(pk=session.pk).problems if p["endpoint"] == "click"]
    assert shown and shown[0] in notice and "HTTP 409" not in notice, (shown, notice)
    page.wait_for_timeout(3000)  # room for a retry that must not come
    context.close()
    assert len(click_requests) == 2, click_requests  # trial 0's click and one try of trial 1's
    problems = Session.objects.get(pk=session.pk).problems
    assert [(p["endpoint"], p["status"], p["position"]) for p in problems if p["endpoint"] == "click"] == [
        ("click", 409, 1)
    ], problems
    assert Click.objects.filter(trial__session=session).count() == 1


def test_rotate_hint_shows_before_start_for_landscape_pictures_on_a_portrait_phone(
    chromium, player_server, tmp_path
):
    """Landscape pictures on a portrait phone: the instructions say to turn the phone before START (a turn
    during a timed trial would spoil it); turned sideways, or with portrait pictures, they do not."""
    from tests.annotation_ui.driver import SCREENSHOT_DIR

    landscape = _study(tmp_path / "landscape", n_images=3, batch_size=3, size=(320, 240))
    portrait = _study(tmp_path / "portrait", n_images=3, batch_size=3, size=(240, 320))
    seen = {}
    for name, study, layout in (("portrait phone", landscape, {}),
                                ("turned phone", landscape, {"viewport": {"width": 844, "height": 390}}),
                                ("portrait pictures", portrait, {})):  # fmt: skip
        context = _context(chromium, "phone", **layout)
        page = context.new_page()
        open_player(page, entry_url(player_server.url, study))
        wait_start_enabled(page)
        seen[name] = page.is_visible("#rotate-hint-start")
        if name == "portrait phone":
            SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT_DIR / "player-rotate-hint-before-start.png"))
            page.set_viewport_size({"width": 844, "height": 390})  # the worker turns the phone: the hint goes
            page.wait_for_function("() => document.getElementById('rotate-hint-start').hidden")
        context.close()
    assert seen == {"portrait phone": True, "turned phone": False, "portrait pictures": False}
