"""The Gaussians a run starts from: at seed points (a point cloud, 3DGS's 3-NN scales), uniform in a
box when a capture has none, or from given parameters (a PLY), moved by a similarity transform
with their SH rotated."""
from __future__ import annotations

from typing import Optional

import jax.numpy as jnp
import numpy as np

from ..array_ops import next_pow2
from ..rendering import num_sh_bases
from .data import camera_centres, scene_extent
from .gaussians import PARAM_NAMES, Gaussians, rgb_to_sh0


def knn_mean_distance(points: np.ndarray, k: int = 3) -> np.ndarray:
    """Mean distance of each point to its k nearest neighbours (the 3DGS initial scale)."""
    from scipy.spatial import cKDTree

    if len(points) <= 1:
        return np.full(len(points), 0.01)
    d, _ = cKDTree(points).query(points, k=min(k, len(points) - 1) + 1)
    d = d[:, 1:].mean(axis=1)
    return np.maximum(d, 1e-7)


def init_from_points(
    points: np.ndarray,
    colors: Optional[np.ndarray] = None,
    *,
    sh_degree: int = 3,
    capacity: Optional[int] = None,
    init_opacity: float = 0.1,
    seed: int = 0,
) -> Gaussians:
    """Gaussians at seed points, scales from the 3-NN mean distance (isotropic), random rotations.

    Args:
      points: [P, 3] positions.
      colors: [P, 3] colours in [0, 1] or 0..255 (random when None).
      sh_degree: SH degree of the colour (the higher bands start at zero).
      capacity: slots (default: the next power of two >= P); slots past P are dead.
      init_opacity: initial opacity of every Gaussian.
      seed: for the random rotations (and colours).

    Returns:
      `Gaussians` with `capacity` slots.
    """
    points = np.asarray(points, np.float64)
    if points.ndim != 2 or points.shape[1] != 3 or len(points) == 0:
        raise ValueError(f"seed points must be a non-empty [P,3] array, got shape {points.shape}")
    if not np.all(np.isfinite(points)):
        raise ValueError("seed points contain non-finite values")
    n = len(points)
    rng = np.random.default_rng(seed)
    if colors is None:
        colors = rng.uniform(0, 1, (n, 3))
    colors = np.asarray(colors, np.float64)
    if colors.max() > 1.0:
        colors = colors / 255.0
    capacity = capacity or next_pow2(n)
    if capacity < n:
        raise ValueError(f"capacity {capacity} is smaller than the {n} seed points")
    k = num_sh_bases(sh_degree)
    dist = knn_mean_distance(points)
    params = {
        "means": points,
        "scales": np.repeat(np.log(dist)[:, None], 3, axis=1),
        "quats": rng.normal(size=(n, 4)),
        "opacities": np.full(n, np.log(init_opacity / (1 - init_opacity))),
        "sh0": rgb_to_sh0(colors)[:, None, :],
        "shN": np.zeros((n, k - 1, 3)),
    }
    params["quats"] /= np.linalg.norm(params["quats"], axis=1, keepdims=True)
    return _padded(params, n, capacity)


def _padded(params: dict, n: int, capacity: int) -> Gaussians:
    """`n` Gaussians' parameters (numpy, [n, ...]) in `capacity` float32 slots; the slots past `n`
    are dead, with zero parameters and a valid (identity) quaternion."""
    out = {}
    for name, v in params.items():
        v = np.asarray(v, np.float64)
        out[name] = jnp.asarray(np.concatenate([v, np.zeros((capacity - n,) + v.shape[1:])]), jnp.float32)
    out["quats"] = out["quats"].at[n:, 0].set(1.0)
    return Gaussians(out, jnp.arange(capacity) < n)


def init_from_params(params: dict, *, sh_degree: int = 3, capacity: Optional[int] = None, source: str = "the input"
                     ) -> Gaussians:
    """Gaussians from raw parameters (PARAM_NAMES: log scales, opacity logits, SH coefficients), as
    `files.read_ply` reads a 3DGS PLY: SH bands beyond `sh_degree` dropped, missing ones zero;
    `capacity` slots (default: the next power of two). `source` names the input in errors."""
    from ..errors import UserFacingError

    n = len(params["means"])
    if n == 0:
        raise UserFacingError(f"{source} holds no Gaussians")
    for name in PARAM_NAMES:
        bad = ~np.isfinite(np.asarray(params[name], np.float64).reshape(n, -1)).all(axis=1)
        if bad.any():
            raise UserFacingError(f"{source}: {name} of {int(bad.sum())} Gaussian(s) is not finite (first: row "
                                  f"{int(np.argmax(bad))})")
    k = num_sh_bases(sh_degree) - 1
    shN = np.asarray(params["shN"], np.float64)[:, :k]
    shN = np.concatenate([shN, np.zeros((n, k - shN.shape[1], 3))], 1)
    quats = np.asarray(params["quats"], np.float64)
    norms = np.linalg.norm(quats, axis=1)
    if (norms < 1e-12).any():
        raise UserFacingError(f"{source}: the rotation of {int((norms < 1e-12).sum())} Gaussian(s) is a zero quaternion")
    capacity = capacity or next_pow2(n)
    if capacity < n:
        raise ValueError(f"capacity {capacity} is smaller than the {n} Gaussians")
    full = dict(means=params["means"], scales=params["scales"], quats=quats / norms[:, None],
                opacities=np.asarray(params["opacities"]).reshape(n), sh0=np.asarray(params["sh0"]).reshape(n, 1, 3),
                shN=shN)
    return _padded(full, n, capacity)


def sh_rotation(rotation: np.ndarray, degree: int) -> np.ndarray:
    """[K, K] block-diagonal matrix M (K = (degree+1)^2 bases) with sum_k (M c)_k Y_k(R d) =
    sum_k c_k Y_k(d) for every direction d: the SH coefficients of a colour seen in a world turned
    by `rotation` R. Each band's block solved by least squares from 64 directions (exact: a band
    maps onto itself under rotations)."""
    from ..rendering.sh import sh_basis

    R = np.asarray(rotation, np.float64)
    dirs = np.random.default_rng(0).normal(size=(64, 3))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    A = np.asarray(sh_basis(jnp.asarray(dirs @ R.T, jnp.float32), degree), np.float64)  # Y(R d)
    B = np.asarray(sh_basis(jnp.asarray(dirs, jnp.float32), degree), np.float64)  # Y(d)
    M = np.zeros((A.shape[1], A.shape[1]))
    for band in range(degree + 1):
        sl = slice(band * band, (band + 1) ** 2)
        M[sl, sl] = np.linalg.lstsq(A[:, sl], B[:, sl], rcond=None)[0]  # Y(R d) M = Y(d) on the band
    return M


def transform_params(params: dict, rotation, translation, scale: float) -> dict:
    """Raw parameters (PARAM_NAMES) moved by the similarity x -> scale (R x + t): means moved,
    log scales shifted by log(scale), rotations composed with R, SH coefficients rotated (the
    colour seen along R d is the colour seen along d before)."""
    from scipy.spatial.transform import Rotation

    R = np.asarray(rotation, np.float64)
    if not np.allclose(R @ R.T, np.eye(3), atol=1e-4) or np.linalg.det(R) < 0:
        raise ValueError(f"not a rotation: {R.tolist()}")
    means = scale * (np.asarray(params["means"], np.float64) @ R.T + np.asarray(translation, np.float64))
    x, y, z, w = Rotation.from_matrix(R).as_quat()
    qw, qx, qy, qz = np.asarray(params["quats"], np.float64).T
    quats = np.stack([w * qw - x * qx - y * qy - z * qz, w * qx + x * qw + y * qz - z * qy,
                      w * qy - x * qz + y * qw + z * qx, w * qz + x * qy - y * qx + z * qw], 1)  # (R) * q
    sh = np.concatenate([np.asarray(params["sh0"], np.float64), np.asarray(params["shN"], np.float64)], 1)
    degree = int(round(np.sqrt(sh.shape[1]))) - 1
    sh = np.einsum("kj,njc->nkc", sh_rotation(R, degree), sh)
    return dict(params, means=means, scales=np.asarray(params["scales"], np.float64) + np.log(scale), quats=quats,
                sh0=sh[:, :1], shN=sh[:, 1:])


def init_random(num: int, scene_min, scene_max, **kw) -> Gaussians:
    """`num` Gaussians uniform in the box [scene_min, scene_max] ([3] each) with random colours;
    keyword arguments as `init_from_points`."""
    rng = np.random.default_rng(kw.get("seed", 0))
    lo, hi = np.asarray(scene_min, np.float64), np.asarray(scene_max, np.float64)
    return init_from_points(rng.uniform(lo, hi, (num, 3)), None, **kw)


def random_init_box(scene_box=None, viewmats=None):
    """The box random initial Gaussians fill when a capture has no point cloud: the scene's bounds.

    Args:
      scene_box: [2, 3] (min, max) corners of the scene's box (a dataparser's scene box), used
        when given.
      viewmats: [V, 4, 4] world-to-camera matrices, used otherwise: a cube centred on the cameras'
        mean centre, reaching `scene_extent` (1.1 x the largest distance of a camera from it) each
        way, so it holds what cameras around an object look at.

    Returns:
      (lo [3], hi [3]) float64 corners.
    """
    if scene_box is not None:
        box = np.asarray(scene_box, np.float64).reshape(2, 3)
        if not np.all(np.isfinite(box)) or np.any(box[1] <= box[0]):
            raise ValueError(f"the scene box must have finite corners with min < max, got {box.tolist()}")
        return box[0], box[1]
    if viewmats is None:
        raise ValueError("random_init_box needs a scene box or the cameras")
    centre = camera_centres(viewmats).mean(0)
    r = scene_extent(viewmats)
    if not r > 0:
        raise ValueError("the cameras all sit at one point: give the scene's box")
    return centre - r, centre + r
