"""Atomic file writes (a temporary file, fsync, rename: a kill mid-write leaves the previous file
intact), the clean-up of temporary files a killed writer left, PNG contents (by Pillow), and a
background writer thread.

A write that runs out of space (ENOSPC, or a quota's EDQUOT) raises `DiskFullError`: one line
naming the file, what it needed and what is free; the previous file is left as it was.

Temporary files are named `.<target name>.<pid>.<random>.tmp`, so a later run can tell one left by
a dead process (removed by `remove_stale_temps`) from one another process is writing."""
from __future__ import annotations

import contextlib
import errno
import io
import os
import queue
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path

import numpy as np
import PIL.Image

from ..errors import UserFacingError


class DiskFullError(UserFacingError, OSError):
    """A write that ran out of space; the message names the file, the bytes it needed and the
    bytes free."""

    def __str__(self) -> str:
        return self.strerror


_FULL = (errno.ENOSPC, errno.EDQUOT)


def out_of_space(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from or while handling, is ENOSPC / EDQUOT
    (torch.save, for one, raises a RuntimeError of its own while handling the OSError)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _FULL:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def disk_full_error(path, needed=None, atomic: bool = True) -> DiskFullError:
    """The error for a write of `path` that ran out of space: what it needed (bytes, when known),
    what its file system has free now and (`atomic`: written by `atomic_open`) what was kept."""
    path = Path(path)
    folder = next((p for p in [path.parent, *path.parents] if p.is_dir()), Path("."))
    free = shutil.disk_usage(folder).free
    need = f"it needs {_megabytes(needed)}, " if needed is not None else ""
    kept = ""
    if atomic:
        kept = " (the previous file is unchanged)" if path.exists() else " (no partial file was left)"
    return DiskFullError(errno.ENOSPC, f"no space left on the device to write {path}: {need}"
                         f"{_megabytes(free)} free there{kept}", str(path))


def _umask() -> int:
    """This process's umask, read without changing it where Linux tells it (`os.umask` sets it to
    read it: another thread creating a file meanwhile would get the wrong mode)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def plain_write_mode(path) -> int:
    """The permission bits `open(path, "wb")` would leave: an existing file keeps its own, a new
    one gets 0666 less the umask (0644 under the usual 022)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


@contextlib.contextmanager
def atomic_open(path, temp_dir=None, size=None):
    """Open `path` for writing so that readers see the old file or the whole new one, never a
    part: yields a binary file in `temp_dir` (default: `path`'s folder, which must be on the same
    file system), fsynced and renamed onto `path` when the block ends without an exception, and
    removed when it raises. Creates the folders. The file gets the mode a plain write would give it
    (`plain_write_mode`), not the temporary file's 0600.

    Out of space: `DiskFullError` naming `path` and `size`, the bytes the file needs (an int, or a
    function that gives it, called only then)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(temp_dir) if temp_dir is not None else path.parent
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=folder)
        os.fchmod(fd, plain_write_mode(path))  # mkstemp's 0600 would outlive the rename
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if out_of_space(e):
            raise disk_full_error(path, size() if callable(size) else size) from None
        raise


def atomic_write(path, data: bytes, temp_dir=None) -> Path:
    """Write `data` to `path` atomically (`atomic_open`). Returns the path."""
    with atomic_open(path, temp_dir, size=len(data)) as f:
        f.write(data)
    return Path(path)


_TEMP = re.compile(r"^\.(?P<name>.+?)\.(?P<pid>\d+)(\.[^.]*)?\.tmp$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temps(folder, name_glob: str = "*") -> list:
    """Remove the temporary files `atomic_open` left in `folder` for targets matching `name_glob`
    when the process that wrote them is gone (killed mid-write). Returns the removed paths."""
    folder = Path(folder)
    removed = []
    if not folder.is_dir():
        return removed
    for p in folder.glob(f".{name_glob}.*.tmp"):
        m = _TEMP.match(p.name)
        if m and int(m["pid"]) != os.getpid() and not _alive(int(m["pid"])):
            with contextlib.suppress(OSError):
                p.unlink()
                removed.append(p)
    return removed


def png_bytes(image) -> bytes:
    """[H, W, 3|4] uint8 (or float in [0, 1]) -> PNG file contents (Pillow's encoder)."""
    im = np.asarray(image)
    if im.dtype != np.uint8:
        im = (np.clip(im, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    if im.ndim != 3 or im.shape[2] not in (3, 4):
        raise ValueError(f"PNG image must be [H,W,3|4], got {im.shape}")
    out = io.BytesIO()
    PIL.Image.fromarray(np.ascontiguousarray(im), "RGBA" if im.shape[2] == 4 else "RGB").save(out, format="PNG")
    return out.getvalue()


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

    def check(self):
        """Raise the first `DiskFullError` a job met, if one did: the writes after it would fail too."""
        full = next((e for e in self.errors if isinstance(e, DiskFullError)), None)
        if full is not None:
            raise full

    def close(self):
        """Wait for every queued job; the first `DiskFullError` if one ran out of space, else
        RuntimeError with the first failure if any failed."""
        self._queue.put(None)
        self._thread.join()
        self.check()
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} snapshot write(s) failed; first: {self.errors[0]!r}")
