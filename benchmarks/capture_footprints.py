"""Two ways to blend fewer (Gaussian, pixel) pairs, measured on a real capture before building
either (#53, part 2): snowmiku through jax-gs's pipeline, Gaussians as `profile_capture` draws them.

1. Tight tile boxes: of the (Gaussian, tile) pairs the binning makes from each splat's box (the
   ellipse's axis-aligned box where alpha can reach 1/255), how many tiles does the ellipse itself
   reach (the minimum of the blend's quadratic form over the tile's pixel centres within the
   opacity's level; every 12th training view)? Pairs it does not reach blend nothing.
2. Smaller tiles: the flat rasterizer's forward and forward + backward (an L1 loss) of view 0 at
   full resolution with 16x16 tiles (jax-gs's) and 8x8 ones (fewer pixels per pair, more pairs),
   each view's tiles dealt over the cores as in training.

    python -m benchmarks.capture_footprints [--gaussians 25000,300000] [--data ../shared/data/snowmiku]
    python -m benchmarks.capture_footprints --checkpoint outputs/snowmiku/jax-gs-fast/T/nerfstudio_models/step-001999.ckpt

3. Tight tiles as built (`binning.ellipse_reaches`), against the boxes alone
   (`RasterizerOptions(tight_tiles=False)`), side by side: view 0's forward + backward (an L1 loss) at quarter and full
   resolution, the intersections blended and the seconds of each.

--checkpoint measures a trained scene instead of drawn Gaussians: a jax-gs run's checkpoint on the
same capture (its Gaussians as trained: thin, rotated, opaque ones among them).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .profile_capture import SNOWMIKU, grown, load_engine, timed


def trained(checkpoint: Path):
    """The Gaussians a jax-gs checkpoint holds (its live ones)."""
    import jax.numpy as jnp
    import numpy as np
    import torch

    from jax_backend import Gaussians
    from nerfstudio_jaxgs.checkpoint_entries import read

    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["pipeline"]
    g = read({k[len("_model."):]: v for k, v in state.items() if k.startswith("_model.")}).gaussians
    alive = np.asarray(g.alive)
    return Gaussians({k: jnp.asarray(np.asarray(v)[alive]) for k, v in g.params.items()}, jnp.ones(int(alive.sum()), bool))


def reached_tiles(proj, grid, width: int, height: int):
    """(pairs the boxes make, pairs whose tile the ellipse reaches) for one projected view."""
    import numpy as np

    from jax_backend.rendering.binning import tile_rect

    lo_t, n_xy = map(np.asarray, tile_rect(proj, grid))
    cnt = n_xy[:, 0] * n_xy[:, 1]
    idx = np.repeat(np.arange(len(cnt)), cnt)
    k = np.arange(cnt.sum()) - (np.cumsum(cnt) - cnt)[idx]
    tx = lo_t[idx, 0] + k % np.maximum(n_xy[idx, 0], 1)
    ty = lo_t[idx, 1] + k // np.maximum(n_xy[idx, 0], 1)
    t = grid.tile_size
    x0, x1 = np.maximum(tx * t, 0) + 0.5, np.minimum(tx * t + t - 1, width - 1) + 0.5
    y0, y1 = np.maximum(ty * t, 0) + 0.5, np.minimum(ty * t + t - 1, height - 1) + 0.5
    mx, my = np.asarray(proj.means2d)[idx].T
    a, r, s = np.asarray(proj.quad)[idx].T  # q = a (dx + r dy)^2 + s dy^2, as blended
    level = 2 * np.log(np.maximum(np.asarray(proj.opacities)[idx], 1 / 255) * 255)

    def q(dx, dy):
        return a * (dx + r * dy) ** 2 + s * dy ** 2

    best = np.full(len(idx), np.inf)
    for yc in (y0, y1):  # the convex form's minimum over the rectangle lies on an edge (or inside: 0)
        dy = yc - my
        best = np.minimum(best, q(np.clip(-r * dy, x0 - mx, x1 - mx), dy))
    for xc in (x0, x1):
        dx = xc - mx
        best = np.minimum(best, q(dx, np.clip(-a * r * dx / (a * r * r + s), y0 - my, y1 - my)))
    inside = (mx >= x0) & (mx <= x1) & (my >= y0) & (my <= y1)
    best = np.where(inside, 0.0, best)
    return len(idx), int((best <= level).sum())


def tight_against_boxes(engine, scenes, repeat: int):
    """Part 3: the forward + backward of view 0 with the tight tiles and with the boxes alone."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import RasterizerOptions, activated, count_intersections, traced_rasterization
    from jax_backend.rendering.binning import bin_gaussians
    from jax_backend.rendering.projection import project_gaussians
    from jax_backend.rendering.tiles import TileGrid
    from jax_backend.training.data import downscaled_cameras

    d = engine.data
    print("\n3. Tight tiles against the boxes alone: view 0, forward + backward (L1), seconds, side by side")
    print("| Gaussians | resolution | box pairs | blended pairs (tight) | boxes | tight | boxes / tight |")
    print("|---|---|---|---|---|---|---|")
    for g in scenes:
        splats = activated(*g)
        for ds in (4, 1):
            Ks, W, H = downscaled_cameras(d.Ks, d.width, d.height, ds)
            vm, K = jnp.asarray(d.viewmats[0]), jnp.asarray(Ks[0])
            image = jnp.asarray(np.asarray(d.images[0])[::ds, ::ds][:H, :W, :3], jnp.float32) / 255.0
            count = int(count_intersections(*splats[:4], vm[None], K[None], W, H)[0])
            cap = 1 << (count - 1).bit_length()
            proj = project_gaussians(*splats[:4], vm, K, W, H)
            blended = int(bin_gaussians(proj, TileGrid(W, H, 16), cap, "cpu").tile_end[-1])
            grads = {}
            for name, tight in (("boxes", False), ("tight", True)):
                def render(*p, cap=cap, tight=tight):
                    return traced_rasterization(*p, vm[None], K[None], W, H, sh_degree=3, isect_capacity=cap,
                                                rasterizer="flat", layout=engine.layout,
                                                options=RasterizerOptions(tight_tiles=tight))[0][0]

                grads[name] = jax.jit(jax.grad(lambda *p, render=render: jnp.abs(render(*p) - image).mean(),
                                               argnums=(0, 1, 2, 3, 4)))
                jax.block_until_ready(grads[name](*splats))
            t = {name: [] for name in grads}
            for _ in range(repeat):  # alternating: the machine's drift falls on both
                for name in grads:
                    t[name].append(timed(grads[name], *splats, repeat=1))
            tb, tt = min(t["boxes"]), min(t["tight"])
            print(f"| {g.capacity:,} | {W}x{H} | {count:,} | {blended:,} | {tb:.3f} | {tt:.3f} | {tb / tt:.2f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=SNOWMIKU)
    ap.add_argument("--gaussians", default="25000,300000")
    ap.add_argument("--checkpoint", type=Path, default=None, help="a jax-gs checkpoint of this capture: its trained "
                                                                   "Gaussians instead of drawn ones")
    ap.add_argument("--boxes-only", action="store_true", help="measure the tile boxes alone (no timing)")
    ap.add_argument("--tight-only", action="store_true", help="part 3 alone (with part 1's counts)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    engine = load_engine(a.data)
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import activated, count_intersections, traced_rasterization
    from jax_backend.rendering.projection import project_gaussians
    from jax_backend.rendering.tiles import TileGrid
    from jax_backend.training.data import downscaled_cameras

    d = engine.data
    print(f"# python -m benchmarks.capture_footprints " + (f"--checkpoint {a.checkpoint}" if a.checkpoint else
                                                           f"--gaussians {a.gaussians}"))
    print(f"# {a.data.name}, {d.num_views} training views; {engine.layout.tile_devices} CPU devices")
    print("\n1. Tight tile boxes: pairs the boxes make and pairs whose tile the ellipse reaches (every 12th view)")
    print("| Gaussians | resolution | box pairs | reached | share |")
    print("|---|---|---|---|---|")
    scenes = ([trained(a.checkpoint)] if a.checkpoint else
              [grown(engine.gaussians, int(x)) for x in a.gaussians.split(",")])
    for g in scenes:
        n = g.capacity
        splats = activated(*g)
        for ds in (4, 1):
            Ks, W, H = downscaled_cameras(d.Ks, d.width, d.height, ds)
            grid, made, reached = TileGrid(W, H, 16), 0, 0
            for v in range(0, d.num_views, 12):
                proj = project_gaussians(*splats[:4], jnp.asarray(d.viewmats[v]), jnp.asarray(Ks[v]), W, H, 0.01, 0.3,
                                         "classic")
                m, r = reached_tiles(proj, grid, W, H)
                made, reached = made + m, reached + r
            print(f"| {n:,} | {W}x{H} | {made:,} | {reached:,} | {reached / made:.1%} |", flush=True)
    if a.boxes_only:
        return
    tight_against_boxes(engine, scenes, a.repeat)
    if a.tight_only:
        return
    print("\n2. Tile size: view 0 at full resolution, seconds (flat rasterizer, tiles dealt over the cores)")
    print("| Gaussians | tile | intersections | (Gaussian, pixel) pairs | forward | forward + backward |")
    print("|---|---|---|---|---|---|")
    Ks, W, H = downscaled_cameras(d.Ks, d.width, d.height, 1)
    vm, K = jnp.asarray(d.viewmats[0]), jnp.asarray(Ks[0])
    image = jnp.asarray(np.asarray(d.images[0])[:H, :W, :3], jnp.float32) / 255.0
    for g in scenes:
        n = g.capacity
        splats = activated(*g)
        for tile in (16, 8):
            count = int(count_intersections(*splats[:4], vm[None], K[None], W, H, tile_size=tile)[0])
            cap = 1 << (count - 1).bit_length()

            def render(*p, tile=tile, cap=cap):
                return traced_rasterization(*p, vm[None], K[None], W, H, sh_degree=3, isect_capacity=cap,
                                            rasterizer="flat", tile_size=tile, layout=engine.layout)[0][0]

            fwd = jax.jit(render)
            grad = jax.jit(jax.grad(lambda *p: jnp.abs(render(*p) - image).mean(), argnums=(0, 1, 2, 3, 4)))
            tf, tg = timed(fwd, *splats, repeat=3), timed(grad, *splats, repeat=3)
            print(f"| {n:,} | {tile}x{tile} | {count:,} | {count * tile * tile:,} | {tf:.3f} | {tg:.3f} |", flush=True)


if __name__ == "__main__":
    main()
