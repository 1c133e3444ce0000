"""A training state as named arrays and back, and a trainer's state in a checkpoint file: the
middle of the three checkpoint layers (below it `files.checkpoint`, the .npz file; above it the
plugin's `nerfstudio_jaxgs.checkpoint_entries`, nerfstudio's checkpoints). Names are the key paths in the
state, e.g. ".gaussians.params['means']", ".stats['grad2d']", ".step"."""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..files.checkpoint import CheckpointError, read_checkpoint, save_checkpoint
from .gaussians import PARAM_NAMES, Gaussians

if TYPE_CHECKING:
    from .trainer import Trainer


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


# -- a trainer's state

def state_arrays(trainer: Trainer) -> dict:
    """The whole training state as {name: numpy array}."""
    return named_arrays(trainer.state)


def load_state_arrays(trainer: Trainer, arrays: dict, source="checkpoint"):
    """Restore a state saved by `state_arrays` (same configuration and dataset): the capacity grows
    to the saved one first, the intersection buffer to what the restored Gaussians need. StateError
    naming `source` when it does not fit."""
    trainer.grow_capacity(capacity_of(arrays, source))
    trainer.state = from_named_arrays(trainer.state, arrays, source)
    trainer.size_buffer_ahead()


def save(trainer: Trainer, path, meta: Optional[dict] = None):
    """One .npz with the whole state (atomic). Returns its path."""
    info = {"capacity": trainer.capacity, "isect_capacity": trainer.isect_capacity, "step": trainer.step}
    return save_checkpoint(path, state_arrays(trainer), dict(meta or {}, trainer=info))


def restore(trainer: Trainer, path) -> dict:
    """Load a checkpoint written by `save` (same configuration and dataset). Returns its meta."""
    arrays, meta = read_checkpoint(path)
    load_state_arrays(trainer, arrays, path)
    trainer.isect_capacity = int(meta.get("trainer", {}).get("isect_capacity", trainer.isect_capacity))
    return meta
