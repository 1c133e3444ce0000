"""Train the engine on the real fox capture (../shared/data/fox) and report held-out PSNR
(every 8th view) at the given steps.

    python -m benchmarks.fox [--data ../shared/data/fox] [--steps 2000 7000] [--strategy default|mcmc]
        [--density engine|splatfacto]

`--density splatfacto`: the default strategy with the settings `ns-train jax-gs` gives it by default
(splatfacto's: absgrad 0.0008, cull-alpha 0.1, cull-scale 0.5, screen-size rules until 4000, no
refinement for num-images + refine-every steps after a reset); `engine`: the backend's own
DefaultStrategy defaults (gsplat's: gradient 0.0002, prune-opacity 0.005, prune-scale 0.1).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path



def heldout_psnr(trainer, test):
    from jax_backend.training import evaluation

    return evaluation.heldout_psnr(trainer, *test)


def main():
    from jax_backend import TrainConfig, Trainer, init_random, make_dataset, make_strategy

    from tools.captures import load_transforms

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "fox"))
    ap.add_argument("--steps", type=int, nargs="+", default=[2000, 7000])
    ap.add_argument("--strategy", choices=["default", "mcmc"], default="default")
    ap.add_argument("--init-points", type=int, default=20000)
    ap.add_argument("--max-gaussians", type=int, default=40000, help="Gaussian budget (0: none)")
    ap.add_argument("--init-extent", type=float, default=0.5, help="half-size of the initial cube / camera radius")
    ap.add_argument("--rasterizer", default="flat")
    ap.add_argument("--log-every", type=int, default=500)
    ap.add_argument("--steps-per-block", type=int, default=100)
    ap.add_argument("--density", choices=["engine", "splatfacto"], default="engine")
    a = ap.parse_args()
    d = load_transforms(a.data)
    data = make_dataset(*d["train"])
    # random initial Gaussians in a cube around the scene centre, half the camera radius across
    # (the capture has no point cloud; Gaussians right in front of the cameras only cost time)
    r = a.init_extent * d["scene_extent"] / 1.1
    lo, hi = [-r] * 3, [r] * 3
    if a.density == "splatfacto":
        from nerfstudio_jaxgs.model import JaxGSModelConfig
        from nerfstudio_jaxgs.settings import strategy as plugin_strategy

        name, settings = plugin_strategy(JaxGSModelConfig(strategy=a.strategy, max_gaussians=a.max_gaussians),
                                         data.num_views)
        strategy = make_strategy(name, **settings)
    else:
        strategy = make_strategy(a.strategy, budget=a.max_gaussians)
    print(strategy)
    cfg = TrainConfig(max_steps=max(a.steps), strategy=strategy, rasterizer=a.rasterizer, steps_per_block=a.steps_per_block)
    g = init_random(a.init_points, lo, hi, sh_degree=cfg.sh_degree)
    tr = Trainer(cfg, data, g, d["scene_extent"])
    print(f"fox: {data.num_views} train / {len(d['test'][0])} held-out views, {data.width}x{data.height}, "
          f"{a.strategy} strategy, {a.init_points} random initial Gaussians, budget {a.max_gaussians}")
    print(f"step 0: held-out PSNR {heldout_psnr(tr, d['test']):.2f} dB")
    t0 = time.perf_counter()
    for target in sorted(a.steps):
        def cb(t, m, info):
            if t.step % a.log_every == 0:
                print(f"  step {t.step}: train PSNR {m['psnr'].mean():.2f}, {m['num_alive']} Gaussians, "
                      f"{int(m['num_intersections'].mean())} isects, {info}, "
                      f"{time.perf_counter() - t0:.0f} s", flush=True)

        tr.train(target - tr.step, callback=cb)
        print(f"step {tr.step}: held-out PSNR {heldout_psnr(tr, d['test']):.2f} dB, "
              f"{int(tr.state.gaussians.alive.sum())} Gaussians, {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
