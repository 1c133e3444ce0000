"""The standard rasterizer: vmap over tiles, vmap over the S*S pixels of a tile, each tile walking
only its own range of the sorted intersection list, one Gaussian per step.

Tiles are processed in groups of `tile_batch` (`lax.map` with a batch size: vmap inside a group,
groups in sequence). With all tiles in one group it is a plain vmap (best on GPUs); with small
groups each group's loop ends with its own longest tile, so on CPUs the work approaches the
number of intersections. The backward walks each group back to front from its deepest last
contributor and adds each step's per-Gaussian gradient into one accumulator.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .blend import (BackState, BlendState, PixelCotangents, Splat, blend_backward, blend_forward, gradient_rows,
                    initial_state, split_rows, sum_pixels)
from .tiles import Pixels, Tiles, group_tiles

# per-pixel state and images carry the pixel axis last (features channel first: [ch, P])
_pixel_blend = jax.vmap(blend_forward, in_axes=(-1, -1, None), out_axes=-1)
_pixel_back = jax.vmap(blend_backward, in_axes=(-1, -1, None, -1), out_axes=-1)
# a group of tiles: tile axis second to last ([G, P], [ch, G, P]); per-tile Gaussian geom [GEOM, G]
_tile_back = jax.vmap(_pixel_back, in_axes=(-2, -2, Splat(-1, -1, None, 0), -2), out_axes=-2)


def _group_size(cfg, num_tiles: int) -> int:
    batch = cfg.options.tile_batch
    return num_tiles if batch <= 0 else min(batch, num_tiles)


def standard_forward(cfg, geom, feats, ids, tiles: Tiles) -> BlendState:
    """Front-to-back blend, one tile's list per vmapped lane. Arguments and result as
    `rasterize_flat.flat_forward` (cfg.options.tile_batch: tiles vmapped together)."""
    ch = feats.shape[0]

    def tile(args):
        tpx, tin, s, e = args

        def cond(carry):
            p, st = carry
            return (s + p < e) & ~jnp.all(st.done)

        def body(carry):
            p, st = carry
            gid = ids[s + p]
            return p + 1, _pixel_blend(st, tpx, Splat(geom[:, gid], feats[:, gid], p, True))

        return jax.lax.while_loop(cond, body, (jnp.int32(0), initial_state(tin, ch)))[1]

    st = jax.lax.map(tile, (tiles.px, tiles.inside, tiles.start, tiles.end),
                     batch_size=_group_size(cfg, tiles.start.shape[0]))
    return st._replace(color=jnp.moveaxis(st.color, 1, 0))  # [T, ch, P] -> [ch, T, P]


def standard_backward(cfg, geom, feats, ids, tiles: Tiles, cot: PixelCotangents, behind0):
    """Back-to-front walk, a group of tiles at a time. Arguments and result as
    `rasterize_flat.flat_backward`."""
    ch, n = feats.shape
    num_tiles = tiles.start.shape[0]
    G = _group_size(cfg, num_tiles)

    def grouped(x, axis=0):  # tile axis -> [num_groups, ..., G, ...], padding with empty tiles
        return group_tiles(x, G, axis)

    groups = (grouped(tiles.px.x), grouped(tiles.px.y), grouped(tiles.start), grouped(tiles.end),
              PixelCotangents(grouped(cot.last), grouped(cot.T_final), grouped(cot.dC, 1), grouped(cot.dA)),
              grouped(behind0, 1))

    def group(acc, args):
        x, y, s, e, gcot, b0 = args
        length = e - s

        def body(carry):
            p, st, acc = carry
            p = p - 1
            in_range = p < length
            gid = jnp.where(in_range, ids[jnp.clip(s + p, 0, ids.shape[0] - 1)], n)
            g = geom.at[:, gid].get(mode="fill", fill_value=0.0)
            f = feats.at[:, gid].get(mode="fill", fill_value=0.0)
            st, grads = _tile_back(st, Pixels(x, y), Splat(g, f, p, in_range), gcot)
            acc = acc.at[gid].add(jnp.concatenate(sum_pixels(grads), -1), mode="drop")  # one scatter, as flat
            return p, st, acc

        init = (jnp.max(gcot.last), BackState(T=gcot.T_final, behind=b0), acc)
        return jax.lax.while_loop(lambda c: c[0] > 0, body, init)[2], None

    acc, _ = jax.lax.scan(group, gradient_rows(n, ch), groups)
    return split_rows(acc, ch)
