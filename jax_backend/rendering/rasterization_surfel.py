"""2D Gaussian Splatting's entry points, shaped like gsplat's `rasterization_2dgs`: the surfels of
`projection_surfel` blended by the rasterizers with `blend_surfel`'s rule (`composite.surfels`),
with the same binning, intersection buffer policy and exact tile semantics as 3DGS's
`rasterization` (its eager form grows the buffer; `traced_rasterization_2dgs` takes a static one).

Besides the colours and alpha a render gives the blended normals, the normals of the rendered
depth's surface (`depth_to_normals`, what 2DGS's normal-consistency loss compares them with), the
depth distortion and the median depth. Normals come in world space, as gsplat's.
"""
from __future__ import annotations

from functools import partial
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from .binning import bin_gaussians, tile_rect
from .composite import RasterizerOptions, composite, surfels
from .projection_surfel import project_surfels
from .rasterization import (RenderConfig, RenderInputs, rasterized_per_camera, render_config, render_eagerly,
                            render_inputs, render_meta, view_colors)
from .tile_parallel import gathered
from .tiles import TileGrid
from ..layout import Layout

DEPTH_MODES = ("expected", "median")  # the depth `depth_to_normals` reads for the surface normals


def depth_to_normals(depth, K):
    """Normals of the surface a depth map draws, camera space, turned towards the camera: each
    pixel's point z (x', y', 1) (x' = (x + 0.5 - cx) / fx), crossed central differences of its
    neighbours' points; [H, W] -> [H, W, 3], zero on the image's border (no neighbours there)."""
    h, w = depth.shape
    ys, xs = jnp.mgrid[0:h, 0:w].astype(jnp.float32) + 0.5
    pts = jnp.stack([(xs - K[0, 2]) / K[0, 0] * depth, (ys - K[1, 2]) / K[1, 1] * depth, depth], -1)
    dx = pts[1:-1, 2:] - pts[1:-1, :-2]
    dy = pts[2:, 1:-1] - pts[:-2, 1:-1]
    n = jnp.cross(dy, dx)  # x right, y down, z forward: dy x dx points at the camera
    sq = jnp.sum(n * n, -1, keepdims=True)
    n = jnp.where(sq > 0, n * jax.lax.rsqrt(jnp.where(sq > 0, sq, 1.0)), 0.0)  # no sqrt of 0: finite gradients
    return jnp.pad(n, ((1, 1), (1, 1), (0, 0)))


def _render_one(depth_mode: str, rc: RenderConfig, x: RenderInputs):
    """One camera's render (`x` holds that camera's entries)."""
    cfg, grid, viewmat, K = rc.composite, rc.composite.grid, x.viewmats, x.Ks
    proj = project_surfels(x.means, x.quats, x.scales, x.opacities, viewmat, K, grid.width, grid.height, rc.near_plane)
    colors = view_colors(rc, x)
    proj, colors = gathered((proj, colors), cfg.layout)
    ch = colors.shape[-1]
    feats = jnp.concatenate([colors, proj.normals], -1)  # the normals blend as three more features
    bg = jnp.zeros((ch + 3,), jnp.float32)
    if x.backgrounds is not None:
        bg = bg.at[:ch].set(x.backgrounds)
    bins = gathered(bin_gaussians(jax.lax.stop_gradient(proj), grid, rc.isect_capacity, cfg.layout.platform),
                    cfg.layout)
    geom = jnp.concatenate([proj.transforms, proj.means2d, proj.opacities[:, None]], -1)  # SURFEL_GEOM_ROWS
    image, alpha, depth, distort, median = composite(cfg, geom, feats, bg, x.probe, bins.lists)
    expected = depth / jnp.maximum(alpha, 1e-10)
    colors_out = {"RGB": image[..., :ch], "D": depth[..., None], "ED": expected[..., None]}
    mode = rc.render_mode
    out = colors_out[mode.split("+")[0]]
    if "+" in mode:
        out = jnp.concatenate([image[..., :ch], colors_out[mode.split("+")[1]]], -1)
    to_world = viewmat[:3, :3]  # n_world = R^T n_cam: rows of R times the camera entries
    normals = jnp.einsum("hwi,ij->hwj", image[..., ch:], to_world, precision=jax.lax.Precision.HIGHEST)
    surf = depth_to_normals(expected if depth_mode == "expected" else median, K)
    surf = jnp.einsum("hwi,ij->hwj", surf, to_world, precision=jax.lax.Precision.HIGHEST)
    meta = render_meta(proj, bins, x.probe, normals=proj.normals, ray_transforms=proj.transforms)
    return out, alpha[..., None], normals, surf, distort[..., None], median[..., None], meta


@partial(jax.jit, static_argnums=(0, 1))
def _rasterize_jit(rc: RenderConfig, depth_mode: str, x: RenderInputs):
    """Cameras one after another (`rasterization.rasterized_per_camera`)."""
    return rasterized_per_camera(rc, partial(_render_one, depth_mode), x)


@partial(jax.jit, static_argnums=(6, 7, 8, 9))
def _count_jit(means, quats, scales, opacities, viewmats, Ks, width, height, tile_size, near_plane):
    grid = TileGrid(width, height, tile_size)

    def one(cam):
        vm, K = cam
        proj = project_surfels(means, quats, scales, opacities, vm, K, width, height, near_plane)
        _, n_xy = tile_rect(proj, grid)
        return jnp.sum(n_xy[:, 0] * n_xy[:, 1])

    return jax.lax.map(one, (viewmats, Ks))


def count_intersections_2dgs(means, quats, scales, opacities, viewmats, Ks, width: int, height: int, *,
                             near_plane: float = 0.01, tile_size: int = 16) -> np.ndarray:
    """The (surfel, tile) intersections each camera's render needs (projection and boxes only);
    int64 [C]."""
    arrays = [jnp.asarray(x, jnp.float32) for x in (means, quats, scales, opacities, viewmats, Ks)]
    return np.asarray(_count_jit(*arrays, int(width), int(height), int(tile_size), float(near_plane)), np.int64)


_ARGS_DOC = """
    Args:
      means: [N, 3] disk centres.
      quats: [N, 4] rotations, wxyz, any norm: the disk's tangent axes are the rotation's first two
        columns, its normal the third.
      scales: [N, 2] the disk's two axes (activated), or [N, 3] (the third is not drawn).
      opacities: [N] activated opacities.
      colors: [N, D] or [C, N, D] features, or SH coefficients [N, K, 3] with `sh_degree`.
      viewmats: [C, 4, 4] world-to-camera, OpenCV axes; Ks: [C, 3, 3] pinhole intrinsics.
      width, height: image size in pixels.
      sh_degree: highest SH band (int or traced scalar); None when `colors` are not SH.
      backgrounds: [C, D] colours behind the surfels (default zeros).
      near_plane: surfels whose centres are nearer are culled.
      render_mode: "RGB", "D" (accumulated intersection depth), "ED" (expected depth), "RGB+D", "RGB+ED".
      depth_mode: the depth the surface normals are taken from, "expected" or "median".
      rasterizer, tile_size, options, layout, absgrad, means2d_probe: as `rasterization`'s (the probe
        moves each surfel's footprint on screen).

    Returns:
      (render_colors [C, H, W, ch], render_alphas [C, H, W, 1], render_normals [C, H, W, 3] (the
      surfels' normals, turned towards the camera, blended; world space), surf_normals [C, H, W, 3]
      (`depth_to_normals` of the `depth_mode` depth, world space), render_distort [C, H, W, 1]
      (sum_i sum_{j<i} 2 w_i w_j (z_i - z_j) over each pixel's intersection depths: gsplat's),
      render_median [C, H, W, 1] (the intersection depth where the transmittance reaches 0.5), meta):
      `meta` holds per-camera radii, means2d, depths, normals (camera space), ray_transforms,
      tiles_per_gauss, num_intersections and overflow.
"""


def _prepared(means, quats, scales, opacities, colors, viewmats, Ks, width: int, height: int, *, sh_degree,
              backgrounds, near_plane: float, render_mode: str, depth_mode: str, rasterizer: str, tile_size: int,
              isect_capacity, means2d_probe, absgrad: bool, options, layout, zeros):
    """The checked `RenderConfig` and `RenderInputs` of a 2DGS render (the probe made by `zeros`
    when none is given)."""
    x = render_inputs(means, quats, scales, opacities, colors, viewmats, Ks, sh_degree=sh_degree,
                      backgrounds=backgrounds, probe=means2d_probe, zeros=zeros, pinhole_only=True)
    if depth_mode not in DEPTH_MODES:
        raise ValueError(f"depth_mode must be one of {DEPTH_MODES}, got {depth_mode!r}")
    rc = render_config(width, height, tile_size=tile_size, render_mode=render_mode, rasterizer=rasterizer,
                       options=options, absgrad=absgrad, layout=layout, near_plane=near_plane,
                       use_sh=sh_degree is not None, isect_capacity=isect_capacity or 1, splatting=surfels(near_plane))
    return rc, x


def traced_rasterization_2dgs(means, quats, scales, opacities, colors, viewmats, Ks, width: int, height: int, *,
                              isect_capacity: int, sh_degree=None, backgrounds=None, near_plane: float = 0.01,
                              render_mode: str = "RGB", depth_mode: str = "expected", rasterizer: str = "auto",
                              tile_size: int = 16, means2d_probe=None, absgrad: bool = False,
                              options: Optional[RasterizerOptions] = None, layout: Optional[Layout] = None):
    """Render C cameras' surfels inside a program (`jit`, `grad`, a training step), as gsplat's
    `rasterization_2dgs`; the intersection buffer is a static size the caller keeps and
    `meta["overflow"]` says where it was too small (as `traced_rasterization`)."""
    if isect_capacity is None or int(isect_capacity) < 1:
        raise ValueError(f"traced_rasterization_2dgs needs the intersection buffer's size (isect_capacity >= 1), got "
                         f"{isect_capacity!r}: `count_intersections_2dgs` says what cameras need")
    rc, x = _prepared(means, quats, scales, opacities, colors, viewmats, Ks, width, height, sh_degree=sh_degree,
                      backgrounds=backgrounds, near_plane=near_plane, render_mode=render_mode, depth_mode=depth_mode,
                      rasterizer=rasterizer, tile_size=tile_size, isect_capacity=isect_capacity,
                      means2d_probe=means2d_probe, absgrad=absgrad, options=options, layout=layout, zeros=jnp.zeros)
    return _rasterize_jit(rc, depth_mode, x)


def rasterization_2dgs(means, quats, scales, opacities, colors, viewmats, Ks, width: int, height: int, *,
                       sh_degree=None, backgrounds=None, near_plane: float = 0.01, render_mode: str = "RGB",
                       depth_mode: str = "expected", rasterizer: str = "auto", tile_size: int = 16,
                       isect_capacity: Optional[int] = None, means2d_probe=None, absgrad: bool = False,
                       options: Optional[RasterizerOptions] = None, layout: Optional[Layout] = None):
    """Render C cameras' surfels (2DGS), as gsplat's `rasterization_2dgs`, called eagerly: the
    intersection buffer is what the cameras need unless `isect_capacity` is given, and grown and
    rendered again when too small (as `rasterization`)."""
    rc, x = _prepared(means, quats, scales, opacities, colors, viewmats, Ks, width, height, sh_degree=sh_degree,
                      backgrounds=backgrounds, near_plane=near_plane, render_mode=render_mode, depth_mode=depth_mode,
                      rasterizer=rasterizer, tile_size=tile_size, isect_capacity=isect_capacity,
                      means2d_probe=means2d_probe, absgrad=absgrad, options=options, layout=layout, zeros=np.zeros)

    def count():
        return count_intersections_2dgs(x.means, x.quats, x.scales, x.opacities, x.viewmats, x.Ks, width, height,
                                        near_plane=near_plane, tile_size=tile_size)

    return render_eagerly(rc, x, lambda rc, x: _rasterize_jit(rc, depth_mode, x),
                          None if isect_capacity is not None else count)


rasterization_2dgs.__doc__ += _ARGS_DOC
traced_rasterization_2dgs.__doc__ += _ARGS_DOC
