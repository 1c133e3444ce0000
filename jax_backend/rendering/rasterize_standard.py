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

from .blend import Splat, sum_pixels
from .tiles import Pixels, Tiles, group_tiles


def _pixel_blend(rule):
    """The rule's forward over a tile's pixels (per-pixel state and images carry the pixel axis
    last, features channel first: [ch, P])."""
    return jax.vmap(rule.forward, in_axes=(-1, -1, None), out_axes=-1)


def _tile_back(rule):
    """The rule's backward over a group of tiles' pixels: tile axis second to last ([G, P],
    [ch, G, P]); per-tile Gaussian geom [GEOM, G]."""
    pixel_back = jax.vmap(rule.backward, in_axes=(-1, -1, None, -1), out_axes=-1)
    return jax.vmap(pixel_back, in_axes=(-2, -2, Splat(-1, -1, None, 0), -2), out_axes=-2)


def _group_size(cfg, num_tiles: int) -> int:
    batch = cfg.options.tile_batch
    return num_tiles if batch <= 0 else min(batch, num_tiles)


def standard_forward(cfg, geom, feats, ids, tiles: Tiles):
    """Front-to-back blend, one tile's list per vmapped lane. Arguments and result as
    `rasterize_flat.flat_forward` (cfg.options.tile_batch: tiles vmapped together)."""
    ch = feats.shape[0]
    rule = cfg.rule
    blend = _pixel_blend(rule)

    def tile(args):
        tpx, tin, s, e = args

        def cond(carry):
            p, st = carry
            return (s + p < e) & ~jnp.all(st.done)

        def body(carry):
            p, st = carry
            gid = ids[s + p]
            return p + 1, blend(st, tpx, Splat(geom[:, gid], feats[:, gid], p, True))

        return jax.lax.while_loop(cond, body, (jnp.int32(0), rule.initial_state(tin, ch)))[1]

    st = jax.lax.map(tile, (tiles.px, tiles.inside, tiles.start, tiles.end),
                     batch_size=_group_size(cfg, tiles.start.shape[0]))
    # channel-first entries: [T, ch, P] -> [ch, T, P]
    return jax.tree_util.tree_map(lambda x: jnp.moveaxis(x, 1, 0) if x.ndim == 3 else x, st)


def standard_backward(cfg, geom, feats, ids, tiles: Tiles, cot, behind0):
    """Back-to-front walk, a group of tiles at a time. Arguments and result as
    `rasterize_flat.flat_backward`."""
    ch, n = feats.shape
    rule = cfg.rule
    tile_back = _tile_back(rule)
    num_tiles = tiles.start.shape[0]
    G = _group_size(cfg, num_tiles)

    def grouped(x, axis=0):  # tile axis -> [num_groups, ..., G, ...], padding with empty tiles
        return group_tiles(x, G, axis)

    groups = (grouped(tiles.px.x), grouped(tiles.px.y), grouped(tiles.start), grouped(tiles.end),
              jax.tree_util.tree_map(lambda a: grouped(a, a.ndim - 2), cot), grouped(behind0, 1))

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
            st, grads = tile_back(st, Pixels(x, y), Splat(g, f, p, in_range), gcot)
            acc = acc.at[gid].add(jnp.concatenate(sum_pixels(grads), -1), mode="drop")  # one scatter, as flat
            return p, st, acc

        init = (jnp.max(gcot.last), rule.initial_back(gcot, b0), acc)
        return jax.lax.while_loop(lambda c: c[0] > 0, body, init)[2], None

    acc, _ = jax.lax.scan(group, rule.gradient_rows(n, ch), groups)
    return rule.split_rows(acc, ch)
