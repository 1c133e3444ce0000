"""`composite`: one camera's binned splats blended into an image, as a `jax.custom_vjp` whose
forward and backward are those of the rasterizer named in its config (see `RASTERIZERS`), walking
the tiles with the config's blend rule (`Splatting`: 3DGS's Gaussians or 2DGS's surfels)."""
from __future__ import annotations

from functools import lru_cache, partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..layout import Layout
from .blend import GAUSSIAN_RULE, GEOM_ROWS, BlendRule, PixelCotangents
from .blend_surfel import SURFEL_GEOM_ROWS, SurfelCotangents, surfel_rule
from .rasterize_flat import flat_backward, flat_forward
from .rasterize_pallas import pallas_backward, pallas_forward
from .rasterize_standard import standard_backward, standard_forward
from .tile_parallel import dealt_backward, dealt_forward
from .tiles import TileGrid, TileLists, all_tiles, image_to_tiles, tiles_to_image


class Rasterizer(NamedTuple):
    """A rasterizer's two walks over the tile lists (signatures of `rasterize_flat`'s)."""

    forward: Callable  # (cfg, geom [GEOM,N], feats [ch,N], ids, Tiles) -> the rule's state (tile layout)
    backward: Callable  # (cfg, geom, feats, ids, Tiles, the rule's cotangents, behind0) -> (d geom, d feats, |d means2d|)


RASTERIZERS = {
    "flat": Rasterizer(flat_forward, flat_backward),
    "standard": Rasterizer(standard_forward, standard_backward),
    "pallas": Rasterizer(pallas_forward, pallas_backward),
}


AUTO = "auto"  # the rasterizer for the platform programs are built for (`resolve_rasterizer`)


def resolve_rasterizer(name: str, platform: str) -> str:
    """`name`, or for "auto" the rasterizer for `platform` (the layout's): "pallas"
    on a GPU (one kernel per pass), "flat" elsewhere (CPU and TPU). ValueError naming the choices
    for an unknown name."""
    if name == AUTO:
        return "pallas" if platform == "gpu" else "flat"
    get_rasterizer(name)
    return name


def auto_tile_size(rasterizer: str, platform: str) -> int:
    """The tile edge for training renders when none is set: 8 pixels for the flat rasterizer on a
    CPU, whose blend walks every pixel of a tile for each of its splats (on a real capture a
    quarter of 16x16's pixels blends fewer idle pairs than the intersections it adds; figure:
    cpu-tiles, benchmarks/results/library_figures.md); gsplat's 16 elsewhere (`rasterizer` as
    resolved by `resolve_rasterizer`)."""
    return 8 if (rasterizer, platform) == ("flat", "cpu") else 16


def get_rasterizer(name: str) -> Rasterizer:
    """The registered rasterizer called `name`; ValueError naming the choices otherwise."""
    try:
        return RASTERIZERS[name]
    except (KeyError, TypeError):
        raise ValueError(f"rasterizer must be one of {sorted(RASTERIZERS) + [AUTO]}, got {name!r}") from None


class RasterizerOptions(NamedTuple):
    """Options of the rasterizers, each read by one (as gsplat's renderer settings); the defaults
    suit every device."""

    chunk: int = 32  # flat: Gaussians gathered per tile at once
    groups: int = 0  # flat, "groups" walk: tiles sorted by workload and cut into this many groups, walked one
    # after another (0: automatic, `rasterize_flat.auto_groups`: about 16 tiles each, at most 16)
    tile_batch: int = 0  # standard: tiles vmapped together (0: all)
    tight_tiles: bool = False  # binning (3DGS): leave out the box tiles the ellipse misses (`binning.ellipse_reaches`);
    # off: on a CPU it saved no time on a real capture though it drops up to a fifth of the pairs (figure:
    # tight-tiles, benchmarks/results/library_figures.md), so it waits for a measurement on an accelerator
    walk: str = "auto"  # flat: how tiles are scheduled (`rasterize_flat.WALKS`): "groups" (the CPU's), "lanes"
    # (accelerators': each lane takes the next tile as its own finishes) or "auto" (by the layout's platform)
    lanes: int = 0  # flat, "lanes" walk: tiles walked side by side (0: automatic, `rasterize_flat.auto_lanes`)


class Splatting(NamedTuple):
    """What a kind of splat adds to the tile walks: its blend rule, the per-pixel maps its forward
    returns besides the features, and where its packed parameters hold its centre's pixel (the
    means2d probe is added there: it moves the splat's whole footprint on screen)."""

    rule: BlendRule
    maps: Callable  # (state, background [ch]) -> (features [ch, T, P], alpha [T, P], extra maps [T, P]...)
    cotangents: Callable  # (state residuals, cotangents of the maps in the tile layout) -> the rule's cotangents
    residuals: Callable  # state -> what the backward keeps of it
    mean_row: int  # the rows mean_x, mean_y of geom are mean_row, mean_row + 1


def _gaussian_maps(state, background):
    return state.color + state.T * background[:, None, None], 1.0 - state.T


def _gaussian_cotangents(res, cot):
    last, T_final = res
    return PixelCotangents(last, T_final, jnp.moveaxis(cot[0], -1, 0), cot[1])


GAUSSIANS = Splatting(GAUSSIAN_RULE, _gaussian_maps, _gaussian_cotangents, lambda st: (st.last, st.T),
                      GEOM_ROWS.index("mean_x"))


def _surfel_maps(state, background):
    """Features, alpha, depth (sum w z), distortion and median depth."""
    return (state.color + state.T * background[:, None, None], 1.0 - state.T, state.depth, state.distort,
            state.median)


def _surfel_cotangents(res, cot):
    last, T_final, depth, median_last = res
    return SurfelCotangents(last, T_final, depth, median_last, jnp.moveaxis(cot[0], -1, 0), *cot[1:])


def _surfel_residuals(state):
    return state.last, state.T, state.depth, state.median_last


@lru_cache(maxsize=None)
def surfels(near_plane: float) -> Splatting:
    """2DGS's surfels, hits from `near_plane` on (`blend_surfel.surfel_rule`; one object per value)."""
    return Splatting(surfel_rule(float(near_plane)), _surfel_maps, _surfel_cotangents, _surfel_residuals,
                     SURFEL_GEOM_ROWS.index("mean_x"))


class CompositeConfig(NamedTuple):
    """Static settings of one compositing call (hashable: part of the jit cache key)."""

    grid: TileGrid
    rasterizer: str  # a key of RASTERIZERS
    options: RasterizerOptions
    absgrad: bool  # the means2d probe receives sum |dL/dmeans2d| instead of dL/dmeans2d
    layout: Layout  # the devices it is built for; the tiles are dealt over `layout.tile_devices` (`tile_parallel`)
    splatting: Splatting = GAUSSIANS  # what is splatted: GAUSSIANS (3DGS) or surfels(near_plane) (2DGS)

    @property
    def rule(self) -> BlendRule:
        """The blend rule the rasterizers walk the tiles with."""
        return self.splatting.rule


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def composite(cfg: CompositeConfig, geom, feats, background, probe, lists: TileLists):
    """Render one camera's binned splats.

    Args:
      cfg: static settings; `cfg.rasterizer` picks the implementation, `cfg.splatting` the splats.
      geom: [N, GEOM] packed screen parameters (the rule's `geom_rows`: for Gaussians mean x, y, the
        conic's blend form, opacity).
      feats: [N, ch] features to blend (colours, depth; a surfel's normal).
      background: [ch] features behind everything.
      probe: [N, 2] a screen shift of each splat (zeros); its cotangent is dL/dmeans2d, or with
        `cfg.absgrad` the sum over pixels of |dL/dmeans2d|.
      lists: the binning's per-tile lists (no cotangent).

    Returns:
      (image [H, W, ch], alpha [H, W]) for Gaussians; surfels add their depth (sum w z),
      distortion and median depth, each [H, W].
    """
    out, _ = _composite_fwd(cfg, geom, feats, background, probe, lists)
    return out


def _composite_fwd(cfg, geom, feats, background, probe, lists):
    kind = cfg.splatting
    geom_cf = geom.at[:, kind.mean_row:kind.mean_row + 2].add(probe).T  # channel first: [GEOM, N]
    feats_cf = feats.T  # [ch, N]
    state = dealt_forward(get_rasterizer(cfg.rasterizer).forward, cfg, geom_cf, feats_cf, lists.ids,
                          all_tiles(lists, cfg.grid), cfg.layout)
    color, *maps = kind.maps(state, background)  # [ch, T, P], then [T, P] each
    out = (tiles_to_image(jnp.moveaxis(color, 0, -1), cfg.grid),) + tuple(tiles_to_image(m, cfg.grid) for m in maps)
    res = (geom_cf, feats_cf, background, lists, kind.residuals(state))
    return out, res


def _float0_like(x):
    return np.zeros(x.shape, dtype=jax.dtypes.float0)


def _composite_bwd(cfg, res, cot):
    geom_cf, feats_cf, background, lists, kept = res
    kind = cfg.splatting
    cot = tuple(image_to_tiles(c, cfg.grid) for c in cot)  # [T, P, ch], then [T, P] each
    pixel_cot = kind.cotangents(kept, cot)
    behind0 = pixel_cot.T_final * background[:, None, None]
    d_geom, d_feats, d_abs = dealt_backward(get_rasterizer(cfg.rasterizer).backward, cfg, geom_cf, feats_cf, lists.ids,
                                            all_tiles(lists, cfg.grid), pixel_cot, behind0, cfg.layout)
    d_background = jnp.sum(pixel_cot.T_final * pixel_cot.dC, axis=(1, 2))
    d_probe = d_abs if cfg.absgrad else d_geom[:, kind.mean_row:kind.mean_row + 2]
    return d_geom, d_feats, d_background, d_probe, jax.tree_util.tree_map(_float0_like, lists)


composite.defvjp(_composite_fwd, _composite_bwd)
