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

from .sh import SH_C0, num_sh_bases

PARAM_NAMES = ("means", "scales", "quats", "opacities", "sh0", "shN")


class Gaussians(NamedTuple):
    params: dict  # name -> [capacity, ...] (see PARAM_NAMES)
    alive: jnp.ndarray  # [capacity] bool

    @property
    def capacity(self) -> int:
        return self.alive.shape[0]


def rgb_to_sh0(rgb):
    return (rgb - 0.5) / SH_C0


def activated(params: dict, alive):
    """What the renderer takes: means, unit-free quats, scales, opacities (0 for dead slots), SH [N,K,3]."""
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


def next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def init_from_points(
    points: np.ndarray,
    colors: Optional[np.ndarray] = None,
    *,
    sh_degree: int = 3,
    capacity: Optional[int] = None,
    init_opacity: float = 0.1,
    seed: int = 0,
) -> Gaussians:
    """Gaussians at seed points (colours in [0,1] or uint8), scales from the 3-NN mean distance."""
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
    pad = capacity - n
    out = {}
    for name, v in params.items():
        v = np.concatenate([v, np.zeros((pad,) + v.shape[1:])]) if pad else v
        out[name] = jnp.asarray(v, jnp.float32)
    out["quats"] = out["quats"].at[n:, 0].set(1.0)  # dead slots hold valid quaternions
    return Gaussians(out, jnp.arange(capacity) < n)


def init_random(num: int, scene_min, scene_max, **kw) -> Gaussians:
    """`num` Gaussians uniform in the box [scene_min, scene_max] with random colours."""
    rng = np.random.default_rng(kw.get("seed", 0))
    lo, hi = np.asarray(scene_min, np.float64), np.asarray(scene_max, np.float64)
    return init_from_points(rng.uniform(lo, hi, (num, 3)), None, **kw)


def pad_leading(tree, old: int, new: int):
    """Grow every array whose leading dimension is `old` to `new` (zeros; quats become identity
    is not needed: dead slots are never rendered). Other leaves are left as they are."""

    def grow(x):
        if hasattr(x, "shape") and x.ndim >= 1 and x.shape[0] == old:
            return jnp.concatenate([x, jnp.zeros((new - old,) + x.shape[1:], x.dtype)])
        return x

    return jax.tree_util.tree_map(grow, tree)
