"""Density control with static shapes, run inside the compiled program at block boundaries.

Two strategies, each a frozen config dataclass (its thresholds as fields) with explicit state:
- `DefaultStrategy`: gsplat's default (3DGS adaptive density control): screen-space gradient
  statistics, clone small / split large Gaussians, prune by opacity and world size, periodic
  opacity reset. New Gaussians go into dead slots; when there are not enough, `refine` changes
  nothing and reports how many slots it needs, and the host grows the capacity and runs it again.
- `MCMCStrategy`: 3DGS as Markov chain Monte Carlo (Kheradmand et al. 2024): a fixed budget,
  dead Gaussians relocated onto live ones, new ones sampled by opacity, noise on positions, and
  opacity / scale regularisation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .gaussians import Gaussians
from .optim import gather_slots, zero_slots
from .projection import quat_to_rotmat


def _logit(p):
    return math.log(p / (1 - p))


def crossed(step_before, step_after, every):
    """A multiple of `every` lies in (step_before, step_after]."""
    return (step_after // every) > (step_before // every)


def assign_free_slots(source_mask, alive, capacity):
    """Pair the i-th selected source with the i-th dead slot. Returns (src [capacity] int: the
    slot each slot copies from, itself when unchanged; new [capacity] bool: slots that receive a
    copy; number needed)."""
    n_needed = jnp.sum(source_mask)
    free = ~alive
    src_ids = jnp.nonzero(source_mask, size=capacity, fill_value=0)[0]
    free_rank = jnp.cumsum(free) - 1
    new = free & (free_rank < n_needed)
    src = jnp.where(new, src_ids[jnp.clip(free_rank, 0, capacity - 1)], jnp.arange(capacity))
    return src, new, n_needed


class RefineInfo(NamedTuple):
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
        z = jnp.int32(0)
        f = jnp.bool_(False)
        return RefineInfo(f, z, z, z, z, z, z, f, f)


@dataclass(frozen=True)
class DefaultStrategy:
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
        return {"grad2d": jnp.zeros((capacity,), jnp.float32), "count": jnp.zeros((capacity,), jnp.float32)}

    def accumulate(self, stats, step, probe_grad, radii, width: int, height: int):
        """Add one step's screen-space gradient norms (NDC-scaled, as gsplat) of visible Gaussians."""
        g = probe_grad * jnp.array([width / 2.0, height / 2.0])
        visible = radii > 0
        on = step < self.refine_stop
        return {
            "grad2d": stats["grad2d"] + jnp.where(visible & on, jnp.linalg.norm(g, axis=-1), 0.0),
            "count": stats["count"] + jnp.where(visible & on, 1.0, 0.0),
        }

    def loss_regularizer(self, params, alive):
        return 0.0

    def post_step(self, key, gaussians, step, means_lr):
        return gaussians

    def refine(self, key, g: Gaussians, opt_state, stats, step_before, step_after, scene_scale):
        """Density control for the steps (step_before, step_after] just trained."""
        due = (step_after > self.refine_start) & (step_after <= self.refine_stop) & crossed(
            step_before, step_after, self.refine_every)
        g, opt_state, stats, info = jax.lax.cond(
            due, lambda a: self._grow_and_prune(key, *a, step_after, scene_scale),
            lambda a: a + (RefineInfo.none(),), (g, opt_state, stats))
        reset = (step_after <= self.refine_stop) & crossed(step_before, step_after, self.reset_every)
        g, opt_state = jax.lax.cond(reset, lambda a: self._reset_opacity(*a), lambda a: a, (g, opt_state))
        return g, opt_state, stats, info._replace(opacity_reset=reset)

    def _grow_and_prune(self, key, g: Gaussians, opt_state, stats, step, scene_scale):
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
            child = gather_slots(p, src, cap)
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
            out = {k: jnp.where(new.reshape((-1,) + (1,) * (v.ndim - 1)), child[k], v) for k, v in p.items()}
            out["means"], out["scales"] = means, scales
            opt_state = zero_slots(opt_state, new | split, cap)
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

    def _reset_opacity(self, g: Gaussians, opt_state):
        p = dict(g.params)
        p["opacities"] = jnp.minimum(p["opacities"], _logit(self.prune_opa * 2.0))
        return Gaussians(p, g.alive), zero_slots(opt_state, jnp.ones((g.capacity,), bool), g.capacity, names=("opacities",))


# ----------------------------------------------------------------------------- MCMC

_N_MAX = 51
# denominator of Eq. 9 (Kheradmand et al.): sum_{i=1..r} sum_{k<i} C(i-1,k) (-1)^k / sqrt(k+1) o^(k+1)
# = sum_{k<r} C(r, k+1) (-1)^k / sqrt(k+1) o^(k+1)  (hockey-stick identity): a table over (r, k)
_RELOC = np.array([[math.comb(r, k + 1) * (-1) ** k / math.sqrt(k + 1) if k < r else 0.0 for k in range(_N_MAX)]
                   for r in range(_N_MAX + 1)], np.float32)


def relocation(opacities, scales, ratios):
    """New opacity and scale of a Gaussian shared by `ratios` copies (gsplat's compute_relocation)."""
    r = jnp.clip(jnp.asarray(ratios).astype(jnp.int32), 1, _N_MAX)
    new_o = 1.0 - (1.0 - opacities) ** (1.0 / r)
    powers = new_o[:, None] ** jnp.arange(1, _N_MAX + 1)[None]
    denom = jnp.sum(jnp.asarray(_RELOC)[r] * powers, axis=-1)
    return new_o, (opacities / denom)[:, None] * scales


@dataclass(frozen=True)
class MCMCStrategy:
    cap_max: int = 1_000_000
    noise_lr: float = 5e5
    refine_start: int = 500
    refine_stop: int = 25_000
    refine_every: int = 100
    min_opacity: float = 0.005
    opacity_reg: float = 0.01
    scale_reg: float = 0.01
    absgrad: bool = False

    def init_stats(self, capacity: int) -> dict:
        return {}

    def accumulate(self, stats, step, probe_grad, radii, width: int, height: int):
        return stats

    def loss_regularizer(self, params, alive):
        w = alive.astype(jnp.float32)
        n = jnp.maximum(jnp.sum(w), 1.0)
        reg = self.opacity_reg * jnp.sum(jax.nn.sigmoid(params["opacities"]) * w) / n
        return reg + self.scale_reg * jnp.sum(jnp.exp(params["scales"]) * w[:, None]) / (3.0 * n)

    def post_step(self, key, g: Gaussians, step, means_lr):
        """Noise on positions, shaped by each Gaussian's covariance, strongest for transparent ones."""
        p = dict(g.params)
        o = jax.nn.sigmoid(p["opacities"])
        R = quat_to_rotmat(p["quats"])
        s = jnp.exp(p["scales"])
        cov = jnp.einsum("nij,nj,nkj->nik", R, s * s, R)
        gate = jax.nn.sigmoid(100.0 * ((1.0 - o) - 0.995))
        noise = jax.random.normal(key, p["means"].shape) * (gate * means_lr * self.noise_lr)[:, None]
        p["means"] = p["means"] + jnp.where(g.alive[:, None], jnp.einsum("nij,nj->ni", cov, noise), 0.0)
        return Gaussians(p, g.alive)

    def refine(self, key, g: Gaussians, opt_state, stats, step_before, step_after, scene_scale):
        due = (step_after > self.refine_start) & (step_after < self.refine_stop) & crossed(
            step_before, step_after, self.refine_every)
        g, opt_state, info = jax.lax.cond(
            due, lambda a: self._relocate_and_add(key, *a), lambda a: a + (RefineInfo.none(),), (g, opt_state))
        return g, opt_state, stats, info

    def _sample(self, key, weights, mask, n_max):
        """n_max indices drawn with replacement, proportional to weights where mask is set.
        Inverse CDF (cumsum + searchsorted): O(N log N) memory-light, unlike a Gumbel argmax."""
        w = jnp.where(mask, jnp.maximum(weights, 0.0), 0.0)
        cdf = jnp.cumsum(w)
        u = jax.random.uniform(key, (n_max,)) * cdf[-1]
        idx = jnp.searchsorted(cdf, u, side="right")
        return jnp.clip(idx, 0, weights.shape[0] - 1)

    def _teleport(self, g: Gaussians, opt_state, targets, sources, used):
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
        src = jnp.arange(cap).at[jnp.where(used, targets, cap)].set(sources, mode="drop")
        p = gather_slots(p, src, cap)
        moved = (src != jnp.arange(cap)) | hit
        return Gaussians(p, g.alive), zero_slots(opt_state, moved, cap), moved

    def _relocate_and_add(self, key, g: Gaussians, opt_state):
        cap = g.capacity
        k1, k2 = jax.random.split(key)
        o = jax.nn.sigmoid(g.params["opacities"])
        dead = g.alive & (o <= self.min_opacity)
        live = g.alive & ~dead
        n_dead = jnp.sum(dead)
        # relocation: dead slots take copies of live Gaussians sampled by opacity
        targets = jnp.nonzero(dead, size=cap, fill_value=0)[0]
        sources = self._sample(k1, o, live, cap)
        used = (jnp.arange(cap) < n_dead) & jnp.any(live)
        g, opt_state, _ = self._teleport(g, opt_state, targets, sources, used)
        # growth: +5% up to the budget, into free slots
        n_alive = jnp.sum(g.alive)
        # the target is not capped by the capacity: when it does not fit, nothing is added and
        # slots_needed tells the host to grow the capacity and refine again (never a silent cap)
        n_target = jnp.minimum(self.cap_max, jnp.floor(1.05 * n_alive).astype(jnp.int32))
        n_add = jnp.where(n_target <= cap, jnp.maximum(n_target - n_alive, 0), 0)
        o = jax.nn.sigmoid(g.params["opacities"])
        targets = jnp.nonzero(~g.alive, size=cap, fill_value=0)[0]
        sources = self._sample(k2, o, g.alive, cap)
        used = jnp.arange(cap) < n_add
        g, opt_state, _ = self._teleport(g, opt_state, targets, sources, used)
        alive = g.alive.at[jnp.where(used, targets, cap)].set(True, mode="drop")
        info = RefineInfo.none()._replace(refined=jnp.bool_(True), n_relocated=n_dead.astype(jnp.int32),
                                          n_added=n_add.astype(jnp.int32), slots_needed=n_target.astype(jnp.int32),
                                          budget_bound=n_target >= self.cap_max)
        return Gaussians(g.params, alive), opt_state, info
