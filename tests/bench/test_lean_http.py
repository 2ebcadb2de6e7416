"""The load suite's HTTP client (bench/bench_load_faults.py, ``LeanHTTP``) against a scripted local server.

``make bench-faults`` runs it against gunicorn, which answers every request with a Content-Length and keeps
the connection; these tests hold the other branches: chunked answers, ``Connection: close``, a kept
connection the server closed (sent once more, the server sees the request once), an answer cut in the
middle (an error, never a half response) and the timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "bench_load_faults", Path(__file__).resolve().parents[2] / "bench" / "bench_load_faults.py"
)
suite = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(suite)


class _Server:
    """Answers each request with the next scripted action; records what it received per connection."""

    def __init__(self, script):
        self.script = list(script)
        self.requests: list[tuple[int, bytes, bytes]] = []  # (connection number, head, body)
        self.connections = 0

    async def handle(self, reader, writer):
        self.connections += 1
        number = self.connections
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.requests.append((number, head, body))
                action = self.script.pop(0)
                if action == "hang":
                    await asyncio.sleep(10)
                    return
                closing = action.endswith(b"<close>")  # the marker is not sent: close after the answer
                writer.write(action.removesuffix(b"<close>"))
                await writer.drain()
                if closing:
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def _plain(status: str, body: bytes, extra: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def _in_own_loop(coroutine):
    """Run ``coroutine`` in a new event loop on a thread of its own: earlier tests of the suite (Playwright's
    sync API) may leave a loop running in the test thread, where ``asyncio.run`` refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _run(script, calls):
    server = _Server(script)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    http = suite.LeanHTTP(f"http://127.0.0.1:{port}", 4)
    try:
        results = []
        for call in calls:
            try:
                results.append(await call(http))
            except Exception as exc:  # the test looks at it
                results.append(exc)
        return server, results
    finally:
        await http.close()
        listener.close()


def test_keep_alive_json_and_form_bodies_on_one_connection():
    script = [_plain("201 Created", b'{"a": 1}'), _plain("303 See Other", b"", "Location: /a/tok/\r\n")]
    server, (first, second) = _in_own_loop(
        _run(
            script,
            [
                lambda h: h.request("POST", "/api/x/click", json={"k": "é"}, timeout=5),
                lambda h: h.request("POST", "/s/link/", data={"device": "pc"}, timeout=5),
            ],
        )
    )
    assert first.status_code == 201 and first.json() == {"a": 1}
    assert second.status_code == 303 and second.headers["location"] == "/a/tok/" and second.content == b""
    assert server.connections == 1 and [r[0] for r in server.requests] == [1, 1]
    (_, head1, body1), (_, head2, body2) = server.requests
    assert head1.startswith(b"POST /api/x/click HTTP/1.1\r\n") and b"Content-Type: application/json" in head1
    assert body1 == b'{"k": "\\u00e9"}'
    assert b"application/x-www-form-urlencoded" in head2 and body2 == b"device=pc"


def test_a_chunked_answer_and_connection_close():
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"
    closing = _plain("200 OK", b"bye", "Connection: close\r\n") + b"<close>"
    server, results = _in_own_loop(
        _run(
            [chunked, closing, _plain("200 OK", b"new")],
            [lambda h: h.request("GET", "/", timeout=5)] * 3,
        )
    )
    assert [r.content for r in results] == [b"abcde", b"bye", b"new"]
    assert [r[0] for r in server.requests] == [1, 1, 2]  # a new connection after Connection: close


def test_a_kept_connection_closed_by_the_server_is_sent_again_once_and_a_cut_answer_raises():
    # The server closes after its first answer without saying so (as at its keep-alive timeout): the next
    # request finds the kept connection closed and goes out once more on a new one.
    script = [
        _plain("200 OK", b"one") + b"<close>",
        _plain("200 OK", b"two"),
        b"HTTP/1.1 200 OK\r\nContent-Le<close>",
    ]
    server, results = _in_own_loop(_run(script, [lambda h: h.request("GET", "/", timeout=5)] * 3))
    assert [r.content for r in results[:2]] == [b"one", b"two"]
    assert len(server.requests) == 3 and [r[0] for r in server.requests] == [1, 2, 2]
    assert isinstance(results[2], asyncio.IncompleteReadError | ConnectionError), results[2]


def test_a_silent_server_times_out():
    server, (result,) = _in_own_loop(_run(["hang"], [lambda h: h.request("GET", "/", timeout=0.3)]))
    assert isinstance(result, TimeoutError), result
    assert len(server.requests) == 1


@pytest.mark.parametrize("content_length", [b"3", b"nope"])
def test_a_malformed_answer_is_an_error_not_a_response(content_length):
    script = [b"HTTP/1.1 200 OK\r\nContent-Length: " + content_length + b"\r\n\r\nab<close>"]
    _server, (result,) = _in_own_loop(_run(script, [lambda h: h.request("GET", "/", timeout=2)]))
    assert isinstance(result, Exception) and not isinstance(result, suite._Response), result
