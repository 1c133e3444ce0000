"""Training step time with 16- and 8-pixel tiles on a real capture (#53): the whole step as a run
pays it (`Trainer.run_block`: the engine `ns-train jax-gs` builds for snowmiku, each view's tiles
dealt over the CPU's cores), the two tile sizes alternating, at splatfacto's three training
resolutions. Prints each pair's seconds per step and their ratio, and the intersections the
buffer was sized for.

The Gaussians are a trained scene's (`--checkpoint`: a jax-gs run's checkpoint of the capture,
e.g. jax-gs-fast's last) or the seeds grown to `--gaussians` (`profile_capture.grown`). Density
control is off inside the timed blocks; two blocks of each run untimed first (compilation, and a
recompilation when the first block grows the intersection buffer).

    python -m benchmarks.tile_size --checkpoint outputs/.../step-000001999.ckpt [--downscales 4,2,1]
    python -m benchmarks.tile_size --gaussians 25000 [--rounds 2] [--steps 4]
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

from .profile_capture import SNOWMIKU, grown, load_engine, step_time

SIZES = (16, 8)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=SNOWMIKU)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", type=Path, help="a jax-gs checkpoint of the capture (its live Gaussians)")
    src.add_argument("--gaussians", type=int, help="the seeds grown to this many")
    ap.add_argument("--downscales", default="4,2,1")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of the two sizes")
    ap.add_argument("--steps", type=int, default=4, help="steps in each timed block")
    a = ap.parse_args()

    from jax_backend import Trainer
    from jax_backend.training.data import downscaled_cameras

    from .capture_footprints import trained

    engine = load_engine(a.data)
    g = trained(a.checkpoint) if a.checkpoint else grown(engine.gaussians, a.gaussians)
    what = f"--checkpoint {a.checkpoint}" if a.checkpoint else f"--gaussians {a.gaussians}"
    print(f"# python -m benchmarks.tile_size {what} --downscales {a.downscales} --rounds {a.rounds} --steps {a.steps}")
    print(f"# {a.data.name}: {int(g.alive.sum())} Gaussians; seconds per training step, the tile sizes alternating")
    print("| resolution | round | 16 px: s/step | 8 px: s/step | 16 / 8 | buffers (16, 8) |")
    print("|---|---|---|---|---|---|")
    base = engine.cfg
    for ds in (int(x) for x in a.downscales.split(",")):
        for r in range(a.rounds):
            times, buffers = {}, {}
            for ts in SIZES:
                cfg = dataclasses.replace(base, num_downscales=int(round(math.log2(ds))), resolution_schedule=10**9,
                                          steps_per_block=a.steps, tile_size=ts,
                                          strategy=dataclasses.replace(base.strategy, refine_start=10**9))
                tr = Trainer(cfg, engine.data, g, engine.scene_extent, layout=engine.layout, log=lambda *x: None)
                times[ts] = step_time(tr, a.steps, repeat=4, warmup=2)  # 2 untimed, 2 timed
                buffers[ts] = tr.isect_capacity
            _, w, h = downscaled_cameras(engine.data.Ks, engine.data.width, engine.data.height, ds)
            print(f"| {w}x{h} | {r + 1} | {times[16]:.3f} | {times[8]:.3f} | {times[16] / times[8]:.2f} "
                  f"| {buffers[16]:,}, {buffers[8]:,} |", flush=True)


if __name__ == "__main__":
    main()
