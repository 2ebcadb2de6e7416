"""Issue 35 item 5: one settings registry (config/environment.py), the table in docs/operations.md made from it, checked both
ways; BEHIND_TLS_PROXY makes "terminate TLS in a reverse proxy" work."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from collector.management.commands.settings_table import readme_table, readme_with_table
from config.environment import BY_NAME, PROCESS_VARIABLES, VARIABLES, read, settings_table
from tests.support.celery_worker import PROJECT_ROOT

SOURCE_FOLDERS = (
    "config",
    "collector",
    "annotation_ui",
    "evaluation",
    "exports",
    "tasks",
    "segmenters",
    "benchmark",
)
# a variable named by a string literal in any way Python reads the environment
_LITERAL_READS = (
    re.compile(r"""os\.environ\.get\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""),
    re.compile(r"""os\.environ\[\s*["']([A-Za-z_][A-Za-z0-9_]*)["']\s*\]"""),
    re.compile(r"""os\.environ\.setdefault\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""),
    re.compile(r"""os\.getenv\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""),
    re.compile(r"""["']([A-Za-z_][A-Za-z0-9_]*)["']\s+in\s+os\.environ"""),
)
_REGISTRY_READ = re.compile(r"""\bread\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']""")
# a read whose name the grep cannot see (a variable, an f-string): not allowed, the name must be greppable
_OPAQUE_READ = re.compile(r"""(os\.environ\.get\(|os\.environ\[|os\.getenv\()\s*(?!["'])""")


def _sources():
    files = [PROJECT_ROOT / "manage.py"]
    for folder in SOURCE_FOLDERS:
        files += [p for p in (PROJECT_ROOT / folder).rglob("*.py") if "migrations" not in p.parts]
    return [(path.relative_to(PROJECT_ROOT), path.read_text()) for path in files]


def _reads(*, direct_only: bool = False) -> dict[str, list[str]]:
    """Every environment variable the code reads, with where (``file:line``); ``direct_only``: the reads past
    config.environment.read (os.environ and friends)."""
    patterns = _LITERAL_READS if direct_only else (*_LITERAL_READS, _REGISTRY_READ)
    found: dict[str, list[str]] = {}
    for path, text in _sources():
        if str(path) == "config/environment.py":
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for pattern in patterns:
                for name in pattern.findall(line):
                    found.setdefault(name, []).append(f"{path}:{number}")
    return found


def test_every_variable_the_code_reads_is_declared_in_the_registry():
    undeclared = {
        name: where
        for name, where in _reads().items()
        if name not in BY_NAME and name not in PROCESS_VARIABLES
    }
    assert not undeclared, (
        "environment variables read but not declared in config/environment.py VARIABLES (add each with its "
        f"type, default and meaning, then `python manage.py settings_table --write`): {undeclared}"
    )


def test_no_read_hides_the_variable_name_from_this_check():
    opaque = [
        f"{path}:{number}: {line.strip()}"
        for path, text in _sources()
        if str(path) != "config/environment.py"
        for number, line in enumerate(text.splitlines(), 1)
        if _OPAQUE_READ.search(line)
    ]
    assert not opaque, (
        "these lines read the environment with a name that is not a string literal; name the variable "
        f'literally (read("NAME")) so the registry check sees it: {opaque}'
    )


def test_the_app_reads_through_the_registry_and_the_libraries_declare_theirs():
    """Past the registry only the Django-free libraries (installed without the web app, so they cannot import
    it) and the process variables read os.environ; every declared variable is read somewhere (none is dead)."""
    past_registry = {
        name: [w for w in where if not w.startswith(("segmenters/", "benchmark/"))]
        for name, where in _reads(direct_only=True).items()
        if name not in PROCESS_VARIABLES
    }
    past_registry = {name: where for name, where in past_registry.items() if where}
    assert not past_registry, f"the app reads these past config.environment.read: {past_registry}"
    reads = _reads()
    unread = [variable.name for variable in VARIABLES if variable.name not in reads]
    assert not unread, f"declared in config/environment.py but read nowhere (remove or use them): {unread}"
    for variable in VARIABLES:
        if variable.scope == "library":
            assert all(w.startswith(("benchmark/", "segmenters/")) for w in reads[variable.name]), variable


def test_the_readme_table_is_the_registry_s_and_names_every_variable():
    readme = (PROJECT_ROOT / "docs" / "operations.md").read_text()
    block = readme_table(readme)
    assert block == settings_table(), (
        "docs/operations.md's settings table differs from config/environment.py: run `python manage.py settings_table "
        "--write` and commit docs/operations.md."
    )
    in_table = set(re.findall(r"^\| `([A-Z_0-9]+)` \|", block, flags=re.M))
    assert in_table == {variable.name for variable in VARIABLES}
    for variable in VARIABLES:
        assert variable.meaning and variable.kind, variable
    # the writer replaces only the block
    assert readme_with_table(readme, settings_table()) == readme


def test_the_settings_table_command_prints_the_table(tmp_path):
    # the embedded environment: the command needs no database, broker or production secret
    dropped = {"DJANGO_ALLOW_ASYNC_UNSAFE", "DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"}
    env = {k: v for k, v in os.environ.items() if k not in dropped} | {"CLICKLAB_VAR_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "manage.py", "settings_table"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == settings_table()
    assert "| `BEHIND_TLS_PROXY` | bool | `false` |" in result.stdout


def test_read_parses_types_and_falls_back_to_the_declared_default(monkeypatch):
    monkeypatch.delenv("TOLOKA_RETRIES", raising=False)
    assert read("TOLOKA_RETRIES") == 3
    monkeypatch.setenv("TOLOKA_RETRIES", "  ")
    assert read("TOLOKA_RETRIES") == 3
    monkeypatch.setenv("TOLOKA_RETRIES", "5")
    assert read("TOLOKA_RETRIES") == 5
    monkeypatch.setenv("SECRET_KEY_FALLBACKS", " old-one , ,older ")
    assert read("SECRET_KEY_FALLBACKS") == ["old-one", "older"]
    monkeypatch.setenv("BEHIND_TLS_PROXY", "yes")
    assert read("BEHIND_TLS_PROXY") is True
    monkeypatch.setenv("LOG_FORMAT", "JSON")
    assert read("LOG_FORMAT") == "json"
    monkeypatch.setenv("LOG_FORMAT", "xml")
    with pytest.raises(Exception, match=r"LOG_FORMAT='xml': use json or text"):
        read("LOG_FORMAT")
    monkeypatch.setenv("BEHIND_TLS_PROXY", "maybe")
    with pytest.raises(Exception, match=r"BEHIND_TLS_PROXY='maybe': use true or false"):
        read("BEHIND_TLS_PROXY")


# --- BEHIND_TLS_PROXY over HTTP -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _get(url: str, headers: dict[str, str]) -> tuple[int, str]:
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=10) as response:
            return response.status, response.headers.get("Location", "")
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Location", "")


def _production_server(tmp_path, behind_proxy: bool):
    port = _free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {"DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE", "DATABASE_URL", "CELERY_BROKER_URL"}
    }
    env.update(
        {
            "DEBUG": "false",  # production security settings: SECURE_SSL_REDIRECT on
            "ALLOWED_HOSTS": "127.0.0.1",
            "CLICKLAB_VAR_DIR": str(tmp_path / ("proxy" if behind_proxy else "direct")),
            "BEHIND_TLS_PROXY": "true" if behind_proxy else "",
        }
    )
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", "--skip-checks", f"127.0.0.1:{port}"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"the server did not start: {server.stderr.read() if server.stderr else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise AssertionError("the server did not listen within 60 s")


@pytest.mark.parametrize("behind_proxy", [True, False], ids=["BEHIND_TLS_PROXY=true", "unset"])
def test_behind_tls_proxy_an_https_request_from_the_proxy_is_not_redirected_to_itself(tmp_path, behind_proxy):
    server, base = _production_server(tmp_path, behind_proxy)
    try:
        page = base + "/researcher/"
        status, location = _get(page, {"X-Forwarded-Proto": "https"})
        if behind_proxy:
            # answered by the app: the researcher area sends a visitor who is not logged in to its login page
            assert (status, location) == (302, "/researcher/login/?next=/researcher/")
        else:
            # without the setting, the proxy's https request is sent to https://<the same address>: the loop
            # the README's proxy set-up would hit
            assert (status, location) == (301, "https://" + page.removeprefix("http://"))
        # plain http (a client that bypassed TLS) is redirected to https either way
        assert _get(page, {"X-Forwarded-Proto": "http"}) == (301, "https://" + page.removeprefix("http://"))
    finally:
        server.terminate()
        server.wait(timeout=10)
