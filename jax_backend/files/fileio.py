"""Atomic file writes (temp file in the same folder, fsync, rename: a kill mid-write leaves the
previous file intact), a minimal PNG encoder, and a background writer thread."""
from __future__ import annotations

import os
import queue
import struct
import tempfile
import threading
import zlib
from pathlib import Path

import numpy as np


def atomic_write(path, data: bytes) -> Path:
    """Write `data` to `path` so that readers see the old file or the whole new one, never a part:
    a temporary file in the same folder, fsync, rename. Creates the folder. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def png_bytes(image) -> bytes:
    """[H, W, 3] uint8 (or float in [0, 1]) -> PNG file contents."""
    im = np.asarray(image)
    if im.dtype != np.uint8:
        im = (np.clip(im, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    if im.ndim != 3 or im.shape[2] not in (3, 4):
        raise ValueError(f"PNG image must be [H,W,3|4], got {im.shape}")
    h, w, c = im.shape
    raw = b"".join(b"\x00" + im[y].tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, 6 if c == 4 else 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


class AsyncWriter:
    """Runs write jobs on one background thread, in order. The training loop only enqueues:
    device arrays handed to a job are fetched (and waited for) on the writer thread."""

    def __init__(self, max_pending: int = 4):
        self._queue: queue.Queue = queue.Queue(maxsize=max_pending)
        self.errors: list = []
        self.done = 0
        self._thread = threading.Thread(target=self._run, name="jax-gs-writer", daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            job = self._queue.get()
            if job is None:
                break
            fn, args = job
            try:
                fn(*args)
                self.done += 1
            except Exception as e:  # reported by close(); training goes on
                self.errors.append(e)

    def submit(self, fn, *args):
        """Queue `fn(*args)` (blocks only when `max_pending` jobs are already waiting)."""
        self._queue.put((fn, args))

    def close(self):
        """Wait for every queued job; RuntimeError with the first failure if any failed."""
        self._queue.put(None)
        self._thread.join()
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} snapshot write(s) failed; first: {self.errors[0]!r}")
