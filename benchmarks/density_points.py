"""Density-control defaults on a capture that starts from a point cloud, as COLMAP captures do:
splatfacto's settings (the plugin's defaults) against the engine's own (gsplat's), side by side
in one run, on the same scene, start and steps.

The scene: a textured sphere on a checkered floor, 36,000 small Gaussians, rendered by jax-gs at
160x160 from 56 cameras on two rings (every 8th held out). The start imitates structure from
motion: 4,000 of the true centres, jittered by 1 cm, with their colours plus noise (COLMAP's
points are sparse, noisy and coloured).

    python -m benchmarks.density_points [--steps 1000 2000 4000] [--out benchmarks/results/density_points.txt]
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def surface_scene(seed=0):
    """(means, colours) of Gaussians on a unit sphere (stripes and checks) and a floor (checks)."""
    rng = np.random.default_rng(seed)
    n_sphere, n_floor = 20000, 16000
    v = rng.normal(size=(n_sphere, 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    lon, lat = np.arctan2(v[:, 1], v[:, 0]), np.arcsin(v[:, 2])
    stripe = (np.floor(lon / (np.pi / 6)) + np.floor(lat / (np.pi / 8))) % 2
    sphere_rgb = np.where(stripe[:, None] > 0, [0.9, 0.3, 0.2], [0.2, 0.5, 0.9]) * (0.7 + 0.3 * (v[:, 2:3] + 1) / 2)
    floor = np.stack([rng.uniform(-2.5, 2.5, n_floor), rng.uniform(-2.5, 2.5, n_floor), np.full(n_floor, -1.0)], -1)
    check = (np.floor(floor[:, 0] / 0.5) + np.floor(floor[:, 1] / 0.5)) % 2
    floor_rgb = np.where(check[:, None] > 0, [0.85, 0.85, 0.8], [0.15, 0.2, 0.15])
    return np.concatenate([v, floor]).astype(np.float32), np.concatenate([sphere_rgb, floor_rgb]).astype(np.float32)


def look_at(eye, target=(0.0, 0.0, 0.0), up=(0.0, 0.0, 1.0)):
    """World-to-camera (OpenCV axes: x right, y down, z forward)."""
    f = np.asarray(target, np.float64) - eye
    f /= np.linalg.norm(f)
    r = np.cross(f, up)
    r /= np.linalg.norm(r)
    d = np.cross(f, r)
    R = np.stack([r, d, f])
    m = np.eye(4)
    m[:3, :3], m[:3, 3] = R, -R @ eye
    return m.astype(np.float32)


def render_views(means, colours, size=160, focal=190.0):
    import jax.numpy as jnp

    from jax_backend import rasterization


    eyes = [4.0 * np.array([np.cos(a) * np.cos(e), np.sin(a) * np.cos(e), np.sin(e)])
            for e in (np.radians(20), np.radians(45)) for a in np.linspace(0, 2 * np.pi, 28, endpoint=False)]
    viewmats = np.stack([look_at(e) for e in eyes])
    K = np.array([[focal, 0, size / 2], [0, focal, size / 2], [0, 0, 1]], np.float32)
    Ks = np.stack([K] * len(eyes))
    n = len(means)
    images = []
    for i in range(0, len(eyes), 8):
        rgb, _, _ = rasterization(jnp.asarray(means), jnp.tile(jnp.array([1.0, 0, 0, 0]), (n, 1)),
                                  jnp.full((n, 3), 0.03), jnp.full((n,), 0.9), jnp.asarray(colours),
                                  jnp.asarray(viewmats[i:i + 8]), jnp.asarray(Ks[i:i + 8]), size, size)
        images += [np.asarray(np.clip(im, 0, 1) * 255 + 0.5, np.uint8) for im in np.asarray(rgb)]
    return np.stack(images), viewmats, Ks


def main():
    from jax_backend import TrainConfig, Trainer, init_from_points, make_dataset, make_strategy, scene_extent
    from jax_backend.training import evaluation

    from nerfstudio_jaxgs.model import JaxGSModelConfig
    from nerfstudio_jaxgs.settings import strategy as plugin_strategy

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, nargs="+", default=[1000, 2000, 4000])
    ap.add_argument("--points", type=int, default=4000)
    ap.add_argument("--budget", type=int, default=100000)
    ap.add_argument("--density", nargs="+", default=["splatfacto", "engine"], choices=["splatfacto", "engine"])
    a = ap.parse_args()

    means, colours = surface_scene()
    images, viewmats, Ks = render_views(means, colours)
    test = np.arange(len(images)) % 8 == 0
    data = make_dataset(list(images[~test]), viewmats[~test], Ks[~test])
    extent = scene_extent(viewmats[~test])
    rng = np.random.default_rng(1)
    pick = rng.choice(len(means), a.points, replace=False)
    pts = means[pick] + rng.normal(0, 0.01, (a.points, 3)).astype(np.float32)
    rgb = np.clip(colours[pick] + rng.normal(0, 0.05, (a.points, 3)), 0, 1)
    print(f"scene: {len(means)} true Gaussians, {int((~test).sum())} train / {int(test.sum())} held-out views "
          f"160x160; start: {a.points} jittered points; budget {a.budget}", flush=True)

    rows = {}
    for density in a.density:
        if density == "splatfacto":
            name, settings = plugin_strategy(JaxGSModelConfig(max_gaussians=a.budget), data.num_views)
            strategy = make_strategy(name, **settings)
        else:
            strategy = make_strategy("default", budget=a.budget)
        cfg = TrainConfig(max_steps=max(a.steps), strategy=strategy, steps_per_block=100)
        tr = Trainer(cfg, data, init_from_points(pts, rgb * 255, sh_degree=cfg.sh_degree), extent, log=lambda *_: None)
        t0 = time.perf_counter()
        for target in sorted(a.steps):
            tr.train(target - tr.step)
            psnr = evaluation.heldout_psnr(tr, images[test], viewmats[test], Ks[test])
            n = int(tr.state.gaussians.alive.sum())
            rows.setdefault(target, {})[density] = (psnr, n)
            print(f"{density:10s} step {tr.step}: held-out PSNR {psnr:.2f} dB, {n} Gaussians, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    print("\nheld-out PSNR dB (Gaussians): step | " + " | ".join(a.density))
    for step, r in sorted(rows.items()):
        print(f"{step} | " + " | ".join(f"{r[d][0]:.2f} ({r[d][1]})" for d in a.density))


if __name__ == "__main__":
    main()
