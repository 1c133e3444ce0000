"""Which exchange of screen-space splats moves fewer bytes when the Gaussians are split over K
devices that share one view's tiles (#42): counted on a real projection, per device per view.

- all-gather (what `rendering.tile_parallel` does): every device receives every splat, (K-1)/K
  of them from the others, and sends its own N/K to each of the K-1 others (ring: the same bytes);
  no device needs to know in advance which tiles a splat touches, and the shapes are static.
- all-to-all, tiles dealt by workload (the deal `tile_parallel.deal` makes): each device sends
  each of its splats only to the other devices owning a tile it touches. Counted here as the
  splats that actually need to move; a static-shape all-to-all sends equal chunks, so each chunk
  would be padded to the largest pair's count (also printed).
- all-to-all, image in K bands (contiguous runs of tiles in row-major order, cut where the
  cumulative workload is even): splats touch fewer devices, and the work per device is printed
  as max / mean (1.00 = balanced), since a contiguous cut cannot follow where the splats pile up.

The Gaussians are `tools.programs.realistic_scene`'s, seen from its camera with the
focal length scaled to the image width (`accelerator_compile.scene_views`); the row owner of
Gaussian g is g mod K (rows split evenly and the scene's order is random). B = bytes of one splat
as the training step gathers it (projected Gaussian and colour); the backward sends the same
splats' gradient sums back (a reduce-scatter, or the reverse all-to-all): the same ratio.

    python -m benchmarks.splat_exchange [--gaussians 100000 5000000] [--sizes 504x378 1297x840] [--shards 4 16]
"""
from __future__ import annotations

import argparse

SPLAT_BYTES = 4 * (2 + 3 + 3 + 1 + 2 + 1 + 3) + 1  # means2d, conics, quad, depth, extents, opacity, colour; valid


def pairs(lo, n_xy, tiles_x: int, chunk: int = 1 << 20):
    """(Gaussian, tile) of every intersection, in chunks of Gaussians (numpy)."""
    import numpy as np

    count = n_xy[:, 0].astype(np.int64) * n_xy[:, 1]
    for a in range(0, len(count), chunk):
        c = count[a:a + chunk]
        g = np.repeat(np.arange(a, a + len(c)), c)
        first = np.repeat(np.cumsum(c) - c, c)
        k = np.arange(len(g)) - first  # index within the Gaussian's rectangle
        w = np.maximum(n_xy[g, 0], 1)
        yield g, (lo[g, 1] + k // w) * tiles_x + lo[g, 0] + k % w


def measure(n: int, width: int, height: int, shards: list) -> list:
    import jax
    import numpy as np

    from tools.programs import scene_views
    from jax_backend.rendering.binning import tile_rect
    from jax_backend.rendering.projection import project_gaussians
    from jax_backend.rendering.tiles import TileGrid

    means, quats, scales, opacities, _, viewmats, Ks = scene_views(n, width, height)
    grid = TileGrid(width, height, 16)
    proj = jax.jit(lambda *a: project_gaussians(*a, width, height))(means, quats, scales, opacities, viewmats[0], Ks[0])
    lo, n_xy = (np.asarray(x) for x in jax.jit(lambda p: tile_rect(p, grid))(proj))
    tiles = grid.tiles_x * grid.tiles_y
    work = np.zeros(tiles, np.int64)
    for _, t in pairs(lo, n_xy, grid.tiles_x):
        work += np.bincount(t, minlength=tiles)
    rows = []
    for k in shards:
        dealt = np.empty(tiles, np.int64)
        dealt[np.argsort(-work, kind="stable")] = np.arange(tiles) % k  # `tile_parallel.deal`'s round robin
        cum = np.cumsum(work)
        band = np.minimum(cum * k // max(cum[-1], 1), k - 1)  # contiguous, even cumulative workload
        out = {"gaussians": n, "size": f"{width}x{height}", "shards": k, "intersections": int(work.sum()),
               "visible": int((n_xy.prod(1) > 0).sum()), "all_gather_bytes": (k - 1) / k * n * SPLAT_BYTES}
        for name, owner_of_tile in (("dealt", dealt), ("bands", band)):
            mask = np.zeros(n, np.int64)  # bit d: Gaussian needed on device d
            for g, t in pairs(lo, n_xy, grid.tiles_x):
                np.bitwise_or.at(mask, g, np.left_shift(1, owner_of_tile[t]))
            own = np.arange(n) % k
            need = np.stack([(mask >> d) & 1 for d in range(k)], 1).astype(bool)  # [N, K]
            need[np.arange(n), own] = False  # a device has its own splats
            pair = np.zeros((k, k), np.int64)  # splats device s sends device r
            np.add.at(pair, (np.repeat(own, need.sum(1)), np.nonzero(need)[1]), 1)
            out[f"{name}_bytes"] = pair.sum(1).max() * SPLAT_BYTES  # the busiest sender
            out[f"{name}_padded_bytes"] = (k - 1) * pair.max() * SPLAT_BYTES  # equal chunks of the largest pair
            out[f"{name}_balance"] = float(np.bincount(owner_of_tile, work, k).max() / (work.sum() / k))
        rows.append(out)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gaussians", type=int, nargs="+", default=[100_000, 5_000_000])
    ap.add_argument("--sizes", nargs="+", default=["504x378", "1297x840"])
    ap.add_argument("--shards", type=int, nargs="+", default=[4, 16])
    a = ap.parse_args()
    print(f"# MB each device sends per view (the busiest), splat = {SPLAT_BYTES} B; balance = the busiest device's "
          f"intersections / the mean")
    print("| Gaussians | image | K | visible | intersections | all-gather | all-to-all, dealt tiles (padded) "
          "| balance | all-to-all, bands (padded) | balance |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in a.gaussians:
        for size in a.sizes:
            w, h = (int(x) for x in size.split("x"))
            for r in measure(n, w, h, a.shards):
                mb = lambda x: f"{x / 1e6:.1f}"  # noqa: E731
                print(f"| {n:,} | {size} | {r['shards']} | {r['visible']:,} | {r['intersections']:,} "
                      f"| {mb(r['all_gather_bytes'])} | {mb(r['dealt_bytes'])} ({mb(r['dealt_padded_bytes'])}) "
                      f"| {r['dealt_balance']:.2f} | {mb(r['bands_bytes'])} ({mb(r['bands_padded_bytes'])}) "
                      f"| {r['bands_balance']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
