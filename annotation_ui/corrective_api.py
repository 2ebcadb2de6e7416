"""The annotator API of corrective-click campaigns (issue 17) under ``/api/annotator/<token>/corrective/``.

Same rules as ``annotation_ui.api``: JSON, CSRF-exempt, authorised by the session token only; every body
passes the bounded parser (``annotation_ui.parsers``) and the endpoint's declared serializer
(``annotation_ui.serializers``: strict types, so ``"x": true`` or an object as a key is a 400 naming the field)
before any service runs. Every write is safe to repeat (the player's outbox retries until the server answers): clicks and undos carry the
click's idempotency key, a round submit names its round, skip/done/finish are no-ops the second time.
Errors are ``{"error": message, ...}`` (a 400 adds ``"field"``) with 400 (malformed, e.g. a click outside the image), 404 (bad token, an
item of another session), 409 (refused by the rules: skipped/finished item, budget used, model updating).
"""

from __future__ import annotations

from django.core.files.storage import default_storage
from django.http import FileResponse, Http404, JsonResponse
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from collector.models import CorrectiveClick, CorrectiveItem, CorrectiveMask, Session
from collector.services.corrective import (
    CorrectiveRefused,
    corrective_click_record,
    corrective_click_undo,
    corrective_item_done,
    corrective_item_skip,
    corrective_items_ensure,
    corrective_round_submit,
    corrective_session_finish,
    round_budget,
)

from . import serializers as contract
from .api import InputRefused, validated
from .parsers import BodyRefused, parse_body
from .payloads import finish_payload
from .views import session_from_token


class BadRequest(Exception):
    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


def _input(request, serializer_class) -> dict:
    """The body through the annotator API's bounded parser (size, depth, NUL/control characters, finite
    numbers: ``annotation_ui.parsers``) and the endpoint's serializer; a refusal is a 400 naming the field."""
    try:
        return validated(serializer_class, parse_body(request.body))
    except BodyRefused as exc:
        raise BadRequest(str(exc.detail), field=exc.field) from None
    except InputRefused as exc:
        raise BadRequest(exc.body["error"], field=exc.body["field"]) from None


def _bad_request(exc: BadRequest) -> JsonResponse:
    return _error(str(exc), 400, field=exc.field)


def _error(message: str, status: int, **extra) -> JsonResponse:
    response = JsonResponse({"error": message, **extra}, status=status)
    response["Cache-Control"] = "no-store"
    return response


def _ok(data: dict, status: int = 200) -> JsonResponse:
    response = JsonResponse(data, status=status)
    response["Cache-Control"] = "no-store"
    return response


IMAGE_TYPES = {
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "png": "image/png",
    "webp": "image/webp",
    "bmp": "image/bmp",
}


def _corrective_session(token: str) -> Session:
    session = session_from_token(token)
    if not session.study.is_corrective:
        raise Http404("not a corrective campaign")
    return session


def item_payload(item: CorrectiveItem, *, token: str) -> dict:
    study = item.session.study
    instance = item.trial.target.instance
    image = instance.image
    live = list(CorrectiveClick.objects.filter(item=item, round=item.round, undone=False).order_by("order"))
    mask = item.current_mask
    return {
        "id": item.pk,
        "position": item.position,
        "state": item.state,
        "round": item.round,
        "rounds": study.corrective_rounds,
        "budget": round_budget(study=study, round_number=item.round),
        "first_click": item.round == 0 and mask is None,
        "clicks": [{"key": c.idempotency_key, "x": c.x, "y": c.y, "positive": c.is_positive} for c in live],
        "mask_url": reverse("annotation_ui:corrective_mask", kwargs={"token": token, "mask_id": mask.pk})
        if mask
        else None,
        "mask_round": mask.round if mask else None,
        "error": item.error,
        "image_url": reverse("annotation_ui:corrective_image", kwargs={"token": token, "item_id": item.pk}),
        "width": image.width,
        "height": image.height,
        "box": [instance.bbox_x0, instance.bbox_y0, instance.bbox_x1, instance.bbox_y1],
        "active_ms": item.active_ms,
    }


def corrective_payload(*, session: Session, token: str) -> dict:
    items = corrective_items_ensure(session=session)
    items = list(
        CorrectiveItem.objects.filter(pk__in=[i.pk for i in items])
        .select_related("session__study", "trial__target__instance__image", "current_mask")
        .order_by("position")
    )

    def url(name: str) -> str:
        return reverse(f"annotation_ui:corrective_{name}", kwargs={"token": token})

    study = session.study
    return {
        "mode": "corrective",
        "session": {"id": session.pk, "device": session.device, "status": session.status},
        "study": {
            "rounds": study.corrective_rounds,
            "clicks_per_round": study.corrective_clicks_per_round,
            "init": study.corrective_init,
        },
        "items": [item_payload(item, token=token) for item in items],
        # A batch already worked on resumes without the instructions.
        "started": any(item.is_finished for item in items)
        or CorrectiveClick.objects.filter(item__session=session).exists(),
        "api": {name: url(name) for name in ("state", "click", "undo", "submit", "skip", "done", "finish")},
        "finish": finish_payload(session),
    }


def _refused(exc: CorrectiveRefused, **extra):
    return _error(str(exc), exc.status, **extra)


@csrf_exempt
@never_cache
@require_GET
def state(request, token: str):
    session = _corrective_session(token)
    return _ok(corrective_payload(session=session, token=token))


def _item_state(item_id, token: str) -> dict:
    item = (
        CorrectiveItem.objects.select_related(
            "session__study", "trial__target__instance__image", "current_mask"
        )
        .filter(pk=item_id)
        .first()
    )
    return item_payload(item, token=token) if item else {}


@csrf_exempt
@require_POST
def click(request, token: str):
    session = _corrective_session(token)
    try:
        data = _input(request, contract.CorrectiveClickIn)
    except BadRequest as exc:
        return _bad_request(exc)
    try:
        stored, created = corrective_click_record(
            session=session,
            item_id=data["item"],
            idempotency_key=data["idempotency_key"],
            x=data["x"],
            y=data["y"],
            is_positive=data["positive"],
            pointer_type=data["pointer_type"],
            item_ms=data.get("item_ms"),
        )
    except CorrectiveRefused as exc:
        return _refused(exc, item=data.get("item"))
    return _ok(
        {
            "ok": True,
            "created": created,
            "round": stored.round,
            "order": stored.order,
            "item": _item_state(stored.item_id, token),
        },
        status=201 if created else 200,
    )


def _item_action(
    request, token: str, action, contract_in, fields: dict | None = None, *, timed=True, item_id_of=None
):
    """One item's action: the body is checked by ``contract_in`` (``item`` and ``fields``, request field ->
    keyword of ``action``, required), ``round_ms`` is passed on when ``timed`` and present; answers the
    item's new state (the item is ``item_id_of(result)``, by default the result's own id)."""
    fields = fields or {}
    session = _corrective_session(token)
    try:
        data = _input(request, contract_in)
    except BadRequest as exc:
        return _bad_request(exc)
    kwargs = {keyword: data[name] for name, keyword in fields.items()}
    if timed:
        kwargs.update(_optional(data))
    try:
        result = action(session=session, item_id=data["item"], **kwargs)
    except CorrectiveRefused as exc:
        return _refused(exc, item=data.get("item"))
    return _ok({"ok": True, "item": _item_state(item_id_of(result) if item_id_of else result.pk, token)})


def _optional(data: dict) -> dict:
    return {"round_ms": data["round_ms"]} if data.get("round_ms") is not None else {}


@csrf_exempt
@require_POST
def undo(request, token: str):
    return _item_action(request, token, corrective_click_undo, contract.CorrectiveUndoIn,
                        {"idempotency_key": "idempotency_key"}, timed=False,
                        item_id_of=lambda click: click.item_id)  # fmt: skip


@csrf_exempt
@require_POST
def submit(request, token: str):
    return _item_action(
        request, token, corrective_round_submit, contract.CorrectiveSubmitIn, {"round": "round_number"}
    )


@csrf_exempt
@require_POST
def skip(request, token: str):
    return _item_action(request, token, corrective_item_skip, contract.CorrectiveItemIn)


@csrf_exempt
@require_POST
def done(request, token: str):
    return _item_action(request, token, corrective_item_done, contract.CorrectiveItemIn)


@csrf_exempt
@require_POST
def finish(request, token: str):
    session = _corrective_session(token)
    try:
        finished = corrective_session_finish(session_id=session.pk)
    except CorrectiveRefused as exc:
        return _refused(exc)
    return _ok({"ok": True, "finish": finish_payload(finished)})


@require_GET
def image(request, token: str, item_id: int):
    """The item's image (the stored file; the player scales it to the canonical frame it is given)."""
    session = _corrective_session(token)
    item = (
        CorrectiveItem.objects.select_related("trial__target__instance__image")
        .filter(pk=item_id, session=session)
        .first()
    )
    if item is None:
        raise Http404("no such item")
    name = item.trial.target.instance.image.file.name
    response = FileResponse(
        default_storage.open(name, "rb"),
        content_type=IMAGE_TYPES.get(name.rsplit(".", 1)[-1].lower(), "application/octet-stream"),
    )
    response["Cache-Control"] = "private, max-age=3600"
    return response


@require_GET
def mask(request, token: str, mask_id: int):
    """A stored mask of one of the session's items (0/255 PNG; names are unique, so cached for good)."""
    session = _corrective_session(token)
    stored = CorrectiveMask.objects.filter(pk=mask_id, item__session=session).first()
    if stored is None:
        raise Http404("no such mask")
    response = FileResponse(default_storage.open(stored.file.name, "rb"), content_type="image/png")
    response["Cache-Control"] = "private, max-age=31536000, immutable"
    return response
