"""The standard rasterizer: vmap over tiles, vmap over the S*S pixels of a tile, each tile walking
only its own range of the sorted intersection list, one Gaussian per step.

Tiles are processed in groups of `tile_batch` (`lax.map` with a batch size, i.e. vmap inside a
group, groups in sequence): with all tiles in one group it is a plain vmap (best on GPUs); with
small groups each group's loop ends with its own longest tile, so on CPUs the work approaches
the number of intersections. The backward walks each group back to front from its deepest
last contributor and adds each step's per-Gaussian gradient into one accumulator.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .compositing import BackState, BlendState, CompositeConfig, blend_backward, blend_forward, initial_state, tile_pixel_centres


def _group_size(cfg: CompositeConfig, num_tiles: int) -> int:
    return num_tiles if cfg.tile_batch <= 0 else min(cfg.tile_batch, num_tiles)


def standard_forward(cfg: CompositeConfig, geom, feats, ids, start, end) -> BlendState:
    px, py, inside = tile_pixel_centres(cfg)
    ch = feats.shape[-1]
    pixel_blend = jax.vmap(blend_forward, in_axes=(0, 0, 0, None, None, None, None))

    def tile(args):
        tpx, tpy, tin, s, e = args

        def cond(carry):
            p, st = carry
            return (s + p < e) & ~jnp.all(st.done)

        def body(carry):
            p, st = carry
            gid = ids[s + p]
            return p + 1, pixel_blend(st, tpx, tpy, geom[gid], feats[gid], p, True)

        _, st = jax.lax.while_loop(cond, body, (jnp.int32(0), initial_state(tin, ch)))
        return st

    num_tiles = start.shape[0]
    return jax.lax.map(tile, (px, py, inside, start, end), batch_size=_group_size(cfg, num_tiles))


def standard_backward(cfg: CompositeConfig, geom, feats, ids, start, end, last, T_final, behind0, dC, dA):
    px, py, _ = tile_pixel_centres(cfg)
    n, ch = feats.shape
    num_tiles = start.shape[0]
    G = _group_size(cfg, num_tiles)
    pad = (-num_tiles) % G

    def grouped(x):  # [T, ...] -> [T/G, G, ...], padding tiles with empty ranges
        x = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
        return x.reshape((-1, G) + x.shape[1:])

    groups = tuple(map(grouped, (px, py, start, end, last, T_final, behind0, dC, dA)))
    pixel_step = jax.vmap(blend_backward, in_axes=(0, 0, 0, None, None, None, None, 0, 0, 0, 0))
    tile_step = jax.vmap(pixel_step, in_axes=(0, 0, 0, 0, 0, None, 0, 0, 0, 0, 0))

    def group(acc, args):
        tpx, tpy, s, e, lst, Tf, b0, dc, da = args
        length = e - s

        def body(carry):
            p, st, acc_g, acc_f, acc_a = carry
            p = p - 1
            in_range = p < length
            gid = jnp.where(in_range, ids[jnp.clip(s + p, 0, ids.shape[0] - 1)], n)
            g = geom.at[gid].get(mode="fill", fill_value=0.0)
            f = feats.at[gid].get(mode="fill", fill_value=0.0)
            st, d_g, d_f, d_a = tile_step(st, tpx, tpy, g, f, p, in_range, lst, Tf, dc, da)
            acc_g = acc_g.at[gid].add(d_g.sum(1), mode="drop")
            acc_f = acc_f.at[gid].add(d_f.sum(1), mode="drop")
            acc_a = acc_a.at[gid].add(d_a.sum(1), mode="drop")
            return p, st, acc_g, acc_f, acc_a

        init = (jnp.max(lst), BackState(T=Tf, behind=b0)) + acc
        out = jax.lax.while_loop(lambda c: c[0] > 0, body, init)
        return out[2:], None

    acc0 = (
        jnp.zeros((n, geom.shape[1]), jnp.float32),
        jnp.zeros((n, ch), jnp.float32),
        jnp.zeros((n, 2), jnp.float32),
    )
    (d_geom, d_feats, d_abs), _ = jax.lax.scan(group, acc0, groups)
    return d_geom, d_feats, d_abs
