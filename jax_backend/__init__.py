"""jax-gs backend: 3D Gaussian Splatting in pure JAX (no torch, no nerfstudio)."""
from .rendering import rasterization

__all__ = ["rasterization"]
