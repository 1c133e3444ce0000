"""Gaussian parameters as a pytree with a static capacity and an alive mask.

Parameters are stored unconstrained, as in 3DGS and gsplat: means, log-scales, quaternions (wxyz,
unnormalised), opacity logits, SH DC `sh0` [N,1,3] and the higher bands `shN` [N,K-1,3].
Slots beyond the live Gaussians are dead (`alive` False): they render with opacity 0, get no
updates, and are where densification puts new Gaussians.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..rendering import SH_C0

PARAM_NAMES = ("means", "scales", "quats", "opacities", "sh0", "shN")


class Gaussians(NamedTuple):
    """The Gaussians of a scene: every leaf has the leading [capacity] axis."""

    params: dict  # name -> [capacity, ...] (see PARAM_NAMES)
    alive: jnp.ndarray  # [capacity] bool

    @property
    def capacity(self) -> int:
        return self.alive.shape[0]


def rgb_to_sh0(rgb):
    """RGB in [0, 1] -> the SH DC coefficient that renders it."""
    return (rgb - 0.5) / SH_C0


def sh0_to_rgb(sh0):
    """The SH DC coefficient -> the RGB it renders (before clamping; numpy, JAX or torch arrays)."""
    return sh0 * SH_C0 + 0.5


def activated(params: dict, alive):
    """What the renderer takes.

    Args:
      params: the parameters (PARAM_NAMES), each [N, ...].
      alive: [N] bool.

    Returns:
      (means [N,3], quats [N,4], scales [N,3], opacities [N] (0 for dead slots), SH [N,K,3]).
    """
    opacities = jnp.where(alive, jax.nn.sigmoid(params["opacities"]), 0.0)
    sh = jnp.concatenate([params["sh0"], params["shN"]], axis=1)
    return params["means"], params["quats"], jnp.exp(params["scales"]), opacities, sh


def alive_first(gaussians: Gaussians):
    """The parameters with the alive Gaussians first (in slot order), and how many are alive.

    Returns:
      ({name: [capacity, ...]}, number alive).
    """
    order = jnp.argsort(~gaussians.alive, stable=True)
    return {k: v[order] for k, v in gaussians.params.items()}, int(jnp.sum(gaussians.alive))
