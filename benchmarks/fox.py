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

import time
from pathlib import Path
from typing import List, Literal

from benchmarks.harness import cli



def heldout_psnr(trainer, test):
    from jax_backend.training import evaluation

    return evaluation.heldout_psnr(trainer, *test)


def main(data: Path = Path(__file__).resolve().parents[2] / "shared" / "data" / "fox",
         steps: List[int] = [2000, 7000], strategy: Literal["default", "mcmc"] = "default", init_points: int = 20000,
         max_gaussians: int = 40000, init_extent: float = 0.5, rasterizer: str = "flat", log_every: int = 500,
         steps_per_block: int = 100, density: Literal["engine", "splatfacto"] = "engine") -> None:
    """Held-out PSNR at each of `steps`. `max_gaussians`: the budget (0: none); `init_extent`:
    half-size of the initial cube over the camera radius; `density`: the engine's or splatfacto's
    density settings."""
    from jax_backend import TrainConfig, Trainer, init_random, make_dataset, make_strategy

    from tools.captures import load_transforms

    d = load_transforms(data)
    dataset = make_dataset(*d["train"])
    # random initial Gaussians in a cube around the scene centre, half the camera radius across
    # (the capture has no point cloud; Gaussians right in front of the cameras only cost time)
    r = init_extent * d["scene_extent"] / 1.1
    lo, hi = [-r] * 3, [r] * 3
    if density == "splatfacto":
        from nerfstudio_jaxgs.model import JaxGSModelConfig
        from nerfstudio_jaxgs.settings import strategy as plugin_strategy

        name, settings = plugin_strategy(JaxGSModelConfig(strategy=strategy, max_gaussians=max_gaussians),
                                         dataset.num_views)
        rule = make_strategy(name, **settings)
    else:
        rule = make_strategy(strategy, budget=max_gaussians)
    print(rule)
    cfg = TrainConfig(max_steps=max(steps), strategy=rule, rasterizer=rasterizer, steps_per_block=steps_per_block)
    g = init_random(init_points, lo, hi, sh_degree=cfg.sh_degree)
    tr = Trainer(cfg, dataset, g, d["scene_extent"])
    print(f"fox: {dataset.num_views} train / {len(d['test'][0])} held-out views, {dataset.width}x{dataset.height}, "
          f"{strategy} strategy, {init_points} random initial Gaussians, budget {max_gaussians}")
    print(f"step 0: held-out PSNR {heldout_psnr(tr, d['test']):.2f} dB")
    t0 = time.perf_counter()
    for target in sorted(steps):
        def cb(t, m, info):
            if t.step % log_every == 0:
                print(f"  step {t.step}: train PSNR {m['psnr'].mean():.2f}, {m['num_alive']} Gaussians, "
                      f"{int(m['num_intersections'].mean())} isects, {info}, "
                      f"{time.perf_counter() - t0:.0f} s", flush=True)

        tr.train(target - tr.step, callback=cb)
        print(f"step {tr.step}: held-out PSNR {heldout_psnr(tr, d['test']):.2f} dB, "
              f"{int(tr.state.gaussians.alive.sum())} Gaussians, {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    cli(main, "fox")
