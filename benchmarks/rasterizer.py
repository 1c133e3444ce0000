"""The rasterizers, on their own.

speed: forward and forward+backward time and peak process memory, flat vs standard, at 504x378
with 10k / 100k / 300k Gaussians of realistic sizes (`tools.programs.realistic_scene`); every
configuration in a process of its own, one after another in this one run, the ratios from figures
measured side by side.
exactness: against the dense float64 reference renderer (`tests/reference.py`), per rasterizer and
scene family: the worst absolute difference in colour or alpha over every pixel, and how many
pixels sit within float32 rounding of a threshold decision (alpha against 1/255, transmittance
against 1e-4; see docs/rendering.md).

    python -m benchmarks.rasterizer speed [--sizes 10000 100000 300000] [--repeats 5]
    python -m benchmarks.rasterizer exactness [--seeds 40] [--pallas-seeds 4]
"""
from __future__ import annotations

import os
import resource
import sys
import time
from typing import List

from benchmarks.harness import ROOT, cli, in_process
from tools.programs import HEIGHT, WIDTH, realistic_scene


def measure(n: int, rasterizer: str, mode: str, repeats: int) -> dict:
    """One configuration, in a process of its own (`harness.in_process`: peak RSS is per process)."""
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


def speed(sizes: List[int] = [10_000, 100_000, 300_000], repeats: int = 5,
          rasterizers: List[str] = ["flat", "standard"]) -> None:
    """Time and peak memory of each rasterizer, forward and forward+backward."""
    import jax

    print(f"# jax {jax.__version__}, backend {os.environ.get('JAX_PLATFORMS', 'default')}, {WIDTH}x{HEIGHT}, "
          f"median of {repeats}; memory = peak RSS of a process doing only that")
    rows = {}
    for n in sizes:
        for r in rasterizers:
            for m in ("forward", "fwd+bwd"):
                rows[n, r, m] = res = in_process("benchmarks.rasterizer:measure", n=n, rasterizer=r, mode=m,
                                                 repeats=repeats)
                print(f"N={n:>7} {r:>8} {m:>8}: {res['median_s'] * 1e3:8.1f} ms  peak {res['peak_rss_mib']:7.0f} MiB  "
                      f"isects {res['intersections']}  (compile {res['compile_s']:.1f} s)", flush=True)
    print()
    print("| Gaussians | intersections | rasterizer | forward ms | fwd+bwd ms | peak MiB (fwd+bwd) |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        for r in rasterizers:
            f, b = rows[n, r, "forward"], rows[n, r, "fwd+bwd"]
            print(f"| {n} | {f['intersections']} | {r} | {f['median_s'] * 1e3:.1f} | {b['median_s'] * 1e3:.1f} | "
                  f"{b['peak_rss_mib']:.0f} |")
    if len(rasterizers) == 2:
        x, y = rasterizers
        print()
        for n in sizes:
            for m in ("forward", "fwd+bwd"):
                print(f"N={n}: {m} time {y}/{x} = {rows[n, y, m]['median_s'] / rows[n, x, m]['median_s']:.2f}, "
                      f"peak memory {y}/{x} = {rows[n, y, m]['peak_rss_mib'] / rows[n, x, m]['peak_rss_mib']:.2f}")


def exactness(seeds: int = 40, pallas_seeds: int = 4) -> None:
    """Worst differences from the float64 reference (`pallas_seeds`: Pallas runs interpreted on a
    CPU, slowly)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests"))  # reference.py, scenes.py
    import reference
    from jax_backend import rasterization
    from scenes import cameras, hard_scene, off_centre_intrinsics, wide_scene

    def hard(seed):
        w, h = 77, 53
        vms, Ks = cameras(w, h, n=1, seed=seed)
        return hard_scene(seed=seed), [(vms[0], Ks[0], w, h)]

    def wide(seed):
        scene, vm = wide_scene(seed)
        return scene, [(vm, off_centre_intrinsics(w, h, seed), w, h) for w, h in ((97, 41), (40, 90))]

    print("| family | rasterizer | images | worst |error| | worst where no threshold is ambiguous | ambiguous pixels |")
    print("|---|---|---|---|---|---|")
    for name, family in (("hard (tests/scenes.hard_scene)", hard), ("wide (tests/scenes.wide_scene)", wide)):
        for rasterizer in ("flat", "standard", "pallas"):
            count = pallas_seeds if rasterizer == "pallas" else seeds
            worst = worst_sure = 0.0
            images = ambiguous = 0
            for seed in range(count):
                s, views = family(seed)
                for vm, K, w, h in views:
                    ref, ref_alpha, margin = reference.render(s["means"], s["quats"], s["scales"], s["opacities"],
                                                              s["colors"], vm, K, w, h, return_margin=True)
                    img, alpha, _ = rasterization(s["means"], s["quats"], s["scales"], s["opacities"], s["colors"],
                                                  vm[None], K[None], w, h, rasterizer=rasterizer)
                    err = np.maximum(np.abs(np.asarray(img[0]) - ref).max(-1),
                                     np.abs(np.asarray(alpha[0, ..., 0]) - ref_alpha))
                    sure = margin >= 1e-5
                    worst, worst_sure = max(worst, float(err.max())), max(worst_sure, float(err[sure].max()))
                    ambiguous += int((~sure).sum())
                    images += 1
            print(f"| {name} | {rasterizer} | {images} | {worst:.2e} | {worst_sure:.2e} | {ambiguous} |", flush=True)



if __name__ == "__main__":
    cli({"speed": speed, "exactness": exactness}, "rasterizer")
