"""Camera pose optimisation: a pose correction per training view, learned with the Gaussians
inside the compiled step, as nerfstudio's `CameraOptimizer` (splatfacto's `camera_optimizer`).

Each view v has a tangent vector d_v = (translation t, rotation w) (nerfstudio's layout). Its
correction [R_adj | t_adj] is exp(d_v), in "SO3xR3" (R_adj = exp(w), t_adj = t) or "SE3" mode (the
SE(3) exponential), applied as nerfstudio's `apply_to_camera` does, in world coordinates: the
camera's axes are rotated by R_adj (its position is not) and its position moved by t_adj. The
loss gains nerfstudio's penalty, trans_l2_penalty * mean |t| + rot_l2_penalty * mean |w|. Only
training renders use the corrections; held-out views keep their own poses.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import jax.numpy as jnp

from .. import defaults
from ..array_ops import einsum, matmul
from .corrections import Correction
from .optim import GroupConfig

CAMERA_OPT_MODES = ("off", "SO3xR3", "SE3")


@dataclass(frozen=True)
class CameraOptConfig(Correction):
    """nerfstudio's CameraOptimizerConfig and splatfacto's `camera_opt` optimizer group."""

    mode: str = "off"
    optimizer: GroupConfig = field(default_factory=lambda: GroupConfig(**defaults.CAMERA_OPT_ADAM))
    trans_l2_penalty: float = 1e-2
    rot_l2_penalty: float = 1e-3

    def __post_init__(self):
        if self.mode not in CAMERA_OPT_MODES:
            raise ValueError(f"camera optimiser mode must be one of {CAMERA_OPT_MODES}, got {self.mode!r}")

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def init_values(self, num_views: int):
        return jnp.zeros((num_views, 6), jnp.float32)

    def state(self, values, opt_state):
        return CameraState(values, opt_state)

    def viewmats(self, values, views, viewmats):
        return corrected_viewmats(viewmats, values[views], self.mode)

    def penalty(self, values):
        return camera_penalty(self, values)


class CameraState(NamedTuple):
    """The per-view corrections [V, 6] and their Adam state."""

    deltas: jnp.ndarray
    opt_state: object


def _skew(w):
    z = jnp.zeros_like(w[..., 0])
    return jnp.stack([jnp.stack([z, -w[..., 2], w[..., 1]], -1),
                      jnp.stack([w[..., 2], z, -w[..., 0]], -1),
                      jnp.stack([-w[..., 1], w[..., 0], z], -1)], -2)


def exp_so3(w):
    """Rotation matrices [..., 3, 3] of axis-angle vectors w [..., 3] (Rodrigues; the angle is
    clamped below at 0.01 as nerfstudio does, which keeps it finite and smooth at 0)."""
    theta = jnp.sqrt(jnp.maximum(jnp.sum(w * w, -1), 1e-4))[..., None, None]
    K = _skew(w)
    return jnp.eye(3) + jnp.sin(theta) / theta * K + (1.0 - jnp.cos(theta)) / theta**2 * matmul(K, K)


def pose_corrections(deltas, mode: str):
    """(R_adj [..., 3, 3], t_adj [..., 3]) of tangent vectors [..., 6] = (t, w)."""
    t, w = deltas[..., :3], deltas[..., 3:]
    R = exp_so3(w)
    if mode == "SE3":
        theta = jnp.sqrt(jnp.maximum(jnp.sum(w * w, -1), 1e-4))[..., None, None]
        K = _skew(w)
        V = jnp.eye(3) + (1.0 - jnp.cos(theta)) / theta**2 * K + (theta - jnp.sin(theta)) / theta**3 * matmul(K, K)
        t = matmul(V, t[..., None])[..., 0]
    elif mode != "SO3xR3":
        raise ValueError(f"no pose corrections in mode {mode!r}")
    return R, t


def corrected_viewmats(viewmats, deltas, mode: str):
    """World-to-camera matrices [..., 4, 4] of the corrected poses: camera-to-world [R | c] becomes
    [R_adj R | c + t_adj] (nerfstudio's `apply_to_camera`)."""
    R_adj, t_adj = pose_corrections(deltas, mode)
    R, t = viewmats[..., :3, :3], viewmats[..., :3, 3]
    c = -einsum("...ji,...j->...i", R, t)  # camera centre R^T (-t)
    R_new = matmul(R, jnp.swapaxes(R_adj, -1, -2))  # world-to-camera rotation of R_adj R^T
    t_new = -einsum("...ij,...j->...i", R_new, c + t_adj)
    top = jnp.concatenate([R_new, t_new[..., None]], -1)
    bottom = jnp.broadcast_to(jnp.array([0.0, 0.0, 0.0, 1.0], viewmats.dtype), top.shape[:-2] + (1, 4))
    return jnp.concatenate([top, bottom], -2)


def _safe_norm(x):
    sq = jnp.sum(x * x, -1)
    ok = sq > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, sq, 1.0)), 0.0)


def camera_penalty(cfg: CameraOptConfig, deltas):
    """nerfstudio's camera_opt_regularizer over every view's correction."""
    return (cfg.trans_l2_penalty * jnp.mean(_safe_norm(deltas[:, :3]))
            + cfg.rot_l2_penalty * jnp.mean(_safe_norm(deltas[:, 3:])))
