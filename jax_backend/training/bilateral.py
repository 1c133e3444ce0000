"""Bilateral-grid appearance (gsplat's and splatfacto's `use_bilateral_grid`, after "Bilateral
Guided Radiance Field Processing"): one small grid of 3x4 affine colour transforms per training
image, sliced at each pixel by its position and its rendered luminance, applied to training
renders only. It absorbs per-image exposure and white-balance changes, so the Gaussians learn the
scene's own colours; held-out views and exports never see it.

Layout and rules are nerfstudio's `lib_bilagrid`: grids [V, 12, L, H, W] (12 = a row-major 3x4
matrix, identity to start), trilinear sampling with the corners aligned and coordinates clamped
to the border (`F.grid_sample(align_corners=True, padding_mode="border")`), pixel x, y spread
over [0, 1] corner to corner as splatfacto does, luminance 0.299 r + 0.587 g + 0.114 b, and the
total-variation penalty weighted 10.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp

from .. import defaults
from .corrections import Correction
from .optim import GroupConfig

_IDENTITY = jnp.array([1.0, 0, 0, 0, 0, 1.0, 0, 0, 0, 0, 1.0, 0])
_GRAY = jnp.array([0.299, 0.587, 0.114])


@dataclass(frozen=True)
class BilateralGridConfig(Correction):
    """splatfacto's use_bilateral_grid / grid_shape and its `bilateral_grid` optimizer group."""

    enabled: bool = False
    shape: Tuple[int, int, int] = (16, 16, 8)  # (X: width cells, Y: height cells, W: luminance cells)
    optimizer: GroupConfig = field(default_factory=lambda: GroupConfig(**defaults.BILATERAL_GRID_ADAM))
    tv_weight: float = 10.0
    centred: bool = True  # jax-gs: the grids' mean over the images is held at the identity (`centre_grids`)

    def init_values(self, num_views: int):
        """Identity grids for `num_views` training images."""
        X, Y, L = self.shape
        return jnp.broadcast_to(_IDENTITY[None, :, None, None, None], (num_views, 12, L, Y, X)).astype(jnp.float32)

    def state(self, values, opt_state):
        return GridState(values, opt_state)

    def renders(self, values, views, renders):
        """Each training render through its own image's grid."""
        return renders.at[..., :3].set(apply_grids(values[views], renders[..., :3]))

    def penalty(self, values):
        return self.tv_weight * total_variation(values)

    def after_update(self, values):
        return centre_grids(values) if self.centred else values


class GridState(NamedTuple):
    grids: jnp.ndarray  # [V, 12, L, H, W]
    opt_state: object


def centre_grids(grids):
    """The grids with their mean over the images moved to the identity, every image's grid shifted
    by the same amount.

    Grids and Gaussians can trade any transform common to all images (every grid x A, the
    Gaussians' colours x A^-1) without changing a training render, and nerfstudio's grids drift
    along that freedom; held-out views, which no grid touches, then show the drifted colours
    (figure: grid-drift, benchmarks/results/library_figures.md). Holding the mean at the identity fixes the
    split: the Gaussians keep the images' average appearance, and what each grid learns is its
    image's departure from it."""
    identity = _IDENTITY.astype(grids.dtype)[:, None, None, None]
    return grids - jnp.mean(grids, axis=0) + identity


def _axis(coord, size: int):
    """Clamped sample position on an axis of `size` cells: (lower index, weight of the upper)."""
    c = jnp.clip(coord * (size - 1), 0.0, size - 1)
    i0 = jnp.clip(jnp.floor(c), 0, max(size - 2, 0)).astype(jnp.int32)
    return i0, jnp.clip(c - i0, 0.0, 1.0)


def slice_grid(grid, rgb):
    """Apply one image's grid [12, L, H, W] to its render `rgb` [h, w, 3] -> [h, w, 3]."""
    _, L, Hg, Wg = grid.shape
    h, w, _ = rgb.shape
    x0, fx = _axis(jnp.linspace(0.0, 1.0, w), Wg)
    y0, fy = _axis(jnp.linspace(0.0, 1.0, h), Hg)
    z0, fz = _axis(jnp.sum(rgb * _GRAY, -1), L)  # [h, w]: luminance
    x0, fx = jnp.broadcast_to(x0[None, :], (h, w)), jnp.broadcast_to(fx[None, :], (h, w))
    y0, fy = jnp.broadcast_to(y0[:, None], (h, w)), jnp.broadcast_to(fy[:, None], (h, w))
    cells = jnp.moveaxis(grid, 0, -1)  # [L, H, W, 12]
    step = lambda size: 1 if size > 1 else 0  # noqa: E731
    A = 0.0
    for dz in (0, 1):
        for dy in (0, 1):
            for dx in (0, 1):
                wgt = (fz if dz else 1 - fz) * (fy if dy else 1 - fy) * (fx if dx else 1 - fx)
                A = A + wgt[..., None] * cells[z0 + dz * step(L), y0 + dy * step(Hg), x0 + dx * step(Wg)]
    A = A.reshape(h, w, 3, 4)
    return jnp.sum(A[..., :3] * rgb[..., None, :], -1) + A[..., 3]  # A rgb + b, elementwise (float32 everywhere)


def total_variation(grids):
    """nerfstudio's total_variation_loss: the mean squared difference of neighbouring cells, summed
    over the luminance, height and width axes."""
    return sum(jnp.mean(jnp.diff(grids, axis=a) ** 2) for a in (2, 3, 4))


apply_grids = jax.vmap(slice_grid)  # [B, 12, L, H, W], [B, h, w, 3]
