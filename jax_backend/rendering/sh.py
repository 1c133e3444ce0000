"""Real spherical harmonics up to degree 3, with the constants of the 3DGS reference code."""
from __future__ import annotations

import jax.numpy as jnp

SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396)
SH_C3 = (
    -0.5900435899266435,
    2.890611442640554,
    -0.4570457994644658,
    0.3731763325901154,
    -0.4570457994644658,
    1.445305721320277,
    -0.5900435899266435,
)


def num_sh_bases(degree: int) -> int:
    """SH coefficients per colour channel up to `degree`: (degree + 1)^2."""
    return (degree + 1) ** 2


def sh_degree_of(num_bases: int) -> int:
    """The degree whose bases number `num_bases` (1, 4, 9 or 16); ValueError otherwise."""
    degree = int(round(num_bases**0.5)) - 1
    if num_bases not in (1, 4, 9, 16) or num_sh_bases(degree) != num_bases:
        raise ValueError(f"SH coefficients must have 1, 4, 9 or 16 bases per channel, got {num_bases}")
    return degree


def sh_basis(dirs: jnp.ndarray, degree: int) -> jnp.ndarray:
    """[..., 3] unit directions -> [..., (degree+1)^2] basis values."""
    x, y, z = dirs[..., 0], dirs[..., 1], dirs[..., 2]
    out = [jnp.full_like(x, SH_C0)]
    if degree >= 1:
        out += [-SH_C1 * y, SH_C1 * z, -SH_C1 * x]
    if degree >= 2:
        xx, yy, zz, xy, yz, xz = x * x, y * y, z * z, x * y, y * z, x * z
        out += [
            SH_C2[0] * xy,
            SH_C2[1] * yz,
            SH_C2[2] * (2 * zz - xx - yy),
            SH_C2[3] * xz,
            SH_C2[4] * (xx - yy),
        ]
    if degree >= 3:
        out += [
            SH_C3[0] * y * (3 * xx - yy),
            SH_C3[1] * xy * z,
            SH_C3[2] * y * (4 * zz - xx - yy),
            SH_C3[3] * z * (2 * zz - 3 * xx - 3 * yy),
            SH_C3[4] * x * (4 * zz - xx - yy),
            SH_C3[5] * z * (xx - yy),
            SH_C3[6] * x * (xx - 3 * yy),
        ]
    return jnp.stack(out, -1)


def band_mask(degree: int, active_degree) -> jnp.ndarray:
    """[(degree+1)^2] mask keeping bands l <= active_degree; active_degree may be traced."""
    bands = jnp.concatenate([jnp.full((2 * l + 1,), l) for l in range(degree + 1)])
    return (bands <= active_degree).astype(jnp.float32)


def direction_basis(dirs: jnp.ndarray, degree: int, active_degree=None) -> jnp.ndarray:
    """dirs [N,3] (any norm) -> the SH basis of their unit directions [N,(degree+1)^2], bands above
    `active_degree` (int or traced scalar) zeroed, so a degree schedule does not change shapes or
    recompile."""
    n = jnp.linalg.norm(dirs, axis=-1, keepdims=True)
    basis = sh_basis(dirs / jnp.where(n > 0, n, 1.0), degree)
    if active_degree is not None:
        basis = basis * band_mask(degree, active_degree)
    return basis


def sh_to_color(coeffs: jnp.ndarray, dirs: jnp.ndarray, active_degree=None) -> jnp.ndarray:
    """coeffs [N,K,3], dirs [N,3] (any norm) -> colours [N,3] = max(SH(dirs) + 0.5, 0), the bands
    above `active_degree` left out (`direction_basis`)."""
    basis = direction_basis(dirs, sh_degree_of(coeffs.shape[-2]), active_degree)
    # the sum over bases elementwise: float32 on every platform (a dot at default precision would
    # multiply in bfloat16 on a TPU: docs/tpu.md)
    return jnp.maximum(jnp.sum(basis[..., None] * coeffs, -2) + 0.5, 0.0)
