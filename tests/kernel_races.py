"""Stores that race between a Pallas kernel's programs, found in the jaxpr.

On a GPU a grid's programs run at the same time; in interpret mode (this CPU) one after the other,
so a store that two programs make to one place gives the right answer here and a wrong one there.
`races(jaxpr)` walks every `pallas_call` in a traced program (through jit, while, cond, scan,
shard_map, custom_vjp) and reports each store (`swap`, `addupdate`: `ref[i] = v`, `ref[i] += v`)
that two programs of a grid of more than one may make to one place:
- into an input (every program sees the whole of it, or a block another program may share);
- into an output whose block is not the program's own (the block's index map does not follow the
  program id, e.g. the whole array in every program);
- into an output block at a place chosen at run time (an index that is not a literal).
A store into a program's own block at a literal place, into scratch memory, and an atomic
(`atomic_rmw`: `pallas.triton.atomic_add` and its kin) is not reported. Conservative: an index
computed from literals inside the kernel is reported as chosen at run time.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

STORES = ("swap", "addupdate")


class Race(NamedTuple):
    kernel: str  # the pallas_call's name
    primitive: str  # swap or addupdate
    operand: str  # e.g. "output 0 [60, 11]"
    why: str


class _Ref(NamedTuple):
    kind: str  # "input", "output" or "scratch"
    index: int
    shape: tuple
    own_block: bool  # each program of the grid gets its own block of it


def _jaxprs(value):
    for v in value if isinstance(value, (list, tuple)) else (value,):
        if isinstance(v, ClosedJaxpr):
            yield v.jaxpr
        elif isinstance(v, Jaxpr):
            yield v


def pallas_calls(jaxpr):
    """Every `pallas_call` equation in a jaxpr and in every jaxpr nested in it."""
    if isinstance(jaxpr, ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
        for value in eqn.params.values():
            for sub in _jaxprs(value):
                yield from pallas_calls(sub)


def _own_block(bm) -> bool:
    """The block mapping gives each program its own block: along some axis the block is smaller
    than the array and the index map's output there is not a constant."""
    outs = bm.index_map_jaxpr.jaxpr.outvars
    full, block = bm.array_aval.shape, bm.block_aval.shape
    return any(not isinstance(o, Literal) and b < f for o, b, f in zip(outs, block, full))


def _kernel_refs(eqn) -> list:
    gm = eqn.params["grid_mapping"]
    n_idx, n_in, n_out = gm.num_index_operands, gm.num_inputs, gm.num_outputs
    refs = []
    for i, bm in enumerate(gm.block_mappings):
        kind, index = ("input", i) if i < n_in else ("output", i - n_in)
        refs.append(_Ref(kind, index, tuple(bm.array_aval.shape), _own_block(bm)))
    invars = eqn.params["jaxpr"].invars
    scratch = invars[n_idx + n_in + n_out:]
    refs = [_Ref("input", -1, (), False)] * n_idx + refs + [_Ref("scratch", i, (), True) for i in range(len(scratch))]
    return dict(zip(invars, refs))


def _inner_maps(eqn):
    """(nested jaxpr, {its invar: the outer operand it is}) for each jaxpr nested in `eqn`."""
    ops, name = eqn.invars, eqn.primitive.name
    if name == "while":
        cn, bn = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        cond, body = eqn.params["cond_jaxpr"].jaxpr, eqn.params["body_jaxpr"].jaxpr
        yield cond, dict(zip(cond.invars, ops[:cn] + ops[cn + bn:]))
        yield body, dict(zip(body.invars, ops[cn:cn + bn] + ops[cn + bn:]))
        return
    if name == "cond":
        for branch in eqn.params["branches"]:
            yield branch.jaxpr, dict(zip(branch.jaxpr.invars, ops[1:]))
        return
    for value in eqn.params.values():
        for sub in _jaxprs(value):
            if len(sub.invars) != len(ops):
                raise NotImplementedError(f"kernel_races cannot follow refs into {name}'s jaxpr")
            yield sub, dict(zip(sub.invars, ops))


def _dynamic(index_vars) -> bool:
    return any(not isinstance(v, Literal) for v in index_vars)


def _walk(jaxpr, env: dict, kernel: str, found: list):
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in STORES and eqn.invars[0] in env:
            ref = env[eqn.invars[0]]
            idx = eqn.invars[2:]  # ref, value, then the indexer's leaves
            operand = f"{ref.kind} {ref.index} {list(ref.shape)}"
            if ref.kind == "input":
                found.append(Race(kernel, name, operand, "a store into an input, which other programs read"))
            elif ref.kind == "output" and not ref.own_block:
                found.append(Race(kernel, name, operand, "a store into a block every program shares"
                                  + (" at a place chosen at run time" if _dynamic(idx) else "")))
            elif ref.kind == "output" and _dynamic(idx):
                found.append(Race(kernel, name, operand, "a store at a place chosen at run time"))
            continue
        for sub, mapping in _inner_maps(eqn):
            inner = {v: env[o] for v, o in mapping.items() if not isinstance(o, Literal) and o in env}
            if inner:
                _walk(sub, inner, kernel, found)


def grid_size(eqn) -> int:
    return int(np.prod([g if isinstance(g, int) else 2 for g in eqn.params["grid_mapping"].grid]))


def kernel_name(eqn) -> str:
    return str(eqn.params.get("name") or getattr(eqn.params.get("metadata"), "name", "?"))


def races(jaxpr) -> list:
    """Every racing store (`Race`) of every Pallas kernel in `jaxpr` whose grid has more than one
    program."""
    found = []
    for eqn in pallas_calls(jaxpr):
        if grid_size(eqn) > 1:
            _walk(eqn.params["jaxpr"], _kernel_refs(eqn), kernel_name(eqn), found)
    return found


def atomics(jaxpr) -> int:
    """The number of atomic read-modify-writes in the Pallas kernels of `jaxpr` (nested jaxprs included)."""

    def count(j):
        return sum((e.primitive.name == "atomic_rmw") + sum(count(s) for v in e.params.values() for s in _jaxprs(v))
                   for e in j.eqns)

    return sum(count(e.params["jaxpr"]) for e in pallas_calls(jaxpr))

