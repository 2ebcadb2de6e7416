"""The input (and output) contract of the annotator API, declared once.

Each annotator endpoint validates its body with one serializer here before any service runs, and the
OpenAPI schema (``/api/annotator/schema/``) is generated from the same declarations. Beyond the parser's
body rules (``annotation_ui.parsers``) the fields are strict: a number is a JSON number (``true`` and
``"1.5"`` are not), finite and within its declared range; an integer is a JSON integer; a string is a JSON
string of printable characters within its length and pattern. Unknown top-level fields are ignored (so an
older server accepts a newer player), but they still pass the parser's body rules.
"""

from __future__ import annotations

import math
import re

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.fields import SkipField, empty, get_error_detail

from collector.models import DEVICES
from config.api_errors import ErrorEnvelope
from config.json_bodies import string_fault

#: Canonical image pixels; images are at most a few thousand px, this only keeps values sane.
MAX_COORDINATE_PX = 100_000.0
#: performance.now() milliseconds: a page open for ~4 months.
MAX_TIMESTAMP_MS = 1e10
MAX_POSITION = 10_000
MAX_CLIENT_INFO_KEYS = 40
MAX_CLIENT_INFO_TEXT = 500
PROBLEM_ENDPOINTS = ("click", "finish", "presented", "client", "start") + tuple(
    f"corrective/{name}" for name in ("click", "undo", "submit", "skip", "done", "finish")
)

TOKEN_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
FLAG_PATTERN = r"^[A-Za-z0-9_.:-]{1,40}$"
CLIENT_INFO_KEY = re.compile(r"^[A-Za-z0-9_]{1,40}$")
#: what a StrictString may hold, as a pattern for the schema (no C0/C1 control character; multiline: tab and line
#: breaks too); config.json_bodies.string_fault is the check
PRINTABLE_TEXT = r"^[^\x00-\x1f\x7f-\x9f]*$"
MULTILINE_TEXT = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*$"


def _run_bounds(field, value) -> None:
    """A number field's validators, run lean: its bounds compared here (DRF's Min/MaxValueValidator, one call
    each per value, stay in the list for the schema), any other validator called as DRF calls it."""
    if field.min_value is not None and value < field.min_value:
        field.fail("min_value", min_value=field.min_value)
    if field.max_value is not None and value > field.max_value:
        field.fail("max_value", max_value=field.max_value)
    others = field.__dict__.get("_other_validators")
    if others is None:
        others = field.__dict__["_other_validators"] = [
            v for v in field.validators if not isinstance(v, MinValueValidator | MaxValueValidator)
        ]
    if others:
        serializers.Field.run_validators(field, value)


class StrictNumber(serializers.FloatField):
    """A finite JSON number (int or float, never a bool or a string) within min/max."""

    default_error_messages = {
        "invalid": "must be a number (a JSON number, not a string or a boolean)",
        "not_finite": "must be a finite number",
    }

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        try:
            value = float(data)
        except OverflowError:
            self.fail("overflow")
        if not math.isfinite(value):
            self.fail("not_finite")
        return value

    def run_validators(self, value):
        _run_bounds(self, value)


class StrictInteger(serializers.IntegerField):
    """A JSON integer (never a bool, a float or a string) within min/max."""

    default_error_messages = {"invalid": "must be an integer (a JSON integer, not a string or a boolean)"}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return data

    def run_validators(self, value):
        _run_bounds(self, value)


class StrictBoolean(serializers.BooleanField):
    """A JSON boolean (never 1, "true" or "yes")."""

    default_error_messages = {"invalid": "must be true or false (a JSON boolean)"}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictString(serializers.CharField):
    """A JSON string (never a number) of printable characters; ``multiline`` also allows tab and line breaks."""

    default_error_messages = {
        "invalid": "must be a JSON string",
        "unprintable": "{fault}; send printable characters",
    }

    def __init__(self, *, multiline: bool = False, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        self.multiline = multiline
        super().__init__(**kwargs)
        # documents the printable rule in the schema as a pattern (string_fault, below, checks it and names the
        # character, so run_validators skips it); a field's own pattern, earlier in the list, is the one the
        # schema shows
        self.printable_validator = RegexValidator(MULTILINE_TEXT if multiline else PRINTABLE_TEXT)
        self.validators.append(self.printable_validator)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        fault = string_fault(data, allow_whitespace=self.multiline)
        if fault:
            self.fail("unprintable", fault=fault)
        return super().to_internal_value(data)

    def run_validators(self, value):
        for validator in self.validators:
            if validator is self.printable_validator:
                continue
            try:
                validator(value)
            except DjangoValidationError as exc:
                raise ValidationError(get_error_detail(exc)) from None


class Contract(serializers.Serializer):
    """An input contract validated lean: DRF's Serializer, with its per-field loop written for a JSON object.

    For a body the parser gave (a ``dict``), each declared field validates its value in declaration order and
    the errors are collected by field, as DRF does; what DRF does besides for every request and no contract here
    uses is left out (``validate_<field>`` lookups, ``source`` paths, the serializer-level validators and their
    read-only defaults, ``validate``). A contract that declares any of those, or input that is not a dict, takes
    DRF's own loop. Profiled (annotation_ui.api.validated on a full click), DRF's loop and validators took about
    1.2 ms of a loaded core per click."""

    def _lean(self) -> tuple | None:
        plan = self.__dict__.get("_lean_plan")
        if plan is None:
            fields = tuple((field.field_name, field) for field in self._writable_fields)
            plain = (
                type(self).validate is serializers.Serializer.validate
                and not self.validators
                and all(
                    field.source_attrs == [name] and not hasattr(self, f"validate_{name}")
                    for name, field in fields
                )
            )
            plan = self.__dict__["_lean_plan"] = (fields,) if plain else ()
        return plan[0] if plan else None

    def run_validation(self, data=empty):
        if self._lean() is None:
            return super().run_validation(data)
        is_empty, data = self.validate_empty_values(data)
        return data if is_empty else self.to_internal_value(data)

    def to_internal_value(self, data):
        fields = self._lean()
        if fields is None or type(data) is not dict:
            return super().to_internal_value(data)
        validated, errors = {}, {}
        for name, field in fields:
            try:
                validated[name] = field.run_validation(data.get(name, empty))
            except ValidationError as exc:
                errors[name] = exc.detail
            except DjangoValidationError as exc:
                errors[name] = get_error_detail(exc)
            except SkipField:
                pass
        if errors:
            raise ValidationError(errors)
        return validated


def _plain_value(value) -> bool:
    """A client_info value other than text: null, a boolean, an integer or a finite number."""
    return (
        value is None or isinstance(value, bool | int) or (isinstance(value, float) and math.isfinite(value))
    )


@extend_schema_field(
    {
        "type": "object",
        "maxProperties": MAX_CLIENT_INFO_KEYS,
        "additionalProperties": {
            "oneOf": [
                {"type": "string", "maxLength": MAX_CLIENT_INFO_TEXT},
                {"type": "number"},
                {"type": "boolean"},
            ],
            "nullable": True,
        },
        "description": "What the browser measured: a flat object of names ([A-Za-z0-9_], <= 40 chars) to "
        "strings, finite numbers, booleans or null.",
    }
)
class ClientInfoField(serializers.Field):
    """A flat object of measurement names to scalars (string, finite number, boolean, null)."""

    default_error_messages = {
        "invalid": "must be a JSON object",
        "too_many": f"must hold at most {MAX_CLIENT_INFO_KEYS} names",
        "bad_key": "has the name {name!r}; names are 1-40 letters, digits or underscores",
        "bad_value": "has a nested or non-finite value under {name!r}; send strings, numbers, booleans or null",
        "too_long": f"has a string longer than {MAX_CLIENT_INFO_TEXT} characters under {{name!r}}",
    }

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("invalid")
        if len(data) > MAX_CLIENT_INFO_KEYS:
            self.fail("too_many")
        for key, value in data.items():
            if not CLIENT_INFO_KEY.match(key):
                self.fail("bad_key", name=key[:40])
            if isinstance(value, str):
                if len(value) > MAX_CLIENT_INFO_TEXT:
                    self.fail("too_long", name=key)
            elif not _plain_value(value):
                self.fail("bad_value", name=key)
        return dict(data)

    def to_representation(self, value):
        return value


def _onset(help_text: str) -> StrictNumber:
    return StrictNumber(
        required=False,
        allow_null=True,
        min_value=-MAX_TIMESTAMP_MS,
        max_value=MAX_TIMESTAMP_MS,
        help_text=help_text,
    )


class PhaseOnsets(Contract):
    """Onsets of phases A-D (and of the click) in performance.now() milliseconds."""

    A = _onset("Phase A (image).")
    B = _onset("Phase B (target).")
    C = _onset("Phase C (image, clicking blocked).")
    D = _onset("Phase D (clicking allowed).")
    click = _onset("The click (the pointer event's timeStamp).")


class ClientReportIn(Contract):
    client_info = ClientInfoField(required=False, default=dict)
    detected_device = serializers.ChoiceField(
        choices=[*DEVICES, ""], required=False, default="", help_text="The browser's own device class."
    )


class PresentedIn(Contract):
    position = StrictInteger(min_value=0, max_value=MAX_POSITION)
    presentation_id = StrictString(
        min_length=1,
        max_length=64,
        validators=[RegexValidator(TOKEN_PATTERN, "must be 1-64 letters, digits or _.:- (a UUID is best)")],
        help_text="A new id per showing (after a reload); the same one on a network retry.",
    )


class ClickIn(Contract):
    """One click: canonical image pixels (x = column, y = row, origin top-left), ms on the page's clock."""

    position = StrictInteger(
        min_value=0, max_value=MAX_POSITION, help_text="The trial's position in the batch."
    )
    idempotency_key = StrictString(
        min_length=1,
        max_length=64,
        validators=[RegexValidator(TOKEN_PATTERN, "must be 1-64 letters, digits or _.:- (a UUID is best)")],
        help_text="A new key per click; the same key on a retry stores the click once.",
    )
    x = StrictNumber(min_value=-MAX_COORDINATE_PX, max_value=MAX_COORDINATE_PX, help_text="Column, px.")
    y = StrictNumber(min_value=-MAX_COORDINATE_PX, max_value=MAX_COORDINATE_PX, help_text="Row, px.")
    shown_width = StrictNumber(min_value=1.0, max_value=MAX_COORDINATE_PX, help_text="CSS px as displayed.")
    shown_height = StrictNumber(min_value=1.0, max_value=MAX_COORDINATE_PX, help_text="CSS px as displayed.")
    pointer_type = serializers.ChoiceField(choices=["mouse", "touch", "pen", ""], required=False, default="")
    reaction_ms = StrictNumber(
        required=False, allow_null=True, min_value=-MAX_TIMESTAMP_MS, max_value=MAX_TIMESTAMP_MS
    )
    event_timestamp_ms = StrictNumber(
        required=False, allow_null=True, min_value=-MAX_TIMESTAMP_MS, max_value=MAX_TIMESTAMP_MS
    )
    phase_onsets_ms = PhaseOnsets(
        required=False,
        allow_null=True,
        help_text="PRESENTED onsets: the first frame each phase was on screen.",
    )
    scheduled_onsets_ms = PhaseOnsets(
        required=False, allow_null=True, help_text="The onsets the player scheduled/stamped."
    )
    load_wait_ms = StrictNumber(
        required=False,
        default=0.0,
        min_value=0.0,
        max_value=MAX_TIMESTAMP_MS,
        help_text="How long the trial waited for its pictures before phase A (0 when none).",
    )
    blocked_clicks = StrictInteger(required=False, default=0, min_value=0, max_value=10_000)
    flags = serializers.ListField(
        child=StrictString(
            max_length=40, validators=[RegexValidator(FLAG_PATTERN, "must match " + FLAG_PATTERN)]
        ),
        required=False,
        allow_null=True,
        max_length=20,
        help_text="Why the player thinks the trial is invalid (tab_hidden, focus_lost, ...).",
    )
    refresh_hz = StrictNumber(required=False, allow_null=True, min_value=0.0, max_value=1000.0)
    next_presentation = PresentedIn(
        required=False,
        allow_null=True,
        help_text="The next trial's presentation report, carried on this click (the player starts that trial "
        "now): recorded as POST .../presented records it; the answer's next_presentation says how.",
    )


class ProblemIn(Contract):
    status = StrictInteger(min_value=100, max_value=599, help_text="The HTTP status the server answered.")
    endpoint = serializers.ChoiceField(choices=PROBLEM_ENDPOINTS)
    message = StrictString(
        max_length=500, allow_blank=True, multiline=True, help_text="The server's message as shown."
    )
    position = StrictInteger(
        required=False, allow_null=True, default=None, min_value=0, max_value=MAX_POSITION
    )


class HeartbeatIn(Contract):
    """The player is still open (sent every ``HEARTBEAT_S`` seconds, and on each page-visibility change)."""

    visibility = serializers.ChoiceField(
        choices=["visible", "hidden", "gone"],
        required=False,
        default="visible",
        help_text=(
            'document.visibilityState when sent: a hidden page still counts as heard from. "gone": the page '
            "is going away (pagehide beacon): not a sign of life; the batch is released CLICKLAB_LEAVE_GRACE_S "
            "later unless heard from again."
        ),
    )
    page = StrictInteger(
        required=False,
        allow_null=True,
        default=None,
        min_value=0,
        max_value=2**31 - 1,
        help_text=(
            'With "gone": the page that is going away (the payload\'s "page"). A beacon of a page served before '
            "the latest one (a reload's, arriving late) is ignored. Without it, the beacon counts whatever the page."
        ),
    )


class FinishIn(Contract):
    """``finish`` takes no fields (an empty body or ``{}``)."""


# ------------------------------------------------------------------------------------------------
# corrective-click campaigns (annotation_ui.corrective_api)

#: A round's or an item's working time: at most a day (the service's own bound).
MAX_ROUND_MS = 24 * 3600 * 1000.0


def _item_id() -> StrictInteger:
    return StrictInteger(min_value=1, help_text="The item's id (from the state's items).")


def _round_ms() -> StrictNumber:
    return StrictNumber(
        required=False, allow_null=True, min_value=0.0, max_value=MAX_ROUND_MS,
        help_text="Time spent on the item's current round, ms.",
    )  # fmt: skip


def _click_key() -> StrictString:
    return StrictString(
        min_length=1,
        max_length=64,
        validators=[RegexValidator(TOKEN_PATTERN, "must be 1-64 letters, digits or _.:- (a UUID is best)")],
        help_text="The click's key: a new one per click, the same on a retry.",
    )


class CorrectiveItemIn(Contract):
    """skip / done: the item, and the time spent on its current round."""

    item = _item_id()
    round_ms = _round_ms()


class CorrectiveClickIn(Contract):
    """One corrective click, in the image's pixels (x = column, y = row, origin top-left)."""

    item = _item_id()
    idempotency_key = _click_key()
    x = StrictNumber(min_value=-MAX_COORDINATE_PX, max_value=MAX_COORDINATE_PX, help_text="Column, px.")
    y = StrictNumber(min_value=-MAX_COORDINATE_PX, max_value=MAX_COORDINATE_PX, help_text="Row, px.")
    positive = StrictBoolean(help_text="True: on the object (add); false: background (remove).")
    pointer_type = serializers.ChoiceField(choices=["mouse", "touch", "pen", ""], required=False, default="")
    item_ms = StrictNumber(
        required=False, allow_null=True, min_value=-MAX_TIMESTAMP_MS, max_value=MAX_TIMESTAMP_MS,
        help_text="ms since the item was shown.",
    )  # fmt: skip


class CorrectiveUndoIn(Contract):
    item = _item_id()
    idempotency_key = _click_key()


class CorrectiveSubmitIn(Contract):
    item = _item_id()
    round = StrictInteger(min_value=0, max_value=1000, help_text="The round being submitted (the item's).")
    round_ms = _round_ms()


# ------------------------------------------------------------------------------------------------
# responses (for the schema)


class ErrorOut(ErrorEnvelope):
    """The error envelope (``config.api_errors``) with the annotator API's extra keys."""

    position = serializers.IntegerField(required=False, help_text="The trial a 409 refused.")
    missing = serializers.ListField(
        child=serializers.IntegerField(), required=False, help_text="Positions still without a click (409)."
    )
    item = serializers.IntegerField(required=False, help_text="The corrective item a 409 refused.")


class OkOut(serializers.Serializer):
    ok = serializers.BooleanField()


class PresentedOut(OkOut):
    position = serializers.IntegerField()
    presentations = serializers.IntegerField()
    replayed = serializers.BooleanField()


class HeartbeatOut(OkOut):
    status = serializers.CharField(help_text="The session's status: started, finished or expired.")
    reclaimed = serializers.BooleanField(
        help_text="The batch had been given back while the worker was away and was re-reserved now: reload."
    )
    kept = serializers.ListField(child=serializers.IntegerField(), help_text="Positions re-reserved.")
    replaced = serializers.ListField(
        child=serializers.IntegerField(), help_text="Positions given another image."
    )
    dropped = serializers.ListField(
        child=serializers.IntegerField(), help_text="Positions dropped from the batch."
    )


class NextPresentationOut(OkOut):
    position = serializers.IntegerField()
    presentations = serializers.IntegerField(required=False, help_text="When ok.")
    replayed = serializers.BooleanField(required=False, help_text="When ok.")
    code = serializers.CharField(
        required=False, help_text="When not ok: session_finished, session_expired, trial_done or invalid."
    )
    message = serializers.CharField(required=False, help_text="When not ok: the message for the worker.")


class ClickOut(OkOut):
    created = serializers.BooleanField(help_text="False when the same idempotency_key was stored before.")
    position = serializers.IntegerField()
    missing = serializers.ListField(
        child=serializers.IntegerField(), help_text="Positions still without a click."
    )
    next_presentation = NextPresentationOut(
        required=False, help_text="How the next trial's presentation the click carried was recorded."
    )


class FinishOut(OkOut):
    finish = serializers.DictField(help_text="{kind, code, url, fields}: how to hand the code over.")


STATE_OUT = OpenApiTypes.OBJECT
