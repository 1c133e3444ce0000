"""Optimizer groups, as splatfacto's `--optimizers.*`: every group (the Gaussians' parameters, and
each per-view correction: pose corrections, bilateral grids) is an Adam built from one
`GroupConfig` (rate, eps, exponential decay, warm-up) by `adam`; the Gaussians' groups are one
transform over the parameter dict (optax.multi_transform), the defaults the 3DGS ones."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, NamedTuple, Optional

import optax
import jax.numpy as jnp

from .. import defaults
from .gaussians import PARAM_NAMES


@dataclass(frozen=True)
class GroupConfig:
    """One optimizer group's Adam: nerfstudio's AdamOptimizerConfig with its
    ExponentialDecaySchedulerConfig."""

    lr: float
    lr_final: Optional[float] = None  # exponential decay from lr to this over decay_steps (None: constant)
    decay_steps: int = 0  # 0: over the whole run (TrainConfig.max_steps)
    eps: float = defaults.ADAM_EPS
    times_extent: bool = False  # lr and lr_final are times the scene extent (the means', as 3DGS)
    warmup_steps: int = 0  # a warm-up from lr_pre_warmup to lr first, along `ramp`
    lr_pre_warmup: float = 0.0
    ramp: str = "cosine"  # or "linear"

    @property
    def constant(self) -> bool:
        return self.lr_final is None and self.warmup_steps <= 0


@dataclass(frozen=True)
class OptimConfig:
    """Adam settings per parameter group (PARAM_NAMES), the 3DGS ones by default."""

    means: GroupConfig = field(default_factory=lambda: GroupConfig(defaults.GAUSSIAN_LRS["means"],
                                                                   defaults.MEANS_LR_FINAL, times_extent=True))
    scales: GroupConfig = field(default_factory=lambda: GroupConfig(defaults.GAUSSIAN_LRS["scales"]))
    quats: GroupConfig = field(default_factory=lambda: GroupConfig(defaults.GAUSSIAN_LRS["quats"]))
    opacities: GroupConfig = field(default_factory=lambda: GroupConfig(defaults.GAUSSIAN_LRS["opacities"]))
    sh0: GroupConfig = field(default_factory=lambda: GroupConfig(defaults.GAUSSIAN_LRS["sh0"]))
    shN: GroupConfig = field(default_factory=lambda: GroupConfig(defaults.GAUSSIAN_LRS["shN"]))

    def with_eps(self, eps: float) -> "OptimConfig":
        """The same with every group's eps set to `eps`."""
        return replace(self, **{n: replace(getattr(self, n), eps=eps) for n in PARAM_NAMES})


def warmup_exponential_decay(lr: float, lr_final: float, warmup_steps: int, end: int, lr_pre_warmup: float = 0.0,
                             ramp: str = "cosine"):
    """nerfstudio's ExponentialDecayScheduler as a function of the step: a cosine (or linear)
    warm-up from `lr_pre_warmup` to `lr` over `warmup_steps`, then exponential decay to `lr_final`
    at step `end`."""
    warm = max(int(warmup_steps), 0)

    def schedule(step):
        step = jnp.asarray(step, jnp.float32)
        t = jnp.clip((step - warm) / max(end - warm, 1), 0.0, 1.0)
        decayed = jnp.exp(jnp.log(lr) * (1.0 - t) + jnp.log(lr_final) * t)
        frac = jnp.clip(step / max(warm, 1), 0.0, 1.0)
        rise = jnp.sin(0.5 * jnp.pi * frac) if ramp == "cosine" else frac
        return jnp.where(step < warm, lr_pre_warmup + (lr - lr_pre_warmup) * rise, decayed)

    return schedule


def lr_schedule(group: GroupConfig, scene_extent: float, max_steps: int):
    """The group's learning rate as a function of the step: nerfstudio's ExponentialDecayScheduler
    (`warmup_exponential_decay`), or a constant."""
    k = scene_extent if group.times_extent else 1.0
    if group.constant:
        return optax.constant_schedule(group.lr * k)
    lr_final = group.lr if group.lr_final is None else group.lr_final
    return warmup_exponential_decay(group.lr * k, lr_final * k, group.warmup_steps, group.decay_steps or max_steps,
                                    group.lr_pre_warmup * k, group.ramp)


def adam(group: GroupConfig, scene_extent: float, max_steps: int) -> optax.GradientTransformation:
    """The group's Adam (a constant rate as a plain float: no schedule state)."""
    k = scene_extent if group.times_extent else 1.0
    rate = group.lr * k if group.constant else lr_schedule(group, scene_extent, max_steps)
    return optax.adam(rate, eps=group.eps)


def make_optimizer(cfg: OptimConfig, scene_extent: float, max_steps: int) -> optax.GradientTransformation:
    """The Gaussians' groups: one Adam per parameter (PARAM_NAMES), over a `Gaussians.params` dict."""
    return optax.multi_transform({name: adam(getattr(cfg, name), scene_extent, max_steps) for name in PARAM_NAMES},
                                 {name: name for name in PARAM_NAMES})


class Optimizers(NamedTuple):
    """Every optimizer group of a run: the Gaussians' transform, the means' rate (MCMC's position
    noise follows it), and one Adam per enabled per-view correction (keyed as in `TrainState`)."""

    gaussians: optax.GradientTransformation
    means_lr: Callable
    corrections: dict


def make_optimizers(cfg: OptimConfig, corrections: dict, scene_extent: float, max_steps: int) -> Optimizers:
    """`Optimizers` from the Gaussians' groups and {name: GroupConfig} of the enabled corrections."""
    return Optimizers(make_optimizer(cfg, scene_extent, max_steps), lr_schedule(cfg.means, scene_extent, max_steps),
                      {name: adam(group, 1.0, max_steps) for name, group in corrections.items()})
