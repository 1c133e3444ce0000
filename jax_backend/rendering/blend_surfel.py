"""The per-surfel, per-pixel blend rule of 2D Gaussian Splatting (Huang et al. 2024), forward and
backward, written once: `surfel_rule(near_plane)`, the `blend.BlendRule` the rasterizers walk 2DGS
tiles with.

A surfel (a 2D Gaussian: a disk with centre p, tangent axes t_u, t_v) is drawn through its ray
transform, in pixels relative to the pixel c of its centre: the disk's point U = (u, v, 1) lies on
the ray of the pixel c + (dx, dy) where (dx w, dy w, w) = (r0 . U, r1 . U, r2 . U), with
  r0 = fx (t_u.x - x_c t_u.z, t_v.x - x_c t_v.z, 0), r1 = fy (t_u.y - y_c t_u.z, t_v.y - y_c t_v.z, 0),
  r2 = (t_u.z, t_v.z, p.z)  (camera space; x_c = p.x / p.z, y_c = p.y / p.z),
i.e. K [t_u | t_v | p] with the centre's pixel moved to the origin (`projection_surfel`): no
term of the size of the principal point cancels in float32. A pixel sees the disk where h_u =
dx r2 - r0 and h_v = dy r2 - r1 are both orthogonal to U: U is along c = h_u x h_v, (u, v) =
(c0 / c2, c1 / c2) (Cramer's rule for the 3x3 system ray = disk point; c2 = 0 when the ray lies in
the disk's plane: no intersection), and the intersection's camera depth is z = r2 . U.

  weight = exp(-min((u^2 + v^2) / 2, |x - c|^2)): the disk's Gaussian, or the screen-space low pass
  (standard deviation sqrt(2)/2 pixel) around the centre's pixel c, whichever is larger; the hit's
  depth z where the disk's Gaussian is the larger, the centre's depth where the low pass is (as
  the paper's code: a disk drawn by the low pass, too small or seen edge-on, has no meaningful
  intersection; a near-grazing one would be far off and ill-conditioned); a hit nearer than the
  near plane (behind the camera included) is skipped;
  alpha = min(0.99, o weight), and 3DGS's rules: skipped below 1/255, stopped before T < 1e-4.
Blended per pixel: the features (colours, the surfel's normal) with weights w = alpha T, the depth
z, and two maps of their own:
  distortion = sum_i sum_{j<i} 2 w_i w_j (z_i - z_j) (gsplat's; the paper's sum_ij w_i w_j |z_i - z_j|
    when the intersections come front to back), accumulated as 2 w_i (z_i (1 - T_i) - D_i), D_i the
    depth blended in front of i;
  median depth: z of the first surfel that takes T to 0.5 or below (the last blended one's if none
    does), its list position kept for the backward.

The backward walks back to front as the 3DGS one (T_i = T_{i+1} / (1 - alpha_i)) and recovers what
the distortion's gradient needs from what lies behind: B = sum_{j>i} w_j = T_{i+1} - T_final,
sum_{j>i} w_j z_j (the depth behind) and the distortion among the surfels behind, one running sum.
"""
from __future__ import annotations

from functools import lru_cache, partial
from typing import NamedTuple

import jax.numpy as jnp

from .blend import ALPHA_MAX, T_MIN, BlendRule, PixelGrads, Splat, scaled, scaled_add
from .projection import ALPHA_MIN
from .tiles import Pixels

# A surfel's packed screen parameters, channel first: the ray transform's rows (r0 = (a_u, a_v, 0),
# r1 = (b_u, b_v, 0), r2 = (c_u, c_v, depth)), the centre's pixel, opacity
SURFEL_GEOM_ROWS = ("a_u", "a_v", "b_u", "b_v", "c_u", "c_v", "depth", "mean_x", "mean_y", "opacity")
PARALLEL = 1e-6  # |c2| below this fraction of |h_u| |h_v|: the ray lies in the disk's plane (no intersection)


class SurfelState(NamedTuple):
    """Per-pixel state of the front-to-back walk."""

    T: jnp.ndarray  # transmittance [...]
    color: jnp.ndarray  # accumulated features, channel first [ch, ...]
    depth: jnp.ndarray  # sum w z [...]
    distort: jnp.ndarray  # the depth distortion so far [...]
    median: jnp.ndarray  # median depth [...]
    median_last: jnp.ndarray  # 1 + position of the surfel giving the median (0: none) [...]
    last: jnp.ndarray  # 1 + position of the last blended surfel (0: none) [...]
    done: jnp.ndarray  # pixel saturated (or outside the image) [...]


class SurfelCotangents(NamedTuple):
    """Per-pixel inputs of the backward walk: what the forward kept and the output cotangents."""

    last: jnp.ndarray  # [...] SurfelState.last of the forward
    T_final: jnp.ndarray  # [...]
    depth_total: jnp.ndarray  # [...] the forward's sum w z
    median_last: jnp.ndarray  # [...] SurfelState.median_last
    dC: jnp.ndarray  # [ch, ...] cotangent of the features
    dA: jnp.ndarray  # [...] of the alpha
    dD: jnp.ndarray  # [...] of the depth (sum w z)
    dDist: jnp.ndarray  # [...] of the distortion
    dMed: jnp.ndarray  # [...] of the median depth


class SurfelBack(NamedTuple):
    """Per-pixel state of the back-to-front walk (everything behind the current position)."""

    T: jnp.ndarray  # transmittance after the current position
    behind: jnp.ndarray  # [ch, ...] features blended behind (and the background)
    depth: jnp.ndarray  # sum w z behind
    distort: jnp.ndarray  # the distortion among the surfels behind


class Hit(NamedTuple):
    """Where a pixel's ray meets a surfel, and its weight there (planes [...])."""

    alpha: jnp.ndarray  # min(ALPHA_MAX, raw)
    raw: jnp.ndarray  # o * vis
    vis: jnp.ndarray  # the weight exp(-min(g3, g2)) (0 without an intersection)
    disk: jnp.ndarray  # bool: the disk's Gaussian is the larger (else the low pass)
    u: jnp.ndarray
    v: jnp.ndarray
    z: jnp.ndarray  # the intersection's camera depth
    c2: jnp.ndarray  # h_u x h_v's third entry (1 where there is no intersection)
    hu: tuple
    hv: tuple
    dx: jnp.ndarray  # pixel - centre's pixel
    dy: jnp.ndarray


def surfel_hit(px: Pixels, g, near_plane: float) -> Hit:
    """The ray-surfel intersection at the pixel centres `px` for packed parameters `g`
    [SURFEL_GEOM, ...] broadcast against them; no hit nearer than `near_plane`."""
    dx, dy = px.x - g[7], px.y - g[8]
    hu = (dx * g[4] - g[0], dx * g[5] - g[1], dx * g[6])
    hv = (dy * g[4] - g[2], dy * g[5] - g[3], dy * g[6])
    c0, c1, c2 = _cross(hu, hv)
    norms2 = (hu[0] * hu[0] + hu[1] * hu[1] + hu[2] * hu[2]) * (hv[0] * hv[0] + hv[1] * hv[1] + hv[2] * hv[2])
    ok = c2 * c2 > (PARALLEL * PARALLEL) * norms2  # |c2| > PARALLEL |h_u| |h_v|, without a square root per pixel
    c2 = jnp.where(ok, c2, 1.0)
    u, v = c0 / c2, c1 / c2
    g3 = 0.5 * (u * u + v * v)
    g2 = dx * dx + dy * dy
    disk = g3 <= g2
    z = jnp.where(disk, g[4] * u + g[5] * v + g[6], g[6])
    ok = ok & (z >= near_plane)
    vis = jnp.where(ok, jnp.exp(-jnp.minimum(g3, g2)), 0.0)
    raw = g[9] * vis
    return Hit(jnp.minimum(ALPHA_MAX, raw), raw, vis, disk, u, v, jnp.where(ok, z, 0.0), c2, hu, hv, dx, dy)


def _cross(a, b):
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def initial_state(inside, ch: int, per_channel: bool = False) -> SurfelState:
    """State before any surfel (as `blend.initial_state`)."""
    shape = inside.shape
    zeros = jnp.zeros(shape, jnp.float32)
    return SurfelState(
        T=jnp.ones(shape, jnp.float32),
        color=(zeros,) * ch if per_channel else jnp.zeros((ch,) + shape, jnp.float32),
        depth=zeros, distort=zeros, median=zeros,
        median_last=jnp.zeros(shape, jnp.int32), last=jnp.zeros(shape, jnp.int32), done=~inside,
    )


def blend_forward(state: SurfelState, px: Pixels, s: Splat, near_plane: float) -> SurfelState:
    """Blend one surfel into the pixels (front to back)."""
    hit = surfel_hit(px, s.geom, near_plane)
    blend = s.in_range & ~state.done & (hit.alpha >= ALPHA_MIN)
    next_T = state.T * (1.0 - hit.alpha)
    stop = blend & (next_T < T_MIN)
    blend = blend & ~stop
    w = jnp.where(blend, hit.alpha * state.T, 0.0)
    median = blend & (state.T > 0.5)  # the transmittance has not yet reached 0.5: this one is the median so far
    return SurfelState(
        T=jnp.where(blend, next_T, state.T),
        color=scaled_add(state.color, w, s.feats),
        depth=state.depth + w * hit.z,
        distort=state.distort + 2.0 * w * (hit.z * (1.0 - state.T) - state.depth),
        median=jnp.where(median, hit.z, state.median),
        median_last=jnp.where(median, s.pos + 1, state.median_last),
        last=jnp.where(blend, s.pos + 1, state.last),
        done=state.done | stop,
    )


def initial_back(cot: SurfelCotangents, behind0) -> SurfelBack:
    """Back-to-front state behind the last surfel: the background's features, no depth behind."""
    zeros = jnp.zeros_like(cot.T_final)
    return SurfelBack(T=cot.T_final, behind=behind0, depth=zeros, distort=zeros)


def blend_backward(state: SurfelBack, px: Pixels, s: Splat, cot: SurfelCotangents, near_plane: float):
    """One step of the back-to-front walk: un-blend the surfel and return its per-pixel gradients
    (geom rows SURFEL_GEOM_ROWS; `abs_means` |d mean_x|, |d mean_y|: moving the centre's pixel
    moves the whole footprint on screen, the means2d probe's statistic)."""
    g, f = s.geom, s.feats
    hit = surfel_hit(px, g, near_plane)
    alpha, z = hit.alpha, hit.z
    active = s.in_range & (s.pos < cot.last) & (alpha >= ALPHA_MIN)
    inv = 1.0 / (1.0 - alpha)
    T_k = jnp.where(active, state.T * inv, state.T)
    w = jnp.where(active, alpha * T_k, 0.0)

    # d alpha: the features and depth (T_k f - behind / (1 - alpha)), the alpha, the distortion
    d_alpha = cot.dA * cot.T_final * inv + cot.dD * (T_k * z - state.depth * inv)
    for i in range(len(cot.dC)):
        d_alpha = d_alpha + cot.dC[i] * (T_k * f[i] - state.behind[i] * inv)
    A = 1.0 - T_k  # sum of the weights in front
    B = state.T - cot.T_final  # ... and behind
    front = cot.depth_total - w * z - state.depth  # sum w z in front
    per_weight = 2.0 * (z * A - front + state.depth - z * B)  # d distortion / d w_k
    pairs_behind = 2.0 * state.distort + 2.0 * (state.depth * (A + w) - B * (front + w * z))  # sum_{i>k} w_i dDist/dw_i
    d_alpha = d_alpha + cot.dDist * (T_k * per_weight - pairs_behind * inv)
    d_alpha = jnp.where(active & (hit.raw <= ALPHA_MAX), d_alpha, 0.0)
    d_z = w * cot.dD + cot.dDist * 2.0 * w * (A - B) + jnp.where(s.pos + 1 == cot.median_last, cot.dMed, 0.0)
    d_z = jnp.where(active, d_z, 0.0)

    # through alpha = o exp(-min(g3, g2)) and z = r2 . (u, v, 1) (the disk's) or r2's depth (the low pass's)
    d_e = -hit.raw * d_alpha
    d_g3 = jnp.where(hit.disk, d_e, 0.0)
    d_g2 = jnp.where(hit.disk, 0.0, d_e)
    d_zd = jnp.where(hit.disk, d_z, 0.0)  # z of the disk's intersection
    d_u = d_g3 * hit.u + d_zd * g[4]
    d_v = d_g3 * hit.v + d_zd * g[5]
    d_c = (d_u / hit.c2, d_v / hit.c2, -(d_u * hit.u + d_v * hit.v) / hit.c2)  # u = c0 / c2, v = c1 / c2
    d_hu = _cross(hit.hv, d_c)  # c = h_u x h_v
    d_hv = _cross(d_c, hit.hu)
    dx, dy = hit.dx, hit.dy
    d_mean = (-(d_hu[0] * g[4] + d_hu[1] * g[5] + d_hu[2] * g[6]) - 2.0 * dx * d_g2,  # h_u = dx r2 - r0, dx = x - mean_x
              -(d_hv[0] * g[4] + d_hv[1] * g[5] + d_hv[2] * g[6]) - 2.0 * dy * d_g2)
    geom = (-d_hu[0], -d_hu[1], -d_hv[0], -d_hv[1],
            dx * d_hu[0] + dy * d_hv[0] + d_zd * hit.u, dx * d_hu[1] + dy * d_hv[1] + d_zd * hit.v,
            dx * d_hu[2] + dy * d_hv[2] + d_z) + d_mean + (d_alpha * hit.vis,)
    grads = PixelGrads(geom=geom, feats=scaled(w, cot.dC), abs_means=tuple(jnp.abs(x) for x in d_mean))
    back = SurfelBack(
        T=T_k,
        behind=scaled_add(state.behind, w, f),
        depth=state.depth + w * z,
        distort=state.distort + jnp.where(active, 2.0 * w * (state.depth - z * B), 0.0),
    )
    return back, grads


@lru_cache(maxsize=None)
def surfel_rule(near_plane: float) -> BlendRule:
    """The rule for surfels with hits from `near_plane` on (one object per value: rules are part
    of the compiled programs' keys)."""
    near_plane = float(near_plane)
    return BlendRule(SURFEL_GEOM_ROWS, initial_state, partial(blend_forward, near_plane=near_plane), initial_back,
                     partial(blend_backward, near_plane=near_plane))
