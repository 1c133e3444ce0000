"""A real headless Chromium (the machine's, driven by Playwright): open a page, read its text, take
screenshots; and what a screenshot of nerfstudio's viewer shows."""
from __future__ import annotations

import shutil
import socket
import time

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


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
    """One page of the machine's Chromium, driven by Playwright (its own browser download is not
    needed: `executable_path` is the system's)."""

    def __init__(self, width=1280, height=800):
        from playwright.sync_api import sync_playwright

        exe = find_chromium()
        if exe is None:
            raise RuntimeError("no chromium found")
        self._playwright = sync_playwright().start()
        try:
            self._browser = self._playwright.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_FLAGS)
            self.page = self._browser.new_page(viewport={"width": width, "height": height})
        except BaseException:
            self._playwright.stop()
            raise

    def open(self, url):
        self.page.goto(url, wait_until="commit")

    def text(self) -> str:
        """The page's visible text."""
        return self.page.evaluate("document.body ? document.body.innerText : ''") or ""

    def screenshot(self) -> bytes:
        return self.page.screenshot()

    def close(self):
        try:
            self._browser.close()
        finally:
            self._playwright.stop()


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
