"""Where a training step's time goes on this machine (#13's profile): each piece of the step on
`benchmarks.train`'s scene (504x378, 10k Gaussians), jitted alone and timed after compiling, side
by side in one run, as a share of the whole step.

Pieces: projection + SH + binning (with its sort), the flat rasterizer's forward, forward and
backward (L1 on the render), the photometric loss with SSIM and its gradient on an image, and the
whole training step (`Trainer.run_block`, per step), with and without the SSIM term.

    python -m benchmarks.profile_step [--gaussians 10000] [--repeat 10]

It runs on one XLA CPU device (the tiles are not dealt over the cores), and a piece jitted alone
is not always what it costs inside the step: the L1+SSIM gradient alone takes longer than a
whole step that contains it (XLA's CPU convolution is slow as a program's top-level operation
and fast inside the block's loop: docs/time_to_quality.md). Read the rows as the ablation they
are; the step rows are the ones a training run pays. (Before 2026-12-06 the step "without SSIM"
still computed SSIM and multiplied it by 0; `photometric_loss` now leaves the blurs out.)
"""
from __future__ import annotations

import argparse
import time


def timed(fn, *args, repeat: int) -> float:
    import jax

    jax.block_until_ready(fn(*args))  # compile
    t0 = time.perf_counter()
    for _ in range(repeat):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / repeat


def main():
    import jax
    import jax.numpy as jnp

    from jax_backend import activated, photometric_loss, traced_rasterization
    from jax_backend.rendering.binning import bin_gaussians
    from jax_backend.rendering.projection import project_gaussians
    from jax_backend.rendering.tiles import TileGrid

    from .train import build_trainer

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gaussians", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    tr = build_trainer(a.gaussians, "flat", 10)
    g, data = tr.state.gaussians, tr.data
    means, quats, scales, opac, sh = activated(g.params, g.alive)
    vm, K, W, H = data.viewmats[0], data.Ks[0], data.width, data.height
    target = data.images[0].astype(jnp.float32)[..., :3] / 255.0
    cap = tr.isect_capacity
    grid = TileGrid(W, H, 16)

    @jax.jit
    def bin_only(means, quats, scales, opac):
        proj = project_gaussians(means, quats, scales, opac, vm, K, W, H, 0.01, 0.3, "classic")
        return bin_gaussians(proj, grid, cap).gaussian_ids

    def render(means, quats, scales, opac, sh):
        return traced_rasterization(means, quats, scales, opac, sh, vm[None], K[None], W, H, sh_degree=3,
                             isect_capacity=cap)[0][0]

    fwd = jax.jit(render)
    grad = jax.jit(jax.grad(lambda *p: jnp.abs(render(*p) - target).mean(), argnums=(0, 1, 2, 3, 4)))
    img = jnp.clip(fwd(means, quats, scales, opac, sh), 0, 1)
    loss_grad = jax.jit(jax.grad(lambda x: photometric_loss(x, target, None, 0.2)))

    rows = {
        "projection + binning (sort)": timed(bin_only, means, quats, scales, opac, repeat=a.repeat),
        "render forward": timed(fwd, means, quats, scales, opac, sh, repeat=a.repeat),
        "render forward + backward": timed(grad, means, quats, scales, opac, sh, repeat=a.repeat),
        "loss (L1 + SSIM) gradient": timed(loss_grad, img, repeat=a.repeat),
    }
    def per_step(trainer) -> float:
        trainer.run_block()  # compile
        t0 = time.perf_counter()
        reps = max(1, a.repeat // 5)
        for _ in range(reps):
            trainer.run_block()
        return (time.perf_counter() - t0) / (10 * reps)

    rows["whole training step"] = per_step(tr)
    rows["whole training step without SSIM (ssim_lambda 0)"] = per_step(build_trainer(a.gaussians, "flat", 10,
                                                                                      ssim_lambda=0.0))
    step = rows["whole training step"]
    print(f"{a.gaussians} Gaussians, {W}x{H}, intersection buffer {cap}, one device ({jax.devices()[0].platform}), "
          "each piece jitted alone")
    print("| piece | ms | share of a step |\n|---|---|---|")
    for name, t in rows.items():
        print(f"| {name} | {t * 1e3:.1f} | {t / step:.0%} |")


if __name__ == "__main__":
    main()
