"""The kind of splat a run trains, as one object the engine and the plugin ask: what a training
step renders and what its loss adds, how many intersections a view needs, what evaluation,
snapshots and the viewer draw (one return type, `Render`), and how the parameters look when they
start training, inside the loss and when written out.

- `GAUSSIANS_3D` (`Gaussians3D`): 3D Gaussian Splatting (Kerbl et al. 2023), `rasterization`.
- `Surfels2D`: 2D Gaussian Splatting's disks (Huang et al. 2024), `rasterization_2dgs`, with the
  settings of its two geometry terms (the 2DGS math itself: `surfels.py`).

`TrainConfig.splats` holds the kind; nothing above it asks which kind it is.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .. import defaults
from ..errors import UserFacingError
from ..rendering import (count_intersections, count_intersections_2dgs, rasterization, rasterization_2dgs,
                         traced_rasterization, traced_rasterization_2dgs)
from ..rendering.rasterization_surfel import DEPTH_MODES
from .gaussians import Gaussians, activated
from .surfels import as_surfels, geometry_loss, geometry_terms, third_scale_fixed


class SettingError(UserFacingError, ValueError):
    """A setting a kind of splat cannot train or draw with; `setting` is its name here (the
    plugin names the flag)."""

    def __init__(self, setting: str, message: str):
        super().__init__(message)
        self.setting = setting


class Render(NamedTuple):
    """One camera's render of a scene's splats, numpy arrays."""

    rgb: np.ndarray  # [H, W, 3]
    depth: Optional[np.ndarray]  # [H, W, 1] expected camera depth (None when not asked for)
    alpha: np.ndarray  # [H, W, 1]
    extras: dict  # the kind's own images ({} for 3D Gaussians; 2DGS: normals, surf_normals, distortion, median_depth)


@jax.jit
def _render_inputs(params, alive, keep):
    """`activated`, dropped Gaussians at opacity 0, as one program (op by op, each operation of a
    render's first call compiled on its own)."""
    means, quats, scales, opacities, sh = activated(params, alive)
    if keep is not None:
        opacities = jnp.where(keep, opacities, 0.0)
    return means, quats, scales, opacities, sh


def _one_camera(gaussians: Gaussians, viewmat, K, background, keep):
    keep = None if keep is None else np.asarray(keep, bool)
    bg = None if background is None else np.asarray(background, np.float32).reshape(1, -1)
    return (*_render_inputs(gaussians.params, gaussians.alive, keep), np.asarray(viewmat, np.float32)[None],
            np.asarray(K, np.float32)[None], bg)


def render_gaussians(gaussians: Gaussians, viewmat, K, width: int, height: int, *, sh_degree, background=None,
                     depth: bool = True, rasterizer: str = "auto", rasterize_mode: str = "classic", keep=None,
                     layout=None, camera_model: str = "pinhole", distortion=None) -> Render:
    """Render the alive Gaussians from one camera (eagerly: the intersection buffer grows as needed).

    Args:
      gaussians: the scene.
      viewmat: [4, 4] world-to-camera (OpenCV axes); K: [3, 3].
      width, height: image size.
      sh_degree: SH bands to evaluate (e.g. `schedule.sh_degree_at(step, ...)`).
      background: [3] colour behind the Gaussians (black when None).
      depth: also the expected depth (`Render.depth`; render mode "RGB+ED", else "RGB").
      rasterizer: "auto", "flat", "standard" or "pallas" (`rasterization`).
      rasterize_mode: "classic" or "antialiased" (as `rasterization`).
      keep: optional [capacity] bool, Gaussians to render (others get opacity 0; e.g. a crop box).
      layout: the devices it renders on (`layout.Layout`, as `rasterization`: its tile devices
        deal the image's tiles; default: one device of this process).
      camera_model, distortion: the camera's model and a fisheye's k1-k4 [4] (as `rasterization`).
    """
    *splats, viewmats, Ks, bg = _one_camera(gaussians, viewmat, K, background, keep)
    colors, alpha, _ = rasterization(*splats, viewmats, Ks, width, height, sh_degree=sh_degree, backgrounds=bg,
                                     render_mode="RGB+ED" if depth else "RGB", rasterizer=rasterizer,
                                     rasterize_mode=rasterize_mode, layout=layout, camera_model=camera_model,
                                     distortion=distortion)
    colors = np.asarray(colors)[0]  # on the host: no program per image size for the indexing
    return Render(colors[..., :3], colors[..., 3:] if depth else None, np.asarray(alpha)[0], {})


def render_surfels(gaussians: Gaussians, viewmat, K, width: int, height: int, *, sh_degree, background=None,
                   rasterizer: str = "auto", keep=None, layout=None, near_plane: float = 0.01,
                   depth_mode: str = "expected") -> Render:
    """Render the alive Gaussians as 2DGS disks (`rasterization_2dgs`; the third scale is not drawn)
    from one pinhole camera, eagerly; arguments as `render_gaussians`'s. Its extras: "normals"
    [H, W, 3] the blended disk normals (world space), "surf_normals" [H, W, 3] (the `depth_mode`
    depth's surface normals, world space), "distortion" [H, W, 1] and "median_depth" [H, W, 1]."""
    *splats, viewmats, Ks, bg = _one_camera(gaussians, viewmat, K, background, keep)
    colors, alpha, normals, surf, distort, median, _ = rasterization_2dgs(
        *splats, viewmats, Ks, width, height, sh_degree=sh_degree, backgrounds=bg, render_mode="RGB+ED",
        rasterizer=rasterizer, layout=layout, near_plane=near_plane, depth_mode=depth_mode)
    colors = np.asarray(colors)[0]
    extras = {"normals": np.asarray(normals)[0], "surf_normals": np.asarray(surf)[0],
              "distortion": np.asarray(distort)[0], "median_depth": np.asarray(median)[0]}
    return Render(colors[..., :3], colors[..., 3:], np.asarray(alpha)[0], extras)


class SplatKind(abc.ABC):
    """What changes with the kind of splat: the three abstract methods each kind implements (what a
    step renders, the intersections a view needs, one camera's render), and the parameters' forms,
    which default to 3D Gaussians' (`Gaussians3D` is the reference)."""

    name: ClassVar[str]
    shown: ClassVar[tuple] = ()  # the `Render.extras` a viewer shows beside rgb, depth and alpha

    @abc.abstractmethod
    def rendered_views(self, cfg, splats, viewmats, Ks, width: int, height: int, distortion, masks, step, **common):
        """A step's renders of its views [B, H, W, 3], the render's meta and the kind's loss terms on
        the renders' geometry (0.0 for none). `cfg`: the run's `TrainConfig`; `splats`:
        `activated`'s; `common`: the `traced_rasterization` keywords every kind takes (backgrounds,
        sh_degree, rasterizer, isect_capacity, means2d_probe, absgrad, layout, tile_size)."""

    @abc.abstractmethod
    def count_intersections(self, cfg, splats, viewmats, Ks, width: int, height: int, distortions):
        """The intersections each view [V] needs (`isect_buffer`'s sizing)."""

    @abc.abstractmethod
    def render(self, gaussians: Gaussians, viewmat, K, width: int, height: int, **options) -> Render:
        """One camera's render, eagerly; `options` as `render_gaussians`'s (sh_degree, background,
        depth, rasterizer, rasterize_mode, keep, layout, camera_model, distortion)."""

    def check(self, camera_model: str, rasterize_mode: str) -> None:
        """SettingError naming a setting this kind cannot train or draw with (its own or the run's)."""

    def started(self, params: dict) -> dict:
        """The parameters as training starts from them."""
        return params

    def in_loss(self, params: dict) -> dict:
        """The parameters as the loss sees them (what no gradient may reach held constant)."""
        return params

    def drawn_scales(self, log_scales):
        """The log scales the rasterizer draws (what a scale regulariser weighs)."""
        return log_scales

    def exported(self, params: dict) -> dict:
        """The parameters as a 3DGS PLY (snapshots, ns-export) writes them."""
        return params


@dataclass(frozen=True)
class Gaussians3D(SplatKind):
    """3D Gaussian Splatting's Gaussians (Kerbl et al. 2023)."""

    name: ClassVar[str] = "3dgs"

    def rendered_views(self, cfg, splats, viewmats, Ks, width: int, height: int, distortion, masks, step, **common):
        renders, _, meta = traced_rasterization(*splats, viewmats, Ks, width, height, rasterize_mode=cfg.rasterize_mode,
                                                camera_model=cfg.camera_model, distortion=distortion, **common)
        return renders, meta, 0.0

    def count_intersections(self, cfg, splats, viewmats, Ks, width: int, height: int, distortions):
        means, quats, scales, opacities, _ = splats
        return count_intersections(means, quats, scales, opacities, viewmats, Ks, width, height,
                                   rasterize_mode=cfg.rasterize_mode, camera_model=cfg.camera_model,
                                   distortion=distortions, tile_size=cfg.tile_size)

    def render(self, gaussians: Gaussians, viewmat, K, width: int, height: int, **options) -> Render:
        return render_gaussians(gaussians, viewmat, K, width, height, **options)


GAUSSIANS_3D = Gaussians3D()


@dataclass(frozen=True)
class Surfels2D(SplatKind):
    """2D Gaussian Splatting's disks (Huang et al. 2024) and the settings of their two geometry
    terms (the paper's weights and start steps by default; `surfels.py`).

    The parameters keep 3DGS's layout, a disk being a Gaussian whose third scale the rasterizer
    ignores: thin from the start and in every export (`as_surfels`), out of the loss's reach
    (`third_scale_fixed`)."""

    name: ClassVar[str] = "2dgs"
    shown: ClassVar[tuple] = ("normals", "median_depth")

    normal_lambda: float = defaults.SURFEL_NORMAL_LAMBDA
    normal_start: int = defaults.SURFEL_NORMAL_START
    distortion_lambda: float = defaults.SURFEL_DISTORTION_LAMBDA
    distortion_start: int = defaults.SURFEL_DISTORTION_START
    depth_mode: str = defaults.SURFEL_DEPTH_MODE  # the depth the surface normals come from: "expected" or "median"
    near_plane: float = 0.01  # hits nearer than this are not drawn

    def check(self, camera_model: str, rasterize_mode: str) -> None:
        if self.depth_mode not in DEPTH_MODES:
            raise SettingError("depth_mode", f"2DGS depth_mode must be one of {DEPTH_MODES}, got {self.depth_mode!r}")
        for name in ("normal_lambda", "distortion_lambda", "normal_start", "distortion_start"):
            if not getattr(self, name) >= 0:
                raise SettingError(name, f"2DGS {name} must be >= 0, got {getattr(self, name)!r}")
        if not self.near_plane > 0:
            raise SettingError("near_plane", f"2DGS near_plane must be > 0, got {self.near_plane!r}")
        self._check_camera(camera_model)
        if rasterize_mode != "classic":
            raise SettingError("rasterize_mode", f"2DGS has no {rasterize_mode} mode: its screen-space low pass "
                                                 "already bounds each disk's footprint (use the classic one)")

    @staticmethod
    def _check_camera(camera_model: str) -> None:
        if camera_model != "pinhole":
            raise SettingError("camera_model", f"2DGS draws pinhole cameras only (a {camera_model} camera's rays "
                                               "do not meet a disk through one projective map): undistort the "
                                               "images first")

    def started(self, params: dict) -> dict:
        return as_surfels(params)

    def in_loss(self, params: dict) -> dict:
        return third_scale_fixed(params)

    def drawn_scales(self, log_scales):
        return log_scales[:, :2]  # a disk's third scale is not drawn

    def exported(self, params: dict) -> dict:
        return as_surfels(params)  # disks as flat 3D Gaussians

    def rendered_views(self, cfg, splats, viewmats, Ks, width: int, height: int, distortion, masks, step, **common):
        """As `Gaussians3D.rendered_views`; the geometry terms are the normal consistency and the
        depth distortion (`surfels.geometry_terms`), averaged over the views and weighted."""
        renders, alphas, normals, surf, distort, _, meta = traced_rasterization_2dgs(
            *splats, viewmats, Ks, width, height, near_plane=self.near_plane, depth_mode=self.depth_mode, **common)
        consistency, depth_distortion = jax.vmap(geometry_terms)(alphas, normals, surf, distort, masks)
        return renders, meta, geometry_loss(self, step, jnp.mean(consistency), jnp.mean(depth_distortion))

    def count_intersections(self, cfg, splats, viewmats, Ks, width: int, height: int, distortions):
        means, quats, scales, opacities, _ = splats
        return count_intersections_2dgs(means, quats, scales, opacities, viewmats, Ks, width, height,
                                        near_plane=self.near_plane, tile_size=cfg.tile_size)

    def render(self, gaussians: Gaussians, viewmat, K, width: int, height: int, *, camera_model: str = "pinhole",
               depth: bool = True, rasterize_mode: str = "classic", distortion=None, **options) -> Render:
        """One pinhole camera's render (`render_surfels`: the depth and the extras always, in the
        classic mode; a fisheye is refused)."""
        self._check_camera(camera_model)
        return render_surfels(gaussians, viewmat, K, width, height, near_plane=self.near_plane,
                              depth_mode=self.depth_mode, **options)
