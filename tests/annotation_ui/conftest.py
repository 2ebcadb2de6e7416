"""Player tests: a media root per test and a live server of their own (plain-http settings: root conftest)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def player_settings(settings, tmp_path):
    """Stimuli and uploads of each test go to a media root of its own."""
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings


@pytest.fixture
def player_server(player_settings, transactional_db):
    """A live server of the test's own, started after ``player_settings`` so it serves that media root."""
    from pytest_django.live_server_helper import LiveServer

    player_settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
    server = LiveServer("127.0.0.1")
    yield server
    server.stop()
