"""Booting the WSGI application (as each gunicorn worker does) imports what a worker's first finish would otherwise
import under load, and connects nowhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys, socket
opened = []
real_connect = socket.socket.connect
def connect(self, address):
    opened.append(str(address))
    return real_connect(self, address)
socket.socket.connect = connect
import config.wsgi  # noqa: F401
from config.celery import app
transport = app.connection_for_write().transport.__class__.__module__
print(json.dumps({"modules": sorted(sys.modules), "transport": transport, "opened": opened}))
"""


def test_booting_the_wsgi_module_imports_the_finish_path_and_connects_nowhere(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "CLICKLAB_VAR_DIR": str(tmp_path)}
    env.setdefault("SECRET_KEY", "s" * 60)
    done = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    modules = set(seen["modules"])
    for name in ("collector.platforms.toloka", "collector.platforms.mturk", "collector.platforms.prolific",
                 "annotation_ui.api", "annotation_ui.warm", "celery.events.dispatcher", seen["transport"]):  # fmt: skip
        assert name in modules, f"{name} is imported by the first request, not at boot"
    assert seen["opened"] == [], f"booting the WSGI module opened connections: {seen['opened']}"
