"""A corrective-click campaign end to end in real Chromium with a real Celery worker doing the model updates
(issue 17): each worker first passes the qualification test (a careful click on the test picture), then a desktop
worker (mouse: left = positive, right = negative, undo, a reload mid-round, three rounds,
"mask is fine") and a phone worker (touch with the +/− toggle, "done" with clicks pending) in one test with two
browser contexts; then the campaign's masks are exported as COCO RLE that pycocotools decodes back to the
stored masks."""

from __future__ import annotations

import csv
import json

import cv2
import numpy as np
import pytest
from pycocotools import mask as coco_mask

from collector.models import CorrectiveClick, CorrectiveItem, CorrectiveQualification, Session
from collector.services.masks import instance_masks
from exports.corrective import corrective_export, read_mask
from tests.factories import make_dataset, make_study
from tests.support.celery_worker import purge_queues

from .driver import DESKTOP, PHONE, entry_url, open_player

pytestmark = [pytest.mark.browser, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

UPDATE_TIMEOUT_MS = 90_000


def _wait_clicking(page, *, round_number: int, index: int) -> dict:
    page.wait_for_function(
        "([round, index]) => { const c = window.clicklabCorrective; return c && c.index === index && c.item"
        " && c.item.state === 'clicking' && c.item.round === round && c.frame.w > 1; }",
        arg=[round_number, index],
        timeout=UPDATE_TIMEOUT_MS,
        polling=100,
    )
    return page.evaluate(
        "() => ({frame: window.clicklabCorrective.frame, item: window.clicklabCorrective.item})"
    )


def _client_point(page, view: dict, x: float, y: float) -> tuple[float, float]:
    """Client px of canonical pixel (x, y) of the current picture."""
    rect = page.evaluate(
        "() => { const r = document.getElementById('canvas').getBoundingClientRect(); return {l: r.left, t: r.top}; }"
    )
    frame, item = view["frame"], view["item"]
    return rect["l"] + frame["x"] + x * frame["w"] / item["width"], rect["t"] + frame["y"] + y * frame[
        "h"
    ] / item["height"]


def _centre(view: dict) -> tuple[float, float]:
    x0, y0, x1, y1 = view["item"]["box"]
    return (x0 + x1) / 2 + 0.5, (y0 + y1) / 2 + 0.5


def _budget(page) -> str:
    return page.locator("#budget").inner_text()


def _wait_code(page) -> str:
    page.wait_for_selector("#completion-code:not(:empty)", timeout=UPDATE_TIMEOUT_MS)
    return page.locator("#completion-code").inner_text()


def _pass_the_test(page, study, *, touch: bool) -> None:
    """A careful worker's qualification test (one picture): one click on the deepest point of the larger error
    region of the mask shown (positive on a part it misses, negative on a part it covers wrongly), "Update
    mask", then "Mask is fine"; the result screen's Continue opens the real batch's instructions."""
    assert page.locator("#qualification-note").is_visible()
    (page.tap if touch else page.click)("#start-button")
    view = _wait_clicking(page, round_number=1, index=0)
    test = Session.objects.filter(study=study, is_qualification=True).latest("started_at")
    item = test.corrective_items.select_related("current_mask", "trial__target__instance").get(position=0)
    gt, ignore = instance_masks(item.trial.target.instance)
    shown = read_mask(item.current_mask.file.name)
    keep = ~ignore if ignore is not None else np.ones_like(gt)
    missed, extra = gt & ~shown & keep, shown & ~gt & keep
    region, positive = (missed, True) if missed.sum() >= extra.sum() else (extra, False)
    assert region.any(), "the test picture's mask is already perfect: nothing for a careful worker to click"
    depth = cv2.distanceTransform(np.pad(region, 1).astype(np.uint8), cv2.DIST_L2, 5)[1:-1, 1:-1]
    y, x = np.unravel_index(int(np.argmax(depth)), depth.shape)
    point = _client_point(page, view, x + 0.5, y + 0.5)
    if touch:
        if not positive:
            page.tap("#sign-toggle")
        page.touchscreen.tap(*point)
    else:
        page.mouse.click(*point, button="left" if positive else "right")
    page.wait_for_function("() => document.getElementById('budget').textContent.includes('1 / 4')")
    (page.tap if touch else page.click)("#submit-button")
    _wait_clicking(page, round_number=2, index=0)
    (page.tap if touch else page.click)("#skip-button")
    page.wait_for_selector("#screen-qualification:not([hidden])", timeout=UPDATE_TIMEOUT_MS)
    assert "You passed the qualification test" in page.locator("#qualification-text").inner_text()
    test_url = page.url
    (page.tap if touch else page.click)("#continue-button")
    page.wait_for_url(lambda url: "/a/" in url and url != test_url, timeout=30_000)
    page.wait_for_selector("#start-button", state="visible")
    assert page.locator("#qualification-note").count() == 0  # the real batch's instructions


def test_two_workers_correct_masks_on_pc_and_phone_and_the_coco_export_decodes_back(
    chromium, player_server, models_worker, tmp_path
):
    # three pictures: the qualification test takes the first, the campaign's batches the other two
    dataset = make_dataset(tmp_path, n_images=3, size=(160, 120))
    study = make_study(
        dataset,
        publish=True,
        kind="corrective",
        batch_size=2,
        quota_pc=1,
        quota_mobile=1,
        qualification_enabled=True,
        qualification_instances=1,
    )
    assert (study.corrective_rounds, study.corrective_clicks_per_round) == (3, 4)

    # --- desktop: mouse ------------------------------------------------------------------------------
    desk = chromium.new_context(**DESKTOP)
    page = desk.new_page()
    sent: dict[str, tuple[float, float]] = {}  # idempotency key -> (x, y) as the player sent them
    page.on(
        "request",
        lambda r: (
            sent.setdefault(
                r.post_data_json["idempotency_key"], (r.post_data_json["x"], r.post_data_json["y"])
            )
            if r.url.endswith("/corrective/click") and r.method == "POST"
            else None
        ),
    )
    open_player(page, entry_url(player_server.url, study, "pc"))
    _pass_the_test(page, study, touch=False)
    page.click("#start-button")
    view = _wait_clicking(page, round_number=1, index=0)
    assert "Round 1 of 3" in _budget(page) and "0 / 4" in _budget(page)
    cx, cy = _centre(view)
    page.mouse.click(*_client_point(page, view, cx, cy))  # left: positive
    page.mouse.click(*_client_point(page, view, 3, 3), button="right")  # right: negative
    page.wait_for_function("() => document.getElementById('budget').textContent.includes('2 / 4')")
    page.click("#undo-button")
    page.wait_for_function("() => window.clicklabCorrective.pending === 0", timeout=30_000)
    assert "1 / 4" in _budget(page)
    page.click("#submit-button")
    view = _wait_clicking(page, round_number=2, index=0)
    page.mouse.click(*_client_point(page, view, cx - 10, cy))
    page.wait_for_function("() => window.clicklabCorrective.pending === 0", timeout=30_000)
    page.reload()  # a reload mid-round resumes where the worker was, with the round's click
    view = _wait_clicking(page, round_number=2, index=0)
    assert "Round 2 of 3" in _budget(page) and "1 / 4" in _budget(page)
    page.click("#hide-button")
    assert page.locator("#hide-button").get_attribute("aria-pressed") == "true"
    page.click("#submit-button")
    view = _wait_clicking(page, round_number=3, index=0)
    page.mouse.click(*_client_point(page, view, cx + 10, cy))
    page.click("#submit-button")  # the last round: the item is done once its update is stored
    _wait_clicking(page, round_number=1, index=1)
    page.click("#skip-button")  # "mask is fine"
    desk_code = _wait_code(page)

    # --- phone: touch with the two-state toggle ---------------------------------------------------------
    phone = chromium.new_context(**PHONE)
    tap = phone.new_page()
    open_player(tap, entry_url(player_server.url, study, "mobile"))
    _pass_the_test(tap, study, touch=True)
    tap.tap("#start-button")
    view = _wait_clicking(tap, round_number=1, index=0)
    pcx, pcy = _centre(view)
    tap.touchscreen.tap(*_client_point(tap, view, pcx, pcy))  # the toggle starts on "+"
    tap.tap("#sign-toggle")
    assert tap.locator("#sign-toggle").get_attribute("data-positive") == "false"
    tap.touchscreen.tap(*_client_point(tap, view, 4, 4))
    tap.wait_for_function("() => document.getElementById('budget').textContent.includes('2 / 4')")
    tap.tap("#done-button")  # done with two clicks pending: applied, then the item ends
    _wait_clicking(tap, round_number=1, index=1)
    tap.tap("#skip-button")
    phone_code = _wait_code(tap)
    assert phone_code != desk_code

    # --- what the server holds ---------------------------------------------------------------------------
    results = CorrectiveQualification.objects.filter(study=study)
    assert sorted((r.passed, r.placement) for r in results) == [(True, 1.0), (True, 1.0)]
    sessions = {s.device: s for s in Session.objects.filter(study=study, is_qualification=False)}
    assert {d: (s.status, s.validity) for d, s in sessions.items()} == {
        "pc": ("finished", "counted"),
        "mobile": ("finished", "counted"),
    }
    desk_items = list(CorrectiveItem.objects.filter(session=sessions["pc"]).order_by("position"))
    assert [(i.state, i.current_mask.round) for i in desk_items] == [("done", 3), ("skipped", 0)]
    assert [m.round for m in desk_items[0].masks.order_by("round")] == [0, 1, 2, 3]
    clicks = list(CorrectiveClick.objects.filter(item=desk_items[0]).order_by("round", "order"))
    assert [(c.round, c.is_positive, c.undone, c.pointer_type) for c in clicks] == [
        (1, True, False, "mouse"),
        (1, False, True, "mouse"),
        (2, True, False, "mouse"),
        (3, True, False, "mouse"),
    ]
    assert abs(clicks[0].x - cx) < 1.5 and abs(clicks[0].y - cy) < 1.5  # lands on the canonical pixel
    assert abs(clicks[1].x - 3) < 1.5 and abs(clicks[1].y - 3) < 1.5
    assert all(c.item_ms is not None and c.item_ms >= 0 for c in clicks) and desk_items[0].active_ms > 0
    phone_items = list(CorrectiveItem.objects.filter(session=sessions["mobile"]).order_by("position"))
    assert [(i.state, i.current_mask.round) for i in phone_items] == [("done", 1), ("skipped", 0)]
    phone_clicks = CorrectiveClick.objects.filter(item=phone_items[0]).order_by("order")
    assert [(c.is_positive, c.pointer_type) for c in phone_clicks] == [(True, "touch"), (False, "touch")]

    # --- the export: COCO RLE that pycocotools decodes back to the stored masks ------------------------
    result = corrective_export(study_id=study.pk, out_dir=tmp_path / "export")
    coco = json.loads((tmp_path / "export" / "masks.json").read_text())
    assert result.annotations == 4
    for annotation in coco["annotations"]:
        item = CorrectiveItem.objects.select_related("current_mask").get(pk=annotation["clicklab"]["item_id"])
        segmentation = annotation["segmentation"]
        decoded = coco_mask.decode({"size": segmentation["size"], "counts": segmentation["counts"].encode()})
        assert np.array_equal(decoded.astype(bool), read_mask(item.current_mask.file.name))
    # the click log holds every click the desktop player sent, to the last bit (issue 34.3)
    keys = {
        (str(item), str(number), str(order)): key
        for item, number, order, key in CorrectiveClick.objects.filter(
            item__session=sessions["pc"]
        ).values_list("item_id", "round", "order", "idempotency_key")
    }
    with open(tmp_path / "export" / "clicks.csv", newline="") as handle:
        logged = {
            keys[(row["item_id"], row["round"], row["order"])]: (float(row["x"]), float(row["y"]))
            for row in csv.DictReader(handle)
            if row["session_id"] == str(sessions["pc"].pk)
        }
    assert logged and logged == {key: sent[key] for key in logged}, "clicks.csv holds the coordinates as sent"
    assert any(x != round(x, 2) or y != round(y, 2) for x, y in logged.values()), (
        "the player sent sub-pixel clicks"
    )


def test_a_refused_corrective_click_is_not_retried_is_shown_and_reported(chromium, player_server, tmp_path):
    """Issue 20.4 for the corrective player: the session expires while the worker clicks, so the server
    refuses the click with a 409. The outbox sends it once, the item shows the server's reason, and the
    refusal is reported to POST .../problem, where it is kept on the session. The initial masks are applied
    here (no models worker: nothing else is tested)."""
    from collector.services.corrective import corrective_update_apply

    dataset = make_dataset(tmp_path, n_images=2, size=(160, 120))
    study = make_study(dataset, publish=True, kind="corrective", batch_size=2, quota_pc=1, quota_mobile=1)
    context = chromium.new_context(**DESKTOP)
    page = context.new_page()
    clicks = []
    page.on("request", lambda r: clicks.append(r.url) if r.url.endswith("/corrective/click") else None)
    try:
        open_player(page, entry_url(player_server.url, study, "pc"))
        session = Session.objects.get(study=study)
        for item in CorrectiveItem.objects.filter(session=session):
            corrective_update_apply(item_id=item.pk, round_number=0)
        page.click("#start-button")
        view = _wait_clicking(page, round_number=1, index=0)
        Session.objects.filter(pk=session.pk).update(status=Session.Status.EXPIRED)
        page.mouse.click(*_client_point(page, view, *_centre(view)))
        page.wait_for_function(
            "() => !document.getElementById('item-error').hidden"
            " && document.getElementById('item-error').textContent.includes('takes no more work')",
            timeout=30_000,
        )
        page.wait_for_timeout(3000)  # room for a retry that must not come
    finally:
        context.close()
        purge_queues()  # the initial-mask tasks queued for a models worker that never ran
    assert len(clicks) == 1, clicks
    problems = Session.objects.get(pk=session.pk).problems
    assert [(p["endpoint"], p["status"], p["position"]) for p in problems] == [("corrective/click", 409, 0)]
    assert "takes no more work" in problems[0]["message"]
    assert not CorrectiveClick.objects.filter(item__session=session).exists()


def test_the_corrective_end_is_the_timed_players_when_the_platform_cannot_be_reached(
    chromium, player_server, tmp_path, settings
):
    """The corrective player ends with the timed player's finish step (static/player/ui.js): the code on
    screen with a Copy button that works, and Prolific's redirect only once Prolific answers (ui.js's
    ``platformReachable``); Prolific cannot be reached here, so the worker stays with the code and is told
    what to do. The session is worked through the services (the end is what is tested)."""
    from collector.services.corrective import (
        corrective_item_skip,
        corrective_items_ensure,
        corrective_session_finish,
        corrective_update_apply,
    )
    from collector.services.session_start import session_start
    from collector.services.tokens import session_token_make
    from tests.factories import make_worker

    from .driver import SCREENSHOT_DIR, closed_port

    dead = f"http://127.0.0.1:{closed_port()}/submissions/complete"
    settings.PROLIFIC_COMPLETE_URL = dead
    dataset = make_dataset(tmp_path, n_images=2, size=(160, 120))
    study = make_study(dataset, publish=True, kind="corrective", platform="prolific", batch_size=2, quota_pc=1,
                       quota_mobile=1, platform_config={"prolific_completion_code": "C0RR3CT1"})  # fmt: skip
    session = session_start(study=study, worker=make_worker(platform="prolific"), device="pc",
                            platform_assignment_id="sub-1")  # fmt: skip
    for item in corrective_items_ensure(session=session, send=False):
        corrective_update_apply(item_id=item.pk, round_number=0)
        corrective_item_skip(session=session, item_id=item.pk)
    corrective_session_finish(session_id=session.pk)
    context = chromium.new_context(**DESKTOP)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=player_server.url)
    page = context.new_page()
    try:
        player_url = f"{player_server.url}/a/{session_token_make(session_id=session.pk)}/"
        page.goto(player_url)
        page.wait_for_function("() => window.clicklabCorrective.redirectFailed", timeout=20_000)
        assert page.url == player_url and page.inner_text("#completion-code") == "C0RR3CT1"
        assert "could not be reached" in page.inner_text("#done-text")
        assert page.get_attribute("#done-link", "href") == f"{dead}?cc=C0RR3CT1"
        page.click("#copy-code")
        page.wait_for_function("() => document.getElementById('copy-code').textContent === 'Copied'")
        assert page.evaluate("() => navigator.clipboard.readText()") == "C0RR3CT1"
        SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT_DIR / "corrective-prolific-unreachable.png"))
    finally:
        context.close()
