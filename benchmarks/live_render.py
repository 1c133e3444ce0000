"""A viewer render while a training block runs (#56): how long a render of the published
Gaussians takes when it is asked for during a block, on one device against dealt over the devices
the block runs on, for data-parallel and tile-dealt training. A synthetic scene (20k Gaussians,
256x192 views), 3 CPU devices: training on 2, one spare (`use_cpu_cores`'s count on 2 cores).

    python -m benchmarks.live_render [--steps 150]
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def measure(train, test, replicas: int, tile_devices: int, render_devices: int, steps: int) -> dict:
    import jax
    import jax.numpy as jnp

    from jax_backend import DefaultStrategy, TrainConfig, Trainer, activated, init_random, make_layout, rasterization

    cfg = TrainConfig(max_steps=10**6, steps_per_block=steps, sh_degree=1, strategy=DefaultStrategy(refine_start=10**9))
    tr = Trainer(cfg, train, init_random(20000, -1, 1, sh_degree=1, capacity=32768), scene_extent=1.5,
                 log=lambda m: None, layout=make_layout(replicas=replicas, tile_devices=tile_devices))
    where = make_layout(replicas=1, tile_devices=render_devices)
    vm, K = jnp.asarray(test[1][:1]), jnp.asarray(test[2][:1])

    def render():
        m, q, s, o, sh = activated(*where.place((tr.gaussians.params, tr.gaussians.alive)))
        return jax.block_until_ready(rasterization(m, q, s, o, sh, vm, K, 256, 192, sh_degree=1, layout=where)[0])

    tr.run_block()
    render()  # compiled
    t0 = time.perf_counter()
    render()
    alone = time.perf_counter() - t0
    block = threading.Thread(target=tr.run_block)
    t_block = time.perf_counter()
    block.start()
    time.sleep(0.5)
    t0 = time.perf_counter()
    render()
    during = time.perf_counter() - t0
    block.join()
    return {"alone": alone, "during": during, "block": time.perf_counter() - t_block}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=150, help="steps in the block a render meets")
    a = ap.parse_args()
    from synthetic import known_scene

    _, train, test = known_scene(n=2000, width=256, height=192, views=16)
    print(f"# python -m benchmarks.live_render --steps {a.steps}")
    print("| training | render on | render alone, s | render during a block, s | the block, s |")
    print("|---|---|---|---|---|")
    for name, replicas, tiles in (("2 data-parallel replicas", 2, 1), ("tiles dealt over 2 devices", 1, 2)):
        for render_devices in (2, 1):
            r = measure(train, test, replicas, tiles, render_devices, a.steps)
            print(f"| {name} | {'its tiles dealt over 2 devices' if render_devices == 2 else 'one device'} | "
                  f"{r['alone']:.3f} | {r['during']:.3f} | {r['block']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
