"""`composite`: one camera's binned Gaussians blended into an image, as a `jax.custom_vjp` whose
forward and backward are those of the rasterizer named in its config (see `RASTERIZERS`)."""
from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..layout import Layout
from .blend import PixelCotangents
from .rasterize_flat import flat_backward, flat_forward
from .rasterize_pallas import pallas_backward, pallas_forward
from .rasterize_standard import standard_backward, standard_forward
from .tile_parallel import dealt_backward, dealt_forward
from .tiles import TileGrid, TileLists, all_tiles, image_to_tiles, tiles_to_image


class Rasterizer(NamedTuple):
    """A rasterizer's two walks over the tile lists (signatures of `rasterize_flat`'s)."""

    forward: Callable  # (cfg, geom [GEOM,N], feats [ch,N], ids, Tiles) -> BlendState (tile layout)
    backward: Callable  # (cfg, geom, feats, ids, Tiles, PixelCotangents, behind0) -> (d geom, d feats, |d means2d|)


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
    groups: int = 0  # flat: tiles sorted by workload and cut into this many groups, walked one after
    # another (0: automatic, `rasterize_flat.auto_groups`: on a CPU about 16 tiles each, at most 16; 1 elsewhere)
    tile_batch: int = 0  # standard: tiles vmapped together (0: all)


class CompositeConfig(NamedTuple):
    """Static settings of one compositing call (hashable: part of the jit cache key)."""

    grid: TileGrid
    rasterizer: str  # a key of RASTERIZERS
    options: RasterizerOptions
    absgrad: bool  # the means2d probe receives sum |dL/dmeans2d| instead of dL/dmeans2d
    layout: Layout  # the devices it is built for; the tiles are dealt over `layout.tile_devices` (`tile_parallel`)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def composite(cfg: CompositeConfig, geom, feats, background, probe, lists: TileLists):
    """Render one camera's binned Gaussians.

    Args:
      cfg: static settings; `cfg.rasterizer` picks the implementation.
      geom: [N, GEOM] packed screen parameters (mean x, y, conic a, b, c, opacity).
      feats: [N, ch] features to blend (colours, depth).
      background: [ch] features behind everything.
      probe: [N, 2] added to the means; its cotangent is dL/dmeans2d, or with `cfg.absgrad` the
        sum over pixels of |dL/dmeans2d|.
      lists: the binning's per-tile lists (no cotangent).

    Returns:
      (image [H, W, ch], alpha [H, W]).
    """
    out, _ = _composite_fwd(cfg, geom, feats, background, probe, lists)
    return out


def _composite_fwd(cfg, geom, feats, background, probe, lists):
    geom_cf = (geom.at[:, :2].add(probe)).T  # channel first: [GEOM, N]
    feats_cf = feats.T  # [ch, N]
    state = dealt_forward(get_rasterizer(cfg.rasterizer).forward, cfg, geom_cf, feats_cf, lists.ids,
                          all_tiles(lists, cfg.grid), cfg.layout)
    color = state.color + state.T * background[:, None, None]  # [ch, T, P]
    image = tiles_to_image(jnp.moveaxis(color, 0, -1), cfg.grid)
    out = (image, tiles_to_image(1.0 - state.T, cfg.grid))
    res = (geom_cf, feats_cf, background, lists, state.last, state.T)
    return out, res


def _float0_like(x):
    return np.zeros(x.shape, dtype=jax.dtypes.float0)


def _composite_bwd(cfg, res, cot):
    geom_cf, feats_cf, background, lists, last, T_final = res
    dC = jnp.moveaxis(image_to_tiles(cot[0], cfg.grid), -1, 0)  # [ch, T, P]
    dA = image_to_tiles(cot[1], cfg.grid)
    behind0 = T_final * background[:, None, None]
    d_geom, d_feats, d_abs = dealt_backward(get_rasterizer(cfg.rasterizer).backward, cfg, geom_cf, feats_cf, lists.ids,
                                            all_tiles(lists, cfg.grid), PixelCotangents(last, T_final, dC, dA),
                                            behind0, cfg.layout)
    d_background = jnp.sum(T_final * dC, axis=(1, 2))
    d_probe = d_abs if cfg.absgrad else d_geom[:, :2]
    return d_geom, d_feats, d_background, d_probe, jax.tree_util.tree_map(_float0_like, lists)


composite.defvjp(_composite_fwd, _composite_bwd)
