"""The researcher API's JSON parser: DRF's, with a body nested too deep for the decoder a 400.

A body of 15,000 ``[`` makes the JSON decoder raise RecursionError, which DRF's JSONParser does not catch (a
500 with a traceback); here it is a ParseError like any other malformed body. Everything else is DRF's (NUL
and lone surrogates in strings are refused by its CharField, numbers by the serializers' ranges).
"""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class ResearcherJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(
                "JSON parse error - the body nests arrays/objects too deep; send the documented shape."
            ) from None
