"""A headless Chromium driven over the Chrome DevTools protocol with the standard library only (no selenium, nothing
downloaded): the report.html tests open a page, click as a person would and read what the page shows.

Chromium is Debian's package (``apt-get install chromium``; .ci/run installs it); :func:`chromium_path` is None where
it is absent and the tests skip with a note.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
)


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One headless Chromium with one page; ``call(method, **params)`` sends a DevTools command and returns its
    result; events seen meanwhile are kept in ``events``."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 900, timeout: float = 60.0):
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [
                chromium_path(),
                *FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.is_file() and len(port_file.read_text().split()) >= 2):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as r:
            target = next(t for t in json.load(r) if t.get("type") == "page")
        self.sock = self._connect(port, target["webSocketDebuggerUrl"].split(f":{port}", 1)[1])
        self.next_id, self.events = 0, []

    def _connect(self, port: int, path: str) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port), timeout=self.timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"websocket refused: {head[:80]!r}")
        return sock

    def _send(self, text: str) -> None:
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        header = bytes([0x81]) + (
            bytes([0x80 | n])
            if n < 126
            else bytes([0x80 | 126]) + struct.pack(">H", n)
            if n < 65536
            else bytes([0x80 | 127]) + struct.pack(">Q", n)
        )
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise RuntimeError("chromium closed the DevTools connection")
            buf += chunk
        return buf

    def _receive(self) -> dict:
        payload = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload += self._exact(n)
            if b0 & 0x80:  # the final fragment
                return json.loads(payload)

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = self._receive()
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def open(self, url: str, ready: str = "window.GF_READY === true") -> None:
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + self.timeout
        while not self.evaluate(f"Boolean({ready})"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} never became ready ({ready})")
            time.sleep(0.05)

    def click(self, selector: str) -> None:
        """A mouse press and release at the middle of the element (scrolled into view), as a person clicks."""
        box = self.evaluate(
            f"(function(){{var e=document.querySelector({json.dumps(selector)});"
            f"e.scrollIntoView({{block:'center'}});var r=e.getBoundingClientRect();"
            f"return [r.left+r.width/2, r.top+r.height/2];}})()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def screenshot(self, path: Path, full: bool = False) -> Path:
        params = {"format": "png"}
        if full:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(
                captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
            )
        Path(path).write_bytes(base64.b64decode(self.call("Page.captureScreenshot", **params)["data"]))
        return Path(path)

    def close(self) -> None:
        if getattr(self, "sock", None) is not None:
            self.sock.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    """``python tests/browser.py PAGE.html OUT.png [SELECTOR ...]``: open a page, click each selector, screenshot the
    top of the page (how docs/img/report-html.png is taken)."""
    import sys
    import tempfile

    args = sys.argv[1:] if argv is None else argv
    with tempfile.TemporaryDirectory() as profile, Browser(Path(profile), width=1280, height=1350) as b:
        b.open(Path(args[0]).resolve().as_uri())
        for selector in args[2:]:
            b.click(selector)
        b.evaluate("window.scrollTo(0, 0)")
        b.screenshot(Path(args[1]))


if __name__ == "__main__":
    main()
