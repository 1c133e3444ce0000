"""Gaussian parameters as a pytree with a static capacity and an alive mask.

Parameters are stored unconstrained, as in 3DGS and gsplat: means, log-scales, quaternions (wxyz,
unnormalised), opacity logits, SH DC `sh0` [N,1,3] and the higher bands `shN` [N,K-1,3].
Slots beyond the live Gaussians are dead (`alive` False): they render with opacity 0, get no
updates, and are where densification puts new Gaussians.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..rendering import SH_C0, rasterization, rasterization_2dgs

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


def alive_first(gaussians: Gaussians):
    """The parameters with the alive Gaussians first (in slot order), and how many are alive.

    Returns:
      ({name: [capacity, ...]}, number alive).
    """
    order = jnp.argsort(~gaussians.alive, stable=True)
    return {k: v[order] for k, v in gaussians.params.items()}, int(jnp.sum(gaussians.alive))


def render_gaussians(gaussians: Gaussians, viewmat, K, width: int, height: int, *, sh_degree, background=None,
                     render_mode: str = "RGB+ED", rasterizer: str = "auto", rasterize_mode: str = "classic", keep=None,
                     layout=None, camera_model: str = "pinhole", distortion=None):
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
      layout: the devices it renders on (`layout.Layout`, as `rasterization`: its tile devices
        deal the image's tiles; default: one device of this process).
      camera_model, distortion: the camera's model and a fisheye's k1-k4 [4] (as `rasterization`).

    Returns:
      (features [H, W, ch] (RGB, then depth for "+D"/"+ED" modes), alpha [H, W, 1]), numpy arrays.
    """
    keep = None if keep is None else np.asarray(keep, bool)
    bg = None if background is None else np.asarray(background, np.float32).reshape(1, -1)
    means, quats, scales, opacities, sh = _render_inputs(gaussians.params, gaussians.alive, keep)
    colors, alpha, _ = rasterization(means, quats, scales, opacities, sh, np.asarray(viewmat, np.float32)[None],
                                     np.asarray(K, np.float32)[None], width, height, sh_degree=sh_degree,
                                     backgrounds=bg, render_mode=render_mode, rasterizer=rasterizer,
                                     rasterize_mode=rasterize_mode, layout=layout, camera_model=camera_model,
                                     distortion=distortion)
    return np.asarray(colors)[0], np.asarray(alpha)[0]  # on the host: no program per image size for the indexing


def render_surfels(gaussians: Gaussians, viewmat, K, width: int, height: int, *, sh_degree, background=None,
                   rasterizer: str = "auto", keep=None, layout=None, near_plane: float = 0.01,
                   depth_mode: str = "expected"):
    """Render the alive Gaussians as 2DGS disks (`rasterization_2dgs`; the third scale is not drawn)
    from one pinhole camera, eagerly; arguments as `render_gaussians`'s.

    Returns:
      {"rgb": [H, W, 3], "depth": [H, W, 1] expected depth, "accumulation": [H, W, 1],
       "normals": [H, W, 3] the blended disk normals (world space), "surf_normals": [H, W, 3]
       (the `depth_mode` depth's surface normals, world space), "distortion": [H, W, 1],
       "median_depth": [H, W, 1]}, numpy arrays.
    """
    keep = None if keep is None else np.asarray(keep, bool)
    bg = None if background is None else np.asarray(background, np.float32).reshape(1, -1)
    means, quats, scales, opacities, sh = _render_inputs(gaussians.params, gaussians.alive, keep)
    colors, alpha, normals, surf, distort, median, _ = rasterization_2dgs(
        means, quats, scales, opacities, sh, np.asarray(viewmat, np.float32)[None], np.asarray(K, np.float32)[None],
        width, height, sh_degree=sh_degree, backgrounds=bg, render_mode="RGB+ED", rasterizer=rasterizer,
        layout=layout, near_plane=near_plane, depth_mode=depth_mode)
    colors = np.asarray(colors)[0]
    return {"rgb": colors[..., :3], "depth": colors[..., 3:], "accumulation": np.asarray(alpha)[0],
            "normals": np.asarray(normals)[0], "surf_normals": np.asarray(surf)[0],
            "distortion": np.asarray(distort)[0], "median_depth": np.asarray(median)[0]}


@jax.jit
def _render_inputs(params, alive, keep):
    """`activated`, dropped Gaussians at opacity 0, as one program (op by op, each operation of a
    render's first call compiled on its own: ~0.2 s)."""
    means, quats, scales, opacities, sh = activated(params, alive)
    if keep is not None:
        opacities = jnp.where(keep, opacities, 0.0)
    return means, quats, scales, opacities, sh
