"""One Adam per parameter group with the 3DGS learning rates (optax.multi_transform), and the
slot-wise edits densification needs: zeroing the moments of chosen slots."""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import optax

from .gaussians import PARAM_NAMES


@dataclass(frozen=True)
class OptimConfig:
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


def zero_slots(opt_state, mask, capacity: int, names=None):
    """Zero the Adam moments of the slots in `mask` ([capacity] bool). With `names`, only those
    parameter groups' moments (e.g. ("opacities",) for an opacity reset)."""

    def visit(path, x):
        if not (hasattr(x, "ndim") and x.ndim >= 1 and x.shape[0] == capacity):
            return x
        if names is not None and not any(getattr(p, "key", None) in names for p in path):
            return x
        m = mask.reshape((capacity,) + (1,) * (x.ndim - 1))
        return jnp.where(m, jnp.zeros_like(x), x)

    return jax.tree_util.tree_map_with_path(visit, opt_state)


def gather_slots(tree, src, capacity: int):
    """For every array with a leading [capacity] axis: row i becomes row src[i]."""
    return jax.tree_util.tree_map(
        lambda x: x[src] if hasattr(x, "ndim") and x.ndim >= 1 and x.shape[0] == capacity else x, tree
    )
