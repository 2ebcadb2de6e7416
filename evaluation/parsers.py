"""The JSON parser of the evaluation API: what an evaluation-key holder sends is bounded before a view reads it.

Keys are handed to model developers outside the lab, so a body is refused with a 400 (``invalid_json``,
``evaluation.views.EvalView``) before any service sees it when it holds:

* objects/arrays nested deeper than :data:`MAX_DEPTH` (a body of 15,000 ``[``, which ends the JSON decoder
  in a RecursionError, included);
* ``NaN``/``Infinity``, a number beyond the float range (``1e400``) or an integer of more than
  :data:`MAX_INT_DIGITS` digits (``10**400`` cannot become a float);
* a string (keys included) holding NUL or a lone UTF-16 surrogate: PostgreSQL stores neither (other
  characters are the fields' business: a mask's RLE with stray bytes is ``invalid_mask``, as before).

Submissions carry a base64 PNG of up to ``EVAL_MAX_UPLOAD_BYTES``: strings are checked by a regular-expression
search (in C), the nesting by one walk over the parsed values. The fields' own rules stay in
``evaluation.services``.
"""

from __future__ import annotations

import json
import math
import re

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

#: ``group_bounds`` ([[low, high], ...]) and ``mask_rle`` ({"size": [h, w], ...}) are 3 deep.
MAX_DEPTH = 8
#: A seed is at most 2**63 - 1 (19 digits).
MAX_INT_DIGITS = 20

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _refuse_constant(name: str):
    raise ParseError(f"{name} is not a number JSON allows; send a finite number or null.")


def _parse_int(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ParseError(f"the integer {literal[:20]}... has {digits} digits; send at most {MAX_INT_DIGITS}.")
    return int(literal)


def _parse_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ParseError(f"the number {literal[:40]} is beyond the range of a float; send a finite number.")
    return value


def _check_values(data, *, strings: bool = True) -> None:
    """Walk the parsed body once (iteratively): nesting depth and (``strings``) storable strings."""
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise ParseError(
                    f"the body nests objects/arrays more than {MAX_DEPTH} deep; send the documented shape."
                )
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            pending.extend((item, depth + 1) for item in items)
        elif strings and isinstance(value, str) and (found := _UNSTORABLE.search(value)):
            raise ParseError(
                f"the text {value[:40]!r} holds U+{ord(found.group()):04X} (NUL or a lone surrogate, which "
                "cannot be stored); send printable text."
            )


def parse_eval_body(text: str):
    """The parsed body of one request (``text`` decoded); raises ParseError naming what is wrong."""
    try:
        data = json.loads(
            text, parse_constant=_refuse_constant, parse_int=_parse_int, parse_float=_parse_float
        )
    except ParseError:
        raise
    except RecursionError:
        raise ParseError(
            f"the body nests objects/arrays more than {MAX_DEPTH} deep; send the documented shape."
        ) from None
    except ValueError as exc:
        raise ParseError(f"JSON parse error - {str(exc)[:120]}") from None
    # A body of ASCII without a NUL and without a \u escape cannot decode to NUL or a surrogate: the strings
    # need no search then (a submission's base64 mask and logits are hundreds of kilobytes of such text).
    _check_values(data, strings=not (text.isascii() and "\x00" not in text and "\\u" not in text))
    return data


class EvalJSONParser(BaseParser):
    """DRF parser for the evaluation API's ``application/json`` bodies (see the module docstring)."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ParseError("the body is not UTF-8; send JSON encoded as UTF-8.") from None
        return parse_eval_body(text) if text.strip() else {}
