"""A WSGI application that answers with the process id of the worker that served the request (for tests of
the WSGI server's configuration, tests/config/test_gunicorn_config.py)."""

import os


def application(environ, start_response):
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
