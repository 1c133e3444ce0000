"""Photometric loss of 3DGS: 0.8 L1 + 0.2 (1 - SSIM), SSIM with an 11-tap Gaussian window
(sigma 1.5), optional per-pixel masks; and PSNR."""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import array_ops
from ..array_ops import F32

SSIM_C1 = 0.01**2
SSIM_C2 = 0.03**2


def gaussian_window(size: int = 11, sigma: float = 1.5) -> np.ndarray:
    """[size] normalised 1D Gaussian window (SSIM's blur, applied along x then y)."""
    x = np.arange(size) - size // 2
    w = np.exp(-(x**2) / (2 * sigma**2))
    return (w / w.sum()).astype(np.float32)


@partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3, 4))
def _correlate(x, window: tuple, axis: int, pad_lo: int, pad_hi: int):
    """x zero-padded along `axis`, correlated with `window` (full windows only): the weighted sum
    of the window's shifted slices, one fused elementwise kernel."""
    k, n = len(window), x.shape[axis]
    pad = [(0, 0)] * x.ndim
    pad[axis] = (pad_lo, pad_hi)
    x = jnp.pad(x, pad)
    out = n + pad_lo + pad_hi - k + 1
    return sum(w * jax.lax.slice_in_dim(x, t, t + out, axis=axis) for t, w in enumerate(window))


def _correlate_fwd(x, window, axis, pad_lo, pad_hi):
    return _correlate(x, window, axis, pad_lo, pad_hi), None


def _correlate_bwd(window, axis, pad_lo, pad_hi, _, g):
    # the adjoint of a correlation is the correlation with the flipped window, padded to the full
    # overlap: again one fused kernel (autodiff's adjoint kept each slice's padded copy: figure
    # ssim-adjoint, benchmarks/results/library_figures.md)
    k = len(window)
    return (_correlate(g, window[::-1], axis, k - 1 - pad_lo, k - 1 - pad_hi),)


_correlate.defvjp(_correlate_fwd, _correlate_bwd)


def _blur(maps, window, padding):
    """Separable blur of [H, W, C] images along H and W, each channel on its own ("same": of the
    zero-padded image; "valid": full windows only); a list of images in, a list out.

    On TPU as sums of shifted slices, all images stacked into one (`_blur_by_slices`): as
    convolutions, SSIM's blurs made most of the TPU train block's kernels, and a TPU compile's time
    goes to generating kernels. Elsewhere as convolutions, image by image: on a CPU the slices and
    stacked convolutions both trained slower (`array_ops.per_platform`). Measurements: docs/tpu.md."""
    return array_ops.per_platform(maps, tpu=partial(_blur_by_slices, window=window, padding=padding),
                                  default=partial(_blur_by_convolutions, window=window, padding=padding))


def _blur_by_slices(maps, window, padding):
    window = tuple(float(w) for w in window)
    k = len(window)
    lo, hi = (k // 2, k - 1 - k // 2) if padding == "same" else (0, 0)
    x = jnp.stack(maps)  # [images, H, W, C]
    for axis in (1, 2):
        x = _correlate(x, window, axis, lo, hi)
    return list(x)


def _blur_by_convolutions(maps, window, padding):
    k = window.shape[0]
    wx = jnp.asarray(window).reshape(1, 1, 1, k)
    wy = jnp.asarray(window).reshape(1, 1, k, 1)
    pad = "SAME" if padding == "same" else "VALID"
    dn = ("NCHW", "OIHW", "NCHW")
    out = []
    for x in maps:
        x = jnp.moveaxis(x, -1, 0)[:, None]  # [C, 1, H, W]
        x = jax.lax.conv_general_dilated(x, wx, (1, 1), pad, dimension_numbers=dn, precision=F32)
        x = jax.lax.conv_general_dilated(x, wy, (1, 1), pad, dimension_numbers=dn, precision=F32)
        out.append(jnp.moveaxis(x[:, 0], 0, -1))
    return out


def ssim_map(a, b, window_size: int = 11, sigma: float = 1.5, padding: str = "same"):
    """Per-pixel SSIM of [H, W, C] images in [0, 1]. "same": zero padding as the 3DGS code does;
    "valid": only full windows (as pytorch_msssim)."""
    w = gaussian_window(window_size, sigma)
    mu_a, mu_b, aa, bb, ab = _blur([a, b, a * a, b * b, a * b], w, padding)
    s_aa = aa - mu_a**2
    s_bb = bb - mu_b**2
    s_ab = ab - mu_a * mu_b
    num = (2 * mu_a * mu_b + SSIM_C1) * (2 * s_ab + SSIM_C2)
    den = (mu_a**2 + mu_b**2 + SSIM_C1) * (s_aa + s_bb + SSIM_C2)
    return num / den


def masked_mean(x, mask=None):
    """Mean of [H, W, C] over pixels where mask [H, W] is set (all pixels without a mask)."""
    if mask is None:
        return jnp.mean(x)
    m = mask.astype(x.dtype)[..., None]
    return jnp.sum(x * m) / jnp.maximum(jnp.sum(m) * x.shape[-1], 1.0)


def ssim(a, b, mask=None, **kw):
    """Mean SSIM of [H, W, C] images over the pixels in `mask` [H, W] (all when None)."""
    return masked_mean(ssim_map(a, b, **kw), mask)


def photometric_loss(render, target, mask=None, ssim_lambda: float = 0.2):
    """(1 - lambda) L1 + lambda (1 - SSIM) over the masked pixels of [H, W, C] images; L1 alone,
    without SSIM's blurs, when lambda is 0."""
    l1 = masked_mean(jnp.abs(render - target), mask)
    if isinstance(ssim_lambda, (int, float)) and ssim_lambda == 0:
        return l1
    return (1.0 - ssim_lambda) * l1 + ssim_lambda * (1.0 - ssim(render, target, mask))


def psnr(render, target, mask=None):
    """PSNR in dB of [H, W, C] images in [0, 1] over the pixels in `mask` [H, W] (all when None)."""
    mse = masked_mean((render - target) ** 2, mask)
    return -10.0 * jnp.log10(jnp.maximum(mse, 1e-10))


def scale_regularization(log_scales, alive, max_ratio: float, weight: float = 0.1):
    """PhysGaussian's penalty on needle-like Gaussians, as splatfacto applies it: `weight` times the
    mean over alive Gaussians of max(s_max / s_min, max_ratio) - max_ratio, for scales s. Zero
    while every Gaussian's largest-to-smallest scale ratio is within `max_ratio`."""
    ratio = jnp.exp(jnp.max(log_scales, -1) - jnp.min(log_scales, -1))  # from the log scales: no overflow
    w = alive.astype(jnp.float32)
    excess = jnp.maximum(ratio, max_ratio) - max_ratio
    return weight * jnp.sum(excess * w) / jnp.maximum(jnp.sum(w), 1.0)
