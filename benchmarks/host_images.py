"""What keeping the training images in host memory costs in training speed (#55): snowmiku (84
training views of 1008x756) loaded as `ns-train jax-gs` loads it, trained by two engines side by
side in one process, one with the images on the device and one with them in host memory (each
block's views gathered on the host and copied to the device while the block before trains), block
for block in alternation, at the first training resolution (quarter: the cheapest steps, where a
copy would show most). Prints each block's seconds, the ratio, and whether the two trained alike
(bit for bit on the CPU).

    python -m benchmarks.host_images [--blocks 4] [--data ../shared/data/snowmiku]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from .profile_capture import SNOWMIKU, load_engine


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=4, help="timed blocks per engine (after one to compile)")
    ap.add_argument("--data", type=Path, default=SNOWMIKU)
    a = ap.parse_args()
    import jax
    import numpy as np

    from jax_backend import Trainer

    device = load_engine(a.data)
    host = Trainer(device.cfg, device.data, device.gaussians, device.scene_extent, log=lambda *_: None,
                   layout=device.layout, images="host")
    table = host.images.block_table(0, device.cfg.steps_per_block)
    print(f"# {device.data.num_views} views of {device.data.width}x{device.data.height}, "
          f"{device.data.image_bytes / 2**20:.0f} MiB of images and masks; a block of {device.cfg.steps_per_block} "
          f"steps copies {table.images.shape[0]} of them ({(table.images.nbytes + table.masks.nbytes) / 2**20:.0f} "
          f"MiB); {device.capacity} Gaussian slots, downscale {device.cfg.downscale_at(0)}", flush=True)
    times = {"device": [], "host": []}
    same = True
    for block in range(a.blocks + 1):
        losses = {}
        for name, tr in (("device", device), ("host", host)):
            t0 = time.perf_counter()
            metrics, _ = tr.run_block()
            jax.block_until_ready(tr.device_state)
            dt = time.perf_counter() - t0
            losses[name] = metrics["loss"]
            if block:  # the first block compiles
                times[name].append(dt)
            print(f"block {block} {name:>6}: {dt:6.2f} s" + (" (compiles)" if not block else ""), flush=True)
        same = same and np.array_equal(losses["device"], losses["host"])
    d, h = np.median(times["device"]), np.median(times["host"])
    print(f"median block: device images {d:.2f} s, host images {h:.2f} s: host / device = {h / d:.3f}")
    print(f"the two engines' losses {'identical' if same else 'DIFFER'} in every step")


if __name__ == "__main__":
    main()
