"""The JSON parser of the annotator API: bounded before anything else reads the body.

Every annotator request body goes through :class:`AnnotatorJSONParser` before a serializer or a service
sees it. It refuses, as a 400 naming the place at fault (``field`` is a dotted path such as
``client_info.language``):

* a body larger than :data:`MAX_BODY_BYTES` (the ``Content-Length`` is checked before reading);
* anything but UTF-8 JSON; the constants ``NaN``/``Infinity`` and numbers beyond the float range
  (``1e400``); integers longer than :data:`MAX_INT_DIGITS` digits (so ``10**400`` never reaches ``float()``);
* nesting deeper than :data:`MAX_DEPTH` objects/arrays (a body of 15,000 ``[`` is refused by a linear scan,
  never by recursion);
* strings (keys included) holding NUL or another control character, or a lone UTF-16 surrogate — none of
  them can be stored in PostgreSQL ``jsonb``/``text`` and none has a meaning here.

The field rules (types, ranges, lengths) are the serializers' (``annotation_ui.serializers``).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

MAX_BODY_BYTES = 16_000
#: Top-level object = 1; ``client_info`` or ``phase_onsets_ms`` = 2; a value inside them = 3.
MAX_DEPTH = 3
MAX_INT_DIGITS = 16


class BodyRefused(ParseError):
    """A body the parser refuses; ``field`` is the dotted path of the value at fault (None: the body)."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


# Exactly the characters of Unicode categories Cc (C0 and C1 controls and DEL: a set fixed by Unicode's
# stability policy) and Cs (surrogates), so a clean string, the common case, is found by one regex search
# instead of a category lookup per character (tests/annotation_ui/test_parsers.py checks every code point).
_FAULTY = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
# ... and the same less tab, line feed and carriage return, which free-text fields accept (see serializers)
_FAULTY_BESIDES_WHITESPACE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def string_fault(text: str, *, allow_whitespace: bool = False) -> str | None:
    """Why ``text`` cannot be stored (a control character or a lone surrogate), or None when it can."""
    found = (_FAULTY_BESIDES_WHITESPACE if allow_whitespace else _FAULTY).search(text)
    if found is None:
        return None
    index, char = found.start(), found.group()
    if unicodedata.category(char) == "Cs":
        return f"holds a lone UTF-16 surrogate at character {index}"
    return f"holds the control character U+{ord(char):04X} at character {index}"


# A JSON string, escapes included; an unterminated one runs to the end of the text (as the scan it replaced
# read it: everything after an opening quote is string until the closing one).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.S)
_BRACKETS = re.compile(r"[\[\]{}]")


def nesting_depth(text: str) -> int:
    """Deepest object/array nesting of a JSON text: its brackets outside strings, counted in one pass over
    them (never recursion)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_JSON_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _refuse_constant(name: str):
    raise BodyRefused(f"{name} is not a number JSON allows; send a finite number or null.")


def _parse_int(literal: str) -> int:
    digits = literal.lstrip("-")
    if len(digits) > MAX_INT_DIGITS:
        raise BodyRefused(
            f"the integer {literal[:20]}... has {len(digits)} digits; send at most {MAX_INT_DIGITS}."
        )
    return int(literal)


def _parse_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise BodyRefused(f"the number {literal[:40]} is beyond the range of a float; send a finite number.")
    return value


def check_values(data) -> None:
    """Walk the parsed body iteratively and refuse strings that cannot be stored (see module docstring)."""
    pending: list[tuple[str | None, object]] = [(None, data)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                where = f"{path}.{key}" if path else str(key)
                fault = string_fault(key)
                if fault:
                    raise BodyRefused(
                        f"a key of {path or 'the body'} {fault}; send keys of printable characters only.",
                        field=path,
                    )
                pending.append((where, item))
        elif isinstance(value, list):
            pending.extend((f"{path}[{index}]", item) for index, item in enumerate(value))
        elif isinstance(value, str):
            # Free text (a problem report's message) may hold line breaks; the serializer says which fields.
            fault = string_fault(value, allow_whitespace=True)
            if fault:
                raise BodyRefused(
                    f"{path} {fault}; send printable characters only.", field=(path or "").split("[")[0]
                )


def parse_body(raw: bytes):
    """Parse and check one request body (bytes, already bounded in size); raises BodyRefused."""
    if len(raw) > MAX_BODY_BYTES:
        raise BodyRefused(f"the request body is larger than {MAX_BODY_BYTES} bytes; send less.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyRefused("the request body is not UTF-8; send JSON encoded as UTF-8.") from None
    if not text.strip():
        return {}
    if nesting_depth(text) > MAX_DEPTH:
        raise BodyRefused(
            f"the request body nests objects/arrays more than {MAX_DEPTH} deep; send the documented shape."
        )
    try:
        data = json.loads(
            text, parse_constant=_refuse_constant, parse_int=_parse_int, parse_float=_parse_float
        )
    except BodyRefused:
        raise
    except (ValueError, RecursionError) as exc:
        raise BodyRefused(
            f"the request body is not valid JSON ({str(exc)[:120]}); send a JSON object."
        ) from None
    if not isinstance(data, dict):
        raise BodyRefused("the request body must be a JSON object.")
    check_values(data)
    return data


class AnnotatorJSONParser(BaseParser):
    """DRF parser for ``application/json`` bodies of the annotator API (see the module docstring)."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        try:
            too_long = declared and int(declared) > MAX_BODY_BYTES
        except ValueError:
            too_long = False
        if too_long:
            raise BodyRefused(f"the request body is larger than {MAX_BODY_BYTES} bytes; send less.")
        return parse_body(stream.read(MAX_BODY_BYTES + 1))
