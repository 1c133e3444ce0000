"""Tile binning with static shapes: every (Gaussian, tile) intersection in a fixed-size buffer.

depth order -> counts per Gaussian, front to back -> cumsum -> owner of each buffer slot -> (with
`tight`: the tiles of its box that its ellipse does not reach dropped) -> sort by tile, the depth order kept ->
per-tile ranges by searchsorted, on the smallest of a few buffer sizes that holds the view's
intersections. Nothing is capped per tile or per Gaussian; when the buffer is too small
`overflow` says so (the caller then grows it and renders again: `isect_buffer`).
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .. import array_ops
from ..array_ops import next_pow2
from .projection import ALPHA_MIN, Projected
from .tiles import TileGrid, TileLists

MIN_ISECT_CAPACITY = 1 << 14  # smallest intersection buffer


class Bins(NamedTuple):
    """The binning of one camera (see `bin_gaussians`)."""

    gaussian_ids: jnp.ndarray  # [M] Gaussian of each sorted intersection (tile-major, front to back)
    tile_start: jnp.ndarray  # [T] first slot of each tile
    tile_end: jnp.ndarray  # [T] one past the last slot of each tile
    tiles_per_gaussian: jnp.ndarray  # [N] number of tiles each Gaussian touches
    num_intersections: jnp.ndarray  # [] total needed (may exceed isect_capacity)
    overflow: jnp.ndarray  # [] bool: isect_capacity too small, some intersections were left out

    @property
    def lists(self) -> TileLists:
        """What the rasterizers read: the sorted ids and every tile's range."""
        return TileLists(self.gaussian_ids, self.tile_start, self.tile_end)


def tile_rect(proj: Projected, grid: TileGrid):
    """The tiles each splat's opacity-aware box (`proj.box_centers` +- `proj.extents`) touches
    (`proj` a `Projected`, or any projection with those fields, `valid` and `depths`).

    Returns:
      (first tile [N, 2] int32 (x, y), number of tiles [N, 2] int32 along x and y; 0 when none).

    A pixel j (centre j + 0.5) is inside the box when |j + 0.5 - m| <= e. A small margin absorbs
    float rounding: an extra tile costs a little work, a missing one would change the image.
    """
    e = proj.extents * (1.0 + 1e-4) + 1e-3
    lo = jnp.ceil(proj.box_centers - e - 0.5)  # first pixel index covered
    hi = jnp.floor(proj.box_centers + e - 0.5)  # last pixel index covered
    size = jnp.array([grid.width, grid.height], jnp.float32)
    lo = jnp.maximum(lo, 0.0)
    hi = jnp.minimum(hi, size - 1)
    covers = (lo <= hi) & proj.valid[:, None]
    lo_t = jnp.floor(lo / grid.tile_size).astype(jnp.int32)
    hi_t = jnp.floor(jnp.maximum(hi, lo) / grid.tile_size).astype(jnp.int32)
    n_xy = jnp.where(covers.all(-1, keepdims=True), hi_t - lo_t + 1, 0)
    return lo_t, n_xy


def ellipse_reaches(proj: Projected, grid: TileGrid):
    """The tight test of a 3DGS splat's box tiles: (owner [M], tile x [M], tile y [M]) -> bool [M],
    whether any pixel centre of the tile can blend the owner (alpha >= 1/255).

    The box (`tile_rect`) bounds the ellipse q <= level (level = 2 ln(255 o): o exp(-q/2) = 1/255);
    a thin, rotated splat's box holds tiles the ellipse misses (a trained capture's full-resolution
    views: about a fifth of the box's pairs, yet no time saved on a CPU; figure: tight-tiles,
    benchmarks/results/library_figures.md).
    The form q = a (dx + r dy)^2 + s dy^2 is convex, so its minimum over the rectangle of the
    tile's pixel centres is 0 when the mean lies inside, else on an edge, found along each edge in
    closed form. That minimum is at most the minimum over the pixel centres themselves, and a
    margin absorbs float rounding: a pair is dropped only when no pixel of the tile could blend it,
    so the image and the gradients are unchanged (the rasterizers stay exact)."""
    level = 2.0 * jnp.log(jnp.maximum(proj.opacities, ALPHA_MIN) * 255.0)
    level = level * (1.0 + 1e-3) + 1e-3
    t = grid.tile_size

    def reaches(owner, tx, ty):
        x0 = (tx * t).astype(jnp.float32) + 0.5
        x1 = jnp.minimum(tx * t + t - 1, grid.width - 1).astype(jnp.float32) + 0.5
        y0 = (ty * t).astype(jnp.float32) + 0.5
        y1 = jnp.minimum(ty * t + t - 1, grid.height - 1).astype(jnp.float32) + 0.5
        mx, my = proj.means2d[owner, 0], proj.means2d[owner, 1]
        a, r, s = proj.quad[owner, 0], proj.quad[owner, 1], proj.quad[owner, 2]

        def q(dx, dy):
            u = dx + r * dy
            return a * u * u + s * dy * dy

        best = jnp.where((mx >= x0) & (mx <= x1) & (my >= y0) & (my <= y1), 0.0, jnp.inf)
        for yc in (y0, y1):  # along a row dy is fixed: the minimum at u = 0, clipped to the row
            dy = yc - my
            best = jnp.minimum(best, q(jnp.clip(-r * dy, x0 - mx, x1 - mx), dy))
        for xc in (x0, x1):  # along a column: d/d dy = 0 at dy = -a r dx / (a r^2 + s), clipped
            dx = xc - mx
            dy = -a * r * dx / jnp.maximum(a * r * r + s, 1e-30)
            best = jnp.minimum(best, q(dx, jnp.clip(dy, y0 - my, y1 - my)))
        return best <= level[owner]

    return reaches


def depth_order(depths):
    """[N] int32 Gaussian ids front to back: `jnp.argsort(depths, stable=True)` (ties by id;
    `array_ops.argsort`, a radix sort on TPU). Ties are common: MCMC relocation copies Gaussians
    exactly."""
    return array_ops.argsort(depths)


def sort_by_tile(tile, rank, num_tiles: int, n: int):
    """Intersections laid out in depth order, sorted by tile with the depth order kept.

    Args:
      tile: [M] int32 tile of each intersection (`num_tiles` for unused slots, sorted last).
      rank: [M] int32 the depth rank (`depth_order` position, below `n`) of its Gaussian,
        nondecreasing along the slots.

    Returns:
      (tile [M], rank [M]) in (tile, rank) order.

    On TPU a stable radix sort of the tiles alone (the slots are already in depth order). Else
    the keys alone are sorted: one u32 key, tile x n + rank, when (num_tiles + 1) x n fits in 32
    bits (faster on a CPU than a two-key sort with its payload: figure u32-key,
    benchmarks/results/library_figures.md), else the
    (tile, rank) pairs (`sort_pairs`). (`array_ops.per_platform`)
    """
    return array_ops.per_platform(tile, rank, tpu=partial(sort_by_tile_radix, num_tiles=num_tiles),
                                  default=partial(sort_by_tile_keys, num_tiles=num_tiles, n=n))


def sort_by_tile_radix(tile, rank, num_tiles: int):
    """`sort_by_tile` as a TPU program computes it."""
    tile_sorted, rank_sorted = array_ops.radix_sort(tile, int(num_tiles).bit_length(), values=rank)
    return tile_sorted.astype(jnp.int32), rank_sorted.astype(jnp.int32)


def sort_by_tile_keys(tile, rank, num_tiles: int, n: int):
    """`sort_by_tile` as every other program computes it."""
    if (num_tiles + 1) * n < 2**32:
        key = jax.lax.sort(tile.astype(jnp.uint32) * jnp.uint32(n) + rank.astype(jnp.uint32))
        tile_sorted, rank_sorted = key // jnp.uint32(n), key % jnp.uint32(n)
    else:
        tile_sorted, rank_sorted = array_ops.sort_pairs(tile.astype(jnp.uint32), rank.astype(jnp.uint32))
    return tile_sorted.astype(jnp.int32), rank_sorted.astype(jnp.int32)


def buffer_tiers(isect_capacity: int, platform: str) -> list:
    """The buffer sizes a binning picks from at run time: `isect_capacity` and its halves down to
    MIN_ISECT_CAPACITY (at most five). On a TPU `isect_capacity` alone: each tier compiles its own sort, and a
    large sort takes seconds of a TPU compile (figure: tpu-sort-tiers, benchmarks/results/library_figures.md)."""
    sizes = [isect_capacity]
    if platform == "tpu":
        return sizes
    while len(sizes) < 5 and sizes[-1] // 2 >= MIN_ISECT_CAPACITY and sizes[-1] % 2 == 0:
        sizes.append(sizes[-1] // 2)
    return sizes[::-1]


def _sorted_lists(size: int, lo_t, n_xy, by_depth, counts, starts, total, grid: TileGrid, reaches=None):
    """The intersections in a buffer of `size` slots, sorted: (Gaussian ids [size], tile bounds [T+1]).

    `counts` and `starts` are in depth order (`by_depth`): the slots are laid out front to back,
    so sorting them by tile with that order kept gives each tile's front-to-back list. A slot
    whose tile `reaches` (`ellipse_reaches`'s test; None: every box tile) says the owner misses
    is sorted past the last tile, with the unused slots."""
    n = counts.shape[0]
    # Depth rank of slot k's Gaussian: the one whose [start, end) holds k. Scatter each non-empty
    # Gaussian's rank at its start, then a running max fills the slots in between: O(N + M), no
    # search. The non-empty Gaussians' starts are distinct; the empty ones, and starts past a
    # buffer too small, go to distinct slots past the end (dropped): a scatter with unique
    # indices, which compiles for a TPU quickly where the duplicate-index form became a hidden
    # sort (figure: unique-scatter, benchmarks/results/library_figures.md)
    slot = jnp.arange(size, dtype=jnp.int32)
    ranks = jnp.arange(n, dtype=jnp.int32)
    at = jnp.where((counts > 0) & (starts < size), starts, size + ranks)  # past the end: distinct too
    marks = jnp.zeros((size,), jnp.int32).at[at].set(ranks, mode="drop", unique_indices=True)
    rank = array_ops.cummax(marks)
    owner = by_depth[rank]
    row, col = array_ops.small_divmod(slot - starts[rank], jnp.maximum(n_xy[owner, 0], 1))
    tx = lo_t[owner, 0] + col
    ty = lo_t[owner, 1] + row
    in_use = slot < total
    if reaches is not None:
        in_use = in_use & reaches(owner, tx, ty)
    tile = jnp.where(in_use, ty * grid.tiles_x + tx, grid.num_tiles).astype(jnp.int32)
    tile_sorted, rank_sorted = sort_by_tile(tile, rank, grid.num_tiles, n)
    return by_depth[rank_sorted], array_ops.run_starts(tile_sorted, grid.num_tiles)


def bin_gaussians(proj: Projected, grid: TileGrid, isect_capacity: int, platform: str, tight: bool = False) -> Bins:
    """Every (Gaussian, tile) intersection, sorted by tile then depth.

    Args:
      proj: the camera's projected Gaussians (N of them).
      grid: the image's tiles.
      isect_capacity: static size of the intersection buffer.
      platform: the platform the program is built for (its buffer tiers).
      tight: leave out a 3DGS projection's box tiles its ellipse misses (`ellipse_reaches`).

    Returns:
      `Bins`: sorted Gaussian ids [isect_capacity], each tile's [start, end) range [T], tiles per
      Gaussian [N], the number of intersections needed and whether it exceeded `isect_capacity`
      (both counted over the boxes' tiles: the buffer holds those before the sort).

    The buffer is sized for the most demanding view with room to grow, and a view often needs a
    fraction of it: the owner search and the sort (the binning's cost) run on the smallest of
    `buffer_tiers(isect_capacity, platform)` that holds this view's intersections (`lax.switch`), and the slots
    past it are left empty (id 0, in no tile's range). The lists are those of the full buffer.
    The slots are laid out front to back: a buffer too small keeps the nearest Gaussians'.
    With `tight`, a 3DGS projection's box tiles that the ellipse misses are left out of the lists
    (`ellipse_reaches`); other projections (2DGS's disks) keep their boxes' tiles.
    """
    lo_t, n_xy = tile_rect(proj, grid)
    reaches = ellipse_reaches(proj, grid) if tight and isinstance(proj, Projected) else None
    counts = n_xy[:, 0] * n_xy[:, 1]
    by_depth = depth_order(proj.depths)
    counts_by_depth = counts[by_depth]
    ends = array_ops.cumsum(counts_by_depth)  # the slots front to back
    starts = ends - counts_by_depth
    total = ends[-1]

    def at(size):
        ids, bounds = _sorted_lists(size, lo_t, n_xy, by_depth, counts_by_depth, starts, total, grid, reaches)
        return jnp.pad(ids, (0, isect_capacity - size)), bounds

    sizes = buffer_tiers(isect_capacity, platform)
    tier = jnp.sum(jnp.array(sizes, jnp.int32) < total)  # the first that holds it (switch clamps: overflow -> all)
    ids_sorted, bounds = jax.lax.switch(tier, [partial(at, size) for size in sizes])
    return Bins(
        gaussian_ids=ids_sorted,
        tile_start=bounds[:-1].astype(jnp.int32),
        tile_end=bounds[1:].astype(jnp.int32),
        tiles_per_gaussian=counts,
        num_intersections=total,
        overflow=total > isect_capacity,
    )
