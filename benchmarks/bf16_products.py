"""What bfloat16 products would cost: the SH colours as a TPU computes a float32 contraction at the
default precision (operands rounded to bfloat16, products summed in float32), measured on this CPU.

jax-gs evaluates SH colours elementwise (float32 on every platform: `rendering/sh.py`); before
issue 40 it was an einsum at the default precision, which a TPU could run as bfloat16 products
(forward, and its transposes in the backward: `bf16_basis_sum`). Here the
fox (../shared/data/fox) is trained twice from the same start, side by side in one process: once
as jax-gs does, once with the SH bases and coefficients rounded to bfloat16 before their product.
Then the float32-trained scene is rendered both ways from the held-out views.

    python -m benchmarks.bf16_products [--steps 1000] [--data ../shared/data/fox]
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import time
from pathlib import Path


def bf16_sh_to_color(coeffs, dirs, active_degree=None):
    """`sh.sh_to_color` with the bases and coefficients rounded to bfloat16 before their product
    (a TPU's float32 dot at the default precision: bfloat16 inputs, float32 sums)."""
    import jax.numpy as jnp

    from jax_backend.rendering.sh import direction_basis, sh_degree_of


    basis = direction_basis(dirs, sh_degree_of(coeffs.shape[-2]), active_degree)
    return jnp.maximum(bf16_basis_sum(basis, coeffs) + 0.5, 0.0)


@functools.cache
def _bf16_basis_sum():
    """sum_k basis[n, k] coeffs[n, k, c] as a TPU's dot at the default precision computes it,
    forward and backward: each product of bfloat16-rounded operands, summed in float32; the
    gradients (the dot's transposes, dots at the default precision too) likewise, from the
    bfloat16-rounded cotangent. Built once (JAX is imported on first use)."""
    import jax
    import jax.numpy as jnp

    r = round_to_bfloat16

    @jax.custom_vjp
    def f(basis, coeffs):
        return jnp.sum(r(basis)[..., None] * r(coeffs), -2)

    def fwd(basis, coeffs):
        return f(basis, coeffs), (basis, coeffs)

    def bwd(res, g):
        basis, coeffs = res
        g = r(g)[..., None, :]  # [n, 1, c]
        return jnp.sum(r(coeffs) * g, -1), r(basis)[..., None] * g

    f.defvjp(fwd, bwd)
    return f


def bf16_basis_sum(basis, coeffs):
    return _bf16_basis_sum()(basis, coeffs)


def round_to_bfloat16(x):
    """float32 `x` rounded to the nearest bfloat16 (ties to even), kept in float32. By its bits:
    XLA removes a float32 -> bfloat16 -> float32 round trip of `astype` as excess precision it may
    keep (`xla_allow_excess_precision`), and did here. No gradient of its own (integer bits):
    `bf16_basis_sum` gives the product's."""
    import jax
    import jax.numpy as jnp

    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
    bits = (bits + jnp.uint32(0x7FFF) + ((bits >> 16) & 1)) & jnp.uint32(0xFFFF0000)
    return jax.lax.bitcast_convert_type(bits, jnp.float32)


@contextlib.contextmanager
def bf16_products(on: bool):
    import importlib

    import jax

    rasterization = importlib.import_module("jax_backend.rendering.rasterization")  # the module, not the function
    original = rasterization.sh_to_color
    if on:
        rasterization.sh_to_color = bf16_sh_to_color
    jax.clear_caches()
    try:
        yield
    finally:
        rasterization.sh_to_color = original
        jax.clear_caches()


def main():
    import jax.numpy as jnp
    import numpy as np

    from tools.captures import load_transforms
    from jax_backend import TrainConfig, Trainer, init_random, make_dataset, make_strategy
    from jax_backend.training import evaluation
    from jax_backend.training.loss import psnr

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "fox"))
    ap.add_argument("--steps", type=int, default=1000)
    a = ap.parse_args()
    d = load_transforms(a.data)
    data = make_dataset(*d["train"])
    r = 0.5 * d["scene_extent"] / 1.1
    cfg = TrainConfig(max_steps=a.steps, strategy=make_strategy("mcmc", budget=40000), steps_per_block=100,
                      sh_degree_interval=max(a.steps // 4, 1))  # every SH band trained within the run
    print(f"# fox, {a.steps} steps of the MCMC strategy (budget 40000, 20000 random initial Gaussians, SH degree "
          f"+1 every {cfg.sh_degree_interval} steps), {data.num_views} train / {len(d['test'][0])} held-out views; "
          f"SH colours float32 (jax-gs) or from bfloat16-rounded operands (a TPU dot at default precision)", flush=True)
    trained = {}
    for name in ("float32", "bfloat16 products"):
        t0 = time.perf_counter()
        with bf16_products(name != "float32"):
            tr = Trainer(cfg, data, init_random(20000, [-r] * 3, [r] * 3, sh_degree=cfg.sh_degree), d["scene_extent"],
                         log=lambda *_: None)
            tr.train(a.steps)
            trained[name] = tr
            print(f"trained with {name:>17}: held-out PSNR {evaluation.heldout_psnr(tr, *d['test']):.3f} dB "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    tr = trained["float32"]
    images = [jnp.asarray(im[..., :3], jnp.float32) / 255.0 for im in d["test"][0]]
    renders = {}
    for name in ("float32", "bfloat16 products"):
        with bf16_products(name != "float32"):
            renders[name] = [jnp.clip(jnp.asarray(evaluation.render(tr, vm, K, im.shape[1], im.shape[0], depth=False).rgb), 0, 1)
                             for im, vm, K in zip(*d["test"])]
        heldout = np.mean([float(psnr(x, im)) for x, im in zip(renders[name], images)])  # as evaluation.heldout_psnr
        print(f"the float32-trained scene rendered with {name:>17}: held-out PSNR {heldout:.3f} dB", flush=True)
    pairs = list(zip(renders["float32"], renders["bfloat16 products"]))
    diff = [float(psnr(x, y)) for x, y in pairs]
    worst = max(float(jnp.abs(x - y).max()) for x, y in pairs)
    print(f"its bfloat16-product renders against its float32 renders: PSNR {np.mean(diff):.1f} dB (mean over views), "
          f"largest pixel difference {worst:.4f} ({worst * 255:.2f} of 255)", flush=True)

if __name__ == "__main__":
    main()
