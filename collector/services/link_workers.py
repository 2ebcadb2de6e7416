"""Standalone-link workers: one person opening a study link again is the same worker, not a new one.

The link entry (``/s/<study-link token>/``) keeps a long-lived signed id in a first-party cookie
(``link_worker_cookie``): it names the study and a random worker id, signed with SECRET_KEY, so it cannot
be forged, moved to another study, or linked to anything outside this server. It is scoped to the study
links (path ``/s/``, one cookie name per study), ``HttpOnly``, ``SameSite=Lax``; links are top-level
pages (no crowd platform frames them), so no third-party cookie is involved. Platforms with their own
worker ids (Toloka, Prolific, MTurk) never use it.

Wiring in the entry view (``annotation_ui.views.study_link_entry``, POST)::

    name = link_worker_cookie_name(study_id=study.pk)
    worker, signed = link_worker_identify(study_id=study.pk, signed_id=request.COOKIES.get(name, ""))
    ... session_start(study=study, worker=worker, ...) ...   # resumes the worker's running batch
    response.set_cookie(value=signed, **link_worker_cookie(study_id=study.pk, secure=request.is_secure()))
"""

from __future__ import annotations

import uuid

from django.core import signing

from collector.models import Worker
from collector.services.workers import worker_create

_SALT = "clicklab.link.worker.v1"
LINK_WORKER_MAX_AGE_S = 365 * 24 * 3600
LINK_PLATFORM = "link"


def link_worker_cookie_name(*, study_id: int) -> str:
    return f"clicklab_link_worker_{study_id}"


def link_worker_cookie(*, study_id: int, secure: bool) -> dict:
    """Keyword arguments of ``HttpResponse.set_cookie`` (all but ``value``) for the worker cookie."""
    return {
        "key": link_worker_cookie_name(study_id=study_id),
        "max_age": LINK_WORKER_MAX_AGE_S,
        "path": "/s/",
        "secure": secure,
        "httponly": True,
        "samesite": "Lax",
    }


def link_worker_identify(*, study_id: int, signed_id: str | None) -> tuple[Worker, str]:
    """The link worker of this browser for ``study_id`` and the signed id to keep in its cookie.

    ``signed_id``: the cookie's value from an earlier visit (or empty). A genuine id made for this study
    names the same worker again; anything else (missing, forged, expired, another study's, a worker that
    no longer exists) mints a new worker with a new id."""
    claimed_id = signed_id or ""
    try:
        payload = signing.loads(claimed_id, salt=_SALT, max_age=LINK_WORKER_MAX_AGE_S)
    except signing.BadSignature:
        payload = None
    if isinstance(payload, dict) and payload.get("study") == study_id and isinstance(payload.get("w"), str):
        worker = Worker.objects.filter(platform=LINK_PLATFORM, external_id=payload["w"]).first()
        if worker is not None:
            return worker, claimed_id
    external_id = f"link-{uuid.uuid4().hex}"
    worker = worker_create(platform=LINK_PLATFORM, external_id=external_id)  # a random id: nobody has it
    return worker, signing.dumps({"study": study_id, "w": external_id}, salt=_SALT, compress=False)
