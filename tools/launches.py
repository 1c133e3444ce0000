"""Kernel launches per call of a program compiled for a GPU, counted from its optimised HLO.

On a GPU every instruction of an XLA computation that is not bookkeeping (a fusion, a custom call
such as a Triton kernel or cuBLAS, a sort, a copy, a scatter) is one kernel launch; a while loop
launches its condition and its body once per iteration (and waits for the condition on the host
side of the stream), a conditional one of its branches. So:

    launches(computation) = its kernels + for each while loop: trips x (launches(body) + launches(condition))
                            + launches(condition) + for each conditional: the largest branch's

Trip counts come from XLA's `known_trip_count` where it has one. The data-dependent loops (the XLA
rasterizers' walks over each tile's list) take the mean trip count measured by running the same
program on this CPU (`measure_trips`): forward loops are those outside the backward pass, backward
loops those XLA names `transpose(...)` (the VJP). A loop with neither is counted once and reported.

A sort counts as one launch here; XLA built for a GPU without one present uses its own sort
(bitonic stages, several kernels) instead of CUB's (a few kernels), so sorts are counted low.
"""
from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from typing import NamedTuple

# instructions that launch nothing (layout changes, tuples, control flow counted through its computations)
BOOKKEEPING = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "add-dependency",
               "opt-barrier", "partition-id", "replica-id", "domain", "copy-done", "all-reduce-done",
               "all-gather-done", "collective-permute-done", "async-done", "send-done", "recv-done"}
_OPCODE = re.compile(r"=\s.*?\s([a-z][a-z0-9\-]*)\(")
_HEADER = re.compile(r"^(ENTRY )?%(\S+) ")


class Instr(NamedTuple):
    opcode: str
    text: str


def computations(hlo: str) -> tuple:
    """(name of the entry computation, {computation name: [Instr]}) of an HLO module's text."""
    comps, entry, name = {}, None, None
    for line in hlo.splitlines():
        m = _HEADER.match(line)
        if m and line.rstrip().endswith("{"):
            name = m.group(2)
            comps[name] = []
            if m.group(1):
                entry = name
            continue
        if name is None:
            continue
        if line.startswith("}"):
            name = None
            continue
        op = _OPCODE.search(line)
        if op:
            comps[name].append(Instr(op.group(1), line))
    return entry, comps


def _called(text: str, key: str) -> list:
    m = re.search(key + r"=\{([^}]*)\}", text) or re.search(key + r"=(%[\w.\-]+)", text)
    return [] if not m else [c.strip().lstrip("%") for c in m.group(1).split(",")]


class Count(NamedTuple):
    launches: float
    while_loops: int  # while instructions in the program (each branch's counted)
    data_dependent: int  # of them, those without a known trip count
    unmeasured: int  # data-dependent loops with no measured trip count (counted once)


def launches(hlo: str, trips: dict | None = None, computation: str | None = None) -> Count:
    """Launches per call of `computation` (default the entry) of the compiled module `hlo`.

    Args:
      trips: mean trip counts of the data-dependent loops, {"forward": x, "backward": y}
        (`measure_trips`); missing: such a loop counts once and `unmeasured` says how many.
    """
    trips = trips or {}
    entry, comps = computations(hlo)
    stats = Counter()
    memo = {}

    def count(name: str) -> float:
        if name in memo:
            return memo[name]
        total = 0.0
        for ins in comps.get(name, []):
            if ins.opcode in BOOKKEEPING:
                continue
            if ins.opcode == "while":
                stats["while"] += 1
                body, cond = _called(ins.text, "body")[0], _called(ins.text, "condition")[0]
                known = re.search(r'"known_trip_count":\{"n":"(\d+)"', ins.text)
                if known:
                    n = int(known.group(1))
                else:
                    stats["data_dependent"] += 1
                    side = "backward" if "transpose(" in ins.text else "forward"
                    if side in trips:
                        n = float(trips[side])
                    else:
                        stats["unmeasured"] += 1
                        n = 1.0
                total += n * (count(body) + count(cond)) + count(cond)
            elif ins.opcode == "conditional":
                branches = _called(ins.text, "branch_computations") or (
                    _called(ins.text, "true_computation") + _called(ins.text, "false_computation"))
                total += 1 + max((count(b) for b in branches), default=0.0)  # the predicate read, one branch
            elif ins.opcode == "call":
                total += sum(count(c) for c in _called(ins.text, "to_apply"))
            else:
                total += 1
        memo[name] = total
        return total

    n = count(computation or entry)
    return Count(n, stats["while"], stats["data_dependent"], stats["unmeasured"])


def loop_body(hlo: str, trip_count: int) -> str | None:
    """Name of the body of the (first) while loop with `known_trip_count` == trip_count: e.g. the
    train block's scan over its steps, whose body is one training step. XLA's TPU compiler writes
    no trip counts: there, the first while loop of the entry computation whose condition compares
    with that constant."""
    entry, comps = computations(hlo)
    for instrs in comps.values():
        for ins in instrs:
            if ins.opcode == "while" and f'"known_trip_count":{{"n":"{trip_count}"}}' in ins.text:
                return _called(ins.text, "body")[0]
    for ins in comps.get(entry, []):
        if ins.opcode == "while":
            condition = comps.get(_called(ins.text, "condition")[0], [])
            if any(re.search(rf"\bconstant\({trip_count}\)", c.text) for c in condition):
                return _called(ins.text, "body")[0]
    return None


class PlatformOnly:
    """A stand-in device that says only its platform: a `Layout` of it builds a program's structure
    for that platform (tile groups, buffer tiers), which then runs where JAX puts it (this CPU)."""

    def __init__(self, platform: str):
        self.platform = platform


def measure_trips(fn, *args) -> dict:
    """Mean trip counts of the rasterizers' data-dependent walks when `fn(*args)` runs on this CPU:
    {"forward": x, "backward": y}, over every execution of the loops (a vmapped loop runs to its
    longest lane: its max). Build `fn` for the target's platform (a `Layout` of `PlatformOnly`)
    so the program walks as it would there."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    record = defaultdict(list)
    original = jax.lax.while_loop
    walks = {"rasterize_flat.py", "rasterize_standard.py"}

    def counting(cond, body, init):
        frame = sys._getframe(1)
        if frame.f_code.co_filename.rsplit("/", 1)[-1] not in walks:
            return original(cond, body, init)
        side = "backward" if "backward" in frame.f_code.co_name or frame.f_code.co_name == "group" else "forward"
        out, n = original(lambda c: cond(c[0]), lambda c: (body(c[0]), c[1] + 1), (init, jnp.int32(0)))
        jax.debug.callback(lambda k: record[side].append(float(np.max(k))), n)
        return out

    jax.lax.while_loop = counting
    try:
        jax.clear_caches()
        jax.block_until_ready(fn(*args))
        jax.effects_barrier()
    finally:
        jax.lax.while_loop = original
        jax.clear_caches()
    return {side: float(np.mean(v)) for side, v in record.items()}

