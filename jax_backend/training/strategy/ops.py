"""Operations on Gaussian slots, shared by the strategies and the trainer (as gsplat's
`strategy/ops.py`): which leaves of a training state are per-Gaussian, gathering, selecting,
padding and placing their rows, zeroing optimizer moments, assigning free slots to copies,
sampling slots by weight, and MCMC's relocation.

Per-Gaussian arrays are found by structure, never by their length: every leaf of `Gaussians`
(parameters and the alive mask), every leaf of the strategy's statistics (the `Strategy` contract:
`init_stats` returns per-Gaussian arrays only), and the optimizer state's parameter-shaped
subtrees (Adam's moments), found with `optax.tree_map_params`.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from optax.transforms import MaskedNode

from ... import array_ops
from ...rendering.tile_parallel import splits_evenly
from ..gaussians import PARAM_NAMES
from ..state import TrainState


def _is_masked(x):
    return isinstance(x, MaskedNode)


def map_moments(tx: optax.GradientTransformation, fn, opt_state, names=None):
    """Apply `fn` to every parameter-shaped leaf of the optimizer state (Adam's moments), or only to
    those of the parameter groups in `names`. Counts and other state are left as they are."""
    which = {n: names is None or n in names for n in PARAM_NAMES}
    return optax.tree_map_params(tx, lambda x, on: fn(x) if on and not _is_masked(x) else x, opt_state, which,
                                 transform_non_params=lambda x: x, is_leaf=_is_masked)


def _rows(mask, x):
    return mask.reshape((-1,) + (1,) * (x.ndim - 1))


def zero_moments(tx, opt_state, mask, names=None):
    """Zero the optimizer moments of the slots in `mask` ([capacity] bool), of every parameter
    group or only those in `names` (e.g. ("opacities",) for an opacity reset)."""
    return map_moments(tx, lambda x: jnp.where(_rows(mask, x), jnp.zeros_like(x), x), opt_state, names)


def gather_rows(tree, src):
    """Every leaf of a per-Gaussian tree (e.g. `Gaussians.params`): row i becomes row src[i]
    (a leaf of several values a Gaussian by `array_ops.component_rows`: no TPU row padding)."""
    def rows(x):
        if x.ndim < 2:
            return x[src]
        n = x.shape[0]
        return array_ops.component_rows(x.reshape(n, -1).T, src).T.reshape(src.shape + x.shape[1:])

    return jax.tree_util.tree_map(rows, tree)


def select_rows(mask, new_tree, old_tree):
    """Per-Gaussian trees merged: rows in `mask` ([capacity] bool) from `new_tree`, others from `old_tree`."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(_rows(mask, a), a, b), new_tree, old_tree)


def per_gaussian_leaves(tx, state: TrainState):
    """`state` with each leaf replaced by True when it is per-Gaussian (one row per slot), False
    otherwise (the step, the key, optimizer counts, pose corrections, bilateral grids)."""
    flag = lambda on: lambda x: x if _is_masked(x) else on  # noqa: E731
    return TrainState(
        gaussians=jax.tree_util.tree_map(flag(True), state.gaussians),
        opt_state=optax.tree_map_params(tx, flag(True), state.opt_state, transform_non_params=flag(False),
                                        is_leaf=_is_masked),
        stats=jax.tree_util.tree_map(flag(True), state.stats),
        step=False,
        key=False,
        cameras=jax.tree_util.tree_map(flag(False), state.cameras),
        bilateral=jax.tree_util.tree_map(flag(False), state.bilateral),
    )


def rows_to_split(tx, state: TrainState, num_devices: int):
    """The leaves of `state` that a layout dealing tiles over `num_devices` splits by rows (`True`
    in a tree shaped like `state`): the per-Gaussian ones, when the capacity divides evenly (the
    `Trainer` keeps it so); else none."""
    split = splits_evenly(state.gaussians.capacity, num_devices)
    return jax.tree_util.tree_map(lambda on: bool(on and split), per_gaussian_leaves(tx, state))


def grow_capacity(tx, state: TrainState, new_capacity: int) -> TrainState:
    """Pad every per-Gaussian array to `new_capacity` slots: dead Gaussians (identity rotation),
    zero statistics and zero optimizer moments. Nothing else changes."""
    old = state.gaussians.capacity
    if new_capacity <= old:
        return state

    def pad(x):
        return jnp.concatenate([x, jnp.zeros((new_capacity - old,) + x.shape[1:], x.dtype)])

    g = jax.tree_util.tree_map(pad, state.gaussians)
    g = g._replace(params=dict(g.params, quats=g.params["quats"].at[old:, 0].set(1.0)))
    return state._replace(gaussians=g, stats=jax.tree_util.tree_map(pad, state.stats),
                          opt_state=map_moments(tx, pad, state.opt_state))


def assign_free_slots(copies, alive, capacity):
    """Give slot i `copies[i]` copies, in dead slots, in slot order.

    Args:
      copies: [capacity] int, copies wanted of each slot (0 for most).
      alive: [capacity] bool.

    Returns:
      (src [capacity] int: the slot each slot copies from, itself when unchanged; new [capacity]
      bool: slots that receive a copy; number of copies needed, which may exceed the dead slots:
      then only the first ones are marked new and the caller must not use the result).
    """
    n_needed = jnp.sum(copies)
    free = ~alive
    ends = array_ops.cumsum(copies)
    free_rank = array_ops.cumsum(free.astype(jnp.int32)) - 1
    new = free & (free_rank < n_needed)
    owner = jnp.clip(jnp.searchsorted(ends, free_rank, side="right"), 0, capacity - 1)
    src = jnp.where(new, owner, jnp.arange(capacity))
    return src, new, n_needed


_N_MAX = 51


# denominator of Eq. 9 (Kheradmand et al.): sum_{i=1..r} sum_{k<i} C(i-1,k) (-1)^k / sqrt(k+1) o^(k+1)
# = sum_{k<r} C(r, k+1) (-1)^k / sqrt(k+1) o^(k+1)  (hockey-stick identity): a table over (r, k)
_RELOC = np.array([[math.comb(r, k + 1) * (-1) ** k / math.sqrt(k + 1) if k < r else 0.0 for k in range(_N_MAX)]
                   for r in range(_N_MAX + 1)], np.float32)


def relocation(opacities, scales, ratios):
    """New opacity and scale of a Gaussian shared by `ratios` copies (gsplat's compute_relocation).
    The denominator's terms are added one power at a time (a loop over the table's columns): the
    [N, 51] table rows and powers at once were a TPU's largest MCMC temporaries, each padded to 128
    lanes (docs/tpu.md)."""
    r = jnp.clip(jnp.asarray(ratios).astype(jnp.int32), 1, _N_MAX)
    new_o = 1.0 - (1.0 - opacities) ** (1.0 / r)
    table = jnp.asarray(_RELOC.T)  # [k, r]

    def add_term(k, denom):
        return denom + table[k][r] * new_o ** (k + 1.0).astype(new_o.dtype)

    denom = jax.lax.fori_loop(0, _N_MAX, add_term, jnp.zeros_like(new_o))
    return new_o, (opacities / denom)[:, None] * scales


def sample_by_weight(key, weights, mask, n_max: int):
    """`n_max` slot indices drawn with replacement, proportional to `weights` where `mask` is set.
    Inverse CDF (cumsum + searchsorted): O(N log N), memory-light, unlike a Gumbel argmax."""
    w = jnp.where(mask, jnp.maximum(weights, 0.0), 0.0)
    cdf = array_ops.cumsum(w)
    u = jax.random.uniform(key, (n_max,)) * cdf[-1]
    idx = jnp.searchsorted(cdf, u, side="right")
    return jnp.clip(idx, 0, weights.shape[0] - 1)
