"""Stopping and resuming a run: where `--load-dir` finds its checkpoints, Ctrl-C and SIGTERM while
training (the block under way finishes, a checkpoint of the state reached is written and the run
ends with one line naming it and the command that resumes it; a second Ctrl-C ends the process
at once, writing nothing more), and that command."""
from __future__ import annotations

import atexit
import logging
import os
import re
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Optional

from .errors import InputError

log = logging.getLogger(__name__)

_CHECKPOINT = re.compile(r"^step-(\d+)\.ckpt$")


def checkpoint_steps(folder: Path) -> list:
    """Steps of the nerfstudio checkpoints (step-NNNNNNNNN.ckpt) in `folder`, sorted."""
    return sorted(int(m[1]) for p in folder.iterdir() if p.is_file() and (m := _CHECKPOINT.match(p.name)))


def resolve_load_dir(load_dir: Path, load_step: Optional[int]):
    """(folder, step) for `--load-dir` (and `--load-step`): the folder must hold checkpoints; given
    a run folder, its nerfstudio_models/ is used; otherwise InputError says where they are."""
    load_dir = Path(load_dir)
    if not load_dir.is_dir():
        raise InputError(f"--load-dir {load_dir} " + ("is a file, not a folder" if load_dir.exists() else "does not exist"))
    steps = checkpoint_steps(load_dir)
    if not steps and (load_dir / "nerfstudio_models").is_dir() and checkpoint_steps(load_dir / "nerfstudio_models"):
        log.info(f"--load-dir {load_dir} is a run folder: loading from its nerfstudio_models/")
        load_dir = load_dir / "nerfstudio_models"
        steps = checkpoint_steps(load_dir)
    if not steps:
        found = sorted({p.parent for p in load_dir.glob("**/step-*.ckpt") if _CHECKPOINT.match(p.name)})
        where = f"; there are some in {found[-1]}" + (f" (and {len(found) - 1} other folders)" if len(found) > 1 else "") if found else ""
        raise InputError(f"--load-dir {load_dir} holds no checkpoints (step-NNNNNNNNN.ckpt){where}")
    if load_step is not None and load_step not in steps:
        raise InputError(f"--load-step {load_step}: {load_dir} has checkpoints for steps {', '.join(map(str, steps))}")
    return load_dir, (steps[-1] if load_step is None else load_step)


SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class Interrupts:
    """While active (in the main thread): the first SIGINT or SIGTERM is recorded in `.signal` for
    the training loop to stop at the end of the block under way; a second one ends the process at
    once (exit status 128 + the signal), writing nothing.

    A watcher thread reads the signal numbers that Python's C-level handler writes to a wakeup
    pipe the moment a signal arrives, so the second Ctrl-C acts even while the main thread waits
    inside XLA (where Python-level handlers would only run when the block has finished)."""

    def __init__(self):
        self.signal = None
        self._active = False

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread can set handlers (the viewer trains in the main one)
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous = {s: signal.signal(s, lambda *_: None) for s in SIGNALS}
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._active = True
        self._watcher = threading.Thread(target=self._watch, name="jax-gs-interrupts", daemon=True)
        self._watcher.start()
        return self

    def _watch(self):
        while True:
            data = os.read(self._read, 64)
            if not data or 0 in data:  # closed, or `__exit__`'s stop byte
                return
            for num in data:
                if num not in SIGNALS:
                    continue
                if self.signal is None:
                    self.signal = num
                    sys.stderr.write(f"\n[jax-gs] {SIGNALS[num]}: stopping at the end of this block to save a "
                                     f"checkpoint (press Ctrl-C again to stop at once, without saving)\n")
                    sys.stderr.flush()
                else:
                    sys.stderr.write(f"\n[jax-gs] {SIGNALS[num]} again: stopped at once, nothing saved since "
                                     f"the last checkpoint\n")
                    sys.stderr.flush()
                    os._exit(128 + num)

    def __exit__(self, *exc):
        if not self._active:
            return False
        signal.set_wakeup_fd(self._previous_fd)
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        os.write(self._write, b"\0")
        self._watcher.join()
        os.close(self._read)
        os.close(self._write)
        self._active = False
        return False


def resume_command(argv: list, method: str, load_dir: Path, remaining: int) -> str:
    """The ns-train command line of this run (`argv`: sys.argv) that continues it from the
    checkpoints in `load_dir` for the `remaining` steps: the same arguments, with `--load-dir`
    and `--max-num-iterations` (and no other checkpoint choice) right after the method's name."""
    drop = {"--load-dir", "--load-step", "--load-checkpoint", "--max-num-iterations"}
    args, skip = [], False
    for a in argv[1:]:
        if skip:
            skip = False
            continue
        key = a.split("=", 1)[0].replace("_", "-")
        if key in drop:
            skip = "=" not in a
            continue
        args.append(a)
    at = args.index(method) + 1 if method in args else 0
    args[at:at] = ["--load-dir", str(load_dir), "--max-num-iterations", str(remaining)]
    return shlex.join(["ns-train", *args])


def say_last(line: str) -> None:
    """Print `line` as the process's last words: when it exits, after nerfstudio's own closing
    output (its profiler's report)."""
    atexit.register(lambda: print(line, flush=True))
