"""The per-Gaussian, per-pixel blend rule, forward and backward, written once.

Every rasterizer calls `blend_forward` / `blend_backward` on its own layout (broadcasting does
the rest; the Pallas kernels pass the features as a tuple of channels, `scaled_add`):
  alpha = min(0.99, o exp(-q/2)),  q = a (dx + r dy)^2 + s dy^2 (the conic's form, completed to
  a sum of squares: `projection.blend_form`);
  alpha < 1/255 is skipped; a Gaussian that would take T below 1e-4 is not blended and the pixel
  stops; colour = sum alpha_i T_i c_i + T_final * background.
The backward keeps only the final transmittance and the last contributor per pixel and walks
back to front, recovering T_i = T_{i+1} / (1 - alpha_i): memory O(pixels + intersections).

Layout: per-Gaussian quantities are channel first (packed screen parameters [GEOM, ...], features
[ch, ...]) and broadcast against the pixel arrays [...]. XLA on CPU vectorises these planes far
better than a trailing axis of 3 or 6 (figure: channel-first, benchmarks/results/library_figures.md).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax.numpy as jnp

from .projection import ALPHA_MIN
from .tiles import Pixels

ALPHA_MAX = 0.99
T_MIN = 1e-4
# A Gaussian's packed screen parameters, channel first: rows of `Splat.geom`
GEOM_ROWS = ("mean_x", "mean_y", "quad_a", "quad_r", "quad_s", "opacity")
GEOM = len(GEOM_ROWS)


class Splat(NamedTuple):
    """The Gaussian at list position `pos` of the pixels it is blended into."""

    geom: jnp.ndarray  # [GEOM, ...] packed screen parameters (GEOM_ROWS)
    feats: jnp.ndarray  # [ch, ...] colour (and depth) features
    pos: jnp.ndarray  # int: position in the tile's front-to-back list
    in_range: jnp.ndarray  # bool [...]: the position exists in this tile's list


class BlendState(NamedTuple):
    """Per-pixel state of the front-to-back walk."""

    T: jnp.ndarray  # transmittance [...]
    color: jnp.ndarray  # accumulated features, channel first [ch, ...]
    last: jnp.ndarray  # 1 + position of the last blended Gaussian (0: none) [...]
    done: jnp.ndarray  # pixel saturated (or outside the image) [...]


class PixelCotangents(NamedTuple):
    """Per-pixel inputs of the backward walk: what the forward kept and the output cotangents."""

    last: jnp.ndarray  # [...] BlendState.last of the forward
    T_final: jnp.ndarray  # [...] final transmittance
    dC: jnp.ndarray  # [ch, ...] cotangent of the colour
    dA: jnp.ndarray  # [...] cotangent of the alpha (1 - T_final)


class BackState(NamedTuple):
    """Per-pixel state of the back-to-front walk."""

    T: jnp.ndarray  # transmittance after the current position [...]
    behind: jnp.ndarray  # [ch, ...] sum of what lies behind (blended colours and background)


class PixelGrads(NamedTuple):
    """Per-pixel gradient contributions of one Gaussian, each [...] (features [ch, ...])."""

    geom: tuple  # d of each GEOM_ROWS entry
    feats: jnp.ndarray
    abs_means: tuple  # |d mean x|, |d mean y|


def scaled(w, x):
    """w * x over feature channels: x an array [ch, ...], or a tuple of one array (or scalar) per
    channel (inside a Pallas kernel, where an axis of 3 channels is not a legal block)."""
    return tuple(w * v for v in x) if isinstance(x, tuple) else w * x


def scaled_add(acc, w, x):
    """acc + w * x over feature channels (layouts as `scaled`)."""
    return tuple(a + b for a, b in zip(acc, scaled(w, x))) if isinstance(acc, tuple) else acc + w * x


def initial_state(inside, ch: int, per_channel: bool = False) -> BlendState:
    """Blend state before any Gaussian: T = 1, no colour; pixels outside the image are done.

    Args:
      inside: [...] bool, the pixel lies in the image.
      ch: number of feature channels.
      per_channel: the colour as a tuple of ch arrays [...] (`scaled`), not one [ch, ...].
    """
    shape = inside.shape
    return BlendState(
        T=jnp.ones(shape, jnp.float32),
        color=(jnp.zeros(shape, jnp.float32),) * ch if per_channel else jnp.zeros((ch,) + shape, jnp.float32),
        last=jnp.zeros(shape, jnp.int32),
        done=~inside,
    )


def gaussian_alpha(px: Pixels, g):
    """The Gaussian's alpha at the pixel centres.

    Args:
      px: pixel centres [...].
      g: packed parameters [GEOM, ...] broadcast against them.

    Returns:
      (alpha clamped at ALPHA_MAX, raw o exp(-q/2), exp(-q/2), u = dx + r dy, dy), each [...].
    """
    dx = px.x - g[0]
    dy = px.y - g[1]
    u = dx + g[3] * dy
    q = g[2] * u * u + g[4] * dy * dy
    vis = jnp.exp(-0.5 * q)
    raw = g[5] * vis
    return jnp.minimum(ALPHA_MAX, raw), raw, vis, u, dy


def blend_forward(state: BlendState, px: Pixels, s: Splat) -> BlendState:
    """Blend one Gaussian into the pixels (front to back)."""
    alpha, *_ = gaussian_alpha(px, s.geom)
    blend = s.in_range & ~state.done & (alpha >= ALPHA_MIN)
    next_T = state.T * (1.0 - alpha)
    stop = blend & (next_T < T_MIN)
    blend = blend & ~stop
    w = jnp.where(blend, alpha * state.T, 0.0)
    return BlendState(
        T=jnp.where(blend, next_T, state.T),
        color=scaled_add(state.color, w, s.feats),
        last=jnp.where(blend, s.pos + 1, state.last),
        done=state.done | stop,
    )


def blend_backward(state: BackState, px: Pixels, s: Splat, cot: PixelCotangents):
    """One step of the back-to-front walk: un-blend the Gaussian and return its per-pixel gradients.

    Returns:
      (BackState in front of the Gaussian, PixelGrads).
    """
    alpha, raw, vis, u, dy = gaussian_alpha(px, s.geom)
    g, f = s.geom, s.feats
    active = s.in_range & (s.pos < cot.last) & (alpha >= ALPHA_MIN)
    inv = 1.0 / (1.0 - alpha)
    T_k = jnp.where(active, state.T * inv, state.T)
    w = jnp.where(active, alpha * T_k, 0.0)
    ch = len(cot.dC)
    d_alpha = cot.dA * cot.T_final * inv
    for i in range(ch):  # unrolled over channels: no trailing-axis reductions
        d_alpha = d_alpha + cot.dC[i] * (T_k * f[i] - state.behind[i] * inv)
    d_alpha = jnp.where(active & (raw <= ALPHA_MAX), d_alpha, 0.0)
    d_q = -0.5 * raw * d_alpha
    d_au = 2.0 * d_q * g[2] * u  # d q / d u = 2 a u
    d_mx = -d_au
    d_my = -(d_au * g[3] + 2.0 * d_q * g[4] * dy)
    grads = PixelGrads(
        geom=(d_mx, d_my, d_q * u * u, d_au * dy, d_q * dy * dy, d_alpha * vis),
        feats=scaled(w, cot.dC),
        abs_means=(jnp.abs(d_mx), jnp.abs(d_my)),
    )
    return BackState(T=T_k, behind=scaled_add(state.behind, w, f)), grads


def sum_pixels(grads: PixelGrads):
    """Reduce per-pixel contributions over the last (pixel) axis, Gaussian-major:
    (d geom [..., GEOM], d features [..., ch], |d means2d| [..., 2]); concatenated on the last
    axis they are the rows of `BlendRule.gradient_rows`."""
    geom = jnp.stack([x.sum(-1) for x in grads.geom], -1)
    feats = jnp.moveaxis(grads.feats.sum(-1), 0, -1)
    absm = jnp.stack([x.sum(-1) for x in grads.abs_means], -1)
    return geom, feats, absm


def initial_back(cot: PixelCotangents, behind0) -> BackState:
    """Back-to-front state behind the last Gaussian: the final transmittance, `behind0` behind it."""
    return BackState(T=cot.T_final, behind=behind0)


class BlendRule(NamedTuple):
    """How one kind of splat is blended into pixels: what the rasterizers walk every tile's list
    with. The rasterizers (flat, standard, pallas) are walks over the tiles' lists and know nothing
    of the splat: each reads the rule from its config (`CompositeConfig.rule`). Two rules exist:
    this module's `GAUSSIAN_RULE` (3DGS's EWA-projected Gaussians) and `blend_surfel.surfel_rule`
    (2DGS's disks, ray-disk intersections).

    Per-pixel states (`initial_state`'s, `initial_back`'s) and cotangents are NamedTuples whose
    leaves are [..., T, P] (a channel axis first where there is one): any subset of tiles, taken
    on the second-to-last axis, is again a state."""

    geom_rows: tuple  # names of a splat's packed screen parameters, the rows of `geom`
    initial_state: Callable  # (inside [...] bool, ch, per_channel=False) -> forward state (`T`, `color`, `last`, `done` ...)
    forward: Callable  # (state, Pixels, Splat) -> state
    initial_back: Callable  # (cotangents, behind0 [ch, ...]) -> back-to-front state
    backward: Callable  # (back state, Pixels, Splat, cotangents) -> (back state, PixelGrads)

    @property
    def geom(self) -> int:
        return len(self.geom_rows)

    def gradient_rows(self, n: int, ch: int):
        """Zeroed per-splat accumulator of `sum_pixels` rows: [n, geom + ch + 2]."""
        return jnp.zeros((n, self.geom + ch + 2), jnp.float32)

    def split_rows(self, acc, ch: int):
        """[N, geom + ch + 2] rows -> (d geom [N, geom], d features [N, ch], |d means2d| [N, 2])."""
        g = self.geom
        return acc[:, :g], acc[:, g: g + ch], acc[:, g + ch:]


GAUSSIAN_RULE = BlendRule(GEOM_ROWS, initial_state, blend_forward, initial_back, blend_backward)
