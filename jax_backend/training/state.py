"""The training state: everything a run carries from step to step. Which of its leaves are
per-Gaussian, and the operations on their rows, are in `strategy/ops.py`; the state as named
arrays (checkpoints) in `state_arrays.py`."""
from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp

from .gaussians import Gaussians


class TrainState(NamedTuple):
    """Everything a run carries from step to step (a pytree; `strategy.ops.per_gaussian_leaves`
    says which leaves are per-Gaussian)."""

    gaussians: Gaussians
    opt_state: Any  # the optax state of the Gaussians' groups (`optim.make_optimizer`)
    stats: dict  # per-Gaussian density-control statistics (Strategy.init_stats), each [capacity, ...]
    step: jnp.ndarray  # [] int32 steps done
    key: jnp.ndarray  # PRNG key
    cameras: Any = None  # per-view pose corrections (`cameras.CameraState`), None when not optimised
    bilateral: Any = None  # per-view bilateral grids (`bilateral.GridState`), None when not used
