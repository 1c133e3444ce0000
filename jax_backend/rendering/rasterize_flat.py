"""The flat ("TPU") rasterizer: every tile's pixels on one [num_tiles, S*S] axis.

Per chunk, the parameters of the next `chunk` Gaussians of every tile are gathered at once
([.., num_tiles, chunk]) and a scan blends the i-th Gaussian of every tile into all pixels.
Chunks stop as soon as every pixel is saturated or every tile's list is used up: nothing is
truncated, and the backward walks only up to the deepest last contributor.

So that light tiles do not pay for the busiest one, the tiles can be sorted by their workload
(list length forward, deepest last contributor backward) and cut into `groups` equal groups
(the last padded with empty tiles), walked one after another, each to its own longest list: the
work then follows the workload profile instead of num_tiles x the longest list. One loop body
serves every group (`lax.map` / `lax.scan` over the groups), so more groups do not compile more
code. groups=1 is the plain design (one loop over all tiles); groups=0 sizes the groups by the
tiles this call walks (`auto_groups`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


from .blend import Splat, sum_pixels
from .tiles import Pixels, Tiles, group_tiles, ungroup_tiles


def _gather_chunk(k, chunk, geom, feats, ids, start, length):
    """Gaussians at list positions [k*chunk, (k+1)*chunk) of every tile.

    Returns:
      (gid [T, B]: Gaussian ids, one past the last where out of range; the scan inputs: a `Splat`
      per position, stacked on a leading [B] axis: geom [B, GEOM, T, 1], feats [B, ch, T, 1],
      pos [B], in_range [B, T, 1]).
    """
    pos = k * chunk + jnp.arange(chunk, dtype=jnp.int32)  # [B]
    in_range = pos[None, :] < length[:, None]  # [T, B]
    slot = jnp.clip(start[:, None] + pos[None, :], 0, ids.shape[0] - 1)
    gid = jnp.where(in_range, ids[slot], geom.shape[1])  # out of range: one past the end
    g = geom.at[:, gid].get(mode="fill", fill_value=0.0)  # [GEOM, T, B]
    f = feats.at[:, gid].get(mode="fill", fill_value=0.0)
    steps = Splat(jnp.moveaxis(g, -1, 0)[..., None], jnp.moveaxis(f, -1, 0)[..., None], pos, in_range.T[..., None])
    return gid, steps


TILES_PER_GROUP = 16  # automatic groups: about this many tiles each ...
MAX_GROUPS = 16  # ... and at most this many groups


def auto_groups(num_tiles: int, platform: str) -> int:
    """Groups for `num_tiles` tiles when none are set. Accelerators prefer one wide loop: 1. On a
    CPU about TILES_PER_GROUP tiles each, 1 to MAX_GROUPS: a blend step over a group costs a fixed
    dispatch per operation plus its pixels, so fewer, wider groups pay fewer dispatches and more
    groups follow the workload closer. The group-count measurements behind TILES_PER_GROUP are in
    docs/tile_parallel.md."""
    if platform != "cpu":
        return 1
    return max(1, min(MAX_GROUPS, round(num_tiles / TILES_PER_GROUP)))


def _grouping(groups: int, workload, platform: str):
    """Tile order (heaviest first; None: as they are) and the tiles per group (`groups` 0:
    `auto_groups`)."""
    t = workload.shape[0]
    n = max(1, min(groups or auto_groups(t, platform), t))
    return (None if n == 1 else jnp.argsort(-workload)), -(-t // n)


def _grouped(x, order, size: int, axis: int = 0):
    """x's tiles (on `axis`) in `order`, cut into groups of `size`: [groups, ..., size, ...]."""
    return group_tiles(x if order is None else jnp.take(x, order, axis=axis), size, axis)


def _ungrouped(x, inverse, num_tiles: int, axis: int):
    """Inverse of `_grouped` (`inverse`: argsort of its order, or None)."""
    x = ungroup_tiles(x, num_tiles, axis)
    return x if inverse is None else jnp.take(x, inverse, axis=axis)


def _forward_tiles(rule, B, geom, feats, ids, start, length, px: Pixels, inside):
    def cond(carry):
        k, st = carry
        return jnp.any((k * B < length) & ~jnp.all(st.done, axis=1))

    def body(carry):
        k, st = carry
        _, steps = _gather_chunk(k, B, geom, feats, ids, start, length)
        st, _ = jax.lax.scan(lambda s, splat: (rule.forward(s, px, splat), None), st, steps)
        return k + 1, st

    return jax.lax.while_loop(cond, body, (jnp.int32(0), rule.initial_state(inside, feats.shape[0])))[1]


def flat_forward(cfg, geom, feats, ids, tiles: Tiles):
    """Front-to-back blend of every tile's list.

    Args:
      cfg: `CompositeConfig` (its blend rule, its options' chunk and groups).
      geom: [GEOM, N] packed screen parameters (the rule's rows); feats: [ch, N].
      ids: [M] the binning's sorted Gaussian ids.
      tiles: the tiles to render (`Tiles`, T of them).

    Returns:
      the rule's per-pixel state in the tile layout (`BlendState`'s: T, last, done [T, S*S], color
      [ch, T, S*S]).

    The groups are equal (the last padded with empty tiles) and walked one after another by one
    loop (`lax.map`): one loop body to compile, whatever the number of groups.
    """
    length = tiles.end - tiles.start
    t = length.shape[0]
    order, size = _grouping(cfg.options.groups, length, cfg.layout.platform)
    per_tile = [_grouped(a, order, size) for a in (tiles.start, length, tiles.px.x, tiles.px.y, tiles.inside)]

    def group(args):
        start, length, x, y, inside = args
        return _forward_tiles(cfg.rule, cfg.options.chunk, geom, feats, ids, start, length, Pixels(x, y), inside)

    state = jax.lax.map(group, per_tile)  # [groups, ..., size, S*S]
    inverse = None if order is None else jnp.argsort(order)  # once for every field of the state
    return jax.tree_util.tree_map(lambda x: _ungrouped(x, inverse, t, x.ndim - 3), state)  # tile axis: -2


def _backward_tiles(rule, B, acc, geom, feats, ids, start, length, px: Pixels, cot, behind0):
    num_chunks = (jnp.max(cot.last, initial=0) + B - 1) // B

    def body(carry):
        k, st, acc = carry
        k = k - 1
        gid, steps = _gather_chunk(k, B, geom, feats, ids, start, length)

        def step(carry, x):
            s, acc = carry
            splat, gid_at = x
            s, grads = rule.backward(s, px, splat, cot)
            # the T tiles' rows of this list position into the per-Gaussian sums: a scatter of T
            # rows per step, not one of B x T per chunk (for TPU, XLA compiles a scatter-add of
            # 24,576 rows with repeated ids around a hidden sort, 10 s to generate; of 768, none)
            return (s, acc.at[gid_at].add(jnp.concatenate(sum_pixels(grads), -1), mode="drop")), None

        (st, acc), _ = jax.lax.scan(step, (st, acc), (steps, gid.T), reverse=True)
        return k, st, acc

    init = (num_chunks, rule.initial_back(cot, behind0), acc)
    return jax.lax.while_loop(lambda c: c[0] > 0, body, init)[2]


def _tile_axis(x):  # per-pixel arrays in the tile layout: [..., T, S*S]
    return x.ndim - 2


def flat_backward(cfg, geom, feats, ids, tiles: Tiles, cot, behind0):
    """Back-to-front walk of every tile's list.

    Args:
      cfg, geom, feats, ids, tiles: as `flat_forward`.
      cot: per-pixel forward residuals and output cotangents, tile layout (the rule's:
        `blend.PixelCotangents` for 3DGS).
      behind0: [ch, T, S*S] what lies behind the last Gaussian (T_final * background).

    Returns:
      (d geom [N, GEOM], d feats [N, ch], sum over pixels of |d means2d| [N, 2]).

    Groups as `flat_forward` (by the deepest last contributor), one loop body for all of them,
    the per-Gaussian sums carried from group to group.
    """
    ch, n = feats.shape
    rule = cfg.rule
    order, size = _grouping(cfg.options.groups, jnp.max(cot.last, axis=1), cfg.layout.platform)
    per_tile = [_grouped(a, order, size) for a in (tiles.start, tiles.end - tiles.start, tiles.px.x, tiles.px.y)]
    per_pixel = jax.tree_util.tree_map(lambda a: _grouped(a, order, size, axis=_tile_axis(a)), (cot, behind0))

    def group(acc, args):
        (s, length, x, y), (c, b0) = args
        return _backward_tiles(rule, cfg.options.chunk, acc, geom, feats, ids, s, length, Pixels(x, y), c, b0), None

    acc, _ = jax.lax.scan(group, rule.gradient_rows(n, ch), (per_tile, per_pixel))
    return rule.split_rows(acc, ch)
