"""Fixtures of the researcher API tests (the shared ones are in tests/collector/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def api_for():
    """A DRF client authenticated with the user's token (``Authorization: Token <key>``)."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    def make(user):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
        return client

    return make
