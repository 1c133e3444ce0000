"""The training state and everything that edits it slot by slot.

Per-Gaussian arrays are found by structure, never by their length: every leaf of
`Gaussians` (parameters and the alive mask), every leaf of the strategy's statistics (the
`Strategy` contract: `init_stats` returns per-Gaussian arrays only), and the optimizer state's
parameter-shaped subtrees (Adam's moments), found with `optax.tree_map_params`.

Also the state as named arrays and back (checkpoints, the plugin's torch state dict): names are
the key paths in the state, e.g. ".gaussians.params['means']", ".stats['grad2d']", ".step".
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from optax.transforms import MaskedNode

from ..files.checkpoint import CheckpointError
from ..devices import rows_sharding, whole_sharding
from ..rendering.tile_parallel import splits_evenly
from .gaussians import PARAM_NAMES, Gaussians


class TrainState(NamedTuple):
    """Everything a run carries from step to step (a pytree; see the module docstring for which
    leaves are per-Gaussian)."""

    gaussians: Gaussians
    opt_state: Any  # the optax state of `make_optimizer`
    stats: dict  # per-Gaussian density-control statistics (Strategy.init_stats), each [capacity, ...]
    step: jnp.ndarray  # [] int32 steps done
    key: jnp.ndarray  # PRNG key
    cameras: Any = None  # per-view pose corrections (`cameras.CameraState`), None when not optimised
    bilateral: Any = None  # per-view bilateral grids (`bilateral.GridState`), None when not used


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
    """Every leaf of a per-Gaussian tree (e.g. `Gaussians.params`): row i becomes row src[i]."""
    return jax.tree_util.tree_map(lambda x: x[src], tree)


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


def tile_shardings(tx, state: TrainState, num_devices: int):
    """Where a tile-parallel block keeps `state` (`rendering.tile_parallel`): per-Gaussian arrays
    split by rows over the `num_devices` tile devices, everything else whole on each. When the
    capacity does not divide evenly, everything whole (`Trainer` keeps it divisible)."""
    split = splits_evenly(state.gaussians.capacity, num_devices)
    rows, whole = rows_sharding(num_devices), whole_sharding(num_devices)
    return jax.tree_util.tree_map(lambda on: rows if on and split else whole, per_gaussian_leaves(tx, state))


def on_tile_devices(tx, state: TrainState, num_devices: int) -> TrainState:
    """Inside a block program: `state` laid out as `tile_shardings` says (no-op on one device)."""
    if num_devices <= 1:
        return state
    return jax.lax.with_sharding_constraint(state, tile_shardings(tx, state, num_devices))


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


# ----------------------------------------------------------------------------- named arrays

def named_arrays(tree) -> dict:
    """{key path: numpy array} of every leaf (key paths as `jax.tree_util.keystr`)."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(p): np.asarray(jax.device_get(x)) for p, x in leaves}


class _GaussiansOnly(NamedTuple):
    gaussians: Gaussians


def gaussians_arrays(gaussians: Gaussians) -> dict:
    """`named_arrays` of the Gaussians alone, under the names they have in a TrainState."""
    return named_arrays(_GaussiansOnly(gaussians))


def from_named_arrays(template, arrays: dict, source="checkpoint"):
    """A tree of the template's structure filled from `named_arrays` output of the same structure
    and shapes (dtypes follow the template). Density statistics the arrays lack start at zero;
    anything else missing or of another shape: CheckpointError naming `source` and the entry."""
    leaves = []
    for p, x in jax.tree_util.tree_flatten_with_path(template)[0]:
        name = jax.tree_util.keystr(p)
        if name not in arrays and name.startswith((".stats", ".cameras", ".bilateral")):
            leaves.append(jnp.asarray(x))  # a statistic it did not keep (they restart from zero after every
            continue                       # refinement anyway), pose corrections or grids: as they start
        if name not in arrays:
            raise CheckpointError(f"{source}: has no entry {name} (saved by another configuration or version?)")
        a = np.asarray(arrays[name])
        if a.shape != np.shape(x):
            raise CheckpointError(f"{source}: entry {name} has shape {a.shape}, expected {np.shape(x)}")
        leaves.append(jnp.asarray(a.astype(x.dtype)))
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(template), leaves)


def _gaussians_root(arrays: dict, source) -> str:
    """Where the Gaussians sit in `named_arrays` output: ".gaussians" (a TrainState) or
    "['gaussians']" (a `{"gaussians": ...}` dict, as early plugin checkpoints wrote them)."""
    for root in (".gaussians", "['gaussians']"):
        if f"{root}.alive" in arrays:
            return root
    raise CheckpointError(f"{source}: holds no Gaussians (no .gaussians.alive entry)")


def gaussians_from_arrays(arrays: dict, source="checkpoint") -> Gaussians:
    """The Gaussians alone from `named_arrays` of a TrainState (or of a `{"gaussians": ...}` dict,
    as early plugin checkpoints wrote them)."""
    root = _gaussians_root(arrays, source)
    params = {}
    for name in PARAM_NAMES:
        key = f"{root}.params['{name}']"
        if key not in arrays:
            raise CheckpointError(f"{source}: has no entry {key}")
        params[name] = jnp.asarray(np.asarray(arrays[key], np.float32))
    return Gaussians(params, jnp.asarray(np.asarray(arrays[f"{root}.alive"]).astype(bool)))


def capacity_of(arrays: dict, source="checkpoint") -> int:
    """Number of slots of the Gaussians in `named_arrays` output."""
    return int(np.shape(arrays[f"{_gaussians_root(arrays, source)}.alive"])[0])
