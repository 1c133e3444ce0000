"""Does writing nerfstudio's checkpoint stall training? Times, in one process, a train block of
benchmarks.train's scene (504x378, density control off) and the plugin's checkpoint write
(`JaxGSTrainer.save_checkpoint`: the state dict as torch tensors, torch.save, fsync, rename) of
the same trainer's state, padded to several Gaussian capacities; prints the write time as a share
of the training time between two checkpoints (nerfstudio's default: every 2000 steps).

    python -m benchmarks.checkpoint_stall [--capacities 16384 131072 1048576] [--steps 20]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--capacities", type=int, nargs="+", default=[16384, 131072, 1048576])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--steps-per-save", type=int, default=2000)
    a = ap.parse_args()

    import torch

    from nerfstudio_jaxgs.bridge import to_torch
    from nerfstudio_jaxgs.trainer import JaxGSTrainer

    from .train import build_trainer
    from jax_backend.training import state_arrays

    tr = build_trainer(10_000, "flat", a.steps)
    tr.run_block(a.steps)  # compile
    t0 = time.perf_counter()
    tr.run_block(a.steps)
    step_s = (time.perf_counter() - t0) / a.steps
    print(f"training: {1 / step_s:.2f} steps/s ({a.steps} steps, 10k Gaussians, 504x378)")
    print("| capacity | checkpoint MiB | write s | training s between saves | stall |")
    print("|---|---|---|---|---|")
    for cap in a.capacities:
        tr.grow_capacity(cap)
        arrays = state_arrays.state_arrays(tr)
        pipeline = SimpleNamespace(state_dict=lambda: {f"_model.jaxgs.train{k}": to_torch(v).clone()
                                                       for k, v in arrays.items()})
        with tempfile.TemporaryDirectory() as d:
            fake = SimpleNamespace(checkpoint_dir=Path(d) / "nerfstudio_models", pipeline=pipeline,
                                   optimizers=SimpleNamespace(optimizers={}, schedulers={}),
                                   grad_scaler=torch.amp.GradScaler("cpu", enabled=False),
                                   config=SimpleNamespace(save_only_latest_checkpoint=True))
            times = []
            for i in range(3):
                t0 = time.perf_counter()
                JaxGSTrainer.save_checkpoint(fake, i)
                times.append(time.perf_counter() - t0)
            size = sum(f.stat().st_size for f in fake.checkpoint_dir.glob("*.ckpt")) / 2**20
        w = min(times)
        between = a.steps_per_save * step_s
        print(f"| {cap} | {size:.0f} | {w:.2f} | {between:.0f} | {100 * w / (between + w):.2f}% |", flush=True)


if __name__ == "__main__":
    main()
