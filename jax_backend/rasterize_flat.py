"""The flat ("TPU") rasterizer: every tile's pixels on one [num_tiles, S*S] axis.

Per chunk, the parameters of the next `chunk` Gaussians of every tile are gathered at once
([.., num_tiles, chunk]) and a scan blends the i-th Gaussian of every tile into all pixels.
Chunks stop as soon as every pixel is saturated or every tile's list is used up: nothing is
truncated, and the backward walks only up to the deepest last contributor.

So that light tiles do not pay for the busiest one, the tiles can be sorted by their workload
(list length forward, deepest last contributor backward) and cut into `groups` equal groups,
each with its own loop: the work then follows the workload profile instead of
num_tiles x the longest list. groups=1 is the plain design (one loop over all tiles).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .compositing import BackState, BlendState, CompositeConfig, blend_backward, blend_forward, initial_state, split_rows, sum_pixels, tile_pixel_centres


def _gather_chunk(k, chunk, geom, feats, ids, start, length):
    """Gaussians at list positions [k*chunk, (k+1)*chunk) of every tile: g [6,T,B], f [ch,T,B]."""
    pos = k * chunk + jnp.arange(chunk, dtype=jnp.int32)  # [B]
    in_range = pos[None, :] < length[:, None]  # [T, B]
    slot = jnp.clip(start[:, None] + pos[None, :], 0, ids.shape[0] - 1)
    gid = jnp.where(in_range, ids[slot], geom.shape[1])  # out of range: one past the end
    g = geom.at[:, gid].get(mode="fill", fill_value=0.0)
    f = feats.at[:, gid].get(mode="fill", fill_value=0.0)
    return pos, in_range, gid, g, f


def _per_step(pos, in_range, g, f):
    """Scan inputs, one entry per position in the chunk: g [B,6,T,1], f [B,ch,T,1], in_range [B,T,1]."""
    return jnp.moveaxis(g, -1, 0)[..., None], jnp.moveaxis(f, -1, 0)[..., None], pos, in_range.T[..., None]


def _groups(cfg: CompositeConfig, workload):
    """Tile order (heaviest first) and the static group boundaries."""
    t = workload.shape[0]
    n = max(1, min(cfg.groups, t))
    if n == 1:
        return None, [(0, t)]
    order = jnp.argsort(-workload)
    size = -(-t // n)
    return order, [(a, min(a + size, t)) for a in range(0, t, size)]


def _take(x, order, axis=0):
    return x if order is None else jnp.take(x, order, axis=axis)


def _forward_tiles(B, geom, feats, ids, start, length, px, py, inside) -> BlendState:
    def cond(carry):
        k, st = carry
        return jnp.any((k * B < length) & ~jnp.all(st.done, axis=1))

    def body(carry):
        k, st = carry
        pos, in_range, _, g, f = _gather_chunk(k, B, geom, feats, ids, start, length)

        def step(s, x):
            return blend_forward(s, px, py, *x), None

        st, _ = jax.lax.scan(step, st, _per_step(pos, in_range, g, f))
        return k + 1, st

    return jax.lax.while_loop(cond, body, (jnp.int32(0), initial_state(inside, feats.shape[0])))[1]


def flat_forward(cfg: CompositeConfig, geom, feats, ids, start, end) -> BlendState:
    px, py, inside = tile_pixel_centres(cfg)
    length = end - start
    order, bounds = _groups(cfg, length)
    tiles = [_take(x, order) for x in (start, length, px, py, inside)]
    parts = [_forward_tiles(cfg.chunk, geom, feats, ids, *[x[a:b] for x in tiles]) for a, b in bounds]
    state = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs, axis=-2), *parts)  # tile axis: -2
    if order is None:
        return state
    inverse = jnp.argsort(order)
    return jax.tree_util.tree_map(lambda x: jnp.take(x, inverse, axis=x.ndim - 2), state)


def _backward_tiles(B, acc, geom, feats, ids, start, length, px, py, last, T_final, behind0, dC, dA):
    num_chunks = (jnp.max(last, initial=0) + B - 1) // B

    def body(carry):
        k, st, acc = carry
        k = k - 1
        pos, in_range, gid, g, f = _gather_chunk(k, B, geom, feats, ids, start, length)

        def step(s, x):
            gb, fb, p, r = x
            s, grads = blend_backward(s, px, py, gb, fb, p, r, last, T_final, dC, dA)
            return s, sum_pixels(grads)

        st, rows = jax.lax.scan(step, st, _per_step(pos, in_range, g, f), reverse=True)
        # one scatter of [B, T, 6 + ch + 2] rows (matching gid.T) into the per-Gaussian sums
        acc = acc.at[gid.T].add(jnp.concatenate(rows, -1), mode="drop")
        return k, st, acc

    init = (num_chunks, BackState(T=T_final, behind=behind0), acc)
    return jax.lax.while_loop(lambda c: c[0] > 0, body, init)[2]


def flat_backward(cfg: CompositeConfig, geom, feats, ids, start, end, last, T_final, behind0, dC, dA):
    px, py, _ = tile_pixel_centres(cfg)
    ch, n = feats.shape
    order, bounds = _groups(cfg, jnp.max(last, axis=1))
    tiles = [_take(x, order) for x in (start, end - start, px, py, last, T_final, dA)]
    per_ch = [_take(x, order, axis=1) for x in (behind0, dC)]
    acc = jnp.zeros((n, geom.shape[0] + ch + 2), jnp.float32)
    for a, b in bounds:
        s, length, tpx, tpy, lst, Tf, da = [x[a:b] for x in tiles]
        b0, dc = [x[:, a:b] for x in per_ch]
        acc = _backward_tiles(cfg.chunk, acc, geom, feats, ids, s, length, tpx, tpy, lst, Tf, b0, dc, da)
    return split_rows(acc, ch)
