"""A real headless Chromium driven over the DevTools protocol: open a page, take screenshots."""
from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float, proc=None) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before port {port} opened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


class Browser:
    def __init__(self, width=1280, height=800):
        exe = find_chromium()
        if exe is None:
            raise RuntimeError("no chromium found")
        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="jaxgs-chromium-")
        self.proc = subprocess.Popen([exe, *CHROMIUM_FLAGS, f"--remote-debugging-port={self.port}",
                                      f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, 60, self.proc)
        from websockets.sync.client import connect

        for _ in range(60):
            pages = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json").read())
            pages = [p for p in pages if p.get("type") == "page"]
            if pages:
                break
            time.sleep(0.5)
        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30)  # closed in close()
        self._id = 0

    def call(self, method, **params):
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def open(self, url):
        self.call("Page.enable")
        self.call("Page.navigate", url=url)

    def text(self) -> str:
        """The page's visible text."""
        r = self.call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                      returnByValue=True)
        return r.get("result", {}).get("value", "") or ""

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)


def canvas(png: bytes):
    """The 3D canvas of a nerfstudio viewer screenshot (left of the control panel, below the bar)."""
    import io

    import numpy as np
    from PIL import Image

    im = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(np.float64)
    h, w, _ = im.shape
    return im[int(0.15 * h):int(0.95 * h), int(0.05 * w):int(0.70 * w)]


def shows_a_render(canvas) -> bool:
    """viser's empty canvas is near-black (about 20-30 grey levels, train cameras as specks), a page
    that failed to load is white or flat: a frame of the fox fills the canvas with lit, varied
    colour."""
    import numpy as np

    lum = canvas.mean(-1)
    lit = np.mean(lum > 50)
    return lit > 0.6 and np.median(lum) < 235 and canvas.std() > 6


def watch_run(browser, proc, timeout: float = 900, every: float = 2.0, on_render=None) -> list:
    """While `proc` (an ns-train with the viewer open in `browser`) runs: a screenshot every
    `every` seconds, [(seconds, the panel's step readout, canvas)]; `on_render(png)` is called with
    each screenshot that shows a render."""
    import re

    start, seen = time.time(), []
    while proc.poll() is None and time.time() - start < timeout:
        time.sleep(every)
        try:
            shot, text = browser.screenshot(), browser.text()
        except Exception:  # the run ended and its viewer went away between the poll and the shot
            break
        found = re.findall(r"Step:\s*(\d+)", text)
        if found:
            seen.append((time.time() - start, int(found[-1]), canvas(shot)))
            if on_render is not None and shows_a_render(seen[-1][2]):
                on_render(shot)
    return seen
