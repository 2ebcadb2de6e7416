"""Ask a server for every file under a media root, the ways an outsider would, and report what came back."""

from __future__ import annotations

import http.client
from pathlib import Path
from urllib.parse import quote

#: URL prefixes a web server could map onto MEDIA_ROOT (the old DEBUG mapping, the static mapping, the root)
#: and the login-checked view MEDIA_URL names.
PROBE_PREFIXES = ("/media/", "/static/", "/", "/researcher/files/")


def media_files(root: Path) -> list[Path]:
    return sorted(path for path in Path(root).rglob("*") if path.is_file())


def probe_urls(root: Path) -> list[tuple[Path, str]]:
    """(file, URL path) for every file under ``root`` and every prefix of PROBE_PREFIXES."""
    pairs = []
    for path in media_files(root):
        relative = quote(path.relative_to(root).as_posix())
        pairs += [(path, prefix + relative) for prefix in PROBE_PREFIXES]
    return pairs


def leaks(status: int, body: bytes, path: Path) -> bool:
    """True when a response hands the file out: a 200 whose body is the file (or contains it)."""
    content = path.read_bytes()
    return status == 200 and (body == content or (len(content) >= 64 and content in body))


def fetch(host: str, port: int, url: str) -> tuple[int, bytes]:
    """GET ``url`` without following redirects (a login redirect is not the file)."""
    connection = http.client.HTTPConnection(host, port, timeout=30)
    try:
        connection.request("GET", url)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()
