"""Training over several devices, each layout side by side in one process: steps/s and images/s,
and the bytes each device sends per step read from the compiled block's optimised HLO (its scan
body's collectives, ring algorithms: `accelerator_compile.step_traffic`).

Layouts (`--layouts`): "1" one device; "dpD" data parallel over D devices (the replica mesh, one view per
device per step: D views a step, gradients averaged with pmean, density statistics summed with
psum); "shardK" the Gaussians' rows (parameters, Adam's moments, statistics) split over K devices
that deal each view's tiles (`Layout.tile_devices` K: one view a step, projections all-gathered,
per-Gaussian gradient sums reduce-scattered to their owners); "dpDxshardK" both on a D x K mesh
(D views a step, each replica's Gaussians split over its K devices).

On a CPU the devices are forced host devices (XLA_FLAGS=--xla_force_host_platform_device_count)
sharing this machine's cores: the figures measure the programs' overhead and how well they keep
the cores busy, not what separate chips would gain; the bytes are what the compiled program
would send between chips.

Scene: benchmarks.train's (504x378, 8 views, 10k Gaussians, density control off).

    python -m benchmarks.parallel [--layouts 1 dp2 dp4 shard2 shard4 dp2xshard2] [--gaussians 10000] [--steps 20]
"""
from __future__ import annotations

import os
import sys
import time
from typing import List

from benchmarks.harness import cli


def parse_layout(name: str) -> dict:
    """The `build_trainer` counts of a layout name ("1", "dp4", "shard4", "dp2xshard2")."""
    counts = {"replicas": 1, "tile_devices": 1}
    if name == "1":
        return counts
    for part in name.split("x"):
        for prefix, key in (("dp", "replicas"), ("shard", "tile_devices")):
            n = part[len(prefix):]
            if part.startswith(prefix) and n.isdigit() and int(n) > 1:
                counts[key] = int(n)
                break
        else:
            raise SystemExit(f"--layouts: {name!r} is not 1, dpD, shardK or dpDxshardK (D, K > 1)")
    return counts


def main(layouts: List[str] = ["1", "dp2", "dp4", "shard2", "shard4", "dp2xshard2"], gaussians: int = 10_000,
         steps: int = 20) -> None:
    """Steps and images a second of each layout, and what a step sends between devices."""
    layouts = {name: parse_layout(name) for name in layouts}
    if "jax" in sys.modules:
        raise RuntimeError("run as a script: the device count is set before JAX starts")
    need = max(c["replicas"] * c["tile_devices"] for c in layouts.values())
    flags = os.environ.get("XLA_FLAGS", "")
    if os.environ.get("JAX_PLATFORMS", "cpu").startswith("cpu") and "host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={need}".strip()
    import jax

    from benchmarks.accelerator_compile import step_traffic
    from jax_backend.training.aot import lower_block
    from benchmarks.train import build_trainer

    devs = jax.local_devices()
    print(f"# {len(devs)} x {devs[0].platform} device(s) ({devs[0].device_kind}), {os.cpu_count()} cores; 504x378, "
          f"{gaussians} Gaussians, {steps} timed steps per layout after compiling")
    rows = {}
    for name, counts in layouts.items():
        if counts["replicas"] * counts["tile_devices"] > len(devs):
            print(f"{name}: skipped, only {len(devs)} devices")
            continue
        tr = build_trainer(gaussians, "flat", steps, **counts)
        tr.run_block(steps)  # compile
        jax.block_until_ready(tr.device_state)
        t0 = time.perf_counter()
        tr.run_block(steps)
        jax.block_until_ready(tr.device_state)
        dt = time.perf_counter() - t0
        hlo = lower_block(tr, steps).compile().as_text()
        traffic = step_traffic(hlo, steps)
        views = tr.views_per_step
        rows[name] = r = {"steps_per_s": steps / dt, "images_per_s": steps * views / dt,
                          "sent": traffic.get("step_sent_bytes", 0.0), "collectives": traffic.get("step_collectives", {}),
                          "block_end": traffic.get("block_end_sent_bytes", 0.0)}
        print(f"{name:>7}: {r['steps_per_s']:.2f} steps/s, {r['images_per_s']:.2f} images/s ({views} view(s) a step), "
              f"a step sends {r['sent'] / 2**20:.2f} MiB per device {r['collectives'] or ''}; the block's end "
              f"(density control, when it runs) {r['block_end'] / 2**20:.2f} MiB", flush=True)
    if "1" in rows:
        print()
        base = rows["1"]
        for name, r in rows.items():
            if name != "1":
                d = layouts[name]["replicas"] * layouts[name]["tile_devices"]
                print(f"{name:>7} / 1: {r['steps_per_s'] / base['steps_per_s']:.2f}x steps/s, "
                      f"{r['images_per_s'] / base['images_per_s']:.2f}x images/s (over {d} devices: "
                      f"{r['images_per_s'] / (d * base['images_per_s']):.0%} of linear)")


if __name__ == "__main__":
    cli(main, "parallel")
