"""Gaussian parameters as a pytree with a static capacity and an alive mask.

Parameters are stored unconstrained, as in 3DGS and gsplat: means, log-scales, quaternions (wxyz,
unnormalised), opacity logits, SH DC `sh0` [N,1,3] and the higher bands `shN` [N,K-1,3].
Slots beyond the live Gaussians are dead (`alive` False): they render with opacity 0, get no
updates, and are where densification puts new Gaussians.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..rendering import SH_C0, next_pow2, num_sh_bases, rasterization
from .data import camera_centres, scene_extent

PARAM_NAMES = ("means", "scales", "quats", "opacities", "sh0", "shN")


class Gaussians(NamedTuple):
    """The Gaussians of a scene: every leaf has the leading [capacity] axis."""

    params: dict  # name -> [capacity, ...] (see PARAM_NAMES)
    alive: jnp.ndarray  # [capacity] bool

    @property
    def capacity(self) -> int:
        return self.alive.shape[0]


def rgb_to_sh0(rgb):
    """RGB in [0, 1] -> the SH DC coefficient that renders it."""
    return (rgb - 0.5) / SH_C0


def sh0_to_rgb(sh0):
    """The SH DC coefficient -> the RGB it renders (before clamping; numpy, JAX or torch arrays)."""
    return sh0 * SH_C0 + 0.5


def activated(params: dict, alive):
    """What the renderer takes.

    Args:
      params: the parameters (PARAM_NAMES), each [N, ...].
      alive: [N] bool.

    Returns:
      (means [N,3], quats [N,4], scales [N,3], opacities [N] (0 for dead slots), SH [N,K,3]).
    """
    opacities = jnp.where(alive, jax.nn.sigmoid(params["opacities"]), 0.0)
    sh = jnp.concatenate([params["sh0"], params["shN"]], axis=1)
    return params["means"], params["quats"], jnp.exp(params["scales"]), opacities, sh


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


def alive_first(gaussians: Gaussians):
    """The parameters with the alive Gaussians first (in slot order), and how many are alive.

    Returns:
      ({name: [capacity, ...]}, number alive).
    """
    order = jnp.argsort(~gaussians.alive, stable=True)
    return {k: v[order] for k, v in gaussians.params.items()}, int(jnp.sum(gaussians.alive))


def render_gaussians(gaussians: Gaussians, viewmat, K, width: int, height: int, *, sh_degree, background=None,
                     render_mode: str = "RGB+ED", rasterizer: str = "auto", rasterize_mode: str = "classic", keep=None,
                     tile_devices: int = 1):
    """Render the alive Gaussians from one camera (eagerly: the intersection buffer grows as needed).

    Args:
      gaussians: the scene.
      viewmat: [4, 4] world-to-camera (OpenCV axes); K: [3, 3].
      width, height: image size.
      sh_degree: SH bands to evaluate (e.g. `schedule.sh_degree_at(step, ...)`).
      background: [3] colour behind the Gaussians (black when None).
      render_mode: as `rasterization`.
      rasterizer: "auto", "flat", "standard" or "pallas" (`rasterization`).
      rasterize_mode: "classic" or "antialiased" (as `rasterization`).
      keep: optional [capacity] bool, Gaussians to render (others get opacity 0; e.g. a crop box).
      tile_devices: the image's tiles are dealt over this many local devices (as `rasterization`).

    Returns:
      (features [H, W, ch] (RGB, then depth for "+D"/"+ED" modes), alpha [H, W, 1]), numpy arrays.
    """
    keep = None if keep is None else np.asarray(keep, bool)
    bg = None if background is None else np.asarray(background, np.float32).reshape(1, -1)
    means, quats, scales, opacities, sh = _render_inputs(gaussians.params, gaussians.alive, keep)
    colors, alpha, _ = rasterization(means, quats, scales, opacities, sh, np.asarray(viewmat, np.float32)[None],
                                     np.asarray(K, np.float32)[None], width, height, sh_degree=sh_degree,
                                     backgrounds=bg, render_mode=render_mode, rasterizer=rasterizer,
                                     rasterize_mode=rasterize_mode, tile_devices=tile_devices)
    return np.asarray(colors)[0], np.asarray(alpha)[0]  # on the host: no program per image size for the indexing


@jax.jit
def _render_inputs(params, alive, keep):
    """`activated`, dropped Gaussians at opacity 0, as one program (op by op, each operation of a
    render's first call compiled on its own: ~0.2 s)."""
    means, quats, scales, opacities, sh = activated(params, alive)
    if keep is not None:
        opacities = jnp.where(keep, opacities, 0.0)
    return means, quats, scales, opacities, sh
