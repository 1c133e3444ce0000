"""A viewer client with no screen: it speaks viser's websocket protocol as the browser does (the
same camera messages in, the same renders and panel updates out) and draws nothing. Beside a real
browser it tells what watching a run costs jax-gs (renders, encoding, sending) apart from what a
browser's own drawing costs the shared cores (viser's page redraws its WebGL canvas every frame,
in software on a machine without a GPU)."""
from __future__ import annotations

import re
import threading
import time

import numpy as np

STEP = re.compile(r"Step:\s*(\d+)")


def look_at_wxyz(position, target, up=(0.0, 0.0, 1.0)):
    """The quaternion (w, x, y, z) of a camera at `position` looking at `target` with `up` up, in
    viser's convention (OpenCV: +Z forward, +Y down)."""
    import viser.transforms as vtf

    z = np.asarray(target, float) - np.asarray(position, float)
    z /= np.linalg.norm(z)
    y = -(np.asarray(up, float) - np.dot(up, z) * z)
    y /= np.linalg.norm(y)
    x = np.cross(y, z)
    return tuple(float(v) for v in vtf.SO3.from_matrix(np.stack([x, y, z], axis=1)).wxyz)


def _strings(x):
    """Every string inside a decoded message."""
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _strings(v)


class ViserClient:
    """Connects to a viser server on `port`, sends a camera at viser's starting pose (as a browser
    that has just loaded the page), follows the server's camera moves (jax-gs's first view) with
    camera messages as a browser does, and records every render it is sent and every step the
    panel shows: `frames` [(seconds since connecting, bytes of the image)], `steps` [(seconds,
    step)], `images` (every render's encoded bytes, in order), `last_image` (the last), `gui` (the panel's inputs by label;
    `set_gui` changes one)."""

    def __init__(self, port: int, aspect: float = 1.6, fov: float = 1.31):
        from websockets.sync.client import connect

        self.ws = connect(f"ws://127.0.0.1:{port}", max_size=None, open_timeout=60)
        self.start = time.time()
        self.frames, self.steps, self.last_image, self.images = [], [], None, []
        self.gui = {}  # label -> the panel's input as the server described it (id, value, options, ...)
        # viser's starting camera: three.js's (-3, 3, -3), Y up, in viser's Z-up world
        position, look_at, up = (-3.0, 3.0, 3.0), (0.0, 0.0, 0.0), (0.0, 0.0, 1.0)
        self.camera = dict(wxyz=look_at_wxyz(position, look_at, up), position=position, fov=fov, aspect=aspect,
                           look_at=look_at, up_direction=up)
        self._closed = False
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.send_camera()

    def send_camera(self, **changes) -> None:
        import msgspec

        self.camera.update(changes)
        with self._send_lock:
            self.ws.send(msgspec.msgpack.encode(dict(self.camera, type="ViewerCameraMessage")))

    def _read(self) -> None:
        import msgspec

        # the server's camera moves: (message, its field, the camera's field); viser's up-direction
        # message names its vector "position". The browser answers each with its whole camera.
        moves = {"SetCameraPositionMessage": ("position", "position"), "SetCameraLookAtMessage": ("look_at", "look_at"),
                 "SetCameraUpDirectionMessage": ("position", "up_direction"), "SetCameraFovMessage": ("fov", "fov")}
        while not self._closed:
            try:
                raw = self.ws.recv(timeout=1.0)
            except TimeoutError:
                continue
            except Exception:  # the server went away: the run ended
                return
            decoded = msgspec.msgpack.decode(raw)
            for msg in decoded if isinstance(decoded, list) else [decoded]:
                t = time.time() - self.start
                kind = msg.get("type")
                if kind == "BackgroundImageMessage":
                    self.last_image = msg.get("rgb_bytes") or b""
                    self.frames.append((t, len(self.last_image)))
                    self.images.append(self.last_image)
                elif "id" in msg and "label" in msg and "value" in msg:  # a panel input
                    self.gui[msg["label"]] = dict(msg)
                elif kind == "GuiUpdateMessage":
                    for entry in self.gui.values():
                        if entry["id"] == msg.get("id"):
                            entry.update(msg.get("updates") or {})
                elif kind in moves:
                    field, key = moves[kind]
                    value = msg.get(field)
                    self.camera[key] = tuple(value) if isinstance(value, list) else value
                    c = self.camera
                    self.send_camera(wxyz=look_at_wxyz(c["position"], c["look_at"], c["up_direction"]))
                for s in _strings(msg):
                    for found in STEP.findall(s):
                        self.steps.append((t, int(found)))

    def set_gui(self, label: str, value) -> None:
        """Set the panel input labelled `label` to `value`, as a user's choice in the browser."""
        import msgspec

        entry = self.gui[label]
        entry["value"] = value
        with self._send_lock:
            self.ws.send(msgspec.msgpack.encode({"type": "GuiUpdateMessage", "id": entry["id"], "updates": {"value": value}}))

    def orbit(self, degrees: float, timeout: float = 60.0):
        """Turn the camera `degrees` about its look-at point (around its up direction), as a drag
        in the browser ends; the seconds until the first render sent after the move arrives (None:
        none within `timeout`)."""
        import viser.transforms as vtf

        c = self.camera
        target, up = np.asarray(c["look_at"], float), np.asarray(c["up_direction"], float)
        turn = vtf.SO3.exp(np.radians(degrees) * up / np.linalg.norm(up)).as_matrix()
        position = tuple(float(v) for v in target + turn @ (np.asarray(c["position"], float) - target))
        seen = len(self.frames)
        sent = time.time()
        self.send_camera(position=position, wxyz=look_at_wxyz(position, c["look_at"], c["up_direction"]))
        while time.time() - sent < timeout:
            if len(self.frames) > seen:
                return self.frames[seen][0] - (sent - self.start)
            time.sleep(0.01)
        return None

    def close(self) -> None:
        self._closed = True
        try:
            self.ws.close()
        finally:
            self._reader.join(5)
