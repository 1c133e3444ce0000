"""Exactness against the dense float64 reference renderer (`tests/reference.py`), per rasterizer
and scene family: the worst absolute difference in colour or alpha over every pixel, and how many
pixels sit within float32 rounding of a threshold decision (alpha against 1/255, transmittance
against 1e-4; see docs/rendering.md).

    python -m benchmarks.exactness [--seeds 40] [--pallas-seeds 4]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # reference.py, scenes.py


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--pallas-seeds", type=int, default=4, help="Pallas runs interpreted on a CPU: slow")
    a = ap.parse_args(argv)

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
            seeds = a.pallas_seeds if rasterizer == "pallas" else a.seeds
            worst = worst_sure = 0.0
            images = ambiguous = 0
            for seed in range(seeds):
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
    main()
