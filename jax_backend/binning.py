"""Tile binning with static shapes: every (Gaussian, tile) intersection in a fixed-capacity buffer.

counts per Gaussian -> cumsum -> owner of each buffer slot -> (tile, depth) two-key sort ->
per-tile ranges by searchsorted. Nothing is capped per tile or per Gaussian; when the buffer is
too small `overflow` says so (the eager entry point then grows it and renders again).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .projection import Projected


class TileGrid(NamedTuple):
    width: int
    height: int
    tile_size: int

    @property
    def tiles_x(self) -> int:
        return -(-self.width // self.tile_size)

    @property
    def tiles_y(self) -> int:
        return -(-self.height // self.tile_size)

    @property
    def num_tiles(self) -> int:
        return self.tiles_x * self.tiles_y


class Bins(NamedTuple):
    gaussian_ids: jnp.ndarray  # [M] Gaussian of each sorted intersection (tile-major, front to back)
    tile_start: jnp.ndarray  # [T] first slot of each tile
    tile_end: jnp.ndarray  # [T] one past the last slot of each tile
    tiles_per_gaussian: jnp.ndarray  # [N] number of tiles each Gaussian touches
    num_intersections: jnp.ndarray  # [] total needed (may exceed capacity)
    overflow: jnp.ndarray  # [] bool: capacity too small, some intersections were left out


def tile_rect(proj: Projected, grid: TileGrid):
    """Inclusive tile rectangle [x0, x1] x [y0, y1] of each Gaussian's opacity-aware box.

    A pixel j (centre j + 0.5) is inside the box when |j + 0.5 - m| <= e. A small margin absorbs
    float rounding: an extra tile costs a little work, a missing one would change the image.
    """
    e = proj.extents * (1.0 + 1e-4) + 1e-3
    lo = jnp.ceil(proj.means2d - e - 0.5)  # first pixel index covered
    hi = jnp.floor(proj.means2d + e - 0.5)  # last pixel index covered
    size = jnp.array([grid.width, grid.height], jnp.float32)
    lo = jnp.maximum(lo, 0.0)
    hi = jnp.minimum(hi, size - 1)
    covers = (lo <= hi) & proj.valid[:, None]
    lo_t = jnp.floor(lo / grid.tile_size).astype(jnp.int32)
    hi_t = jnp.floor(jnp.maximum(hi, lo) / grid.tile_size).astype(jnp.int32)
    n_xy = jnp.where(covers.all(-1, keepdims=True), hi_t - lo_t + 1, 0)
    return lo_t, n_xy


def bin_gaussians(proj: Projected, grid: TileGrid, capacity: int) -> Bins:
    lo_t, n_xy = tile_rect(proj, grid)
    counts = n_xy[:, 0] * n_xy[:, 1]
    ends = jnp.cumsum(counts)
    starts = ends - counts
    total = ends[-1]
    n = counts.shape[0]

    # Owner of slot k: the Gaussian whose [start, end) holds k. Scatter each non-empty Gaussian's
    # id at its start, then a running max fills the slots in between: O(N + M), no search.
    slot = jnp.arange(capacity, dtype=jnp.int32)
    ids = jnp.arange(n, dtype=jnp.int32)
    marks = jnp.zeros((capacity,), jnp.int32).at[jnp.where(counts > 0, starts, capacity)].max(ids, mode="drop")
    owner = jax.lax.cummax(marks, axis=0)
    local = slot - starts[owner]
    w = jnp.maximum(n_xy[owner, 0], 1)
    tx = lo_t[owner, 0] + local % w
    ty = lo_t[owner, 1] + local // w
    in_use = slot < total
    tile = jnp.where(in_use, ty * grid.tiles_x + tx, grid.num_tiles).astype(jnp.int32)
    depth = jnp.where(in_use, proj.depths[owner], jnp.inf)

    # Two keys, exact float depth; stable, so equal depths keep Gaussian order.
    tile_sorted, _, ids_sorted = jax.lax.sort((tile, depth, owner), num_keys=2, is_stable=True)
    bounds = jnp.searchsorted(tile_sorted, jnp.arange(grid.num_tiles + 1, dtype=jnp.int32), side="left")
    return Bins(
        gaussian_ids=ids_sorted,
        tile_start=bounds[:-1].astype(jnp.int32),
        tile_end=bounds[1:].astype(jnp.int32),
        tiles_per_gaussian=counts,
        num_intersections=total,
        overflow=total > capacity,
    )
