"""Data-parallel training across hosts with the JAX engine (no nerfstudio): every process runs
this same command; each holds its share of the training views and its local devices take part in
one pmap whose gradients are averaged across all hosts.

    # two processes on one machine (CPU collectives):
    JAX_COORDINATOR_ADDRESS=127.0.0.1:12345 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0 python scripts/train_multihost.py --data data/fox --out out &
    JAX_COORDINATOR_ADDRESS=127.0.0.1:12345 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=1 python scripts/train_multihost.py --data data/fox --out out
    # a TPU pod slice: JAX finds the coordinator and the process ids itself
    gcloud compute tpus tpu-vm ssh NAME --zone ZONE --worker=all \\
        --command="cd jax-gs && JAXGS_DISTRIBUTED=1 python scripts/train_multihost.py --data data/fox --out out"

Reads a nerfstudio-format capture (transforms.json); process 0 writes out/splat.ply and logs.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=7000)
    ap.add_argument("--steps-per-block", type=int, default=100)
    ap.add_argument("--views-per-device", type=int, default=1)
    ap.add_argument("--strategy", choices=["default", "mcmc"], default="mcmc")
    ap.add_argument("--max-gaussians", type=int, default=0, help="Gaussian budget (0: the strategy's default)")
    ap.add_argument("--init-points", type=int, default=20_000)
    a = ap.parse_args()

    from jax_backend import host_views, initialize_from_env

    from jax_backend.training import evaluation

    initialize_from_env()
    import jax

    from jax_backend import TrainConfig, Trainer, init_random, make_dataset, make_layout, make_strategy, write_ply
    from benchmarks.captures import load_transforms

    main_process = jax.process_index() == 0
    d = load_transforms(a.data)
    images, viewmats, Ks = d["train"]
    mine = host_views(len(images))
    data = make_dataset([images[i] for i in mine], viewmats[mine], Ks[mine])
    cfg = TrainConfig(max_steps=a.steps, steps_per_block=a.steps_per_block,
                      strategy=make_strategy(a.strategy, budget=a.max_gaussians))
    r = 0.5 * d["scene_extent"] / 1.1
    g = init_random(a.init_points, [-r] * 3, [r] * 3, sh_degree=cfg.sh_degree)  # same seed on every host
    tr = Trainer(cfg, data, g, d["scene_extent"], layout=make_layout(),
                 views_per_device=a.views_per_device, log=print if main_process else (lambda m: None))
    if main_process:
        print(f"{jax.process_count()} process(es), {len(jax.devices())} device(s), {tr.views_per_step} views per step; "
              f"this host: {len(mine)} of {len(images)} training views", flush=True)
    t0 = time.perf_counter()

    def log(t, m, info):
        if main_process:
            print(f"step {t.step}: loss {m['loss'].mean():.4f}, train PSNR {m['psnr'].mean():.2f}, "
                  f"{m['num_alive']} Gaussians, {time.perf_counter() - t0:.0f} s", flush=True)

    tr.train(callback=log)
    if main_process:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        n = write_ply(out / "splat.ply", *jax.device_get((tr.state.gaussians.params, tr.state.gaussians.alive)))
        print(f"wrote {n} Gaussians to {out / 'splat.ply'}; held-out PSNR {evaluation.heldout_psnr(tr, *d['test']):.2f} dB")


if __name__ == "__main__":
    main()
