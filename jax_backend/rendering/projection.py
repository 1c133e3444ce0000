"""Projection of 3D Gaussians to the screen (EWA splatting), one camera at a time.

Everything here is plain differentiable JAX over per-Gaussian arrays; `jax.vmap` over cameras
happens in `rasterization.py`.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

ALPHA_MIN = 1.0 / 255.0  # alpha below this is skipped when compositing


class Projected(NamedTuple):
    """Screen-space Gaussians of one camera; `valid` marks those that can touch a pixel."""

    means2d: jnp.ndarray  # [N, 2] pixel coordinates (pixel centres at +0.5)
    conics: jnp.ndarray  # [N, 3] inverse 2D covariance (a, b, c): q = a dx^2 + 2 b dx dy + c dy^2
    quad: jnp.ndarray  # [N, 3] the same form as blended (a, r, s): q = a (dx + r dy)^2 + s dy^2 (`blend_form`)
    depths: jnp.ndarray  # [N] view-space z
    extents: jnp.ndarray  # [N, 2] half-size in pixels of the box where alpha can reach 1/255
    valid: jnp.ndarray  # [N] bool
    opacities: jnp.ndarray  # [N] the opacity blended: the input, or compensated (antialiased)

    @property
    def box_centers(self) -> jnp.ndarray:
        """[N, 2] the centre of the box `extents` measures from (binning's): the mean's pixel."""
        return self.means2d


RASTERIZE_MODES = ("classic", "antialiased")


# Per-Gaussian vectors and small matrices are kept as planes, one [N] array per entry (nested lists
# for matrices), and multiplied entry by entry. XLA on a CPU fuses these into its loops. As batched
# dots ([N*3, 3] x [3, 3] and [N, 3, 3] x [N, 3, 3]) each product was a library call of its own, and
# the projection with its gradient took several times as long (figure: planes, benchmarks/results/library_figures.md).


@jax.custom_vjp
def columns(x: jnp.ndarray):
    """[N, k] -> its k columns, planes [N] (as `jnp.unstack(x, axis=-1)`).

    The gradient writes each column's cotangent into the [N, k] result in a loop of its own. The
    default gradient (pads or a concatenate of the columns' cotangents) was fused by XLA into one
    loop over [N, k] that evaluated the cotangent expressions of every column for every element,
    without vectorising: most of the projection's time (figure: columns-grad,
    benchmarks/results/library_figures.md)."""
    return tuple(jnp.unstack(x, axis=-1))


def _columns_fwd(x):
    return columns(x), None


def _columns_bwd(_, cts):
    out = jnp.zeros((cts[0].shape[0], len(cts)), cts[0].dtype)
    for j, c in enumerate(cts):
        out = jax.lax.dynamic_update_slice(out, c[:, None], (0, j))
    return (out,)


columns.defvjp(_columns_fwd, _columns_bwd)


def rotmat_planes(quats: jnp.ndarray):
    """[N,4] wxyz quaternions (any norm) -> the rotation matrix as planes: R[i][j] is [N]."""
    w, x, y, z = columns(quats)
    norm = jnp.sqrt(w * w + x * x + y * y + z * z)
    w, x, y, z = w / norm, x / norm, y / norm, z / norm
    return [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]


def quat_to_rotmat(quats: jnp.ndarray) -> jnp.ndarray:
    """[N,4] wxyz quaternions (any norm) -> [N,3,3] rotation matrices."""
    return jnp.stack([jnp.stack(row, -1) for row in rotmat_planes(quats)], -2)


def _gram_determinant(W, rot, sxyz):
    """det(V V^T) for V = W M, M = rot diag(s) (the projected covariance before the low-pass), as a
    sum of squares (Cauchy-Binet): each 2x2 minor of V is (W0 x W1) . (M_j x M_k), and
    M_j x M_k = s_j s_k r_l for the rotation's columns r (l the third index).

    Written as cov00 cov11 - cov01^2 it cancels for thin or strongly anisotropic splats: with the
    diagonal near 1e4 and the determinant near 1e3, float32 kept 3 digits of it and the conic was
    off by 3e-3 relative, enough to move alpha across the 1/255 skip (6.5e-4 in a pixel against
    the float64 reference). Here every term is a product, and the sum has no cancellation."""
    n = [W[0][(k + 1) % 3] * W[1][(k + 2) % 3] - W[0][(k + 2) % 3] * W[1][(k + 1) % 3] for k in range(3)]  # W0 x W1
    s0, s1, s2 = sxyz
    total = 0.0
    for l, pair in ((0, s1 * s2), (1, s0 * s2), (2, s0 * s1)):
        minor = pair * (n[0] * rot[0][l] + n[1] * rot[1][l] + n[2] * rot[2][l])
        total = total + minor * minor
    return total


def blend_form(c00, c01, c11, det):
    """The quadratic form of the 2D covariance [[c00, c01], [c01, c11]] (determinant `det`) as the
    rasterizers evaluate it: q = a (dx + r dy)^2 + s dy^2 with a = c11 / det, r = -c01 / c11,
    s = 1 / c11 (completing the square; a, a r and a r^2 + s are the conic's entries).

    Both terms are non-negative, so q keeps float32's relative precision. The conic's own form
    a dx^2 + 2 b dx dy + c dy^2 sums terms of size d^2 / lambda_min that cancel to q along a thin
    splat's long axis: q and alpha lose precision there against the float64 reference (figure:
    conic-form, benchmarks/results/library_figures.md). r and s come from the covariance's entries, not the conic's."""
    return jnp.stack([c11 / det, -c01 / c11, 1.0 / c11], -1)


CAMERA_MODELS = ("pinhole", "ortho", "fisheye")
FISHEYE_SERIES_BELOW = 0.05  # theta (radians) under which the fisheye Jacobian's curvature term is a series


def _fisheye_curvature(theta, k):
    """q(theta) = (theta_d'(theta) sin(theta) cos(theta) - theta_d(theta)) / sin(theta)^3 for
    theta_d = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8).

    q / rho^3 is the fisheye Jacobian's term in x^2, x y and y^2 (see `camera_projection`). The
    quotient is O(theta^3) / O(theta^3) and cancels near the optical axis (float32 kept nothing of
    it below theta = 3e-4), so there it is its series, (2 k1 - 2/3) + theta^2 (4 k2 - k1 - 1/5),
    whose next term is O(theta^4): under 1e-5 below FISHEYE_SERIES_BELOW."""
    k1, k2, k3, k4 = k
    t2 = theta * theta
    series = (2.0 * k1 - 2.0 / 3.0) + t2 * (4.0 * k2 - k1 - 0.2)
    far = theta >= FISHEYE_SERIES_BELOW
    ts = jnp.where(far, theta, 1.0)  # safe value where the series is used (no NaN in gradients)
    t2s = ts * ts
    d = ts * (1.0 + t2s * (k1 + t2s * (k2 + t2s * (k3 + t2s * k4))))
    dd = 1.0 + t2s * (3.0 * k1 + t2s * (5.0 * k2 + t2s * (7.0 * k3 + t2s * 9.0 * k4)))
    sin, cos = jnp.sin(ts), jnp.cos(ts)
    return jnp.where(far, (dd * sin * cos - d) / (sin * sin * sin), series)


def camera_projection(camera_model: str, x, y, z, K, width: int, height: int, distortion=None):
    """Where a camera draws camera-space points (x, y, z) (planes [N], z > 0): pixel coordinates
    (u, v) and the projection's Jacobian d(u, v)/d(x, y, z) at each, as planes [2][3] (a Python 0.0
    where an entry is zero for every point; EWA's screen covariance is J Sigma J^T).

    - "pinhole": u = fx x / z + cx, with 3DGS's guard: the Jacobian is taken at x/z, y/z clamped
      to 1.3x the image's field of view, so Gaussians far off screen do not blow up.
    - "ortho": u = fx x + cx, v = fy y + cy (gsplat's orthographic camera; K's focal lengths are
      pixels per scene unit).
    - "fisheye": the equidistant (Kannala-Brandt) model with `distortion` (k1, k2, k3, k4), OpenCV's
      fisheye and nerfstudio's FISHEYE: theta = atan2(r, z) for r = |(x, y)|, theta_d = theta (1 +
      k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8), u = fx theta_d x / r + cx. Zero
      coefficients are gsplat's equidistant fisheye. With s = theta_d / r and rho = |(x, y, z)|:
      du/dx = fx (s + x^2 h), du/dy = fx x y h, du/dz = -fx x theta_d'(theta) / rho^2 (v alike),
      h = q(theta) / rho^3 (`_fisheye_curvature`).
    """
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    if camera_model == "pinhole":
        tan_fovx = 0.5 * width / fx
        tan_fovy = 0.5 * height / fy
        lim_x_pos = (width - cx) / fx + 0.3 * tan_fovx
        lim_x_neg = cx / fx + 0.3 * tan_fovx
        lim_y_pos = (height - cy) / fy + 0.3 * tan_fovy
        lim_y_neg = cy / fy + 0.3 * tan_fovy
        tx = z * jnp.clip(x / z, -lim_x_neg, lim_x_pos)
        ty = z * jnp.clip(y / z, -lim_y_neg, lim_y_pos)
        J = [[fx / z, 0.0, -fx * tx / (z * z)], [0.0, fy / z, -fy * ty / (z * z)]]
        return (fx * x / z + cx, fy * y / z + cy), J
    if camera_model == "ortho":
        return (fx * x + cx, fy * y + cy), [[fx, 0.0, 0.0], [0.0, fy, 0.0]]
    if camera_model != "fisheye":
        raise ValueError(f"camera_model must be one of {CAMERA_MODELS}, got {camera_model!r}")
    k = (0.0, 0.0, 0.0, 0.0) if distortion is None else tuple(distortion[i] for i in range(4))
    r2 = x * x + y * y
    r = jnp.sqrt(r2 + 1e-30)  # > 0: no NaN in the gradient on the optical axis
    rho2 = r2 + z * z
    rho = jnp.sqrt(rho2)
    theta = jnp.arctan2(r, z)
    t2 = theta * theta
    k1, k2, k3, k4 = k
    poly = 1.0 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4)))  # theta_d / theta
    dpoly = 1.0 + t2 * (3.0 * k1 + t2 * (5.0 * k2 + t2 * (7.0 * k3 + t2 * 9.0 * k4)))  # theta_d'
    sin = jnp.sin(theta)
    theta_over_sin = jnp.where(theta > 1e-4, theta / jnp.where(theta > 1e-4, sin, 1.0), 1.0 + t2 / 6.0)
    s = poly * theta_over_sin / rho  # theta_d / r
    h = _fisheye_curvature(theta, k) / (rho2 * rho)
    dz = -dpoly / rho2
    J = [[fx * (s + x * x * h), fx * x * y * h, fx * x * dz], [fy * x * y * h, fy * (s + y * y * h), fy * y * dz]]
    return (fx * s * x + cx, fy * s * y + cy), J


def _times_rotation(J, R):
    """J R for J planes [2][3] (literal zeros skipped) and R a [3, 3] array: planes [2][3]."""
    def entry(a, k):
        terms = [J[a][i] * R[i, k] for i in range(3) if not (isinstance(J[a][i], float) and J[a][i] == 0.0)]
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return total

    return [[entry(a, k) for k in range(3)] for a in range(2)]


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
    camera_model: str = "pinhole",
    distortion=None,
) -> Projected:
    """EWA projection with the eps2d low-pass and near culling, for a pinhole camera (with the
    tan-fov guard of 3DGS/gsplat), an orthographic one or a fisheye with its coefficients
    `distortion` [4] (`camera_projection`): each Gaussian's screen covariance is the projection's
    Jacobian at its mean, J Sigma J^T, and its box and tiles follow from that covariance.

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
    mx, my, mz = columns(means)
    x, y, z = (mx * R[i, 0] + my * R[i, 1] + mz * R[i, 2] + t[i] for i in range(3))
    in_front = z > near_plane
    zs = jnp.where(in_front, z, 1.0)  # safe value for culled Gaussians (no NaN in gradients)

    (u, v), J = camera_projection(camera_model, x, y, zs, K, width, height, distortion)
    # cov2d = J R Sigma R^T J^T = V V^T with V = J R M, M = rotation x scales (Sigma = M M^T)
    W = _times_rotation(J, R)  # J R, planes [2][3]
    rot = rotmat_planes(quats)
    sxyz = columns(scales)
    M = [[rot[k][j] * sxyz[j] for j in range(3)] for k in range(3)]
    V = [[W[a][0] * M[0][j] + W[a][1] * M[1][j] + W[a][2] * M[2][j] for j in range(3)] for a in range(2)]
    cov00, cov01, cov11 = (V[a][0] * V[b][0] + V[a][1] * V[b][1] + V[a][2] * V[b][2] for a, b in ((0, 0), (0, 1), (1, 1)))
    c00 = cov00 + eps2d
    c01 = cov01
    c11 = cov11 + eps2d
    det_raw = _gram_determinant(W, rot, sxyz)
    det = det_raw + eps2d * (cov00 + cov11) + eps2d * eps2d  # det(cov + eps2d I), a sum of non-negative terms
    det_ok = det > 0
    dets = jnp.where(det_ok, det, 1.0)
    conics = jnp.stack([c11 / dets, -c01 / dets, c00 / dets], -1)
    quad = blend_form(c00, c01, c11, dets)
    means2d = jnp.stack([u, v], -1)
    if rasterize_mode == "antialiased":
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
    return Projected(means2d, conics, quad, z, extents, valid, opacities)
