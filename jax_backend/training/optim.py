"""One Adam per parameter group (optax.multi_transform), each with its own learning rate, eps and
optional exponential decay; the defaults are the 3DGS ones (splatfacto's `--optimizers.*`)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import optax
import jax.numpy as jnp

from .gaussians import PARAM_NAMES


@dataclass(frozen=True)
class GroupConfig:
    """One parameter group's Adam."""

    lr: float
    lr_final: Optional[float] = None  # exponential decay from lr to this over decay_steps (None: constant)
    decay_steps: int = 0  # 0: over the whole run (TrainConfig.max_steps)
    eps: float = 1e-15
    times_extent: bool = False  # lr and lr_final are times the scene extent (the means', as 3DGS)


@dataclass(frozen=True)
class OptimConfig:
    """Adam settings per parameter group (PARAM_NAMES), the 3DGS ones by default."""

    means: GroupConfig = field(default_factory=lambda: GroupConfig(1.6e-4, 1.6e-6, times_extent=True))
    scales: GroupConfig = field(default_factory=lambda: GroupConfig(5e-3))
    quats: GroupConfig = field(default_factory=lambda: GroupConfig(1e-3))
    opacities: GroupConfig = field(default_factory=lambda: GroupConfig(5e-2))
    sh0: GroupConfig = field(default_factory=lambda: GroupConfig(2.5e-3))
    shN: GroupConfig = field(default_factory=lambda: GroupConfig(2.5e-3 / 20))

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
    """The group's learning rate as an optax schedule (a constant when it does not decay)."""
    k = scene_extent if group.times_extent else 1.0
    if group.lr_final is None:
        return optax.constant_schedule(group.lr * k)
    return optax.exponential_decay(
        init_value=group.lr * k,
        transition_steps=max(group.decay_steps or max_steps, 1),
        decay_rate=group.lr_final / group.lr,
        end_value=group.lr_final * k,
    )


def means_schedule(cfg: OptimConfig, scene_extent: float, max_steps: int):
    """The means' learning rate schedule (MCMC's position noise follows it)."""
    return lr_schedule(cfg.means, scene_extent, max_steps)


def make_optimizer(cfg: OptimConfig, scene_extent: float, max_steps: int) -> optax.GradientTransformation:
    """One Adam per parameter group (PARAM_NAMES), over a `Gaussians.params` dict."""
    def adam(name):
        group = getattr(cfg, name)
        if group.lr_final is None:  # a plain float: no schedule state
            return optax.adam(group.lr * (scene_extent if group.times_extent else 1.0), eps=group.eps)
        return optax.adam(lr_schedule(group, scene_extent, max_steps), eps=group.eps)

    return optax.multi_transform({name: adam(name) for name in PARAM_NAMES}, {name: name for name in PARAM_NAMES})
