"""Rendering: projection (EWA), spherical harmonics, tile binning, the per-pixel blend rule, the
three rasterizers (flat, standard and pallas) behind one custom_vjp, and the `rasterization` entry point.

Layers, bottom up (each imports only those below it): projection, sh, tiles -> binning, blend ->
rasterize_flat, rasterize_standard -> composite -> rasterization; the intersection buffer's
policy in `isect_buffer`. 2D Gaussian Splatting's surfels beside them: projection_surfel,
blend_surfel (the blend rule the same rasterizers walk) and rasterization_surfel
(`rasterization_2dgs`)."""
from . import isect_buffer
from ..array_ops import next_pow2
from .composite import RASTERIZERS, RasterizerOptions
from .projection import quat_to_rotmat
from .projection import RASTERIZE_MODES
from .rasterization import RENDER_MODES, count_intersections, rasterization, traced_rasterization
from .rasterization_surfel import (count_intersections_2dgs, depth_to_normals, rasterization_2dgs,
                                   traced_rasterization_2dgs)
from .sh import SH_C0, num_sh_bases

__all__ = ["rasterization", "traced_rasterization", "count_intersections", "rasterization_2dgs",
           "traced_rasterization_2dgs", "count_intersections_2dgs", "depth_to_normals", "isect_buffer", "RASTERIZERS", "RasterizerOptions", "RASTERIZE_MODES", "RENDER_MODES", "next_pow2", "quat_to_rotmat", "SH_C0",
           "num_sh_bases"]
