"""The tile layout shared by binning and both rasterizers: an image cut into S x S tiles, every
tile's pixels on one axis ([num_tiles, S*S]), and the conversions between that layout and images.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class TileGrid(NamedTuple):
    """An image of `width` x `height` pixels cut into `tile_size`-pixel square tiles (the last row
    and column of tiles may stick out of the image)."""

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


class Pixels(NamedTuple):
    """Pixel centres (coordinates + 0.5) of some pixels, any shape, the same for both."""

    x: jnp.ndarray
    y: jnp.ndarray


def tile_pixels(grid: TileGrid):
    """Every tile's pixel centres.

    Returns:
      (Pixels with x, y [T, S*S] float32, inside [T, S*S] bool: the pixel lies in the image).
    """
    s = grid.tile_size
    t = np.arange(grid.num_tiles)
    i = np.arange(s * s)
    x = (t[:, None] % grid.tiles_x) * s + i[None] % s
    y = (t[:, None] // grid.tiles_x) * s + i[None] // s
    inside = (x < grid.width) & (y < grid.height)
    return Pixels(jnp.asarray(x + 0.5, jnp.float32), jnp.asarray(y + 0.5, jnp.float32)), jnp.asarray(inside)


def tiles_to_image(x, grid: TileGrid):
    """[T, S*S, ...] tile layout -> [H, W, ...] image (the pixels outside the image dropped)."""
    s = grid.tile_size
    rest = x.shape[2:]
    x = x.reshape((grid.tiles_y, grid.tiles_x, s, s) + rest)
    x = jnp.moveaxis(x, 2, 1).reshape((grid.tiles_y * s, grid.tiles_x * s) + rest)
    return x[: grid.height, : grid.width]


def image_to_tiles(x, grid: TileGrid):
    """[H, W, ...] image -> [T, S*S, ...] tile layout (pixels outside the image are zeros)."""
    s = grid.tile_size
    rest = x.shape[2:]
    pad = [(0, grid.tiles_y * s - grid.height), (0, grid.tiles_x * s - grid.width)] + [(0, 0)] * len(rest)
    x = jnp.pad(x, pad).reshape((grid.tiles_y, s, grid.tiles_x, s) + rest)
    return jnp.moveaxis(x, 1, 2).reshape((grid.num_tiles, s * s) + rest)


def group_tiles(x, size: int, axis: int = 0):
    """Tile axis `axis` (T tiles) cut into groups of `size`: [ceil(T / size), ..., size, ...], the
    last group padded with empty tiles (zeros: no list, no pixel inside)."""
    x = jnp.moveaxis(x, axis, 0)
    x = jnp.pad(x, [(0, -x.shape[0] % size)] + [(0, 0)] * (x.ndim - 1))
    x = x.reshape((-1, size) + x.shape[1:])
    return jnp.moveaxis(x, 1, axis + 1)


def ungroup_tiles(x, num_tiles: int, axis: int = 0):
    """Inverse of `group_tiles`: [groups, ..., size, ...] -> the first `num_tiles` on `axis`."""
    x = jnp.moveaxis(x, 0, axis)  # [..., groups, size, ...]
    x = x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 2:])
    return jax.lax.slice_in_dim(x, 0, num_tiles, axis=axis)


class TileLists(NamedTuple):
    """What the rasterizers read of the binning: every tile's front-to-back list of Gaussians,
    `ids[start[t]:end[t]]` for tile t."""

    ids: jnp.ndarray  # [M] int32 Gaussian ids, tile-major, front to back within a tile
    start: jnp.ndarray  # [T] int32
    end: jnp.ndarray  # [T] int32


class Tiles(NamedTuple):
    """Some tiles of an image as the rasterizers walk them: each tile's range of the sorted list
    (`ids[start:end]`) and its pixels. Every entry has the tile axis first, so any subset or
    order of tiles is again `Tiles` (tiles are independent of each other)."""

    start: jnp.ndarray  # [T] int32
    end: jnp.ndarray  # [T] int32
    px: Pixels  # [T, S*S] pixel centres
    inside: jnp.ndarray  # [T, S*S] bool: the pixel lies in the image


def all_tiles(lists: TileLists, grid: TileGrid) -> Tiles:
    """Every tile of `grid`, in row-major order, with its list range."""
    px, inside = tile_pixels(grid)
    return Tiles(lists.start, lists.end, px, inside)
