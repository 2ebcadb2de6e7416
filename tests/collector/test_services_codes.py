"""Completion codes (collector.services.codes): Django's signing with key fallbacks, so a key rotation keeps the
codes of running studies valid while the old key is a fallback and refuses them once it is dropped; codes made
before issue 35 still check."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from django.test import override_settings

from collector.services.codes import CODE_LENGTH, completion_code_check, completion_code_make

OLD_KEY = "old-" + "o" * 60
NEW_KEY = "new-" + "n" * 60


def _code_before_issue_35(*, session_id: int, assignment_id: str, key: str) -> str:
    """The code the previous hand-written HMAC made (written out here, not imported: it is the spec of what
    workers may still hold)."""
    derived = hashlib.sha256(("clicklab.completion.code:" + key).encode()).digest()
    mac = hmac.new(derived, f"{session_id}:{assignment_id}".encode(), hashlib.sha256).digest()
    return f"{session_id}-{base64.b32encode(mac).decode()[:10]}"


def test_a_code_names_its_session_for_its_assignment_only():
    with override_settings(SECRET_KEY=OLD_KEY, SECRET_KEY_FALLBACKS=[]):
        code = completion_code_make(session_id=123, assignment_id="asg-1")
        assert code.startswith("123-") and len(code.split("-")[1]) == CODE_LENGTH
        assert code.split("-")[1] == code.split("-")[1].upper()
        assert completion_code_check(code=code, assignment_id="asg-1") == 123
        assert completion_code_check(code=" " + code.lower() + " ", assignment_id="asg-1") == 123  # typed
        assert completion_code_check(code=code, assignment_id="asg-2") is None
        assert completion_code_check(code="124-" + code.split("-")[1], assignment_id="asg-1") is None
        assert completion_code_check(code=code[:-1], assignment_id="asg-1") is None
        assert completion_code_make(session_id=124, assignment_id="asg-1") != code


@pytest.mark.parametrize("made", ["now", "before issue 35"])
def test_rotation_a_code_checks_while_its_key_is_a_fallback_and_is_refused_once_dropped(made):
    with override_settings(SECRET_KEY=OLD_KEY, SECRET_KEY_FALLBACKS=[]):
        code = (
            completion_code_make(session_id=77, assignment_id="asg-9")
            if made == "now"
            else _code_before_issue_35(session_id=77, assignment_id="asg-9", key=OLD_KEY)
        )
        assert completion_code_check(code=code, assignment_id="asg-9") == 77
    with override_settings(SECRET_KEY=NEW_KEY, SECRET_KEY_FALLBACKS=[OLD_KEY]):
        assert completion_code_check(code=code, assignment_id="asg-9") == 77
        assert completion_code_check(code=code, assignment_id="asg-8") is None
        fresh = completion_code_make(session_id=77, assignment_id="asg-9")
        assert fresh != code and completion_code_check(code=fresh, assignment_id="asg-9") == 77
    with override_settings(SECRET_KEY=NEW_KEY, SECRET_KEY_FALLBACKS=[]):
        assert completion_code_check(code=code, assignment_id="asg-9") is None
        assert completion_code_check(code=fresh, assignment_id="asg-9") == 77
