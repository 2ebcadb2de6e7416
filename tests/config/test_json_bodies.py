"""config.json_bodies' two scans, done by regular expressions, give what the per-character scans they
replaced gave: the same faulty characters (every code point) and the same nesting depth (any text)."""

from __future__ import annotations

import sys
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from config.json_bodies import nesting_depth, string_fault


def _reference_fault(text: str, allow_whitespace: bool) -> str | None:
    for index, char in enumerate(text):
        category = unicodedata.category(char)
        if category == "Cs":
            return f"holds the lone UTF-16 surrogate U+{ord(char):04X} at character {index}"
        if category == "Cc" and not (allow_whitespace and char in "\t\n\r"):
            return f"holds the control character U+{ord(char):04X} at character {index}"
    return None


def _reference_depth(text: str) -> int:
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def test_string_fault_finds_exactly_the_control_characters_and_surrogates_of_every_code_point():
    assert unicodedata.unidata_version, sys.version
    for allow_whitespace in (False, True):
        for code in range(sys.maxunicode + 1):
            char = chr(code)
            category = unicodedata.category(char)
            bad = category == "Cs" or (category == "Cc" and not (allow_whitespace and char in "\t\n\r"))
            fault = string_fault(char, allow_whitespace=allow_whitespace)
            assert (fault is not None) == bad, (hex(code), category, allow_whitespace)


@given(st.text(alphabet=st.sampled_from('ab "\\\t\n\x00\x7f\x85\ud800é€'), max_size=30), st.booleans())
@settings(max_examples=600, deadline=None)
def test_string_fault_gives_the_reference_message(text, allow_whitespace):
    assert string_fault(text, allow_whitespace=allow_whitespace) == _reference_fault(text, allow_whitespace)


@given(st.text(alphabet=st.sampled_from('[]{}"\\a:,'), max_size=60))
@settings(max_examples=800, deadline=None)
def test_nesting_depth_is_the_reference_scans(text):
    assert nesting_depth(text) == _reference_depth(text)


def test_nesting_depth_examples():
    assert nesting_depth('{"a": [1, {"b": "[[[{"}]}') == 3
    assert nesting_depth('{"a\\"[[": 1}') == 1
    assert nesting_depth('{"unterminated [[[[') == 1
    assert nesting_depth("[" * 15_000) == 15_000
