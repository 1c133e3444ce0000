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

from ... import array_ops
from ...rendering import quat_to_rotmat
from ..gaussians import Gaussians
from ..schedule import crossed
from ..state import TrainState
from .base import RefineInfo, logit
from .ops import assign_free_slots, gather_rows, select_rows, zero_moments


@dataclass(frozen=True)
class DefaultStrategy:
    """3DGS / gsplat default density control (thresholds as gsplat's DefaultStrategy names them;
    scene-relative sizes are times the scene extent). Steps count steps done: refinement "at step
    t" runs after t steps."""

    prune_opa: float = 0.005  # prune below this opacity; the opacity reset sets 2x this
    grow_grad2d: float = 0.0002  # densify above this mean NDC screen gradient
    grow_scale3d: float = 0.01  # clone below / split above this largest scale (x extent)
    grow_scale2d: float = 0.05  # also split above this screen radius (fraction of the image), ...
    prune_scale3d: float = 0.1  # prune above this largest scale (x extent), after the first reset
    prune_scale2d: float = 0.15  # ... and prune above this screen radius, ...
    refine_scale2d_stop: int = 0  # ... before this step (0: no screen-size rules)
    refine_start: int = 500
    refine_stop: int = 15_000
    refine_every: int = 100
    reset_every: int = 3000  # opacity reset every this many steps (0: never)
    pause_after_reset: int = 0  # no refinement for this many steps after a reset
    n_split_samples: int = 2  # a split Gaussian becomes this many, scales / (0.8 n)
    absgrad: bool = False
    budget: int = 0  # most live Gaussians; 0: no limit

    def init_stats(self, capacity: int) -> dict:
        """grad2d: summed NDC-scaled screen-gradient norms; count: views that saw the Gaussian;
        with screen-size rules, radii: the largest screen radius seen (fraction of the image)."""
        stats = {"grad2d": jnp.zeros((capacity,), jnp.float32), "count": jnp.zeros((capacity,), jnp.float32)}
        if self.refine_scale2d_stop > 0:
            stats["radii"] = jnp.zeros((capacity,), jnp.float32)
        return stats

    def merge_stats(self, stats, delta, axis_name=None):
        """`stats` plus one step's `delta` (from `accumulate` on zeroed stats), over every replica
        on `axis_name`: sums for gradients and counts, maxima for radii."""
        if axis_name is not None:
            delta = {k: (jax.lax.pmax if k == "radii" else jax.lax.psum)(v, axis_name) for k, v in delta.items()}
        return {k: (jnp.maximum if k == "radii" else jnp.add)(stats[k], delta[k]) for k in stats}

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
        out = {
            "grad2d": stats["grad2d"] + jnp.where(visible & on, jnp.linalg.norm(g, axis=-1), 0.0),
            "count": stats["count"] + jnp.where(visible & on, 1.0, 0.0),
        }
        if "radii" in stats:
            out["radii"] = jnp.maximum(stats["radii"], jnp.where(visible & on, radii / float(max(width, height)), 0.0))
        return out

    def regularizer(self, params, alive):
        """None: 0."""
        return 0.0

    def post_step(self, key, gaussians, step, means_lr):
        """Nothing after the update."""
        return gaussians

    def refine(self, key, state: TrainState, tx, step_before, scene_extent: float):
        """Density control for the steps (step_before, state.step] just trained: grow and prune
        when a refinement step fell due, then the opacity reset when one fell due."""
        step_after = state.step
        due = (step_after > self.refine_start) & (step_after < self.refine_stop) & crossed(
            step_before, step_after, self.refine_every)
        if self.reset_every > 0 and self.pause_after_reset > 0:
            due = due & (step_after % self.reset_every >= self.pause_after_reset)
        before = (state.gaussians, state.opt_state, state.stats)
        g, opt_state, stats, info = array_ops.where_tree(
            due, self._grow_and_prune(key, tx, *before, step_after, scene_extent), before + (RefineInfo.none(),))
        reset = (step_after < self.refine_stop) & crossed(step_before, step_after, self.reset_every)
        g, opt_state = array_ops.where_tree(reset, self._reset_opacity(tx, g, opt_state), (g, opt_state))
        return state._replace(gaussians=g, opt_state=opt_state, stats=stats), info._replace(opacity_reset=reset)

    def _grow_and_prune(self, key, tx, g: Gaussians, opt_state, stats, step, scene_extent):
        cap = g.capacity
        p, alive = g.params, g.alive
        n = self.n_split_samples
        avg = stats["grad2d"] / jnp.maximum(stats["count"], 1.0)
        high = (avg > self.grow_grad2d) & alive
        small = jnp.max(jnp.exp(p["scales"]), axis=-1) <= self.grow_scale3d * scene_extent
        clone, split = high & small, high & ~small
        if "radii" in stats:  # large on screen: split too
            split = split | (alive & (step < self.refine_scale2d_stop) & (stats["radii"] > self.grow_scale2d))
        copies = jnp.where(clone, 1, 0) + jnp.where(split, n - 1, 0)
        n_alive = jnp.sum(alive)
        budget_bound = jnp.bool_(False)
        if self.budget > 0:  # keep the candidates with the largest gradients, as many as fit
            allowed = jnp.maximum(self.budget - n_alive, 0)
            order = array_ops.argsort(-jnp.where(copies > 0, avg, -jnp.inf))  # largest first (radix on TPU)
            # an int32 scatter: for TPU, XLA compiles a scatter of booleans around a sort
            fits = jnp.zeros((cap,), jnp.int32).at[order].set(
                (array_ops.cumsum(copies[order]) <= allowed).astype(jnp.int32), unique_indices=True) > 0
            budget_bound = jnp.sum(copies) > allowed
            clone, split = clone & fits, split & fits
            copies = jnp.where(fits, copies, 0)
        src, new, n_new = assign_free_slots(copies, alive, cap)
        room = n_new <= cap - n_alive

        def grow(args):
            p, opt_state = args
            child = gather_rows(p, src)  # every per-Gaussian value of a new slot comes from this one gather
            split_child = new & split[src]
            # split: every sample drawn in the parent's own frame, scales / (0.8 n)
            k1, k2 = jax.random.split(key)

            def sample(q, log_s, k):
                s = jnp.exp(log_s)
                return jnp.sum(quat_to_rotmat(q) * (s * jax.random.normal(k, s.shape))[:, None, :], -1)  # R v, elementwise

            own = sample(p["quats"], p["scales"], k1)  # the parent's sample
            drawn = sample(child["quats"], child["scales"], k2)  # each new slot's, in its parent's frame
            means = jnp.where(split[:, None], p["means"] + own, p["means"])
            means = jnp.where(split_child[:, None], child["means"] + drawn,
                              jnp.where(new[:, None], child["means"], means))
            shrink = math.log(0.8 * n)
            scales = jnp.where(split[:, None], p["scales"] - shrink, p["scales"])
            scales = jnp.where(split_child[:, None], child["scales"] - shrink,
                               jnp.where(new[:, None], child["scales"], scales))
            out = dict(select_rows(new, child, p), means=means, scales=scales)
            opt_state = zero_moments(tx, opt_state, new | split)
            return out, opt_state

        p, opt_state = array_ops.where_tree(room, grow((p, opt_state)), (p, opt_state))  # not a cond: TPU layouts
        alive = jnp.where(room, alive | new, alive)
        # prune (also what was just added, as gsplat does)
        prune = jax.nn.sigmoid(p["opacities"]) < self.prune_opa
        too_big = jnp.max(jnp.exp(p["scales"]), axis=-1) > self.prune_scale3d * scene_extent
        if "radii" in stats:
            too_big = too_big | ((step < self.refine_scale2d_stop) & (stats["radii"][src] > self.prune_scale2d))
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
