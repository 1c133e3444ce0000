"""One Adam per parameter group with the 3DGS learning rates (optax.multi_transform); the means'
rate decays exponentially over the run."""
from __future__ import annotations

from dataclasses import dataclass

import optax

from .gaussians import PARAM_NAMES


@dataclass(frozen=True)
class OptimConfig:
    """Learning rates (the 3DGS ones by default) and Adam's eps."""

    means_lr: float = 1.6e-4  # times the scene extent
    means_lr_final: float = 1.6e-6  # times the scene extent, reached at the last step
    scales_lr: float = 5e-3
    quats_lr: float = 1e-3
    opacities_lr: float = 5e-2
    sh0_lr: float = 2.5e-3
    shN_lr: float = 2.5e-3 / 20
    eps: float = 1e-15


def means_schedule(cfg: OptimConfig, scene_extent: float, max_steps: int):
    """Exponential decay from means_lr to means_lr_final (both times the extent) over the run."""
    return optax.exponential_decay(
        init_value=cfg.means_lr * scene_extent,
        transition_steps=max(max_steps, 1),
        decay_rate=cfg.means_lr_final / cfg.means_lr,
        end_value=cfg.means_lr_final * scene_extent,
    )


def make_optimizer(cfg: OptimConfig, scene_extent: float, max_steps: int) -> optax.GradientTransformation:
    """One Adam per parameter group (PARAM_NAMES), over a `Gaussians.params` dict."""
    lrs = {
        "means": means_schedule(cfg, scene_extent, max_steps),
        "scales": cfg.scales_lr,
        "quats": cfg.quats_lr,
        "opacities": cfg.opacities_lr,
        "sh0": cfg.sh0_lr,
        "shN": cfg.shN_lr,
    }
    return optax.multi_transform(
        {name: optax.adam(lrs[name], eps=cfg.eps) for name in PARAM_NAMES}, {name: name for name in PARAM_NAMES}
    )
