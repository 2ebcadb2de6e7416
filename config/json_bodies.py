"""The bounded JSON parser of the three APIs: a body is checked before a serializer, a view or a service reads it.

:class:`BoundedJSONParser` (DRF parser for ``application/json``, which reads the body with :func:`parse_body`)
refuses, as :class:`BodyRefused` (a 400 ``invalid_json`` in the error
envelope of ``config.api_errors``, ``field`` the dotted path of the value at fault when there is one):

* a body larger than ``max_body_bytes`` (the ``Content-Length`` is checked before reading);
* anything but UTF-8 JSON; the constants ``NaN``/``Infinity`` and numbers beyond the float range (``1e400``);
  integers longer than ``max_int_digits`` digits (so ``10**400`` never reaches ``float()``);
* nesting deeper than ``max_depth`` objects/arrays (a body of 15,000 ``[``, which ends the JSON decoder in a
  RecursionError, included);
* strings (keys included) that cannot be stored: with ``strings="printable"`` any control character (line
  breaks and tabs allowed in values) or lone UTF-16 surrogate; with ``strings="storable"`` NUL or a lone
  surrogate only (PostgreSQL stores neither in ``jsonb``/``text``);
* with ``object_only``, a body that is not a JSON object.

Each API declares its limits as a subclass: ``annotation_ui.parsers.AnnotatorJSONParser``,
``evaluation.parsers.EvalJSONParser``, ``collector.api.parsers.ResearcherJSONParser``. Their field rules (types,
ranges, lengths) are the serializers' and services'.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser


class BodyRefused(ParseError):
    """A body the parser refuses; ``field`` is the dotted path of the value at fault (None: the body)."""

    default_code = "invalid_json"

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message, "invalid_json")
        self.field = field


# Exactly the characters of Unicode categories Cc (C0 and C1 controls and DEL: a set fixed by Unicode's
# stability policy) and Cs (surrogates), so a clean string, the common case, is found by one regex search
# instead of a category lookup per character (tests/config/test_json_bodies.py checks every code point).
_FAULTY = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
# ... and the same less tab, line feed and carriage return, which free-text fields accept
_FAULTY_BESIDES_WHITESPACE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def string_fault(
    text: str, *, allow_whitespace: bool = False, pattern: re.Pattern | None = None
) -> str | None:
    """Why ``text`` cannot be taken (a control character or a lone surrogate), or None when it can."""
    found = (pattern or (_FAULTY_BESIDES_WHITESPACE if allow_whitespace else _FAULTY)).search(text)
    if found is None:
        return None
    index, char = found.start(), found.group()
    if unicodedata.category(char) == "Cs":
        return f"holds the lone UTF-16 surrogate U+{ord(char):04X} at character {index}"
    return f"holds the control character U+{ord(char):04X} at character {index}"


# A JSON string, escapes included; an unterminated one runs to the end of the text.
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


@dataclass(frozen=True)
class Limits:
    """What one API's bodies may be (see the module docstring)."""

    max_body_bytes: int | None
    max_depth: int
    max_int_digits: int
    strings: Literal["printable", "storable"]
    object_only: bool


def _refuse_constant(name: str):
    raise BodyRefused(f"{name} is not a number JSON allows; send a finite number or null.")


def _parse_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise BodyRefused(f"the number {literal[:40]} is beyond the range of a float; send a finite number.")
    return value


def _int_parser(max_digits: int):
    def parse_int(literal: str) -> int:
        digits = len(literal.lstrip("-"))
        if digits > max_digits:
            raise BodyRefused(
                f"the integer {literal[:20]}... has {digits} digits; send at most {max_digits}."
            )
        return int(literal)

    return parse_int


def _too_deep(limits: Limits) -> BodyRefused:
    return BodyRefused(
        f"the request body nests objects/arrays more than {limits.max_depth} deep; send the documented shape."
    )


def check_values(data, limits: Limits, *, strings: bool = True) -> None:
    """Walk the parsed body once (iteratively): its nesting depth and (``strings``) its strings."""
    printable = limits.strings == "printable"
    key_pattern = None if printable else _UNSTORABLE
    value_pattern = None if printable else _UNSTORABLE
    pending: list[tuple[str | None, object, int]] = [(None, data, 1)]
    while pending:
        path, value, depth = pending.pop()
        if isinstance(value, dict | list) and depth > limits.max_depth:
            raise _too_deep(limits)
        if isinstance(value, dict):
            for key, item in value.items():
                fault = strings and string_fault(key, pattern=key_pattern)
                if fault:
                    raise BodyRefused(
                        f"a key of {path or 'the body'} {fault}; send keys of printable characters only.",
                        field=path,
                    )
                pending.append((f"{path}.{key}" if path else str(key), item, depth + 1))
        elif isinstance(value, list):
            pending.extend((f"{path}[{index}]", item, depth + 1) for index, item in enumerate(value))
        elif strings and isinstance(value, str):
            # free text (a problem report's message) may hold line breaks; the serializers say which fields
            fault = string_fault(value, allow_whitespace=True, pattern=value_pattern)
            if fault:
                where = path or "the body"
                raise BodyRefused(
                    f"{where} {fault}; send printable characters only.",
                    field=(path or "").split("[")[0] or None,
                )


def parse_body(raw: bytes, limits: Limits):
    """Parse and check one request body (bytes, already bounded in size); raises BodyRefused."""
    if limits.max_body_bytes is not None and len(raw) > limits.max_body_bytes:
        raise BodyRefused(f"the request body is larger than {limits.max_body_bytes} bytes; send less.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyRefused("the request body is not UTF-8; send JSON encoded as UTF-8.") from None
    if not text.strip():
        return {}
    # a small body is scanned for its depth before the decoder recurses into it; a large one (a submission's
    # base64 mask) is walked after decoding (a RecursionError is the same refusal)
    if len(text) <= 65_536 and nesting_depth(text) > limits.max_depth:
        raise _too_deep(limits)
    try:
        data = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_int=_int_parser(limits.max_int_digits),
            parse_float=_parse_float,
        )
    except BodyRefused:
        raise
    except RecursionError:
        raise _too_deep(limits) from None
    except ValueError as exc:
        raise BodyRefused(
            f"the request body is not valid JSON ({str(exc)[:120]}); send a JSON object."
        ) from None
    if limits.object_only and not isinstance(data, dict):
        raise BodyRefused("the request body must be a JSON object.")
    # ASCII without a NUL and without a \u escape cannot decode to a control character or a surrogate when only
    # NUL and surrogates are refused: the strings need no search then (hundreds of kilobytes of base64)
    plain = limits.strings == "storable" and text.isascii() and "\x00" not in text and "\\u" not in text
    check_values(data, limits, strings=not plain)
    return data


class BoundedJSONParser(BaseParser):
    """DRF parser for ``application/json`` bodies within ``limits`` (see the module docstring)."""

    media_type = "application/json"
    limits = Limits(
        max_body_bytes=None, max_depth=8, max_int_digits=20, strings="storable", object_only=False
    )

    def parse(self, stream, media_type=None, parser_context=None):
        most = self.limits.max_body_bytes
        request = (parser_context or {}).get("request")
        if most is not None and request is not None:
            try:
                too_long = int(request.META.get("CONTENT_LENGTH") or 0) > most
            except ValueError:
                too_long = False
            if too_long:
                raise BodyRefused(f"the request body is larger than {most} bytes; send less.")
        if stream is None:
            return {}
        return parse_body(stream.read() if most is None else stream.read(most + 1), self.limits)
