"""The backward stores no per-step residuals: its compiled working memory is O(pixels +
intersections + Gaussians) and does not grow with the number of steps in a scan chunk."""
import jax
import jax.numpy as jnp
import pytest

from scenes import cameras, hard_scene
from jax_backend import RasterizerOptions, traced_rasterization

W, H = 160, 120


def _temp_bytes(rasterizer, chunk, capacity, n=2000):
    s = hard_scene(n=n, seed=1)
    vms, Ks = cameras(W, H, n=1)
    args = [jnp.asarray(s[k], jnp.float32) for k in ("means", "quats", "scales", "opacities", "colors")]

    def loss(*a):
        img, alpha, _ = traced_rasterization(*a, vms, Ks, W, H, rasterizer=rasterizer, isect_capacity=capacity,
                                      options=RasterizerOptions(chunk=chunk))
        return jnp.sum(img) + jnp.sum(alpha)

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4))).lower(*args).compile()
    return compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("rasterizer", ["flat", "standard"])
def test_backward_memory_is_independent_of_scan_length(rasterizer):
    capacity, n = 1 << 15, 2000
    small, large = _temp_bytes(rasterizer, 4, capacity, n), _temp_bytes(rasterizer, 64, capacity, n)
    pixels = W * H
    # one float per pixel per step of a 64-step chunk would already add 64 * pixels * 4 bytes
    assert large - small < 8 * pixels * 4, (small, large)
    # O(pixels + intersections + Gaussians) with small constants
    assert large < 64 * pixels * 4 + 16 * capacity * 4 + 64 * n * 4, large
