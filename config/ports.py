"""Whether a TCP address is taken, asked the way servers bind (SO_REUSEADDR set, so connections of an earlier
run in TIME_WAIT do not count; only a socket listening there now does). Used by ``manage.py demo`` before it
starts its server and by gunicorn's configuration (``config/gunicorn.py``) before it binds with SO_REUSEPORT."""

from __future__ import annotations

import errno
import socket


def port_in_use(*, host: str, port: int) -> bool:
    """True when ``host:port`` cannot be bound now (taken, or not ours to bind); another OSError (an address
    this machine does not have) is raised for the caller to name."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False
