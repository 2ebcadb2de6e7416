"""The annotator API of corrective-click campaigns (issue 17) under ``/api/annotator/<token>/corrective/``.

The same API as ``annotation_ui.api`` (its ``AnnotatorView``): JSON, CSRF-exempt, authorised by the session
token only; every body passes the bounded parser (``annotation_ui.parsers``) and the endpoint's declared
serializer (``annotation_ui.serializers``, ``Corrective*In``: strict types, so ``"x": true`` or an object as
a key is a 400 naming the field) before any service runs; the endpoints are in the annotator schema
(``/api/annotator/schema/``). Every write is safe to repeat (the player's outbox retries until the server
answers): clicks and undos carry the click's idempotency key, a round submit names its round,
skip/done/finish are no-ops the second time. Errors are the envelope of ``config.api_errors`` (``{"code",
"message", "field": path|null, ...}``) with 400 (malformed, e.g. a click outside the image), 404 (bad token, an
item of another session), 409 (refused by the rules: skipped/finished item, budget used, model updating);
refusals of an item add ``"item"``; a refused finish's ``code`` is ``items_unfinished`` (wait for the updates)
or ``session_closed`` (final).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.files.storage import default_storage
from django.http import FileResponse, Http404
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.response import Response

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
from collector.services.qualification import (
    not_qualified_message,
    qualification_result,
)
from collector.services.qualified_start import qualification_continue
from collector.services.session_start import SessionStartRefused
from collector.services.tokens import session_token_make
from config.api_errors import error_body

from . import serializers as contract
from .api import ERRORS, REFUSED, TOKEN_PARAMETER, AnnotatorView
from .payloads import finish_payload
from .views import session_from_token

#: the code of a refusal whose exception names no reason, by its status
_REFUSED_CODES = {400: "invalid", 404: "not_found", 409: "refused"}
ITEM_OUT = OpenApiResponse(OpenApiTypes.OBJECT, description="{ok, item: the item's new state}.")

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


def corrective_finish_payload(session: Session, *, token: str) -> dict | None:
    """The finish step: the platform's (code, redirect, auto-post) for a campaign session; for a finished
    qualification test ``{"kind": "qualification", "passed", "message", "continue_url"}`` (a passed worker
    continues to the real tasks, a failed one is told so; neither gets a code for the test itself)."""
    if not session.is_qualification:
        return finish_payload(session)
    if session.status != Session.Status.FINISHED:
        return None
    result = qualification_result(study=session.study, worker=session.worker)
    passed = bool(result and result.passed)
    return {
        "kind": "qualification",
        "passed": passed,
        "message": _("You passed the qualification test. Continue to the task.")
        if passed
        else not_qualified_message(),
        "continue_url": reverse("annotation_ui:corrective_continue", kwargs={"token": token})
        if passed
        else "",
        "code": "",
        "url": "",
        "fields": {},
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
        "api": {
            **{name: url(name) for name in ("state", "click", "undo", "submit", "skip", "done", "finish")},
            # refusals the player showed (and stopped retrying) are reported as the timed player's are
            "problem": reverse("annotation_ui:api_problem", kwargs={"token": token}),
        },
        "qualification": session.is_qualification,
        "finish": corrective_finish_payload(session, token=token),
    }


class CorrectiveView(AnnotatorView):
    """A corrective endpoint: the token must name a session of a corrective campaign."""

    def refused(self, exc: CorrectiveRefused, **extra) -> Response:
        code = exc.reason or _REFUSED_CODES.get(exc.status, "refused")
        return Response(error_body(code, str(exc), **extra), status=exc.status)


class State(CorrectiveView):
    """The campaign's items with their rounds, clicks and current masks, and the finish step."""

    @extend_schema(parameters=[TOKEN_PARAMETER], responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request, token: str):
        session = _corrective_session(token)
        return Response(corrective_payload(session=session, token=token))


def _item_state(item_id, token: str) -> dict:
    item = (
        CorrectiveItem.objects.select_related(
            "session__study", "trial__target__instance__image", "current_mask"
        )
        .filter(pk=item_id)
        .first()
    )
    return item_payload(item, token=token) if item else {}


class Click(CorrectiveView):
    """One click on the item's current round (201 stored, 200 a retry of a stored click)."""

    @extend_schema(
        parameters=[TOKEN_PARAMETER],
        request=contract.CorrectiveClickIn,
        responses={201: OpenApiTypes.OBJECT, 200: OpenApiTypes.OBJECT, **ERRORS, **REFUSED},
    )
    def post(self, request, token: str):
        session = _corrective_session(token)
        data = self.input(contract.CorrectiveClickIn)
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
            return self.refused(exc, item=data["item"])
        body = {
            "ok": True,
            "created": created,
            "round": stored.round,
            "order": stored.order,
            "item": _item_state(stored.item_id, token),
        }
        return Response(body, status=201 if created else 200)


class ItemAction(CorrectiveView):
    """One item's action: the body is checked by ``contract_in``; ``service`` gets the item, the body's
    ``fields`` (request field -> keyword of ``service``) and ``round_ms`` when ``timed`` and present; answers
    the item's new state (the item is ``item_id_of(result)``, by default the result's own id)."""

    contract_in = contract.CorrectiveItemIn
    fields: dict = {}
    timed = True
    # Each action's service function (a staticmethod); their keyword-only signatures differ.
    service: Callable[..., Any]
    item_id_of: Callable[[Any], int] = staticmethod(lambda result: result.pk)

    def post(self, request, token: str):
        session = _corrective_session(token)
        data = self.input(self.contract_in)
        kwargs = {keyword: data[name] for name, keyword in self.fields.items()}
        if self.timed and data.get("round_ms") is not None:
            kwargs["round_ms"] = data["round_ms"]
        try:
            result = self.service(session=session, item_id=data["item"], **kwargs)
        except CorrectiveRefused as exc:
            return self.refused(exc, item=data["item"])
        return Response({"ok": True, "item": _item_state(self.item_id_of(result), token)})


def _item_schema(contract_in):
    return extend_schema(
        parameters=[TOKEN_PARAMETER], request=contract_in, responses={200: ITEM_OUT, **ERRORS, **REFUSED}
    )


class Undo(ItemAction):
    """Undo the latest live click of the current round (again: a no-op)."""

    contract_in = contract.CorrectiveUndoIn
    fields = {"idempotency_key": "idempotency_key"}
    timed = False
    service = staticmethod(corrective_click_undo)
    item_id_of = staticmethod(lambda click: click.item_id)

    @_item_schema(contract.CorrectiveUndoIn)
    def post(self, request, token: str):
        return super().post(request, token)


class Submit(ItemAction):
    """End the item's current round and queue the model update (a repeated submit: the item unchanged)."""

    contract_in = contract.CorrectiveSubmitIn
    fields = {"round": "round_number"}
    service = staticmethod(corrective_round_submit)

    @_item_schema(contract.CorrectiveSubmitIn)
    def post(self, request, token: str):
        return super().post(request, token)


class Skip(ItemAction):
    """ "Skip / mask is fine": the item ends with its current mask."""

    service = staticmethod(corrective_item_skip)

    @_item_schema(contract.CorrectiveItemIn)
    def post(self, request, token: str):
        return super().post(request, token)


class Done(ItemAction):
    """ "Done": live clicks of the round are applied first, then the item ends."""

    service = staticmethod(corrective_item_done)

    @_item_schema(contract.CorrectiveItemIn)
    def post(self, request, token: str):
        return super().post(request, token)


class Finish(CorrectiveView):
    """The completion step, once every item is done or skipped."""

    @extend_schema(
        parameters=[TOKEN_PARAMETER],
        request=contract.FinishIn,
        responses={200: contract.FinishOut, **ERRORS, **REFUSED},
    )
    def post(self, request, token: str):
        session = _corrective_session(token)
        self.input(contract.FinishIn)
        try:
            finished = corrective_session_finish(session_id=session.pk)
        except CorrectiveRefused as exc:
            return self.refused(exc)
        return Response({"ok": True, "finish": corrective_finish_payload(finished, token=token)})


class Continue(CorrectiveView):
    """After a passed qualification test: start (or resume) the worker's real batch; answers its player
    address. 409 with the message for the worker when there is none (test failed, study closed, nothing
    left)."""

    @extend_schema(
        parameters=[TOKEN_PARAMETER],
        request=contract.FinishIn,
        responses={200: OpenApiTypes.OBJECT, **ERRORS, **REFUSED},
    )
    def post(self, request, token: str):
        session = _corrective_session(token)
        self.input(contract.FinishIn)
        try:
            real = qualification_continue(session=session)
        except SessionStartRefused as exc:
            return Response(error_body("not_admitted", str(exc)), status=409)
        url = reverse("annotation_ui:player", kwargs={"token": session_token_make(session_id=real.pk)})
        return Response({"ok": True, "player_url": url})


state = State.as_view()
click = Click.as_view()
undo = Undo.as_view()
submit = Submit.as_view()
skip = Skip.as_view()
done = Done.as_view()
finish = Finish.as_view()
continue_ = Continue.as_view()


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
