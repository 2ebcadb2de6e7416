"""Time from opening the study link to START enabled, 10-trial batch, on an emulated slow network.

Chromium's network is throttled through CDP ``Network.emulateNetworkConditions`` to 1.6 Mbit/s down,
750 kbit/s up and 150 ms round trip (a slow phone connection); every run uses a fresh browser context
(cold cache, a new link worker). Measured from the study link a worker opens (``/s/<token>/``: the entry
page, its device-detecting POST, the player): the absolute time START becomes enabled minus the time the
link's navigation started (``performance.timeOrigin`` of both documents), plus one round trip for the TCP
connection set-up that Chromium's emulation does not model; and the bytes received.

Ours: the link as workers get it. The entry POST answers with the player page itself; START is enabled
once the first trial's pictures are decoded (the batch streams in one response, the rest arrive while
trial 1 runs). Baseline in the same run, same study, same server and the same ten pictures (it resumes the
batch of the run before it, alternating which goes first): the behaviour before issue 14, reached
through the same code (``?then=redirect&load=all``): the POST redirects to the player page, and START
waits for every picture of the batch. Static files are served as in production by default
(``collectstatic`` + WhiteNoise, compressed); ``--static development`` serves them as ``make demo`` does.
Goal (issue 14): START <= 1.5 s from the link. Usage::

    .venv/bin/python bench/bench_player_loading.py [--runs 3] [--display-mode Object_CutOut] [--static production]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_player_setup import bench_environment, chromium, grabcut_study, live_server  # noqa: E402

from tests.annotation_ui.driver import DESKTOP, entry_url, wait_start_enabled  # noqa: E402

SLOW_NETWORK = {
    "offline": False,
    "latency": 150,
    "downloadThroughput": 1_600_000 / 8,
    "uploadThroughput": 750_000 / 8,
}

# The first document of the tab (the entry page) leaves its time origin for the documents after it.
LINK_CLOCK = "try { sessionStorage.getItem('t0') || sessionStorage.setItem('t0', String(performance.timeOrigin)); } catch (e) {}"


def measure(browser, url: str, cookies=()) -> tuple[tuple[float, int, float, list[float]], list]:
    """((ms from opening the link to START enabled, bytes received, ms from START enabled to the batch's
    last picture arriving: > 0 when START came first, [ms from the link to the player page's first byte,
    to the first trial's pictures decoded, to the refresh interval measured]), the context's cookies) on
    the slow network, cold cache. ``cookies``: the link worker's cookie of an earlier run, so the server
    resumes that worker's batch: both players are then timed on the same ten pictures."""
    context = browser.new_context(**DESKTOP)
    context.add_cookies(list(cookies))
    context.add_init_script(LINK_CLOCK)
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", SLOW_NETWORK)
    received = []
    cdp.on("Network.loadingFinished", lambda event: received.append(event.get("encodedDataLength", 0)))
    page.goto(url)
    page.wait_for_url("**/a/**", timeout=180_000)
    wait_start_enabled(page, timeout_ms=180_000)
    since_link_ms = page.evaluate(
        "() => performance.timeOrigin + window.clicklabPlayer.startEnabledAt - Number(sessionStorage.getItem('t0'))"
    )
    # What START waited for, each from the link (ms): the player page's first byte, the first trial's
    # pictures decoded, the refresh interval measured.
    steps = page.evaluate(
        """() => {
            const origin = performance.timeOrigin - Number(sessionStorage.getItem('t0'));
            const player = window.clicklabPlayer, nav = performance.getEntriesByType('navigation')[0];
            return [nav.responseStart, player.firstTrialReadyAt, player.refreshReadyAt].map((t) => origin + t);
        }"""
    )
    # The rest of the batch keeps arriving after START: wait for the bundle to end, then compare.
    page.wait_for_function(
        "() => performance.getEntriesByType('resource').some((e) => e.name.endsWith('.bin') && e.responseEnd > 0)",
        timeout=180_000,
    )
    lead_ms = page.evaluate(
        "() => performance.getEntriesByType('resource').find((e) => e.name.endsWith('.bin')).responseEnd"
        " - window.clicklabPlayer.startEnabledAt"
    )
    cookies = context.cookies()
    context.close()
    # Chromium's emulation delays each request by the latency but models no TCP connection set-up, which a
    # real page open pays once before its first request: charge one round trip for it.
    rtt = SLOW_NETWORK["latency"]
    return (float(since_link_ms) + rtt, int(sum(received)), float(lead_ms), [t + rtt for t in steps]), cookies


def _warm_up(browser, base_url: str, study) -> None:
    """One unthrottled run through the link first, so the server's one-off imports are not timed."""
    context = browser.new_context(**DESKTOP)
    page = context.new_page()
    page.goto(entry_url(base_url, study))
    page.wait_for_url("**/a/**")
    wait_start_enabled(page)
    context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--display-mode", default="Object_CutOut")
    parser.add_argument(
        "--static",
        choices=["production", "development"],
        default="production",
        help="production: collectstatic + WhiteNoise (compressed, as deployed); development: Django's "
        "uncompressed static handler, as `make demo` serves",
    )
    args = parser.parse_args()
    with (
        bench_environment("player_loading"),
        live_server(production_static=args.static == "production") as base_url,
        chromium() as browser,
    ):
        study = grabcut_study(quota_pc=1000, quota_mobile=1000, display_mode=args.display_mode)
        link = entry_url(base_url, study)
        ours, before = [], []
        _warm_up(browser, base_url, study)
        for run in range(args.runs):
            # Both on the same batch (the second resumes the first's), first one then the other first.
            baseline = f"{link}?then=redirect&load=all"
            if run % 2 == 0:
                result, cookies = measure(browser, link)
                ours.append(result)
                before.append(measure(browser, baseline, cookies)[0])
            else:
                result, cookies = measure(browser, baseline)
                before.append(result)
                ours.append(measure(browser, link, cookies)[0])
            print(
                f"run {run + 1}: ours {ours[-1][0] / 1000:.2f} s ({ours[-1][1] / 1024:.0f} KiB by START+rest; "
                f"START {ours[-1][2]:.0f} ms before the last picture; player page's first byte "
                f"{ours[-1][3][0]:.0f} ms, first trial decoded {ours[-1][3][1]:.0f} ms, refresh measured "
                f"{ours[-1][3][2]:.0f} ms), before {before[-1][0] / 1000:.2f} s ({before[-1][1] / 1024:.0f} KiB)"
            )
        ours_s = statistics.median(run[0] for run in ours) / 1000
        before_s = statistics.median(run[0] for run in before) / 1000
        worst_s = max(run[0] for run in ours) / 1000
        print(
            f"study link -> START enabled, 10 trials, 1.6 Mbit/s + 150 ms RTT, {args.static} static, median of "
            f"{args.runs}: ours {ours_s:.2f} s (slowest {worst_s:.2f} s), before issue 14 (redirect + load "
            f"everything first) {before_s:.2f} s; ratio before/ours {before_s / ours_s:.2f}x; goal START <= 1.5 s: "
            f"median {ours_s <= 1.5}, every run {worst_s <= 1.5}"
        )


if __name__ == "__main__":
    main()
