"""The density-control contract every strategy follows, and what refinement reports.

A strategy is a frozen dataclass (its settings as fields, hashable: it is part of the compiled
program) with explicit state, like gsplat's `strategy/` and optax's transformations:

- It keeps: per-Gaussian statistics only, `init_stats(capacity) -> {name: [capacity, ...]}` (so
  they can be padded and moved with the Gaussians by `strategy.ops`). They live in
  `TrainState.stats` and are checkpointed with it.
- Every step, inside the compiled step: `accumulate(stats, step, means2d_grad, radii, width,
  height)` adds the step's screen-space statistics of one view into zeroed statistics, and
  `merge_stats(stats, delta, axis_name)` folds them (over every replica) into the running ones;
  `regularizer(params, alive)` is
  added to the loss; `post_step(key, gaussians, step, means_lr)` runs after the optimizer update.
- At each block boundary, inside the same program: `refine(key, state, tx, step_before,
  scene_extent)` for the steps (step_before, state.step] just trained, with `training.schedule`
  deciding what fell due. It returns the new state and a `RefineInfo`. When it needs more slots
  than the capacity it must change nothing and report `slots_needed`: the host then grows every
  per-Gaussian array (`ops.grow_capacity`) and calls it again with the same arguments.
- `budget`: the most live Gaussians it may grow to (0: the strategy's own default);
  `absgrad`: whether `means2d_grad` is gsplat's absolute gradient.

Adding a strategy: one new module with its dataclass, and one line in `STRATEGIES`.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Protocol

import jax.numpy as jnp


class RefineInfo(NamedTuple):
    """What one refinement did (scalars; on the host, Python values after `as_python`)."""

    refined: jnp.ndarray  # bool: refinement ran
    n_clone: jnp.ndarray
    n_split: jnp.ndarray
    n_pruned: jnp.ndarray
    n_relocated: jnp.ndarray
    n_added: jnp.ndarray
    slots_needed: jnp.ndarray  # > capacity: the host must grow the capacity and refine again
    budget_bound: jnp.ndarray  # bool: the Gaussian budget limited growth
    opacity_reset: jnp.ndarray  # bool

    @staticmethod
    def none():
        """Nothing happened."""
        z = jnp.int32(0)
        f = jnp.bool_(False)
        return RefineInfo(f, z, z, z, z, z, z, f, f)

    def as_python(self) -> "RefineInfo":
        """The same with plain Python bools and ints (fetched from the device)."""
        import numpy as np

        return RefineInfo(*[np.asarray(x).item() for x in self])


class Strategy(Protocol):
    """The density-control contract (see the module docstring)."""

    budget: int
    absgrad: bool

    def init_stats(self, capacity: int) -> dict:
        """Zeroed per-Gaussian statistics: {name: [capacity, ...]} (may be empty)."""

    def accumulate(self, stats: dict, step, means2d_grad, radii, width: int, height: int) -> dict:
        """Statistics after one view of one step: means2d_grad [capacity, 2] (pixels), radii
        [capacity] (0: not visible), the view's size."""

    def merge_stats(self, stats: dict, delta: dict, axis_name=None) -> dict:
        """`stats` updated with one step's `delta` (accumulated from `init_stats`), combined over
        the replicas on the replica axis `axis_name` first (None: one replica)."""

    def regularizer(self, params: dict, alive):
        """Scalar added to the loss (0.0 for none)."""

    def post_step(self, key, gaussians, step, means_lr):
        """The Gaussians after the optimizer update of `step` (e.g. noise); `means_lr` is the
        means' learning rate at that step."""

    def refine(self, key, state, tx, step_before, scene_extent: float):
        """(TrainState, RefineInfo) after density control for (step_before, state.step]."""


def logit(p: float) -> float:
    """log(p / (1 - p))."""
    return math.log(p / (1 - p))
