"""The researcher API's limits for the one bounded JSON parser (``config.json_bodies``): objects/arrays at
most 8 deep (a body of 15,000 ``[`` is a 400, not the decoder's RecursionError), no ``NaN``, integers of at
most 20 digits, no NUL or lone surrogate in a string. The size is Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``;
the fields' rules are the serializers'."""

from __future__ import annotations

from config.json_bodies import BoundedJSONParser, Limits


class ResearcherJSONParser(BoundedJSONParser):
    limits = Limits(
        max_body_bytes=None, max_depth=8, max_int_digits=20, strings="storable", object_only=False
    )
