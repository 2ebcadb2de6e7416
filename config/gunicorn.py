"""gunicorn's configuration: ``gunicorn -c config/gunicorn.py config.wsgi``.

Its access and error lines go through the app's one log handler (config.log_format.logging_config): JSON lines
with ``LOG_FORMAT=json``, readable lines otherwise, and the redaction filter, so the request line of an access
entry (``GET /a/<session token>/``) and its referer carry ``[token]``, never the token.
Bind address, workers and timeouts stay on the command line or in ``GUNICORN_CMD_ARGS``.

Each worker listens on a socket of its own (``reuse_port``: SO_REUSEPORT), so the kernel spreads new
connections evenly over the workers. On one shared socket the worker that happened to be awake took most of
them: a thousand annotators' kept-alive connections arriving together left one worker (one GIL) doing most of
the work while the others idled (measured with bench/bench_load_faults.py, see README). Since a socket with
that flag would also share its port with another server started on it by mistake, ``on_starting`` refuses to
start when something already listens on the address.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `config` importable whatever the cwd

from config.environment import read  # noqa: E402  (after the path is set)
from config.log_format import logging_config  # noqa: E402
from config.ports import port_in_use  # noqa: E402

logconfig_dict = logging_config(read("LOG_FORMAT"), level=read("LOG_LEVEL"), gunicorn=True)
# the combined format with the request time (ms): the redaction filter rewrites the whole line
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(M)sms'

reuse_port = True


def on_starting(server) -> None:
    """Refuse to start (exit status 1, the address named) when the address is taken: with ``reuse_port`` the
    bind itself would succeed and the two servers would split the connections. A new master of a binary
    upgrade (USR2, ``GUNICORN_PID``) or systemd's sockets are left alone."""
    if "GUNICORN_PID" in os.environ or os.environ.get("LISTEN_FDS"):
        return
    for address in server.cfg.address:
        if not isinstance(address, tuple):  # a UNIX socket: gunicorn's own bind checks it
            continue
        host, port = address[0], address[1]
        if port_in_use(host=host, port=port):
            sys.exit(
                f"gunicorn: {host}:{port} is already in use by another server (or a port this user may not "
                "bind); stop that server, or choose another address with --bind / PORT, and start again."
            )
