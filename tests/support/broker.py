"""Point this process's Celery producer at another broker URL (a closed port = the broker is down)."""

from __future__ import annotations

import contextlib
import socket


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _reset_producer_pools(app) -> None:
    # Only forget them: kombu keeps one pool per URL process-wide, and a closed one would stay closed.
    app._pool = None
    app.__dict__.get("amqp") and setattr(app.amqp, "_producer_pool", None)


@contextlib.contextmanager
def broker_url(url: str):
    """Within the block, tasks sent by this (web-side) process go to ``url``; the worker is untouched."""
    from config.celery import app

    saved = app.conf.broker_url, app.conf.broker_write_url
    app.conf.broker_url = app.conf.broker_write_url = url
    _reset_producer_pools(app)
    try:
        yield
    finally:
        app.conf.broker_url, app.conf.broker_write_url = saved
        _reset_producer_pools(app)


def broker_down():
    return broker_url(f"redis://127.0.0.1:{closed_port()}/0")
