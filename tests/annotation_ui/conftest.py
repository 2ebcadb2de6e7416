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


@pytest.fixture
def models_worker(player_settings, exclusive_broker):
    """A worker of the test's own on the models queue (the corrective players' mask updates), started after
    the media root is the test's."""
    from tests.support.celery_worker import CeleryWorkerProcess, purge_queues

    purge_queues()
    process = CeleryWorkerProcess(queues="models")
    process.start()
    yield process
    process.stop()
    purge_queues()
