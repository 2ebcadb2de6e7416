"""What the player page receives: the session's trials with stimulus URLs, never a mask.

Stimulus URLs carry the session token and the content-hash name, so a stimulus is served only to a
session holding that trial and can be cached forever.
"""

from __future__ import annotations

import hashlib

from django.urls import reverse
from django.utils.translation import gettext as _

from collector.models import DisplayMode, Session, Study, Target, Trial
from collector.platforms import get_adapter
from collector.services.presentations import trial_presented_attached
from collector.services.reservations import HEARTBEAT_S
from collector.services.stimuli import target_stimuli_ensure


def click_answer(receipt, *, session_id: int, carried: dict | None) -> dict:
    """The click endpoint's body (the DRF view's): the stored click, and how the next
    trial's report it ``carried`` was recorded (by the click's statement, else here, on its own)."""
    body = {
        "ok": True,
        "created": receipt.created,
        "position": receipt.position,
        "missing": receipt.missing_positions,
    }
    if carried is not None:
        body["next_presentation"] = receipt.next_presentation or trial_presented_attached(
            session_id=session_id, **carried
        )
    return body


def study_timing(study: Study) -> dict:
    """Phase durations (ms) and the display mode the player runs with."""
    return {
        "display_mode": study.display_mode,
        "image_ms": study.image_ms,
        "target_ms": study.phase_b_ms(),
        "blocked_ms": study.blocked_ms,
        "batch_size": study.batch_size,
    }


def _text_for(stimuli: dict) -> str:
    if stimuli.get("text"):
        return stimuli["text"]
    return _("the main object in the image")


def trial_stimuli(*, target: Target, url_for) -> dict:
    """Stimulus description of one target for the player; ``url_for(kind, name)`` builds the URL."""
    stimuli = target_stimuli_ensure(target=target)
    image = target.instance.image
    text_mode = stimuli["target"] is None
    return {
        "width": image.width,
        "height": image.height,
        "mode": stimuli["mode"],
        "click_type": target.click_type,
        "display_url": url_for("display", stimuli["display"]["name"]),
        "target_url": None if text_mode else url_for("target", stimuli["target"]["name"]),
        "text": _text_for(stimuli) if text_mode else "",
        "text_fallback": bool(stimuli.get("text_fallback")) if text_mode else False,
    }


def finish_payload(session: Session) -> dict | None:
    if session.status != Session.Status.FINISHED:
        return None
    return get_adapter(session.study.platform).finish_action(session=session).as_dict()


def _stimuli_manifest(trials) -> tuple[list[dict], str]:
    """Every stimulus file of ``trials`` (in play order), ``[{position, kind, name}]``, and a digest of
    that list."""
    entries = []
    for trial in trials:
        stimuli = target_stimuli_ensure(target=trial.target)
        entries += [
            {"position": trial.position, "kind": kind, "name": stimuli[kind]["name"]}
            for kind in ("display", "target")
            if stimuli.get(kind)
        ]
    listing = ";".join(f"{e['position']}:{e['kind']}:{e['name']}" for e in entries)
    return entries, hashlib.sha256(listing.encode()).hexdigest()[:20]


def session_stimuli_manifest(*, session: Session) -> tuple[list[dict], str]:
    """The session's stimulus files and their digest. The digest names the session's one-request stimulus
    bundle, so the bundle can be cached for good: a reload mid-batch gets the same URL and the browser's
    copy (the list covers every trial, done or not, for that reason)."""
    return _stimuli_manifest(
        session.trials.select_related("target__instance__image", "target__round__study").order_by("position")
    )


def session_payload(*, session: Session, token: str) -> dict:
    """The player's whole state: timing, API URLs, and per trial ``done`` plus (if not done) stimuli."""
    study = session.study
    trials = list(
        session.trials.select_related("target__instance__image", "target__round__study", "click").order_by(
            "position"
        )
    )
    running = session.status == Session.Status.STARTED
    items = []
    for trial in trials:
        done = hasattr(trial, "click")
        item = {"position": trial.position, "done": done}
        if trial.role == Trial.Role.PRACTICE:
            item["practice"] = True  # labelled as practice; a control trial looks like any other (screens.py)
        if not done and running:

            def url_for(kind, name, position=trial.position):
                return reverse(
                    "annotation_ui:stimulus",
                    kwargs={"token": token, "position": position, "kind": kind, "name": name},
                )

            item.update(trial_stimuli(target=trial.target, url_for=url_for))
        items.append(item)
    return {
        "mode": "session",
        "session": {"id": session.pk, "status": session.status, "device": session.device},
        "study": study_timing(study),
        "heartbeat_s": HEARTBEAT_S,
        "text_mode": study.display_mode == DisplayMode.TEXT_DESCRIPTION,
        "api": {
            "state": reverse("annotation_ui:api_state", kwargs={"token": token}),
            "client": reverse("annotation_ui:api_client", kwargs={"token": token}),
            "click": reverse("annotation_ui:api_click", kwargs={"token": token}),
            "finish": reverse("annotation_ui:api_finish", kwargs={"token": token}),
            "presented": reverse("annotation_ui:api_presented", kwargs={"token": token}),
            "heartbeat": reverse("annotation_ui:api_heartbeat", kwargs={"token": token}),
            # POST .../problem (wire contract item 4): built beside the click URL, so the player may call
            # it before the endpoint exists (a 404 there is tolerated).
            "problem": reverse("annotation_ui:api_click", kwargs={"token": token}).rsplit("/", 1)[0]
            + "/problem",
        },
        "trials": items,
        "bundle_url": (
            reverse(
                "annotation_ui:stimuli_bundle",
                kwargs={"token": token, "digest": _stimuli_manifest(trials)[1]},
            )
            if running and not all(item["done"] for item in items)
            else None
        ),
        "finish": finish_payload(session),
    }


def preview_payload(*, study: Study, targets: list[Target]) -> dict:
    """A researcher's preview: the same player without timers and without storing anything."""

    def url_builder(target):
        def url_for(kind, name):
            return reverse(
                "annotation_ui:preview_stimulus",
                kwargs={"study_id": study.pk, "target_id": target.pk, "kind": kind, "name": name},
            )

        return url_for

    return {
        "mode": "preview",
        "session": {"id": None, "status": "preview", "device": ""},
        "study": study_timing(study),
        "heartbeat_s": HEARTBEAT_S,
        "text_mode": study.display_mode == DisplayMode.TEXT_DESCRIPTION,
        "api": {"preview_check": reverse("researcher:preview_check", kwargs={"study_id": study.pk})},
        "trials": [
            {
                "position": index,
                "done": False,
                "target_id": target.pk,
                **trial_stimuli(target=target, url_for=url_builder(target)),
            }
            for index, target in enumerate(targets)
        ],
        "bundle_url": None,
        "finish": None,
    }
