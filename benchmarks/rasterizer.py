"""Rasterizer benchmark: forward and forward+backward time and peak process memory, flat vs
standard, at 504x378 with 10k / 100k / 300k Gaussians of realistic sizes.

Every measurement runs in its own subprocess (peak RSS is per process), one after another in this
one run, and the ratios are printed from figures measured side by side.

    python -m benchmarks.rasterizer [--sizes 10000 100000 300000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from tools.programs import HEIGHT, WIDTH, realistic_scene


def measure(n: int, rasterizer: str, mode: str, repeats: int) -> dict:
    """Runs in the child process."""
    import jax
    import jax.numpy as jnp

    from jax_backend import rasterization, traced_rasterization
    from jax_backend.rendering.isect_buffer import size_for

    args = [jnp.asarray(a, jnp.float32) for a in realistic_scene(n)]
    _, _, meta = rasterization(*args, WIDTH, HEIGHT, rasterizer=rasterizer)  # eager: finds the capacity
    isects = int(meta["num_intersections"][0])
    cap = size_for(isects)
    target = 0.5

    def loss(means, quats, scales, opacities, colors):
        img, alpha, m = traced_rasterization(means, quats, scales, opacities, colors, args[5], args[6], WIDTH, HEIGHT,
                                      rasterizer=rasterizer, isect_capacity=cap)
        return jnp.mean((img - target) ** 2), m["overflow"]

    if mode == "eager":  # a viewer frame: an eager call that sizes its own intersection buffer
        fn = lambda *a: rasterization(*a, args[5], args[6], WIDTH, HEIGHT, rasterizer=rasterizer)[0]  # noqa: E731
    elif mode == "forward":
        fn = jax.jit(lambda *a: loss(*a)[0])
    else:
        fn = jax.jit(jax.grad(lambda *a: loss(*a)[0], argnums=(0, 1, 2, 3, 4)))
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args[:5]))
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args[:5]))
        times.append(time.perf_counter() - t0)
    times.sort()
    return {
        "n": n, "rasterizer": rasterizer, "mode": mode, "intersections": isects,
        "median_s": times[len(times) // 2], "min_s": times[0], "compile_s": compile_s,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_child(n, rasterizer, mode, repeats) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.rasterizer", "--child", str(n), rasterizer, mode, "--repeats", str(repeats)]
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if out.returncode != 0:
        raise RuntimeError(f"benchmark child failed: {' '.join(cmd)}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rasterizers", nargs="+", default=["flat", "standard"])
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        n, r, m = a.child
        print(json.dumps(measure(int(n), r, m, a.repeats)))
        return
    import jax

    print(f"# jax {jax.__version__}, backend {os.environ.get('JAX_PLATFORMS', 'default')}, {WIDTH}x{HEIGHT}, "
          f"median of {a.repeats}; memory = peak RSS of a process doing only that")
    rows = {}
    for n in a.sizes:
        for r in a.rasterizers:
            for m in ("forward", "fwd+bwd"):
                rows[n, r, m] = res = run_child(n, r, m, a.repeats)
                print(f"N={n:>7} {r:>8} {m:>8}: {res['median_s'] * 1e3:8.1f} ms  peak {res['peak_rss_mib']:7.0f} MiB  "
                      f"isects {res['intersections']}  (compile {res['compile_s']:.1f} s)", flush=True)
    print()
    print("| Gaussians | intersections | rasterizer | forward ms | fwd+bwd ms | peak MiB (fwd+bwd) |")
    print("|---|---|---|---|---|---|")
    for n in a.sizes:
        for r in a.rasterizers:
            f, b = rows[n, r, "forward"], rows[n, r, "fwd+bwd"]
            print(f"| {n} | {f['intersections']} | {r} | {f['median_s'] * 1e3:.1f} | {b['median_s'] * 1e3:.1f} | {b['peak_rss_mib']:.0f} |")
    if len(a.rasterizers) == 2:
        x, y = a.rasterizers
        print()
        for n in a.sizes:
            for m in ("forward", "fwd+bwd"):
                print(f"N={n}: {m} time {y}/{x} = {rows[n, y, m]['median_s'] / rows[n, x, m]['median_s']:.2f}, "
                      f"peak memory {y}/{x} = {rows[n, y, m]['peak_rss_mib'] / rows[n, x, m]['peak_rss_mib']:.2f}")


if __name__ == "__main__":
    main()
