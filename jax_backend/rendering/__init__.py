"""Rendering: projection (EWA), spherical harmonics, tile binning, the per-pixel blend rule, the
three rasterizers (flat, standard and pallas) behind one custom_vjp, and the `rasterization` entry point.

Layers, bottom up (each imports only those below it): projection, sh, tiles -> binning, blend ->
rasterize_flat, rasterize_standard -> composite -> rasterization; the intersection buffer's
policy in `isect_buffer`."""
from . import isect_buffer
from .binning import next_pow2
from .composite import RASTERIZERS, RasterizerOptions
from .projection import quat_to_rotmat
from .projection import RASTERIZE_MODES
from .rasterization import RENDER_MODES, count_intersections, rasterization, traced_rasterization
from .sh import SH_C0, num_sh_bases

__all__ = ["rasterization", "traced_rasterization", "count_intersections", "isect_buffer", "RASTERIZERS", "RasterizerOptions", "RASTERIZE_MODES", "RENDER_MODES", "next_pow2", "quat_to_rotmat", "SH_C0",
           "num_sh_bases"]
