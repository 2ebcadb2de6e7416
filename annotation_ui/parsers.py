"""The annotator API's limits for the one bounded JSON parser (``config.json_bodies``).

Every annotator request body goes through :class:`AnnotatorJSONParser` before a serializer or a service sees it:
at most :data:`MAX_BODY_BYTES`, objects/arrays at most :data:`MAX_DEPTH` deep, integers of at most
:data:`MAX_INT_DIGITS` digits, printable strings only (line breaks allowed in values), a JSON object.
The field rules (types, ranges, lengths) are the serializers' (``annotation_ui.serializers``).
"""

from __future__ import annotations

from config.json_bodies import BodyRefused, BoundedJSONParser, Limits, string_fault

MAX_BODY_BYTES = 16_000
#: Top-level object = 1; ``client_info`` or ``phase_onsets_ms`` = 2; a value inside them = 3.
MAX_DEPTH = 3
MAX_INT_DIGITS = 16
LIMITS = Limits(
    max_body_bytes=MAX_BODY_BYTES, max_depth=MAX_DEPTH, max_int_digits=MAX_INT_DIGITS, strings="printable",
    object_only=True,
)  # fmt: skip

__all__ = ["MAX_BODY_BYTES", "AnnotatorJSONParser", "BodyRefused", "string_fault"]


class AnnotatorJSONParser(BoundedJSONParser):
    limits = LIMITS
