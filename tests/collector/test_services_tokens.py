"""Session tokens: one session each, forged or foreign ones refused, expiry by age; the per-process memory of
checked signatures changes none of that (it is keyed by the token and the keys, and never keeps a refusal)."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.test import override_settings

from collector.services import tokens
from collector.services.tokens import (
    TokenInvalid,
    session_token_make,
    session_token_read,
    study_link_token_make,
)


@pytest.fixture(autouse=True)
def fresh_memory():
    tokens._session_token_signed.cache_clear()
    yield
    tokens._session_token_signed.cache_clear()


def test_a_token_names_its_session_every_time_and_is_checked_once():
    token = session_token_make(session_id=42)
    assert [session_token_read(token=token) for _ in range(5)] == [42] * 5
    info = tokens._session_token_signed.cache_info()
    assert (info.misses, info.hits) == (1, 4)


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t[:-3] + ("xyz" if not t.endswith("xyz") else "abc"),  # the signature
        lambda t: "eyJzIjo0M30" + t[t.index(":") :],  # the payload ({"s":43}) under 42's signature
        lambda t: t.replace(":", "", 1),
        lambda t: "",
        lambda t: "a:b:c:d",
    ],
)
def test_forged_tokens_are_refused_even_after_the_genuine_one_was_read(change):
    token = session_token_make(session_id=42)
    assert session_token_read(token=token) == 42
    for _ in range(2):  # a refusal is not remembered as a success, nor the success lent to the forgery
        with pytest.raises(TokenInvalid, match="not valid"):
            session_token_read(token=change(token))


def test_a_study_link_token_is_not_a_session_token():
    with pytest.raises(TokenInvalid, match="not valid"):
        session_token_read(token=study_link_token_make(study_id=42))


def test_age_is_checked_on_every_read_not_only_the_first(monkeypatch):
    token = session_token_make(session_id=7)
    assert session_token_read(token=token, max_age_s=60) == 7
    later = time.time() + 61
    monkeypatch.setattr(tokens.time, "time", lambda: later)
    with pytest.raises(TokenInvalid, match="expired"):
        session_token_read(token=token, max_age_s=60)
    assert session_token_read(token=token, max_age_s=120) == 7


def test_a_token_signed_with_another_key_is_refused_and_a_fallback_key_still_reads():
    token = session_token_make(session_id=9)
    assert session_token_read(token=token) == 9
    with override_settings(SECRET_KEY="another-" + "k" * 50), pytest.raises(TokenInvalid, match="not valid"):
        session_token_read(token=token)  # the check made under the old key is not reused
    old = settings.SECRET_KEY
    with override_settings(SECRET_KEY="rotated-" + "k" * 50, SECRET_KEY_FALLBACKS=[old]):
        assert session_token_read(token=token) == 9
