"""Training-speed benchmark: steps/s of the compiled scan block against the same jitted step
dispatched from a Python loop, and of each rasterizer inside training; peak process memory.

Scene: 504x378, 10k Gaussians of realistic sizes (tools.programs.realistic_scene), 8 views
rendered from them; training starts from those Gaussians (density control off, so every
configuration does the same work). Each configuration runs in its own process (`harness.in_process`),
one after the other in this run; ratios come from figures measured side by side.

    python -m benchmarks.train [--gaussians 10000] [--steps 40]
"""
from __future__ import annotations

import resource
import time
from typing import List

from benchmarks.harness import cli, in_process

CONFIGS = {
    "scan-flat": ("flat", "scan"),
    "loop-flat": ("flat", "loop"),
    "scan-standard": ("standard", "scan"),
}


def build_trainer(n: int, rasterizer: str, steps_per_block: int, ssim_lambda: float = 0.2, tile_devices: int = 0,
                  replicas: int = 0, **trainer_kw):
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import rasterization
    from jax_backend import DefaultStrategy, Gaussians, TrainConfig, Trainer, make_dataset, make_layout, rgb_to_sh0

    from tools.programs import HEIGHT, WIDTH, realistic_scene

    means, quats, scales, opac, colors, _, K = realistic_scene(n)
    vms = []
    for a in np.linspace(-0.3, 0.3, 8):
        c2w = np.eye(4)
        pos = np.array([3 * np.sin(a), 0.0, -3 * np.cos(a)])
        z = -pos / np.linalg.norm(pos)
        x = np.cross([0.0, -1.0, 0.0], z)
        x /= np.linalg.norm(x)
        c2w[:3, :3] = np.stack([x, np.cross(z, x), z], 1)
        c2w[:3, 3] = pos
        vms.append(np.linalg.inv(c2w))
    vms, Ks = np.stack(vms), np.repeat(K, 8, 0)
    imgs = np.asarray(rasterization(means, quats, scales, opac, colors, vms, Ks, WIDTH, HEIGHT)[0])
    data = make_dataset([(np.clip(i, 0, 1) * 255).astype(np.uint8) for i in imgs], vms, Ks)
    p = {"means": means, "scales": np.log(scales), "quats": quats, "opacities": np.log(opac / (1 - opac)),
         "sh0": rgb_to_sh0(colors)[:, None], "shN": np.zeros((n, 15, 3))}
    g = Gaussians({k: jnp.asarray(v, jnp.float32) for k, v in p.items()}, jnp.ones(n, bool))
    cfg = TrainConfig(steps_per_block=steps_per_block, rasterizer=rasterizer, ssim_lambda=ssim_lambda,
                      strategy=DefaultStrategy(refine_start=10**9))
    return Trainer(cfg, data, g, scene_extent=2.0, layout=make_layout(replicas, tile_devices), **trainer_kw)


def measure(n: int, name: str, steps: int) -> dict:
    from jax_backend.devices import use_cpu_cores

    use_cpu_cores()  # as ns-train does: one CPU device per core, each view's tiles dealt over them
    import jax

    rasterizer, mode = CONFIGS[name]
    tr = build_trainer(n, rasterizer, steps if mode == "scan" else 1)
    per_call = steps if mode == "scan" else 1
    tr.run_block(per_call)  # compile
    jax.block_until_ready(tr.state)
    t0 = time.perf_counter()
    done = 0
    while done < steps:
        m, _ = tr.run_block(per_call)
        done += per_call
    jax.block_until_ready(tr.state)
    dt = time.perf_counter() - t0
    return {"name": name, "steps_per_s": steps / dt, "psnr": float(m["psnr"].mean()),
            "intersections": float(m["num_intersections"].mean()),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(gaussians: int = 10_000, steps: int = 40, configs: List[str] = list(CONFIGS)) -> None:
    """Steps per second of each configuration (`configs`: of scan-flat, loop-flat, scan-standard)."""
    print(f"# 504x378, {gaussians} Gaussians, {steps} timed steps after compiling; one process per configuration")
    rows = {}
    for name in configs:
        rows[name] = r = in_process("benchmarks.train:measure", n=gaussians, name=name, steps=steps)
        print(f"{name:>14}: {r['steps_per_s']:.2f} steps/s, peak {r['peak_rss_mib']:.0f} MiB, "
              f"{r['intersections']:.0f} intersections/step, PSNR {r['psnr']:.1f}", flush=True)
    print()
    if "scan-flat" in rows and "loop-flat" in rows:
        print(f"scan block / Python loop (flat): {rows['scan-flat']['steps_per_s'] / rows['loop-flat']['steps_per_s']:.2f}x")
    if "scan-flat" in rows and "scan-standard" in rows:
        print(f"flat / standard inside training: {rows['scan-flat']['steps_per_s'] / rows['scan-standard']['steps_per_s']:.2f}x")


if __name__ == "__main__":
    cli(main, "train")
