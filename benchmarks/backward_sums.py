"""How the Pallas backward's per-Gaussian gradient sums should land, decided from the compiled H200
program: atomic adds into per-Gaussian rows (what `rasterize_pallas` does) against per-intersection
partial sums (each intersection slot its own row, written by the one program whose tile holds it,
then summed per Gaussian by XLA's `segment_sum`). Both are race-free on a GPU.

For each variant, `rasterization` forward + backward at fern size (504x378, `realistic_scene`)
compiled for the H200 target (and with `--xla_gpu_deterministic_ops=true`, which makes XLA's own
scatter-adds deterministic; no XLA flag reaches the atomics inside a Triton kernel): kernel
launches (`launches.py`), XLA's temporary memory, the Triton kernels' global writes, the
intersection buffer; on this CPU (interpret mode) the two variants' gradients side by side.

    python -m benchmarks.backward_sums [--gaussians 10000 100000]

Compile-only: nothing here ran on a GPU. The figures are what XLA builds, not how fast it runs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

VARIANTS = ("atomic", "partials")


def per_intersection_backward(cfg, geom, feats, ids, tiles, cot, behind0):
    """The partial-sums variant: [M, GEOM + ch + 2] rows, one per intersection slot (stored by the
    tile's own program: no two programs write one slot), reduced per Gaussian in XLA."""
    import jax
    import jax.numpy as jnp

    from jax_backend.rendering.rasterize_pallas import backward_call

    ch, n = feats.shape

    def store_at_slot(acc_ref, gid, slot, k, value):
        del gid
        acc_ref[slot, jnp.int32(k)] = value

    zeros = jnp.zeros((ids.shape[0], geom.shape[0] + ch + 2), jnp.float32)
    rows = backward_call(geom, feats, ids, tiles, cot, behind0, store_at_slot, zeros, cfg.layout.platform, cfg.rule)
    return cfg.rule.split_rows(jax.ops.segment_sum(rows, ids, num_segments=n), ch)


def _register():
    from jax_backend.rendering import composite
    from jax_backend.rendering.rasterize_pallas import pallas_forward

    composite.RASTERIZERS["pallas-partials"] = composite.Rasterizer(pallas_forward, per_intersection_backward)
    return {"atomic": "pallas", "partials": "pallas-partials"}


def _program(variant: str, n: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from tools.programs import HEIGHT, WIDTH, scene_views
    from jax_backend import traced_rasterization
    from jax_backend.rendering import count_intersections
    from jax_backend.rendering.isect_buffer import size_for

    rasterizer = _register()[variant]
    means, quats, scales, opacities, colors, viewmats, Ks = scene_views(n)
    count = int(count_intersections(means, quats, scales, opacities, viewmats[:1], Ks[:1], WIDTH, HEIGHT)[0])
    cap = size_for(count)

    def loss(m, q, s, o, c):
        img, alpha, _ = traced_rasterization(m, q, s, o, c, viewmats[:1], Ks[:1], WIDTH, HEIGHT, isect_capacity=cap,
                                      rasterizer=rasterizer)
        return jnp.sum(img) + jnp.sum(alpha)

    args = [np.asarray(a, np.float32) for a in (means, quats, scales, opacities, colors)]
    return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4)), args, {"intersections": count, "isect_capacity": cap}


def child(variant: str, n: int) -> dict:
    import jax

    from tools import hlo_checks, launches
    from tools.programs import lower_program, target_devices

    target = target_devices("h200")
    fn, args, info = _program(variant, n)
    compiled = lower_program(fn, args, target).compile()
    text = compiled.as_text()
    mem = compiled.memory_analysis()
    writes = [hlo_checks.memory_ops(m) for m in hlo_checks.triton_modules(text)]
    return {"variant": variant, "gaussians": n, **info, "launches": launches.launches(text).launches,
            "temp_bytes": int(mem.temp_size_in_bytes), "triton_writes": writes,
            "scatters": text.count(" scatter("), "sorts": text.count(" sort("),
            "deterministic_flag": "xla_gpu_deterministic_ops" in os.environ.get("XLA_FLAGS", ""), "jax": jax.__version__}


def cpu_agreement(n: int = 300) -> float:
    """Largest relative difference between the two variants' gradients, interpret mode on this CPU
    (a small scene: interpret mode is slow)."""
    import jax
    import numpy as np

    from tools.programs import realistic_scene
    from jax_backend import traced_rasterization

    names = _register()
    means, quats, scales, opacities, colors, viewmat, K = realistic_scene(n)
    w, h = 96, 72
    K = K.copy()
    K[:, :2] *= w / 504

    def grads(rasterizer):
        def loss(m, o, c):
            img, alpha, _ = traced_rasterization(m, quats, scales, o, c, viewmat, K, w, h, rasterizer=rasterizer,
                                          isect_capacity=1 << 14)
            return (img * np.linspace(0, 1, 3)).sum() + alpha.sum()

        return jax.grad(loss, argnums=(0, 1, 2))(means, opacities, colors)

    a, b = grads(names["atomic"]), grads(names["partials"])
    return max(float(np.abs(np.asarray(x) - np.asarray(y)).max() / (np.abs(np.asarray(y)).max() + 1e-30))
               for x, y in zip(a, b))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gaussians", nargs="+", type=int, default=[10_000, 100_000])
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], int(a.child[1]))))
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"# the Pallas backward's sums, compiled for h200 (fern size 504x378); gradients of the two variants "
          f"on this CPU (interpret mode) differ by at most {cpu_agreement():.1e} (relative to the largest)", flush=True)
    print("| variant | XLA flag | Gaussians | intersections (buffer) | launches | temp MB | scatters | sorts "
          "| Triton global writes (forward; backward) |", flush=True)
    print("|---|---|---|---|---|---|---|---|---|", flush=True)
    for n in a.gaussians:
        for deterministic in (False, True):
            for variant in VARIANTS:
                env = dict(os.environ, JAX_PLATFORMS="cpu")
                if deterministic:
                    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_gpu_deterministic_ops=true").strip()
                out = subprocess.run([sys.executable, "-m", "benchmarks.backward_sums", "--child", variant, str(n)],
                                     capture_output=True, text=True, cwd=root, env=env)
                if out.returncode:
                    print(f"| {variant} | {'deterministic' if deterministic else '-'} | {n} | FAILED: "
                          f"{out.stderr.strip().splitlines()[-1][:200]} |", flush=True)
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                w = "; ".join(", ".join(f"{v} {k}" for k, v in m.items() if v) for m in r["triton_writes"])
                print(f"| {variant} | {'deterministic ops' if deterministic else '-'} | {n} | {r['intersections']} "
                      f"({r['isect_capacity']}) | {r['launches']:.0f} | {r['temp_bytes'] / 1e6:.1f} | {r['scatters']} "
                      f"| {r['sorts']} | {w} |", flush=True)


if __name__ == "__main__":
    main()
