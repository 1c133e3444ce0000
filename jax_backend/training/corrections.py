"""Per-view corrections learned with the Gaussians, each an optimizer group of its own (as
splatfacto's `camera_opt` and `bilateral_grid` groups): pose corrections (`cameras.py`) and
bilateral grids (`bilateral.py`).

Each correction's config is a `Correction`: it says how its values enter a training step (the
training views' cameras, the training renders, the loss) and how they start. The step applies
every enabled correction the same way and names none (`TrainConfig.corrections`); its optimizer
is built from its `GroupConfig` with the Gaussians' (`optim.make_optimizers`). In a `TrainState`
a correction is (values, Adam state) under its own field, None when it is off.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import jax.numpy as jnp
import optax


class Correction(ABC):
    """How a per-view correction takes part in a step. A config dataclass inherits it, sets
    `enabled` and `optimizer` (a `optim.GroupConfig`), defines the two abstract methods and
    overrides the hooks that apply to it (the others leave the step as it is)."""

    enabled = False

    @abstractmethod
    def init_values(self, num_views: int):
        """The values before the first step (no correction) for `num_views` training views."""

    @abstractmethod
    def state(self, values, opt_state):
        """The correction's entry in a `TrainState` (its field names are the checkpoint's)."""

    def viewmats(self, values, views, viewmats):
        """The world-to-camera matrices [B, 4, 4] of training views `views` as training renders them."""
        return viewmats

    def renders(self, values, views, renders):
        """Training renders [B, H, W, C] of views `views` as the loss compares them."""
        return renders

    def penalty(self, values):
        """Its term in the loss."""
        return 0.0

    def after_update(self, values):
        """The values after an optimizer update (a projection onto what they may be)."""
        return values


def init_corrections(corrections: dict, txs: dict, num_views: int) -> dict:
    """{name: state entry} of every correction in `corrections` ({name: Correction}) before step 0."""
    out = {}
    for name, c in corrections.items():
        values = c.init_values(num_views)
        out[name] = c.state(values, txs[name].init(values))
    return out


def values_of(corrections: dict, state) -> dict:
    """{name: values} of the corrections in `state` (a TrainState)."""
    return {name: getattr(state, name)[0] for name in corrections}


def corrected_viewmats(corrections: dict, values: dict, views, viewmats):
    for name, c in corrections.items():
        viewmats = c.viewmats(values[name], views, viewmats)
    return viewmats


def corrected_renders(corrections: dict, values: dict, views, renders):
    for name, c in corrections.items():
        renders = c.renders(values[name], views, renders)
    return renders


def penalties(corrections: dict, values: dict):
    return sum((c.penalty(values[name]) for name, c in corrections.items()), jnp.float32(0.0))


def updated_corrections(corrections: dict, txs: dict, grads: dict, state) -> dict:
    """{name: state entry} after one Adam step of each correction on `grads` ({name: gradient})."""
    out = {}
    for name, c in corrections.items():
        values, opt_state = getattr(state, name)
        updates, opt_state = txs[name].update(grads[name], opt_state, values)
        out[name] = c.state(c.after_update(optax.apply_updates(values, updates)), opt_state)
    return out
