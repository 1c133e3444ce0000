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
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .profile_capture import SNOWMIKU, grown, load_engine, timed


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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=SNOWMIKU)
    ap.add_argument("--gaussians", default="25000,300000")
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
    print(f"# python -m benchmarks.capture_footprints --gaussians {a.gaussians}")
    print(f"# {a.data.name}, {d.num_views} training views; {engine.layout.tile_devices} CPU devices")
    print("\n1. Tight tile boxes: pairs the boxes make and pairs whose tile the ellipse reaches (every 12th view)")
    print("| Gaussians | resolution | box pairs | reached | share |")
    print("|---|---|---|---|---|")
    sizes = [int(x) for x in a.gaussians.split(",")]
    for n in sizes:
        splats = activated(*grown(engine.gaussians, n))
        for ds in (4, 1):
            Ks, W, H = downscaled_cameras(d.Ks, d.width, d.height, ds)
            grid, made, reached = TileGrid(W, H, 16), 0, 0
            for v in range(0, d.num_views, 12):
                proj = project_gaussians(*splats[:4], jnp.asarray(d.viewmats[v]), jnp.asarray(Ks[v]), W, H, 0.01, 0.3,
                                         "classic")
                m, r = reached_tiles(proj, grid, W, H)
                made, reached = made + m, reached + r
            print(f"| {n:,} | {W}x{H} | {made:,} | {reached:,} | {reached / made:.1%} |", flush=True)
    print("\n2. Tile size: view 0 at full resolution, seconds (flat rasterizer, tiles dealt over the cores)")
    print("| Gaussians | tile | intersections | (Gaussian, pixel) pairs | forward | forward + backward |")
    print("|---|---|---|---|---|---|")
    Ks, W, H = downscaled_cameras(d.Ks, d.width, d.height, 1)
    vm, K = jnp.asarray(d.viewmats[0]), jnp.asarray(Ks[0])
    image = jnp.asarray(np.asarray(d.images[0])[:H, :W, :3], jnp.float32) / 255.0
    for n in sizes:
        splats = activated(*grown(engine.gaussians, n))
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
