"""The rendering entry points, shaped like gsplat's `rasterization`: `rasterization` called
eagerly (it finds the intersection buffer its cameras need and renders again when one given was
too small) and `traced_rasterization` inside a program (`jit`, `grad`, a training step: the
buffer is a required static size and `meta["overflow"]` says whether it held).

projection -> colours (SH) -> binning -> compositing (custom_vjp), cameras one after another
(`lax.map`). Everything static about a call is one `RenderConfig`, checked once when it is made;
the module keeps no state between calls (the intersection buffer is the caller's to keep, by the
policy of `isect_buffer`).
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .isect_buffer import after_overflow, size_for
from .binning import bin_gaussians, tile_rect
from .composite import GAUSSIANS, CompositeConfig, RasterizerOptions, Splatting, composite, resolve_rasterizer
from .rasterize_flat import resolve_walk
from .projection import CAMERA_MODELS, RASTERIZE_MODES, project_gaussians
from .sh import sh_to_color
from ..layout import Layout, local_layout
from .tile_parallel import gathered
from .tiles import TileGrid

RENDER_MODES = ("RGB", "D", "ED", "RGB+D", "RGB+ED")



class RenderConfig(NamedTuple):
    """Everything static about one `rasterization` call (hashable: the jit cache key), checked
    once by `render_config`."""

    composite: CompositeConfig  # the image's tile grid, the rasterizer and its options
    render_mode: str  # RENDER_MODES
    rasterize_mode: str  # projection.RASTERIZE_MODES
    near_plane: float
    eps2d: float
    use_sh: bool  # colours are SH coefficients
    isect_capacity: int  # the intersection buffer's size
    camera_model: str = "pinhole"  # projection.CAMERA_MODELS


def render_config(width: int, height: int, *, tile_size: int = 16, render_mode: str = "RGB",
                  rasterize_mode: str = "classic", rasterizer: str = "auto", options: Optional[RasterizerOptions] = None,
                  absgrad: bool = False, layout: Optional[Layout] = None, near_plane: float = 0.01,
                  eps2d: float = 0.3, use_sh: bool = False, isect_capacity: int = 1,
                  camera_model: str = "pinhole", splatting: Splatting = GAUSSIANS) -> RenderConfig:
    """A `RenderConfig` from `rasterization`'s static arguments (`layout` None: `local_layout`;
    `splatting`: what is splatted, `composite.GAUSSIANS` or `composite.surfels(near_plane)`); ValueError naming
    a bad one."""
    if render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode must be one of {RENDER_MODES}, got {render_mode!r}")
    if rasterize_mode not in RASTERIZE_MODES:
        raise ValueError(f"rasterize_mode must be one of {RASTERIZE_MODES}, got {rasterize_mode!r}")
    if camera_model not in CAMERA_MODELS:
        raise ValueError(f"camera_model must be one of {CAMERA_MODELS}, got {camera_model!r}")
    width, height = int(width), int(height)
    if width <= 0 or height <= 0:
        raise ValueError(f"width and height must be positive, got {width}x{height}")
    o = options if options is not None else RasterizerOptions()
    o = o._replace(chunk=int(o.chunk), groups=int(o.groups or 0), tile_batch=int(o.tile_batch),
                   tight_tiles=bool(o.tight_tiles), lanes=int(o.lanes or 0))
    if o.chunk < 1 or o.groups < 0 or o.tile_batch < 0 or o.lanes < 0:
        raise ValueError(f"rasterizer options must be chunk >= 1, groups >= 0, tile_batch >= 0, lanes >= 0, got {o}")
    resolve_walk(o.walk, "cpu")  # ValueError naming the walks
    grid = TileGrid(width, height, int(tile_size))
    layout = (layout if layout is not None else local_layout()).for_rendering()
    return RenderConfig(CompositeConfig(grid, resolve_rasterizer(rasterizer, layout.platform), o, bool(absgrad), layout,
                                        splatting),
                        render_mode, rasterize_mode, float(near_plane), float(eps2d), bool(use_sh), int(isect_capacity),
                        camera_model)


def check_colors_and_cameras(n: int, colors, viewmats, Ks, sh_degree, backgrounds) -> int:
    """ValueError naming a bad one of a render's colours, cameras or backgrounds for N = `n` splats;
    else the number of cameras."""
    if viewmats.ndim != 3 or viewmats.shape[1:] != (4, 4):
        raise ValueError(f"viewmats must be [C,4,4], got {viewmats.shape}")
    c = viewmats.shape[0]
    if Ks.shape != (c, 3, 3):
        raise ValueError(f"Ks must be [C,3,3] for C={c}, got {Ks.shape}")
    if sh_degree is None:
        if colors.ndim not in (2, 3) or colors.shape[-2] != n or (colors.ndim == 3 and colors.shape[0] != c):
            raise ValueError(f"colors must be [N,D] or [C,N,D] without sh_degree, got {colors.shape}")
    elif colors.ndim != 3 or colors.shape[0] != n or colors.shape[2] != 3 or colors.shape[1] not in (1, 4, 9, 16):
        raise ValueError(f"with sh_degree, colors must be SH coefficients [N,K,3], K in 1,4,9,16; got {colors.shape}")
    if backgrounds is not None and (backgrounds.ndim != 2 or backgrounds.shape[0] != c):
        raise ValueError(f"backgrounds must be [C,D], got {backgrounds.shape}")
    return c


class RenderInputs(NamedTuple):
    """The arrays of one render call, float32 and checked (`render_inputs`), read by name. The
    per-camera fields have a leading [C] axis (`CAMERA_FIELDS`); inside `rasterized_per_camera`
    they hold one camera's entries."""

    means: jnp.ndarray  # [N, 3]
    quats: jnp.ndarray  # [N, 4]
    scales: jnp.ndarray  # [N, 3] (2DGS: [N, 2] or [N, 3])
    opacities: jnp.ndarray  # [N]
    colors: jnp.ndarray  # [N, D], [C, N, D] or SH [N, K, 3]
    viewmats: jnp.ndarray  # [C, 4, 4]
    Ks: jnp.ndarray  # [C, 3, 3]
    distortions: Optional[jnp.ndarray]  # [C, 4] a fisheye's k1-k4 (None: a splat kind that draws pinholes only)
    backgrounds: Optional[jnp.ndarray]  # [C, D] or None (zeros)
    probe: jnp.ndarray  # [C, N, 2] means2d probe
    sh_degree: jnp.ndarray  # int32 scalar (0 when the colours are not SH)


CAMERA_FIELDS = ("viewmats", "Ks", "distortions", "backgrounds", "probe")  # one entry per camera, in this order


def render_inputs(means, quats, scales, opacities, colors, viewmats, Ks, *, sh_degree, backgrounds, probe, zeros,
                  distortion=None, pinhole_only: bool = False) -> RenderInputs:
    """`RenderInputs` from a render call's arrays: float32, fisheye coefficients per camera (None
    when `pinhole_only`), the probe made by `zeros` when none is given; ValueError naming a bad
    shape."""
    means, quats, scales, opacities, colors, viewmats, Ks = (
        jnp.asarray(x, jnp.float32) for x in (means, quats, scales, opacities, colors, viewmats, Ks))
    if backgrounds is not None:
        backgrounds = jnp.asarray(backgrounds, jnp.float32)
    n = means.shape[0] if means.ndim == 2 else -1
    if means.ndim != 2 or means.shape[1] != 3:
        raise ValueError(f"means must be [N,3], got {means.shape}")
    for name, x, shape in (("quats", quats, (n, 4)), ("opacities", opacities, (n,))):
        if tuple(x.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)} for N={n}, got {list(x.shape)}")
    if pinhole_only:  # a 2DGS surfel: two drawn axes, a third not drawn
        if scales.ndim != 2 or scales.shape[0] != n or scales.shape[1] not in (2, 3):
            raise ValueError(f"scales must be [N,2] (a surfel's two axes) or [N,3] (the third not drawn) for N={n}, "
                             f"got {list(scales.shape)}")
    elif tuple(scales.shape) != (n, 3):
        raise ValueError(f"scales must be {[n, 3]} for N={n}, got {list(scales.shape)}")
    c = check_colors_and_cameras(n, colors, viewmats, Ks, sh_degree, backgrounds)
    distortions = None if pinhole_only else camera_distortions(distortion, c)
    if distortions is not None and distortions.shape != (c, 4):
        raise ValueError(f"distortion must be the fisheye's (k1, k2, k3, k4): [4] or [C,4] for C={c}, got "
                         f"{distortions.shape}")
    if probe is None:
        probe = zeros((c, n, 2), np.float32)
    degree = jnp.asarray(sh_degree if sh_degree is not None else 0, jnp.int32)
    return RenderInputs(means, quats, scales, opacities, colors, viewmats, Ks, distortions, backgrounds, probe, degree)


def view_colors(rc: RenderConfig, x: RenderInputs):
    """One camera's colours: its SH coefficients evaluated along each splat's view direction when
    `rc.use_sh`, else the colours as given."""
    if not rc.use_sh:
        return x.colors
    campos = -jnp.sum(x.viewmats[:3, :3] * x.viewmats[:3, 3:], 0)  # -R^T t, elementwise (float32 everywhere)
    return sh_to_color(x.colors, x.means - campos, active_degree=x.sh_degree)


def rasterized_per_camera(rc: RenderConfig, render_one, x: RenderInputs):
    """`render_one(rc, x)` for each camera of `x` (then holding that camera's entries: its colours
    too when they are per camera), one after another (`lax.map`), not vmapped: a vmapped while
    loop would run every camera to the longest one and select over whole carries at each step."""
    per_camera_colors = not rc.use_sh and x.colors.ndim == 3
    xs = (x.colors if per_camera_colors else None,) + tuple(getattr(x, f) for f in CAMERA_FIELDS)

    def call(one):
        colors = one[0] if per_camera_colors else x.colors
        return render_one(rc, x._replace(colors=colors, **dict(zip(CAMERA_FIELDS, one[1:]))))

    if x.viewmats.shape[0] == 1:
        out = call(jax.tree_util.tree_map(lambda a: a[0], xs))
        return jax.tree_util.tree_map(lambda a: a[None], out)
    return jax.lax.map(call, xs)


def _render_one(rc: RenderConfig, x: RenderInputs):
    """One camera's render (`x` holds that camera's entries)."""
    cfg, grid, render_mode = rc.composite, rc.composite.grid, rc.render_mode
    proj = project_gaussians(x.means, x.quats, x.scales, x.opacities, x.viewmats, x.Ks, grid.width, grid.height,
                             rc.near_plane, rc.eps2d, rc.rasterize_mode, rc.camera_model, x.distortions)
    colors = view_colors(rc, x)
    # the binning and every tile need all Gaussians (a training step splits them over the tile devices).
    # The boxes are never differentiated: kept out of the gradient, whose zeros would otherwise meet
    # the box's infinite slopes (0 * inf) in the projection's backward
    proj = proj._replace(extents=jax.lax.stop_gradient(proj.extents))
    proj, colors = gathered((proj, colors), cfg.layout)
    depth = proj.depths[:, None]
    feats = {"RGB": colors, "D": depth, "ED": depth}[render_mode.split("+")[0]]
    if "+" in render_mode:
        feats = jnp.concatenate([colors, depth], -1)
    bg = jnp.zeros((feats.shape[-1],), jnp.float32)
    if x.backgrounds is not None:
        bg = bg.at[: x.backgrounds.shape[0]].set(x.backgrounds)

    # binning is discrete: keep autodiff out of it (no tangents through the sort). Its outputs are
    # pinned whole too: else XLA's partitioner split its cumulative sum after the per-Gaussian
    # statistics that read them (figure: pinned-binning, benchmarks/results/library_figures.md)
    bins = gathered(bin_gaussians(jax.lax.stop_gradient(proj), grid, rc.isect_capacity, cfg.layout.platform,
                                  tight=cfg.options.tight_tiles), cfg.layout)
    geom = jnp.concatenate([proj.means2d, proj.quad, proj.opacities[:, None]], -1)  # blend.GEOM_ROWS
    image, alpha = composite(cfg, geom, feats, bg, x.probe, bins.lists)
    if render_mode.endswith("ED"):
        image = image.at[..., -1].divide(jnp.maximum(alpha, 1e-10))
    return image, alpha[..., None], render_meta(proj, bins, x.probe, conics=proj.conics)


def render_meta(proj, bins, probe, **extra) -> dict:
    """A camera's `meta` (as gsplat's): the splats' screen radii (0 where not drawn), their probed
    means2d, depths, tiles each touches, the intersection count and buffer overflow, and the
    projection's own `extra` entries (3DGS's conics, 2DGS's normals and ray transforms)."""
    radii = jnp.where(proj.valid & (bins.tiles_per_gaussian > 0), jnp.ceil(proj.extents.max(-1)), 0).astype(jnp.int32)
    return {"radii": radii, "means2d": proj.means2d + probe, "depths": proj.depths, **extra,
            "tiles_per_gauss": bins.tiles_per_gaussian, "num_intersections": bins.num_intersections,
            "overflow": bins.overflow}


@partial(jax.jit, static_argnums=(0,))
def _rasterize_jit(rc: RenderConfig, x: RenderInputs):
    """Cameras one after another (`per_camera`)."""
    return rasterized_per_camera(rc, _render_one, x)


@partial(jax.jit, static_argnums=(7, 8, 9, 10, 11, 12, 13))
def _count_jit(means, quats, scales, opacities, viewmats, Ks, distortions, width, height, tile_size, near_plane, eps2d,
               rasterize_mode, camera_model):
    grid = TileGrid(width, height, tile_size)

    def one(cam):
        vm, K, dist = cam
        proj = project_gaussians(means, quats, scales, opacities, vm, K, width, height, near_plane, eps2d,
                                 rasterize_mode, camera_model, dist)
        _, n_xy = tile_rect(proj, grid)
        return jnp.sum(n_xy[:, 0] * n_xy[:, 1])

    return jax.lax.map(one, (viewmats, Ks, distortions))


def camera_distortions(distortion, cameras: int) -> jnp.ndarray:
    """`distortion` as [C, 4] float32 (None: zeros; [4]: the same for every camera)."""
    if distortion is None:
        return jnp.zeros((cameras, 4), jnp.float32)
    d = jnp.asarray(distortion, jnp.float32)
    return jnp.broadcast_to(d, (cameras, 4)) if d.shape == (4,) else d


def count_intersections(means, quats, scales, opacities, viewmats, Ks, width: int, height: int, *,
                        near_plane: float = 0.01, eps2d: float = 0.3, rasterize_mode: str = "classic",
                        tile_size: int = 16, camera_model: str = "pinhole", distortion=None) -> np.ndarray:
    """The (Gaussian, tile) intersections each camera's render needs: the intersection buffer
    `rasterization` must have for it, without rendering (projection and tile boxes only). Inputs
    as `rasterization`'s; returns int64 [C]."""
    if camera_model not in CAMERA_MODELS:
        raise ValueError(f"camera_model must be one of {CAMERA_MODELS}, got {camera_model!r}")
    arrays = [jnp.asarray(x, jnp.float32) for x in (means, quats, scales, opacities, viewmats, Ks)]
    counts = _count_jit(*arrays, camera_distortions(distortion, arrays[4].shape[0]), int(width), int(height),
                        int(tile_size), float(near_plane), float(eps2d), rasterize_mode, camera_model)
    return np.asarray(counts, np.int64)


_ARGS_DOC = """
    Args:
      means: [N, 3] centres.
      quats: [N, 4] rotations, wxyz, any norm.
      scales: [N, 3] activated scales.
      opacities: [N] activated opacities.
      colors: [N, D] or [C, N, D] features, or SH coefficients [N, K, 3] with `sh_degree`.
      viewmats: [C, 4, 4] world-to-camera, OpenCV axes (x right, y down, z forward).
      Ks: [C, 3, 3] intrinsics (pixel centres at +0.5).
      width, height: image size in pixels.
      sh_degree: highest SH band to evaluate (int or traced scalar: higher bands are masked, so a
        schedule never changes shapes); None when `colors` are not SH.
      backgrounds: [C, D] features behind the Gaussians (default zeros).
      near_plane, eps2d: projection's near cull and 2D low-pass (pixels^2).
      render_mode: "RGB", "D" (accumulated depth), "ED" (expected depth), "RGB+D", "RGB+ED".
      rasterize_mode: "classic" (3DGS) or "antialiased" (Mip-Splatting's 2D filter with opacity
        compensation, o * sqrt(det(S) / det(S + eps2d I)), as gsplat's; `projection.py`).
      camera_model: "pinhole", "ortho" (gsplat's orthographic camera: u = fx x + cx) or "fisheye"
        (equidistant Kannala-Brandt, OpenCV's fisheye model; `projection.camera_projection`).
      distortion: the fisheye's coefficients (k1, k2, k3, k4), [4] or [C, 4] (default zeros:
        gsplat's equidistant fisheye); only "fisheye" reads them.
      rasterizer: "flat", "standard" or "pallas" (`composite.RASTERIZERS`), or "auto": "pallas"
        when the program is built for a GPU, "flat" elsewhere (`composite.resolve_rasterizer`).
      tile_size: tile edge in pixels.
      isect_capacity: the intersection buffer's size ((Gaussian, tile) pairs).
      means2d_probe: [C, N, 2] zeros; its gradient is dL/dmeans2d in pixels (or, with `absgrad`,
        the sum over pixels of |dL/dmeans2d|, gsplat's absgrad), the statistic densification uses.
      options: the rasterizers' own options (`composite.RasterizerOptions`: the flat one's chunk
        and groups, the standard one's tile batch); the defaults suit every device.
      layout: the devices the render is built for (`layout.Layout`; default: this process's,
        `local_layout`): its platform picks what "auto" means, and each camera's tiles are dealt
        over its `tile_devices`, which render them side by side (`tile_parallel`).

    Returns:
      (render_colors [C, H, W, ch], render_alphas [C, H, W, 1], meta): `meta` holds per-camera
      radii [C, N], means2d [C, N, 2], depths [C, N], conics [C, N, 3], tiles_per_gauss [C, N],
      num_intersections [C] and overflow [C].
"""


def traced_rasterization(means, quats, scales, opacities, colors, viewmats, Ks, width: int, height: int, *,
                         isect_capacity: int, sh_degree=None, backgrounds=None, near_plane: float = 0.01,
                         eps2d: float = 0.3, render_mode: str = "RGB", rasterize_mode: str = "classic",
                         rasterizer: str = "auto", tile_size: int = 16, means2d_probe=None, absgrad: bool = False,
                         options: Optional[RasterizerOptions] = None, layout: Optional[Layout] = None,
                         camera_model: str = "pinhole", distortion=None):
    """Render C cameras inside a program (under `jit`, `grad`, `vmap`, a training step), as gsplat's
    `rasterization`. The intersection buffer is a static size the caller keeps: `meta["overflow"]`
    says where it was too small (those images left out the farthest intersections), and the caller
    renders again with a larger one (`isect_buffer.after_overflow`), as the `Trainer` does.
    """
    if isect_capacity is None or int(isect_capacity) < 1:
        raise ValueError(f"traced_rasterization needs the intersection buffer's size (isect_capacity >= 1), got "
                         f"{isect_capacity!r}: `count_intersections` says what cameras need")
    x = render_inputs(means, quats, scales, opacities, colors, viewmats, Ks, sh_degree=sh_degree,
                      backgrounds=backgrounds, probe=means2d_probe, zeros=jnp.zeros, distortion=distortion)
    rc = render_config(width, height, tile_size=tile_size, render_mode=render_mode, rasterize_mode=rasterize_mode,
                       rasterizer=rasterizer, options=options, absgrad=absgrad, layout=layout, near_plane=near_plane,
                       eps2d=eps2d, use_sh=sh_degree is not None, isect_capacity=isect_capacity,
                       camera_model=camera_model)
    return _rasterize_jit(rc, x)


def rasterization(means, quats, scales, opacities, colors, viewmats, Ks, width: int, height: int, *, sh_degree=None,
                  backgrounds=None, near_plane: float = 0.01, eps2d: float = 0.3, render_mode: str = "RGB",
                  rasterize_mode: str = "classic", rasterizer: str = "auto", tile_size: int = 16,
                  isect_capacity: Optional[int] = None, means2d_probe=None, absgrad: bool = False,
                  options: Optional[RasterizerOptions] = None, layout: Optional[Layout] = None,
                  camera_model: str = "pinhole", distortion=None):
    """Render C cameras, as gsplat's `rasterization`, called eagerly: the intersection buffer is
    what `count_intersections` says the cameras need (bucketed) unless `isect_capacity` is given,
    and a buffer too small is grown (`isect_buffer.after_overflow`) and the frames rendered again,
    so every image holds all its intersections. Inside `jit`/`grad` use `traced_rasterization`.
    """
    x = render_inputs(means, quats, scales, opacities, colors, viewmats, Ks, sh_degree=sh_degree,
                      backgrounds=backgrounds, probe=means2d_probe, zeros=np.zeros, distortion=distortion)
    rc = render_config(width, height, tile_size=tile_size, render_mode=render_mode, rasterize_mode=rasterize_mode,
                       rasterizer=rasterizer, options=options, absgrad=absgrad, layout=layout, near_plane=near_plane,
                       eps2d=eps2d, use_sh=sh_degree is not None, isect_capacity=isect_capacity or 1,
                       camera_model=camera_model)

    def count():
        return count_intersections(x.means, x.quats, x.scales, x.opacities, x.viewmats, x.Ks, rc.composite.grid.width,
                                   rc.composite.grid.height, near_plane=near_plane, eps2d=eps2d,
                                   rasterize_mode=rasterize_mode, tile_size=tile_size, camera_model=camera_model,
                                   distortion=x.distortions)

    return render_eagerly(rc, x, _rasterize_jit, None if isect_capacity is not None else count)


def render_eagerly(rc: RenderConfig, x: RenderInputs, render, count=None):
    """`render(rc, x)` (a jitted render whose last output is its meta) called eagerly with an
    intersection buffer that holds every camera's intersections: `rc`'s, or with `count` (a
    function returning each camera's count) what the cameras need; grown (`after_overflow`) and
    rendered again while one overflowed."""
    try:
        if count is not None:
            rc = rc._replace(isect_capacity=size_for(max(int(np.max(count())), 1)))
        # the inputs go where the dealt program runs (a trainer's state is on one device)
        x = rc.composite.layout.place(x)
        while True:
            out = render(rc, x)
            needed = int(np.max(np.asarray(out[-1]["num_intersections"])))
            if needed <= rc.isect_capacity:
                return out
            rc = rc._replace(isect_capacity=after_overflow(needed))
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
            jax.errors.TracerIntegerConversionError) as e:
        raise TypeError("an eager entry point (rasterization, rasterization_2dgs) reads the intersection counts "
                        "back; inside jit or grad call its traced_ form with an isect_capacity") from e


rasterization.__doc__ += _ARGS_DOC
traced_rasterization.__doc__ += _ARGS_DOC
