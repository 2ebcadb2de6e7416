"""Chromium driven over the DevTools protocol directly, for what Playwright cannot show: a hidden tab.

Playwright keeps every page it attaches to "visible": it turns on focus emulation
(``Emulation.setFocusEmulationEnabled``), which holds the tab in the foreground whatever else happens, so
``document.visibilityState`` never becomes ``hidden`` and no ``visibilitychange`` fires. This client
attaches to one tab without that emulation, so opening another tab in the same window really hides the
first one, in the real (headless) Chromium, exactly as when a worker switches tabs.

Only loopback, only what the tests need: the DevTools HTTP endpoints (list, new, activate, close) and
one WebSocket per attached tab (``send``, ``evaluate``, ``wait``, a real mouse click).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import time
import urllib.request
from pathlib import Path

from websockets.sync.client import connect


class CdpError(AssertionError):
    """A DevTools call failed, or a condition was not met in time (the message says which)."""


class CdpTab:
    """One tab over its own DevTools WebSocket. Events are read and dropped; calls wait for their reply."""

    def __init__(self, websocket_url: str):
        self._socket = connect(websocket_url, max_size=None, open_timeout=10)
        self._ids = itertools.count(1)

    def close(self) -> None:
        self._socket.close()

    def send(self, method: str, timeout_s: float = 30.0, **params) -> dict:
        call_id = next(self._ids)
        self._socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CdpError(f"DevTools call {method} got no reply in {timeout_s} s")
            message = json.loads(self._socket.recv(timeout=remaining))
            if message.get("id") != call_id:
                continue  # an event, or a late reply to an earlier call
            if "error" in message:
                raise CdpError(f"DevTools call {method}({params}) failed: {message['error']}")
            return message.get("result", {})

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise CdpError(f"page script failed: {expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, expression: str, *, what: str, timeout_s: float = 30.0):
        """Poll ``expression`` in the page until it is truthy; returns its value."""
        from tests.annotation_ui.driver import wait_for

        return wait_for(lambda: self.evaluate(expression), timeout_s=timeout_s, what=f"{what} ({expression})")

    def click(self, x: float, y: float) -> None:
        """A real left-button mouse click at CSS pixel (x, y): the page sees trusted Pointer Events."""
        for kind, extra in (
            ("mouseMoved", {}),
            ("mousePressed", {"button": "left", "buttons": 1, "clickCount": 1}),
            ("mouseReleased", {"button": "left", "buttons": 0, "clickCount": 1}),
        ):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, **extra)

    def click_element(self, selector: str) -> None:
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        self.click(*box)


class RawChromium:
    """A headless Chromium with its DevTools port on 127.0.0.1; tabs are opened and switched over HTTP."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def _json(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"{self.base}{path}", method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        try:
            return json.loads(body)
        except ValueError:
            return body.decode()

    def tabs(self) -> list[dict]:
        return [target for target in self._json("/json/list") if target.get("type") == "page"]

    def new_tab(self, url: str = "about:blank") -> dict:
        """Open a tab in the same window and bring it to the front (the other tabs become hidden)."""
        return self._json(f"/json/new?{url}", method="PUT")

    def activate(self, tab_id: str) -> None:
        self._json(f"/json/activate/{tab_id}")

    def close_tab(self, tab_id: str) -> None:
        self._json(f"/json/close/{tab_id}")

    def attach(self, tab: dict) -> CdpTab:
        return CdpTab(tab["webSocketDebuggerUrl"])


@contextlib.contextmanager
def raw_chromium(executable: str, args: list[str], profile_dir: Path, *, window_size=(1920, 1080)):
    """Start Chromium (headless, DevTools on a free loopback port, a throw-away profile); stop it after."""
    profile_dir.mkdir(parents=True, exist_ok=True)
    command = [
        executable,
        "--headless",
        *args,
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile_dir}",
        f"--window-size={window_size[0]},{window_size[1]}",
        "about:blank",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if process.poll() is not None:
                raise CdpError(
                    f"Chromium exited with code {process.returncode} at start: {' '.join(command)}"
                )
            if time.monotonic() > deadline:
                raise CdpError(f"Chromium wrote no DevTools port to {port_file} within 30 s")
            time.sleep(0.05)
        yield RawChromium(int(port_file.read_text().split()[0]))
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
