"""gsplat's default strategy (3DGS adaptive density control) with static shapes: screen-space
gradient statistics, clone small / split large Gaussians, prune by opacity and world size, periodic
opacity reset. New Gaussians go into dead slots; when there are not enough, `refine` changes
nothing and reports how many slots it needs (the `base.Strategy` contract).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from ...rendering import quat_to_rotmat
from ..gaussians import Gaussians
from ..schedule import crossed
from ..state import TrainState, gather_rows, select_rows, zero_moments
from .base import RefineInfo, logit


def assign_free_slots(source_mask, alive, capacity):
    """Pair the i-th selected source with the i-th dead slot.

    Returns:
      (src [capacity] int: the slot each slot copies from, itself when unchanged; new [capacity]
      bool: slots that receive a copy; number of copies needed).
    """
    n_needed = jnp.sum(source_mask)
    free = ~alive
    src_ids = jnp.nonzero(source_mask, size=capacity, fill_value=0)[0]
    free_rank = jnp.cumsum(free) - 1
    new = free & (free_rank < n_needed)
    src = jnp.where(new, src_ids[jnp.clip(free_rank, 0, capacity - 1)], jnp.arange(capacity))
    return src, new, n_needed


@dataclass(frozen=True)
class DefaultStrategy:
    """3DGS / gsplat default density control (thresholds as gsplat names them)."""

    prune_opa: float = 0.005
    grow_grad2d: float = 0.0002
    grow_scale3d: float = 0.01
    prune_scale3d: float = 0.1
    refine_start: int = 500
    refine_stop: int = 15_000
    refine_every: int = 100
    reset_every: int = 3000
    absgrad: bool = False
    budget: int = 0  # most live Gaussians; 0: no limit

    def init_stats(self, capacity: int) -> dict:
        """grad2d: summed NDC-scaled screen-gradient norms; count: views that saw the Gaussian."""
        return {"grad2d": jnp.zeros((capacity,), jnp.float32), "count": jnp.zeros((capacity,), jnp.float32)}

    def accumulate(self, stats, step, means2d_grad, radii, width: int, height: int):
        """Add one view's screen-space gradient norms (NDC-scaled, as gsplat) of visible Gaussians.

        Args:
          stats: {"grad2d", "count"} each [capacity].
          step: the step being trained.
          means2d_grad: [capacity, 2] dL/dmeans2d in pixels (or gsplat's absgrad).
          radii: [capacity] projected radii (0: not visible).
          width, height: the view's size.
        """
        g = means2d_grad * jnp.array([width / 2.0, height / 2.0])
        visible = radii > 0
        on = step < self.refine_stop
        return {
            "grad2d": stats["grad2d"] + jnp.where(visible & on, jnp.linalg.norm(g, axis=-1), 0.0),
            "count": stats["count"] + jnp.where(visible & on, 1.0, 0.0),
        }

    def regularizer(self, params, alive):
        """None: 0."""
        return 0.0

    def post_step(self, key, gaussians, step, means_lr):
        """Nothing after the update."""
        return gaussians

    def refine(self, key, state: TrainState, tx, step_before, scene_scale: float):
        """Density control for the steps (step_before, state.step] just trained: grow and prune
        when a refinement step fell due, then the opacity reset when one fell due."""
        step_after = state.step
        due = (step_after > self.refine_start) & (step_after <= self.refine_stop) & crossed(
            step_before, step_after, self.refine_every)
        g, opt_state, stats, info = jax.lax.cond(
            due, lambda a: self._grow_and_prune(key, tx, *a, step_after, scene_scale),
            lambda a: a + (RefineInfo.none(),), (state.gaussians, state.opt_state, state.stats))
        reset = (step_after <= self.refine_stop) & crossed(step_before, step_after, self.reset_every)
        g, opt_state = jax.lax.cond(reset, lambda a: self._reset_opacity(tx, *a), lambda a: a, (g, opt_state))
        return state._replace(gaussians=g, opt_state=opt_state, stats=stats), info._replace(opacity_reset=reset)

    def _grow_and_prune(self, key, tx, g: Gaussians, opt_state, stats, step, scene_scale):
        cap = g.capacity
        p, alive = g.params, g.alive
        avg = stats["grad2d"] / jnp.maximum(stats["count"], 1.0)
        high = (avg > self.grow_grad2d) & alive
        n_alive = jnp.sum(alive)
        budget_bound = jnp.bool_(False)
        if self.budget > 0:  # keep the candidates with the largest gradients
            allowed = jnp.maximum(self.budget - n_alive, 0)
            rank = jnp.argsort(jnp.argsort(-jnp.where(high, avg, -jnp.inf)))
            budget_bound = jnp.sum(high) > allowed
            high = high & (rank < allowed)
        small = jnp.max(jnp.exp(p["scales"]), axis=-1) <= self.grow_scale3d * scene_scale
        clone, split = high & small, high & ~small
        src, new, n_new = assign_free_slots(high, alive, cap)
        room = n_new <= cap - n_alive

        def grow(args):
            p, opt_state = args
            child = gather_rows(p, src)
            split_child = new & split[src]
            # split: both halves are drawn in the parent's own frame, scales / 1.6
            R = quat_to_rotmat(p["quats"])
            s = jnp.exp(p["scales"])
            k1, k2 = jax.random.split(key)
            off1 = jnp.einsum("nij,nj->ni", R, s * jax.random.normal(k1, s.shape))
            off2 = jnp.einsum("nij,nj->ni", R, s * jax.random.normal(k2, s.shape))
            means = jnp.where(split[:, None], p["means"] + off1, p["means"])
            means = jnp.where(split_child[:, None], child["means"] + off2[src], jnp.where(new[:, None], child["means"], means))
            shrunk = p["scales"] - math.log(1.6)
            scales = jnp.where(split[:, None], shrunk, p["scales"])
            scales = jnp.where(split_child[:, None], shrunk[src], jnp.where(new[:, None], child["scales"], scales))
            out = dict(select_rows(new, child, p), means=means, scales=scales)
            opt_state = zero_moments(tx, opt_state, new | split)
            return out, opt_state

        p, opt_state = jax.lax.cond(room, grow, lambda a: a, (p, opt_state))
        alive = jnp.where(room, alive | new, alive)
        # prune (also what was just added, as gsplat does)
        prune = jax.nn.sigmoid(p["opacities"]) < self.prune_opa
        too_big = jnp.max(jnp.exp(p["scales"]), axis=-1) > self.prune_scale3d * scene_scale
        prune = alive & room & (prune | (too_big & (step > self.reset_every)))
        alive = alive & ~prune
        stats = jax.tree_util.tree_map(lambda x: jnp.where(room, jnp.zeros_like(x), x), stats)
        info = RefineInfo(
            refined=room,
            n_clone=jnp.where(room, jnp.sum(clone), 0).astype(jnp.int32),
            n_split=jnp.where(room, jnp.sum(split), 0).astype(jnp.int32),
            n_pruned=jnp.sum(prune).astype(jnp.int32),
            n_relocated=jnp.int32(0),
            n_added=jnp.where(room, n_new, 0).astype(jnp.int32),
            slots_needed=(n_alive + n_new).astype(jnp.int32),
            budget_bound=budget_bound,
            opacity_reset=jnp.bool_(False),
        )
        return Gaussians(p, alive), opt_state, stats, info

    def _reset_opacity(self, tx, g: Gaussians, opt_state):
        p = dict(g.params)
        p["opacities"] = jnp.minimum(p["opacities"], logit(self.prune_opa * 2.0))
        return Gaussians(p, g.alive), zero_moments(tx, opt_state, jnp.ones((g.capacity,), bool), names=("opacities",))
