"""The flat ("TPU") rasterizer: every tile's pixels on one [num_tiles, S*S] axis.

Per chunk, the parameters of the next `chunk` Gaussians of every tile are gathered at once
([.., tiles, chunk]) and a scan blends the i-th Gaussian of every tile into all its pixels.
Nothing is truncated: a tile's forward walk ends where its list ends or every pixel is saturated
(its own end), its backward walk starts at its deepest last contributor.

Tiles walked side by side each cost the blend steps of the longest walk among them, so the tiles
are scheduled by workload (list length forward, deepest last contributor backward) in one of two
ways (`RasterizerOptions.walk`):
- "groups" (the CPU's): the tiles, heaviest first, cut into `groups` equal groups walked one after
  another, each to its own longest list (`lax.map`: one loop body for every group). On a CPU,
  whose cost is the pixels blended plus a fixed dispatch per operation, about 16 tiles a group
  (`auto_groups`). groups=1 is one loop over all tiles, every tile to the longest list.
- "lanes" (accelerators'): a fixed number of lanes, each walking one tile; a lane whose tile
  reached its own end takes the next tile, heaviest first, and the finished tile's pixels are
  written out. The loop stays one wide loop (the vector units see `lanes` x S*S pixels per
  operation) while the slots walked follow every tile's own end, saturation included, instead of
  the longest list (`auto_lanes`; measured in docs/tpu.md, "The walk").
Both give every tile the same sequence of blend steps, so the images are the same; the backward's
per-Gaussian sums are added in another order (float32 rounding).

`forward_walk` / `backward_walk` also count what the walk did (`WalkCount`), for the benchmarks.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


from .. import array_ops
from .blend import Splat, sum_pixels
from .tiles import Pixels, Tiles, group_tiles, ungroup_tiles

WALKS = ("groups", "lanes")


class WalkCount(NamedTuple):
    """What one walk did, int32 scalars: loop iterations (chunks walked one after another), the
    (tile, list position) slots its blend steps covered, and the slots a walk of each tile to its
    own end needs (forward: to its list's end or its pixels' saturation; backward: from its
    deepest last contributor), in whole chunks."""

    iterations: jnp.ndarray
    slots: jnp.ndarray
    needed: jnp.ndarray

    def __add__(self, other):
        return WalkCount(*(a + b for a, b in zip(self, other)))


def _no_count():
    return WalkCount(jnp.int32(0), jnp.int32(0), jnp.int32(0))


def _gather_chunk(k, chunk, geom, feats, ids, start, length, flat: bool = False):
    """Gaussians at list positions [k*chunk, (k+1)*chunk) of every tile (`k` a scalar, or one per
    tile [T]); `flat`: by `array_ops.component_rows` (the lanes walk).

    Returns:
      (gid [T, B]: Gaussian ids, one past the last where out of range; the scan inputs: a `Splat`
      per position, stacked on a leading [B] axis: geom [B, GEOM, T, 1], feats [B, ch, T, 1],
      pos [B] (per tile: [B, T, 1]), in_range [B, T, 1]).
    """
    offs = jnp.arange(chunk, dtype=jnp.int32)
    pos = k * chunk + offs if jnp.ndim(k) == 0 else k[:, None] * chunk + offs[None, :]  # [B] or [T, B]
    pos_t = jnp.broadcast_to(pos, length.shape + (chunk,))
    in_range = pos_t < length[:, None]  # [T, B]
    slot = jnp.clip(start[:, None] + pos_t, 0, ids.shape[0] - 1)
    gid = jnp.where(in_range, ids[slot], geom.shape[1])  # out of range: one past the end
    if flat:
        g, f = array_ops.component_rows(geom, gid), array_ops.component_rows(feats, gid)  # [GEOM, T, B], [ch, T, B]
    else:
        g, f = geom.at[:, gid].get(mode="fill", fill_value=0.0), feats.at[:, gid].get(mode="fill", fill_value=0.0)
    step_pos = pos if jnp.ndim(k) == 0 else pos.T[..., None]
    steps = Splat(jnp.moveaxis(g, -1, 0)[..., None], jnp.moveaxis(f, -1, 0)[..., None], step_pos,
                  in_range.T[..., None])
    return gid, steps


TILES_PER_GROUP = 16  # automatic groups: about this many tiles each ...
MAX_GROUPS = 16  # ... and at most this many groups
LANE_SHARE = 12  # automatic lanes: a lane for every this many tiles ...
MIN_LANE_PIXELS = 16384  # ... and at least this many pixels side by side (16 vregs of 8 x 128 float32 per plane)


def auto_groups(num_tiles: int, platform: str) -> int:
    """Groups for `num_tiles` tiles when none are set (the "groups" walk). On a CPU about
    TILES_PER_GROUP tiles each, 1 to MAX_GROUPS: a blend step over a group costs a fixed dispatch
    per operation plus its pixels, so fewer, wider groups pay fewer dispatches and more groups
    follow the workload closer (docs/tile_parallel.md). Elsewhere one group."""
    if platform != "cpu":
        return 1
    return max(1, min(MAX_GROUPS, round(num_tiles / TILES_PER_GROUP)))


def auto_lanes(num_tiles: int, tile_pixels: int) -> int:
    """Lanes for `num_tiles` tiles of `tile_pixels` pixels when none are set (the "lanes" walk): a
    lane for every LANE_SHARE tiles, at least MIN_LANE_PIXELS pixels side by side, at most every
    tile. Fewer lanes walk fewer slots while a lane has tiles to take, but the walk's iterations
    (its sequential length) grow once the tiles' total work over the lanes passes the longest
    tile; LANE_SHARE is the measured balance (docs/tpu.md, "The walk")."""
    lanes = max(-(-num_tiles // LANE_SHARE), -(-MIN_LANE_PIXELS // tile_pixels))
    return max(1, min(num_tiles, lanes))


def resolve_walk(walk: str, platform: str) -> str:
    """The walk for `walk` ("auto": "groups" on a CPU, "lanes" elsewhere); ValueError naming the
    choices for another."""
    if walk == "auto":
        return "groups" if platform == "cpu" else "lanes"
    if walk not in WALKS:
        raise ValueError(f"walk must be one of {list(WALKS) + ['auto']}, got {walk!r}")
    return walk


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


def _tile_axis(x):  # per-pixel arrays in the tile layout: [..., T, S*S]
    return x.ndim - 2


def _rows(tree, idx):
    """The tiles `idx` of a tile-layout pytree (tile axis second to last); zeros for idx == T."""
    return jax.tree_util.tree_map(
        lambda x: jnp.moveaxis(jnp.moveaxis(x, -2, 0).at[idx].get(mode="fill", fill_value=0), 0, -2), tree)


def _lanes_where(lanes_mask, new, old):
    """Per lane: `new`'s rows where `lanes_mask` [W], else `old`'s (tile-layout pytrees)."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(lanes_mask[:, None], a, b), new, old)


def _own_chunks(length, chunk: int):
    return (length + chunk - 1) // chunk


def _heaviest_first(workload, bound: int):
    """[T] tile indices by falling `workload` (ints in [0, bound]; ties by index): the lanes'
    queue. A radix sort: XLA's sort is slow to compile for a TPU (`array_ops.radix_sort`)."""
    return array_ops.radix_sort(bound - workload, int(bound).bit_length())[1]


# -- the forward walks

def _forward_tiles(rule, B, geom, feats, ids, start, length, px: Pixels, inside):
    def walking(k, st):  # per tile: still short of its own end
        return (k * B < length) & ~jnp.all(st.done, axis=1)

    def body(carry):
        k, st, needed = carry
        needed = needed + jnp.sum(walking(k, st))
        _, steps = _gather_chunk(k, B, geom, feats, ids, start, length)
        st, _ = jax.lax.scan(lambda s, splat: (rule.forward(s, px, splat), None), st, steps)
        return k + 1, st, needed

    init = (jnp.int32(0), rule.initial_state(inside, feats.shape[0]), jnp.int32(0))
    k, st, needed = jax.lax.while_loop(lambda c: jnp.any(walking(c[0], c[1])), body, init)
    return st, WalkCount(k, k * B * length.shape[0], needed * B)


def _groups_forward(cfg, geom, feats, ids, tiles: Tiles):
    length = tiles.end - tiles.start
    t = length.shape[0]
    order, size = _grouping(cfg.options.groups, length, cfg.layout.platform)
    per_tile = [_grouped(a, order, size) for a in (tiles.start, length, tiles.px.x, tiles.px.y, tiles.inside)]

    def group(count, args):
        start, length, x, y, inside = args
        st, c = _forward_tiles(cfg.rule, cfg.options.chunk, geom, feats, ids, start, length, Pixels(x, y), inside)
        return count + c, st

    count, state = jax.lax.scan(group, _no_count(), per_tile)  # [groups, ..., size, S*S]
    inverse = None if order is None else jnp.argsort(order)  # once for every field of the state
    return jax.tree_util.tree_map(lambda x: _ungrouped(x, inverse, t, _tile_axis(x) - 1), state), count


def _lanes_forward(cfg, geom, feats, ids, tiles: Tiles):
    rule, B = cfg.rule, cfg.options.chunk
    length = tiles.end - tiles.start
    t, p = tiles.px.x.shape
    ch = feats.shape[0]
    w = cfg.options.lanes or auto_lanes(t, p)
    w = min(w, t)
    order = _heaviest_first(length, ids.shape[0])  # the queue
    busy = jnp.sum(length > 0)  # tiles with a list (the rest stay as they start)
    out = rule.initial_state(tiles.inside, ch)  # every tile's final state, written as its lane finishes

    def queued(q):  # tile at queue position q ([W]), T where none is left
        return jnp.where(q < busy, order[jnp.clip(q, 0, t - 1)], t)

    def lane_state(tile):
        return rule.initial_state(tiles.inside.at[tile].get(mode="fill", fill_value=False), ch)

    def body(c):
        head, tile, k, st, out, count = c
        active = tile < t
        start, n = tiles.start.at[tile].get(mode="fill", fill_value=0), length.at[tile].get(mode="fill", fill_value=0)
        px = Pixels(*(a.at[tile].get(mode="fill", fill_value=0.0) for a in tiles.px))
        _, steps = _gather_chunk(k, B, geom, feats, ids, start, n, flat=True)
        st, _ = jax.lax.scan(lambda s, splat: (rule.forward(s, px, splat), None), st, steps)
        k = k + 1
        finished = active & ((k * B >= n) | jnp.all(st.done, axis=1))
        # finished lanes write their tile out (the others' rows are dropped) and take the next tiles
        put = jnp.where(finished, tile, t)
        out = jax.tree_util.tree_map(
            lambda o, s: jnp.moveaxis(jnp.moveaxis(o, -2, 0).at[put].set(jnp.moveaxis(s, -2, 0), mode="drop"), 0, -2),
            out, st)
        nxt = queued(head + jnp.cumsum(finished) - 1)
        tile = jnp.where(finished, nxt, tile)
        st = _lanes_where(finished, lane_state(tile), st)
        k = jnp.where(finished, 0, k)
        count = count + WalkCount(jnp.int32(1), jnp.int32(w * B), jnp.sum(active).astype(jnp.int32) * B)
        return head + jnp.sum(finished), tile, k, st, out, count

    first = queued(jnp.arange(w))
    init = (jnp.int32(w), first, jnp.zeros((w,), jnp.int32), lane_state(first), out, _no_count())
    *_, out, count = jax.lax.while_loop(lambda c: jnp.any(c[1] < t), body, init)
    return out, count


def forward_walk(cfg, geom, feats, ids, tiles: Tiles):
    """`flat_forward` and its `WalkCount`."""
    walk = resolve_walk(cfg.options.walk, cfg.layout.platform)
    return (_lanes_forward if walk == "lanes" else _groups_forward)(cfg, geom, feats, ids, tiles)


def flat_forward(cfg, geom, feats, ids, tiles: Tiles):
    """Front-to-back blend of every tile's list.

    Args:
      cfg: `CompositeConfig` (its blend rule, its options' chunk, walk, groups and lanes).
      geom: [GEOM, N] packed screen parameters (the rule's rows); feats: [ch, N].
      ids: [M] the binning's sorted Gaussian ids.
      tiles: the tiles to render (`Tiles`, T of them).

    Returns:
      the rule's per-pixel state in the tile layout (`BlendState`'s: T, last, done [T, S*S], color
      [ch, T, S*S]).
    """
    return forward_walk(cfg, geom, feats, ids, tiles)[0]


# -- the backward walks

def _scatter_rows(rule, B, acc, geom, feats, ids, start, length, k, px, cot, st):
    """One chunk of the back-to-front walk (positions of chunk `k`, scalar or per tile): the
    tiles' back states in front of it and the per-Gaussian sums with its rows added (`acc`
    [N, C], or flat [C x N]: the lanes walk, gathering by `array_ops.component_rows` and summing
    by `array_ops.component_sums`)."""
    flat = acc.ndim == 1
    gid, steps = _gather_chunk(k, B, geom, feats, ids, start, length, flat)

    def step(carry, x):
        s, acc = carry
        splat, gid_at = x
        s, grads = rule.backward(s, px, splat, cot)
        # the T tiles' rows of this list position into the per-Gaussian sums: a scatter of T
        # rows per step, not one of B x T per chunk (for TPU, XLA compiles a scatter-add of
        # 24,576 rows with repeated ids around a hidden sort, 10 s to generate; of 768, none)
        rows = jnp.concatenate(sum_pixels(grads), -1)
        return (s, array_ops.component_sums(acc, gid_at, rows) if flat else acc.at[gid_at].add(rows, mode="drop")), None

    (st, acc), _ = jax.lax.scan(step, (st, acc), (steps, gid.T), reverse=True)
    return st, acc


def _backward_tiles(rule, B, acc, geom, feats, ids, start, length, px: Pixels, cot, behind0):
    num_chunks = (jnp.max(cot.last, initial=0) + B - 1) // B

    def body(carry):
        k, st, acc = carry
        k = k - 1
        st, acc = _scatter_rows(rule, B, acc, geom, feats, ids, start, length, k, px, cot, st)
        return k, st, acc

    init = (num_chunks, rule.initial_back(cot, behind0), acc)
    acc = jax.lax.while_loop(lambda c: c[0] > 0, body, init)[2]
    t = length.shape[0]
    needed = jnp.sum(_own_chunks(jnp.max(cot.last, axis=1), B)) * B
    return acc, WalkCount(num_chunks, num_chunks * B * t, needed)


def _groups_backward(cfg, geom, feats, ids, tiles: Tiles, cot, behind0):
    ch, n = feats.shape
    rule = cfg.rule
    order, size = _grouping(cfg.options.groups, jnp.max(cot.last, axis=1), cfg.layout.platform)
    per_tile = [_grouped(a, order, size) for a in (tiles.start, tiles.end - tiles.start, tiles.px.x, tiles.px.y)]
    per_pixel = jax.tree_util.tree_map(lambda a: _grouped(a, order, size, axis=_tile_axis(a)), (cot, behind0))

    def group(carry, args):
        acc, count = carry
        (s, length, x, y), (c, b0) = args
        acc, c = _backward_tiles(rule, cfg.options.chunk, acc, geom, feats, ids, s, length, Pixels(x, y), c, b0)
        return (acc, count + c), None

    (acc, count), _ = jax.lax.scan(group, (rule.gradient_rows(n, ch), _no_count()), (per_tile, per_pixel))
    return rule.split_rows(acc, ch), count


def _lanes_backward(cfg, geom, feats, ids, tiles: Tiles, cot, behind0):
    ch, n = feats.shape
    rule, B = cfg.rule, cfg.options.chunk
    length = tiles.end - tiles.start
    t, p = tiles.px.x.shape
    w = min(cfg.options.lanes or auto_lanes(t, p), t)
    chunks = _own_chunks(jnp.max(cot.last, axis=1), B)  # [T] each tile's walk, from its deepest last contributor
    order = _heaviest_first(chunks, _own_chunks(ids.shape[0], B))
    busy = jnp.sum(chunks > 0)

    def queued(q):
        return jnp.where(q < busy, order[jnp.clip(q, 0, t - 1)], t)

    def lane_start(tile):  # a lane's back state where its tile's walk starts
        return rule.initial_back(_rows(cot, tile), _rows(behind0, tile))

    def body(c):
        head, tile, k, st, acc, count = c
        active = tile < t
        k = k - active
        start, ln = tiles.start.at[tile].get(mode="fill", fill_value=0), length.at[tile].get(mode="fill", fill_value=0)
        px = Pixels(*(a.at[tile].get(mode="fill", fill_value=0.0) for a in tiles.px))
        st, acc = _scatter_rows(rule, B, acc, geom, feats, ids, start, ln, k, px, _rows(cot, tile), st)
        finished = active & (k == 0)
        tile = jnp.where(finished, queued(head + jnp.cumsum(finished) - 1), tile)
        st = _lanes_where(finished, lane_start(tile), st)
        k = jnp.where(finished, chunks.at[tile].get(mode="fill", fill_value=0), k)
        count = count + WalkCount(jnp.int32(1), jnp.int32(w * B), jnp.sum(active).astype(jnp.int32) * B)
        return head + jnp.sum(finished), tile, k, st, acc, count

    first = queued(jnp.arange(w))
    init = (jnp.int32(w), first, chunks.at[first].get(mode="fill", fill_value=0), lane_start(first),
            rule.gradient_rows(n, ch).reshape(-1), _no_count())  # component-major (`array_ops.component_sums`)
    *_, acc, count = jax.lax.while_loop(lambda c: jnp.any(c[1] < t), body, init)
    return rule.split_rows(acc.reshape(-1, n).T, ch), count


def backward_walk(cfg, geom, feats, ids, tiles: Tiles, cot, behind0):
    """`flat_backward` and its `WalkCount`."""
    walk = resolve_walk(cfg.options.walk, cfg.layout.platform)
    return (_lanes_backward if walk == "lanes" else _groups_backward)(cfg, geom, feats, ids, tiles, cot, behind0)


def flat_backward(cfg, geom, feats, ids, tiles: Tiles, cot, behind0):
    """Back-to-front walk of every tile's list.

    Args:
      cfg, geom, feats, ids, tiles: as `flat_forward`.
      cot: per-pixel forward residuals and output cotangents, tile layout (the rule's:
        `blend.PixelCotangents` for 3DGS).
      behind0: [ch, T, S*S] what lies behind the last Gaussian (T_final * background).

    Returns:
      (d geom [N, GEOM], d feats [N, ch], sum over pixels of |d means2d| [N, 2]).
    """
    return backward_walk(cfg, geom, feats, ids, tiles, cot, behind0)[0]
