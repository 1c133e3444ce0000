"""Projection of 3D Gaussians to the screen (EWA splatting), one camera at a time.

Everything here is plain differentiable JAX over per-Gaussian arrays; `jax.vmap` over cameras
happens in `rendering.py`.
"""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

ALPHA_MIN = 1.0 / 255.0  # alpha below this is skipped when compositing


class Projected(NamedTuple):
    """Screen-space Gaussians of one camera; `valid` marks those that can touch a pixel."""

    means2d: jnp.ndarray  # [N, 2] pixel coordinates (pixel centres at +0.5)
    conics: jnp.ndarray  # [N, 3] inverse 2D covariance (a, b, c): q = a dx^2 + 2 b dx dy + c dy^2
    depths: jnp.ndarray  # [N] view-space z
    extents: jnp.ndarray  # [N, 2] half-size in pixels of the box where alpha can reach 1/255
    valid: jnp.ndarray  # [N] bool
    opacities: jnp.ndarray  # [N] the opacity blended: the input, or compensated (antialiased)


RASTERIZE_MODES = ("classic", "antialiased")


def quat_to_rotmat(quats: jnp.ndarray) -> jnp.ndarray:
    """[N,4] wxyz quaternions (any norm) -> [N,3,3] rotation matrices."""
    q = quats / jnp.linalg.norm(quats, axis=-1, keepdims=True)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return jnp.stack(
        [
            jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            jnp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def covariance_3d(quats: jnp.ndarray, scales: jnp.ndarray) -> jnp.ndarray:
    """Sigma = R S S^T R^T, [N,3,3]."""
    m = quat_to_rotmat(quats) * scales[..., None, :]
    return m @ jnp.swapaxes(m, -1, -2)


def project_gaussians(
    means: jnp.ndarray,
    quats: jnp.ndarray,
    scales: jnp.ndarray,
    opacities: jnp.ndarray,
    viewmat: jnp.ndarray,
    K: jnp.ndarray,
    width: int,
    height: int,
    near_plane: float = 0.01,
    eps2d: float = 0.3,
    rasterize_mode: str = "classic",
) -> Projected:
    """EWA projection with the tan-fov guard of 3DGS/gsplat, the eps2d low-pass and near culling.

    `rasterize_mode="antialiased"` (Mip-Splatting's 2D filter, gsplat's name): the low-pass keeps
    each Gaussian's total weight instead of widening it, o' = o sqrt(det(S) / det(S + eps2d I))
    for the 2D covariance S, so splats much smaller than a pixel fade instead of growing into
    pixel-sized blobs (no aliasing when the scene is seen from further away or at a lower
    resolution than it was trained at). "classic" blends o itself (3DGS).

    The extent is opacity-aware: the ellipse q <= 2 ln(255 o) holds every pixel centre where
    alpha = o exp(-q/2) reaches 1/255, and its axis-aligned half-sizes are sqrt(2 ln(255 o) cov_xx),
    sqrt(2 ln(255 o) cov_yy). Binning with this box never drops a visible contribution.
    """
    R, t = viewmat[:3, :3], viewmat[:3, 3]
    p = means @ R.T + t
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    in_front = z > near_plane
    zs = jnp.where(in_front, z, 1.0)  # safe value for culled Gaussians (no NaN in gradients)

    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    tan_fovx = 0.5 * width / fx
    tan_fovy = 0.5 * height / fy
    lim_x_pos = (width - cx) / fx + 0.3 * tan_fovx
    lim_x_neg = cx / fx + 0.3 * tan_fovx
    lim_y_pos = (height - cy) / fy + 0.3 * tan_fovy
    lim_y_neg = cy / fy + 0.3 * tan_fovy
    tx = zs * jnp.clip(x / zs, -lim_x_neg, lim_x_pos)
    ty = zs * jnp.clip(y / zs, -lim_y_neg, lim_y_pos)
    zero = jnp.zeros_like(zs)
    J = jnp.stack(
        [
            jnp.stack([fx / zs, zero, -fx * tx / (zs * zs)], -1),
            jnp.stack([zero, fy / zs, -fy * ty / (zs * zs)], -1),
        ],
        -2,
    )  # [N,2,3]
    cov_cam = R @ covariance_3d(quats, scales) @ R.T
    cov2d = J @ cov_cam @ jnp.swapaxes(J, -1, -2)
    c00 = cov2d[:, 0, 0] + eps2d
    c01 = cov2d[:, 0, 1]
    c11 = cov2d[:, 1, 1] + eps2d
    det = c00 * c11 - c01 * c01
    det_ok = det > 0
    dets = jnp.where(det_ok, det, 1.0)
    conics = jnp.stack([c11 / dets, -c01 / dets, c00 / dets], -1)
    means2d = jnp.stack([fx * x / zs + cx, fy * y / zs + cy], -1)
    if rasterize_mode == "antialiased":
        det_raw = cov2d[:, 0, 0] * cov2d[:, 1, 1] - cov2d[:, 0, 1] * cov2d[:, 0, 1]
        ratio = jnp.where(det_ok & (det_raw > 0), det_raw / dets, 1.0)  # safe inside the sqrt
        opacities = jnp.where(det_ok & (det_raw > 0), opacities * jnp.sqrt(ratio), 0.0)
    elif rasterize_mode != "classic":
        raise ValueError(f"rasterize_mode must be one of {RASTERIZE_MODES}, got {rasterize_mode!r}")

    visible_opacity = opacities >= ALPHA_MIN
    level = 2.0 * jnp.log(jnp.maximum(opacities, ALPHA_MIN) * 255.0)  # q threshold
    extents = jnp.sqrt(jnp.maximum(level, 0.0)[:, None] * jnp.stack([c00, c11], -1))
    on_screen = (
        (means2d[:, 0] + extents[:, 0] > 0)
        & (means2d[:, 0] - extents[:, 0] < width)
        & (means2d[:, 1] + extents[:, 1] > 0)
        & (means2d[:, 1] - extents[:, 1] < height)
    )
    valid = in_front & det_ok & visible_opacity & on_screen
    return Projected(means2d, conics, z, extents, valid, opacities)
