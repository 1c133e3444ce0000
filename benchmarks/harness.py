"""The benchmarks' one harness: arguments through tyro (as nerfstudio's commands take theirs), the
command line a results file starts with, a function run in a fresh process of its own (peak memory
and compile caches are per process; `tree`: another checkout's code), a command run and timed
whole, JAX work timed after its compile, and configurations alternated round by round so that a
noisy host's drift falls on each alike. Every benchmark's ratios come from figures measured side
by side in one run. (`device_check.py` alone keeps argparse: it runs on a lent accelerator's
machine, whose Python may have no tyro.)

    python benchmarks/harness.py MODULE:FUNCTION 'JSON KWARGS'   # what `in_process` runs
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Optional

ROOT = Path(__file__).resolve().parents[1]
_RESULT = "benchmarks.harness result: "  # the line a child's result follows


def cli(commands, module: str):
    """Run `commands` (one function, or {name: function} as subcommands) with tyro's arguments from
    the command line, after printing that command line as a results file's first line."""
    import tyro

    print(f"# python -m benchmarks.{module} {shlex.join(sys.argv[1:])}".rstrip(), flush=True)
    if callable(commands):
        return tyro.cli(commands)
    return tyro.extras.subcommand_cli_from_dict(commands)


def tree_env(tree=None, **overrides) -> dict:
    """The environment of a process running `tree`'s code (a checkout's root; None: this one): its
    folder first on PYTHONPATH, JAX on the CPU unless JAX_PLATFORMS says otherwise, then
    `overrides`."""
    return {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
            "PYTHONPATH": str(tree or ROOT), **{k: str(v) for k, v in overrides.items()}}


def in_process(function: str, tree=None, env: Optional[dict] = None, timeout: Optional[float] = None, **kwargs):
    """`function` ("module:name", e.g. "benchmarks.rasterizer:measure") called with `kwargs` (JSON)
    in a fresh Python process of `tree`'s code, with `env` added to its environment; its result
    (JSON) back. A failure raises with the end of the child's stderr."""
    tree = Path(tree or ROOT)
    # this file run as a script: the child imports `function` from `tree` (PYTHONPATH), even a tree
    # older than the harness
    out = subprocess.run([sys.executable, __file__, function, json.dumps(kwargs)],
                         capture_output=True, text=True, cwd=tree, env=tree_env(tree, **(env or {})),
                         stdin=subprocess.DEVNULL, timeout=timeout)
    lines = [line for line in out.stdout.splitlines() if line.startswith(_RESULT)]
    if out.returncode or not lines:
        raise RuntimeError(f"{function}({kwargs}) in {tree} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len(_RESULT):])


def run_command(cmd, log: Path, env: Optional[dict] = None, timeout: Optional[float] = None, cwd=None) -> dict:
    """Run `cmd` (an ns-* command, say), its output to `log`: {"seconds": its whole time,
    "stopped": whether `timeout` stopped it first, "returncode"}. A failure that no timeout caused
    raises, naming the log."""
    start = time.time()
    stopped = False
    with open(log, "w") as f:
        proc = subprocess.Popen([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=tree_env(None, **(env or {})), cwd=cwd)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stopped = True
            proc.terminate()
            proc.wait()
    if proc.returncode and not stopped:
        raise RuntimeError(f"{' '.join(map(str, cmd[:3]))} ... failed ({proc.returncode}); its output: {log}")
    return {"seconds": time.time() - start, "stopped": stopped, "returncode": proc.returncode}


def timed(fn: Callable, *args, repeat: int = 5) -> float:
    """Seconds a call of `fn(*args)` takes (JAX's work waited for), the mean of `repeat` calls after
    one that compiles."""
    import jax

    jax.block_until_ready(fn(*args))
    t0 = time.perf_counter()
    for _ in range(repeat):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / repeat


def alternate(runs: Dict[str, Callable[[], dict]], rounds: int) -> Dict[str, list]:
    """Each of `runs` called once a round, the order reversed every other round (A B, B A, ...):
    {name: [its result of each round]}."""
    names = list(runs)
    out = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            out[name].append(runs[name]())
    return out


def append_row(out, row: dict) -> None:
    """`row` as one more JSON line of the file `out` (None: nowhere)."""
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")


def _call_in_child() -> None:
    import importlib

    module, name = sys.argv[1].split(":")
    result = getattr(importlib.import_module(module), name)(**json.loads(sys.argv[2]))
    print(_RESULT + json.dumps(result), flush=True)


if __name__ == "__main__":
    _call_in_child()
