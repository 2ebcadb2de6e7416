"""gunicorn's configuration: ``gunicorn -c config/gunicorn.py config.wsgi``.

Its access and error lines go through the app's one log handler (config.log_format.logging_config): JSON lines
with ``LOG_FORMAT=json``, readable lines otherwise, and the redaction filter, so the request line of an access
entry (``GET /a/<session token>/``) and its referer carry ``[token]``, never the token.
Bind address, workers and timeouts stay on the command line or in ``GUNICORN_CMD_ARGS``.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `config` importable whatever the cwd

from config.log_format import logging_config  # noqa: E402  (after the path is set)

logconfig_dict = logging_config(
    os.environ.get("LOG_FORMAT", "text").lower(), level=os.environ.get("LOG_LEVEL", "INFO"), gunicorn=True
)
# the combined format with the request time (ms): the redaction filter rewrites the whole line
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(M)sms'
