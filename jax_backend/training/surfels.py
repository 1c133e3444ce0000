"""Training 2D Gaussian Splatting (Huang et al., SIGGRAPH 2024): what changes when the Gaussians
are disks (`rendering.rasterization_surfel`) rather than 3D Gaussians: the math. The kind of
splat the engine asks, with 2DGS's settings, is `splat_kind.Surfels2D`.

- The parameters keep 3DGS's layout: a disk is a Gaussian whose third scale the rasterizer ignores.
  `as_surfels` sets that third scale to `SURFEL_THICKNESS` of the smaller drawn one when training
  starts (`Surfels2D.started`) and when the disks are exported; in between no loss term trains it
  (`third_scale_fixed`: the strategies' regularisers would), so Adam leaves it, and splits shrink
  it with the others. The density control's splits and MCMC's
  noise, which sample in the Gaussian's own frame, so stay in the disk's plane, and a 3DGS viewer
  opens the exported PLY as flat Gaussians.
- Two terms join the photometric loss, each from its start step on (the paper's start steps):
  the normal consistency `normal_lambda * mean(1 - n . N)`, n the blended disk normals and N the
  rendered depth's surface normals times the alpha (the alpha held constant, as the paper's code),
  with the paper's weight; and the depth distortion `distortion_lambda * mean(distortion)`, the
  rasterizer's `sum_i sum_{j<i} 2 w_i w_j (z_i - z_j)` over camera depth (gsplat's). The paper's
  weights for this term (100 unbounded, 1000 bounded) are for another quantity: its code sums
  squared differences of an NDC depth, m = f (z - n) / ((f - n) z) with n = 0.2, which is no scale
  of this one. Off by default, as in the paper's code (measured: `docs/2dgs.md`).
"""
from __future__ import annotations

import math
import jax
import jax.numpy as jnp

from .loss import masked_mean

SURFEL_THICKNESS = 1e-3  # a disk's third scale, as a fraction of its smaller drawn one


def as_surfels(params: dict) -> dict:
    """The parameters with each Gaussian's third log scale set to `SURFEL_THICKNESS` of its smaller
    drawn scale: a disk written as a flat 3D Gaussian."""
    log_s = params["scales"]
    third = jnp.minimum(log_s[:, 0], log_s[:, 1]) + math.log(SURFEL_THICKNESS)
    return dict(params, scales=log_s.at[:, 2].set(third))


def third_scale_fixed(params: dict) -> dict:
    """The parameters with the third scale held constant (no gradient reaches it) inside the loss."""
    log_s = params["scales"]
    return dict(params, scales=jnp.concatenate([log_s[:, :2], jax.lax.stop_gradient(log_s[:, 2:])], 1))


def geometry_terms(alpha, normals, surf_normals, distort, mask=None):
    """(normal consistency, depth distortion) of one view's render, each a mean over the
    pixels in `mask` (all when None), before their weights.

    Args:
      alpha, distort: [H, W, 1] the render's alpha and depth distortion.
      normals, surf_normals: [H, W, 3] the blended normals and the depth's surface normals.
    """
    n_dot = jnp.sum(normals * surf_normals * jax.lax.stop_gradient(alpha), -1, keepdims=True)
    consistency = masked_mean(1.0 - n_dot, mask)
    distortion = masked_mean(distort, mask)
    return consistency, distortion


def geometry_loss(cfg, step, consistency, distortion):
    """The weighted terms at `step` (each weighted from its start step on; 0 before); `cfg`: the
    weights and start steps (`splat_kind.Surfels2D`)."""
    w_n = jnp.where(step >= cfg.normal_start, cfg.normal_lambda, 0.0)
    w_d = jnp.where(step >= cfg.distortion_start, cfg.distortion_lambda, 0.0)
    return w_n * consistency + w_d * distortion
