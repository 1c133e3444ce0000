"""3DGS as Markov chain Monte Carlo (Kheradmand et al. 2024), with static shapes: a fixed budget,
dead (transparent) Gaussians relocated onto live ones sampled by opacity with the paper's
opacity/scale correction, +5% growth into free slots, noise on positions, and opacity / scale
regularisation in the loss.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from ... import array_ops, defaults
from ...rendering.projection import rotmat_planes
from ..gaussians import Gaussians
from ..schedule import crossed
from ..state import TrainState
from .base import RefineInfo
from .ops import gather_rows, relocation, sample_by_weight, zero_moments


@dataclass(frozen=True)
class MCMCStrategy:
    """3DGS-MCMC (gsplat's MCMCStrategy); `budget` is the paper's cap_max."""

    budget: int = defaults.MCMC_BUDGET
    noise_lr: float = defaults.MCMC_NOISE_LR
    refine_start: int = 500
    refine_stop: int = 25_000
    refine_every: int = 100
    min_opacity: float = 0.005
    opacity_reg: float = defaults.MCMC_OPACITY_REG
    scale_reg: float = defaults.MCMC_SCALE_REG
    absgrad: bool = False

    def init_stats(self, capacity: int) -> dict:
        """None: MCMC decides from opacities alone."""
        return {}

    def accumulate(self, stats, step, means2d_grad, radii, width: int, height: int):
        """Nothing to accumulate."""
        return stats

    def merge_stats(self, stats, delta, axis_name=None):
        """Nothing to merge."""
        return stats

    def regularizer(self, params, alive):
        """Mean opacity and mean scale of the alive Gaussians, weighted."""
        w = alive.astype(jnp.float32)
        n = jnp.maximum(jnp.sum(w), 1.0)
        reg = self.opacity_reg * jnp.sum(jax.nn.sigmoid(params["opacities"]) * w) / n
        return reg + self.scale_reg * jnp.sum(jnp.exp(params["scales"]) * w[:, None]) / (3.0 * n)

    def post_step(self, key, g: Gaussians, step, means_lr):
        """Noise on positions, shaped by each Gaussian's covariance, strongest for transparent ones."""
        p = dict(g.params)
        o = jax.nn.sigmoid(p["opacities"])
        gate = jax.nn.sigmoid(100.0 * ((1.0 - o) - 0.995))
        noise = jax.random.normal(key, p["means"].shape) * (gate * means_lr * self.noise_lr)[:, None]
        # cov @ noise with cov = R diag(s^2) R^T, entry by entry (`rendering.projection`'s planes)
        R = rotmat_planes(p["quats"])
        s2 = jnp.unstack(jnp.exp(2.0 * p["scales"]), axis=-1)
        e = jnp.unstack(noise, axis=-1)
        u = [s2[j] * (R[0][j] * e[0] + R[1][j] * e[1] + R[2][j] * e[2]) for j in range(3)]  # diag(s^2) R^T noise
        step = jnp.stack([R[i][0] * u[0] + R[i][1] * u[1] + R[i][2] * u[2] for i in range(3)], -1)
        p["means"] = p["means"] + jnp.where(g.alive[:, None], step, 0.0)
        return Gaussians(p, g.alive)

    def refine(self, key, state: TrainState, tx, step_before, scene_extent: float):
        """Relocation and growth when a refinement step fell in (step_before, state.step]."""
        step_after = state.step
        due = (step_after > self.refine_start) & (step_after < self.refine_stop) & crossed(
            step_before, step_after, self.refine_every)
        before = (state.gaussians, state.opt_state)
        g, opt_state, info = array_ops.where_tree(due, self._relocate_and_add(key, tx, *before),
                                                  before + (RefineInfo.none(),))  # not a cond: TPU layouts
        return state._replace(gaussians=g, opt_state=opt_state), info

    def _teleport(self, tx, g: Gaussians, opt_state, targets, sources, used):
        """Slots `targets[i]` (where used[i]) become copies of `sources[i]`; every source and copy
        gets the relocated opacity and scale for the number of copies made of it."""
        cap = g.capacity
        p = dict(g.params)
        counts = jnp.zeros((cap,), jnp.int32).at[sources].add(used.astype(jnp.int32))
        hit = counts > 0
        new_o, new_s = relocation(jax.nn.sigmoid(p["opacities"]), jnp.exp(p["scales"]), counts + 1)
        new_o = jnp.clip(new_o, self.min_opacity, 1.0 - 1e-7)
        p["opacities"] = jnp.where(hit, jnp.log(new_o) - jnp.log1p(-new_o), p["opacities"])
        p["scales"] = jnp.where(hit[:, None], jnp.log(new_s), p["scales"])
        # every index distinct (the used targets are; the unused go to distinct places past the end,
        # dropped), so XLA may write them in any order: on a GPU a scatter that may land two writes on
        # one place keeps whichever lands last (docs/gpu.md)
        off_end = cap + jnp.arange(targets.shape[0])
        src = jnp.arange(cap).at[jnp.where(used, targets, off_end)].set(sources, mode="drop", unique_indices=True)
        p = gather_rows(p, src)
        moved = (src != jnp.arange(cap)) | hit
        return Gaussians(p, g.alive), zero_moments(tx, opt_state, moved), moved

    def _relocate_and_add(self, key, tx, g: Gaussians, opt_state):
        cap = g.capacity
        k1, k2 = jax.random.split(key)
        o = jax.nn.sigmoid(g.params["opacities"])
        dead = g.alive & (o <= self.min_opacity)
        live = g.alive & ~dead
        n_dead = jnp.sum(dead)
        # relocation: dead slots take copies of live Gaussians sampled by opacity
        targets = jnp.nonzero(dead, size=cap, fill_value=0)[0]
        sources = sample_by_weight(k1, o, live, cap)
        used = (jnp.arange(cap) < n_dead) & jnp.any(live)
        g, opt_state, _ = self._teleport(tx, g, opt_state, targets, sources, used)
        # growth: +5% up to the budget, into free slots
        n_alive = jnp.sum(g.alive)
        # the target is not capped by the capacity: when it does not fit, nothing is added and
        # slots_needed tells the host to grow the capacity and refine again (never a silent cap)
        n_target = jnp.minimum(self.budget, jnp.floor(1.05 * n_alive).astype(jnp.int32))
        n_add = jnp.where(n_target <= cap, jnp.maximum(n_target - n_alive, 0), 0)
        o = jax.nn.sigmoid(g.params["opacities"])
        targets = jnp.nonzero(~g.alive, size=cap, fill_value=0)[0]
        sources = sample_by_weight(k2, o, g.alive, cap)
        used = jnp.arange(cap) < n_add
        g, opt_state, _ = self._teleport(tx, g, opt_state, targets, sources, used)
        # the first n_add free slots (`targets`, ascending) come alive: no scatter (for TPU, XLA
        # compiles a scatter of booleans around a sort)
        alive = g.alive | (~g.alive & (array_ops.cumsum((~g.alive).astype(jnp.int32)) <= n_add))
        info = RefineInfo.none()._replace(refined=jnp.bool_(True), n_relocated=n_dead.astype(jnp.int32),
                                          n_added=n_add.astype(jnp.int32), slots_needed=n_target.astype(jnp.int32),
                                          budget_bound=n_target >= self.budget)
        return Gaussians(g.params, alive), opt_state, info
