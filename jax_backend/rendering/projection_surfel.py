"""Projection of 2D Gaussians (2DGS's surfels) to the screen, one camera at a time: each disk's ray
transform relative to its centre's pixel (`blend_surfel`), its camera-space normal, and the exact
screen box where it can reach alpha 1/255.

Per-surfel vectors are planes ([N] arrays), as in `projection`.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .projection import ALPHA_MIN, columns, rotmat_planes


class ProjectedSurfels(NamedTuple):
    """Screen-space surfels of one camera; `valid` marks those that can touch a pixel."""

    transforms: jnp.ndarray  # [N, 7] the ray transform's entries (a_u, a_v, b_u, b_v, c_u, c_v, depth): `blend_surfel`
    means2d: jnp.ndarray  # [N, 2] the centre's pixel (pixel centres at +0.5)
    depths: jnp.ndarray  # [N] the centre's camera depth (the blending order)
    normals: jnp.ndarray  # [N, 3] camera-space unit normals, turned towards the camera
    box_centers: jnp.ndarray  # [N, 2] the centre of the screen box ...
    extents: jnp.ndarray  # [N, 2] ... and its half-size: every pixel where alpha can reach 1/255
    valid: jnp.ndarray  # [N] bool
    opacities: jnp.ndarray  # [N]


def _axis_box(r, c, w2, rho2):
    """Offset and half-size along one screen axis of the image of the disk's ellipse u^2 + v^2 <=
    rho2, for the ray transform's rows r (this axis, through the centre's pixel: no third entry)
    and c = (c_u, c_v) with w2 = depth^2. The image's dual conic D = M diag(rho2, rho2, -1) M^T
    gives the tangent lines x = D02 / D22 +- sqrt(D02^2 - D00 D22) / |D22|; relative to the centre's
    pixel both D02 = rho2 r.c and D00 = rho2 |r|^2 have no constant term, so nothing cancels.
    Bounded when D22 = rho2 |c|^2 - w2 < 0: the ellipse lies in front of the camera's plane."""
    d22 = rho2 * (c[0] * c[0] + c[1] * c[1]) - w2
    d02 = rho2 * (r[0] * c[0] + r[1] * c[1])
    d00 = rho2 * (r[0] * r[0] + r[1] * r[1])
    bounded = d22 < 0
    d22s = jnp.where(bounded, d22, -1.0)
    return bounded, d02 / d22s, jnp.sqrt(d02 * d02 - d00 * d22s) / -d22s


def project_surfels(means, quats, scales, opacities, viewmat, K, width: int, height: int,
                    near_plane: float = 0.01) -> ProjectedSurfels:
    """The surfels `means` [N,3], `quats` [N,4] (wxyz, any norm), `scales` [N,2] (or [N,3]: the third
    is not drawn), `opacities` [N] seen by a pinhole camera (`viewmat` [4,4] world-to-camera,
    OpenCV axes; `K` [3,3]).

    The box is exact and opacity-aware: a pixel reaches alpha 1/255 where min((u^2 + v^2) / 2,
    |d|^2) <= L = ln(255 o), the union of the disk's ellipse u^2 + v^2 <= 2 L seen through the
    camera (`_axis_box`) and the low pass's circle of radius sqrt(L) around the centre's pixel.
    An ellipse that reaches behind the camera's plane has an unbounded image: its box is the
    whole image.
    """
    R, t = viewmat[:3, :3], viewmat[:3, 3]
    mx, my, mz = columns(means)
    p = [mx * R[i, 0] + my * R[i, 1] + mz * R[i, 2] + t[i] for i in range(3)]
    in_front = p[2] > near_plane
    zs = jnp.where(in_front, p[2], 1.0)  # safe value for culled surfels (no NaN in gradients)
    rot = rotmat_planes(quats)
    s = columns(scales)
    # the disk's axes in camera space: R R_q[:, j], the tangents scaled by s_u, s_v
    axis = [[R[i, 0] * rot[0][j] + R[i, 1] * rot[1][j] + R[i, 2] * rot[2][j] for i in range(3)] for j in range(3)]
    tu = [a * s[0] for a in axis[0]]
    tv = [a * s[1] for a in axis[1]]
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    xc, yc = p[0] / zs, p[1] / zs
    r0 = (fx * (tu[0] - xc * tu[2]), fx * (tv[0] - xc * tv[2]))
    r1 = (fy * (tu[1] - yc * tu[2]), fy * (tv[1] - yc * tv[2]))
    c = (tu[2], tv[2])
    transforms = jnp.stack([r0[0], r0[1], r1[0], r1[1], c[0], c[1], zs], -1)
    means2d = jnp.stack([fx * xc + cx, fy * yc + cy], -1)
    n = axis[2]
    towards = jnp.where(n[0] * p[0] + n[1] * p[1] + n[2] * p[2] > 0, -1.0, 1.0)
    normals = jnp.stack([towards * a for a in n], -1)

    # the box: never differentiated (binning only)
    level = jnp.log(jnp.maximum(jax.lax.stop_gradient(opacities), ALPHA_MIN) * 255.0)  # >= 0
    rho2 = 2.0 * level
    r0, r1, c, w2 = jax.lax.stop_gradient((r0, r1, c, zs * zs))
    mean = jax.lax.stop_gradient(means2d)
    lowpass = jnp.sqrt(level)  # the low pass's circle
    lo, hi = [], []
    for k, (r, size) in enumerate(((r0, width), (r1, height))):
        bounded, offset, half = _axis_box(r, c, w2, rho2)
        lo.append(jnp.where(bounded, jnp.minimum(mean[:, k] + offset - half, mean[:, k] - lowpass), -1.0))
        hi.append(jnp.where(bounded, jnp.maximum(mean[:, k] + offset + half, mean[:, k] + lowpass), size + 1.0))
    lo, hi = jnp.stack(lo, -1), jnp.stack(hi, -1)
    lo = jnp.maximum(lo, -1.0)  # the box past the image matters no more than the image's edge
    hi = jnp.minimum(hi, jnp.array([width + 1.0, height + 1.0]))
    on_screen = jnp.all((hi > 0) & (lo < jnp.array([width, height], jnp.float32)), -1)
    valid = in_front & (opacities >= ALPHA_MIN) & on_screen  # on screen: lo <= hi after the clamps
    return ProjectedSurfels(transforms, means2d, p[2], normals, 0.5 * (lo + hi), jnp.maximum(0.5 * (hi - lo), 0.0),
                            valid, opacities)
