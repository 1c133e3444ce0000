"""Data-parallel scaling: images/s and efficiency for 1, 2 and 4 devices (pmap, one view per
device per step, gradients averaged with pmean, density statistics summed with psum), measured
side by side in one process, with the communication volume per step.

On a CPU the devices are forced host devices (XLA_FLAGS=--xla_force_host_platform_device_count)
sharing this machine's cores, so the figures measure the overhead of the data-parallel program,
not a speed-up; on a machine with several accelerators they are real devices.

Scene: benchmarks.train's (504x378, 8 views, 10k Gaussians, density control off).

    python -m benchmarks.parallel [--devices 1 2 4] [--gaussians 10000] [--steps 20]
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--gaussians", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    if "jax" in sys.modules:
        raise RuntimeError("run as a script: the device count is set before JAX starts")
    flags = os.environ.get("XLA_FLAGS", "")
    if os.environ.get("JAX_PLATFORMS", "cpu").startswith("cpu") and "host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={max(a.devices)}".strip()
    import jax
    import numpy as np

    from .train import build_trainer

    devs = jax.local_devices()
    print(f"# {len(devs)} x {devs[0].platform} device(s) ({devs[0].device_kind}); 504x378, {a.gaussians} Gaussians, "
          f"{a.steps} timed steps per configuration after compiling")
    rows = {}
    for d in a.devices:
        if d > len(devs):
            print(f"{d} devices: skipped, only {len(devs)}")
            continue
        tr = build_trainer(a.gaussians, "flat", a.steps, replicas=d)
        tr.run_block(a.steps)  # compile
        jax.block_until_ready(tr.device_state)
        t0 = time.perf_counter()
        m, _ = tr.run_block(a.steps)
        jax.block_until_ready(tr.device_state)
        dt = time.perf_counter() - t0
        g = tr.state
        grad_bytes = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(g.gaussians.params))
        stat_bytes = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(g.stats))
        payload = grad_bytes + stat_bytes if d > 1 else 0
        rows[d] = r = {"images_per_s": a.steps * d / dt, "steps_per_s": a.steps / dt, "payload": payload,
                       "ring": payload * 2 * (d - 1) / d}
        print(f"{d} device(s): {r['steps_per_s']:.2f} steps/s, {r['images_per_s']:.2f} images/s, "
              f"all-reduce payload {payload / 2**20:.2f} MiB/step (ring: {r['ring'] / 2**20:.2f} MiB sent per device)",
              flush=True)
    if 1 in rows:
        print()
        base = rows[1]["images_per_s"]
        for d, r in rows.items():
            if d > 1:
                print(f"{d} devices / 1: {r['images_per_s'] / base:.2f}x images/s, scaling efficiency "
                      f"{r['images_per_s'] / (d * base):.0%}")


if __name__ == "__main__":
    main()
