"""The evaluation API's limits for the one bounded JSON parser (``config.json_bodies``).

Keys are handed to model developers outside the lab, so a body is refused with a 400 (``invalid_json``) before
any service sees it when it nests deeper than :data:`MAX_DEPTH`, holds ``NaN``/``Infinity``, a number beyond
the float range or an integer of more than :data:`MAX_INT_DIGITS` digits, or a string (keys included) with NUL
or a lone surrogate (other characters are the fields' business: a mask's RLE with stray bytes is
``invalid_mask``). A submission's size is the view's (413 ``upload_too_large``, ``EVAL_MAX_UPLOAD_BYTES``).
"""

from __future__ import annotations

from config.json_bodies import BoundedJSONParser, Limits

#: ``group_bounds`` ([[low, high], ...]) and ``mask_rle`` ({"size": [h, w], ...}) are 3 deep.
MAX_DEPTH = 8
#: A seed is at most 2**63 - 1 (19 digits).
MAX_INT_DIGITS = 20


class EvalJSONParser(BoundedJSONParser):
    limits = Limits(max_body_bytes=None, max_depth=MAX_DEPTH, max_int_digits=MAX_INT_DIGITS, strings="storable",
                    object_only=False)  # fmt: skip
