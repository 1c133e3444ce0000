"""What the flat rasterizer's walk does on a real capture, in each platform's configuration.

On snowmiku (loaded as `ns-train jax-gs ... colmap --downscale-factor 4` loads it), for Gaussian
states (the 25,784 seeds; a trained state read from an `ns-train` checkpoint, `--trained`; 300k
and 1M grown around the seeds as `benchmarks.profile_capture` grows them) at quarter, half and
full resolution, one view's forward and backward walks (16-pixel tiles) run in three
configurations of `RasterizerOptions`:
- cpu: the CPU's walk ("groups", about 16 tiles a group, heaviest first);
- accel-1group: the accelerators' walk before lanes (one group: every tile to the longest walk);
- accel-lanes: the accelerators' walk now (`auto_lanes` lanes, each taking the next tile, heaviest
  first, when its own ends).
For each: the intersections, the (tile, position) slots walked forward and backward against the
slots a walk of each tile to its own end needs (forward: its list's end or its pixels'
saturation; backward: its deepest last contributor; `WalkCount.needed`), the loop iterations
(chunks walked one after another), and the CPU seconds of the walk jitted alone on one device.
With `--lane-shares`, the lanes walk's slots and iterations for other lane counts (tiles per lane).

With `--compile v6e:2x2`: the rasterizer's forward + backward (`rasterization`, sum of image and
alpha, `benchmarks.accelerator_compile`'s 100k / 1M scene at 504x378) compiled for that TPU
topology in the one-group and the lanes configuration, side by side: compile seconds and device
memory for temporaries. Compile-only: nothing here runs on a TPU.

    python -m benchmarks.walk [--trained CKPT] [--gaussians 0,300000,1000000] [--downscales 4,2,1]
        [--no-time] [--lane-shares 4,8,16] [--compile v6e:2x2] [--configs cpu,accel-1group,accel-lanes]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from .profile_capture import SNOWMIKU, grown, load_engine

CONFIGS = {"cpu": dict(walk="groups"), "accel-1group": dict(walk="groups", groups=1), "accel-lanes": dict(walk="lanes")}


def trained_gaussians(ckpt: Path):
    """The Gaussians of a jax-gs `ns-train` checkpoint (step-*.ckpt)."""
    import torch

    from nerfstudio_jaxgs.checkpoint_entries import read

    sd = torch.load(ckpt, map_location="cpu", weights_only=True)["pipeline"]
    return read({k[len("_model."):]: v for k, v in sd.items() if k.startswith("_model.")}).gaussians


def view_inputs(engine, gaussians, downscale: int, view: int = 0, tile: int = 16):
    """The packed screen parameters, colours and tile lists of one view at 1/downscale, as the
    rasterizer's walks read them (channel first), and its tiles."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import activated
    from jax_backend.rendering import count_intersections
    from jax_backend.rendering.binning import bin_gaussians
    from jax_backend.rendering.isect_buffer import size_for
    from jax_backend.rendering.projection import project_gaussians
    from jax_backend.rendering.sh import sh_to_color
    from jax_backend.rendering.tiles import TileGrid, all_tiles
    from jax_backend.training.data import downscaled_cameras

    data = engine.data
    Ks, W, H = downscaled_cameras(data.Ks, data.width, data.height, downscale)
    vm, K = jnp.asarray(data.viewmats[view]), jnp.asarray(Ks[view])
    means, quats, scales, opac, sh = activated(gaussians.params, gaussians.alive)
    grid = TileGrid(W, H, tile)
    cap = size_for(int(count_intersections(means, quats, scales, opac, vm[None], K[None], W, H, tile_size=tile)[0]))

    @jax.jit
    def prepare(means, quats, scales, opac, sh):
        proj = project_gaussians(means, quats, scales, opac, vm, K, W, H, 0.01, 0.3, "classic")
        campos = -vm[:3, :3].T @ vm[:3, 3]
        colors = sh_to_color(sh, means - campos, active_degree=3)
        bins = bin_gaussians(proj, grid, cap, "cpu")
        geom = jnp.concatenate([proj.means2d, proj.quad, proj.opacities[:, None]], -1).T
        return geom, colors.T, bins.lists

    geom, feats, lists = prepare(means, quats, scales, opac, sh)
    return geom, feats, lists, all_tiles(lists, grid), grid, int(np.asarray(lists.end[-1]))


def run_walks(options, grid, geom, feats, lists, tiles, time_it: bool):
    """(forward WalkCount, backward WalkCount, forward seconds, backward seconds) of one view's
    walks in `options`' configuration, on one CPU device."""
    import jax
    import jax.numpy as jnp

    from jax_backend import Layout
    from jax_backend.rendering.blend import PixelCotangents
    from jax_backend.rendering.composite import CompositeConfig
    from jax_backend.rendering.rasterize_flat import backward_walk, forward_walk

    cfg = CompositeConfig(grid, "flat", options, False, Layout(jax.devices()[:1]))
    fwd = jax.jit(lambda g, f, i, t: forward_walk(cfg, g, f, i, t))

    @jax.jit
    def bwd(g, f, i, t, st):
        ch = f.shape[0]
        dC = jnp.ones((ch,) + st.T.shape, jnp.float32)  # an L1-like cotangent on every pixel
        cot = PixelCotangents(st.last, st.T, dC, jnp.ones_like(st.T))
        return backward_walk(cfg, g, f, i, t, cot, st.T * jnp.zeros((ch, 1, 1)))

    args = (geom, feats, lists.ids, tiles)
    st, fc = jax.block_until_ready(fwd(*args))
    _, bc = jax.block_until_ready(bwd(*args, st))
    tf = tb = float("nan")
    if time_it:
        t0 = time.perf_counter()
        jax.block_until_ready(fwd(*args))
        tf = time.perf_counter() - t0
        t0 = time.perf_counter()
        jax.block_until_ready(bwd(*args, st))
        tb = time.perf_counter() - t0
    return fc, bc, tf, tb


def compile_rows(target_name: str, sizes=("100k", "1m")) -> list:
    """The rasterizer's forward + backward compiled for `target_name` in the one-group and lanes
    configurations: [(scene, config, compile s, temporaries bytes, generated code bytes)]."""
    import jax.numpy as jnp
    import jax

    from jax_backend import RasterizerOptions, traced_rasterization
    from tools.programs import HEIGHT, WIDTH, lower_program, raster_program, target_devices

    target = target_devices(target_name)
    rows = []
    for size in sizes:
        _, arrays, info = raster_program(f"raster-flat-{size}")
        for name in ("accel-1group", "accel-lanes"):
            options = RasterizerOptions(**CONFIGS[name])

            def fn_for(layout, options=options):
                def loss(m, q, s, o, c, vm, K):
                    img, alpha, _ = traced_rasterization(m, q, s, o, c, vm, K, WIDTH, HEIGHT, rasterizer="flat",
                                                         isect_capacity=info["capacity"], layout=layout,
                                                         options=options)
                    return jnp.sum(img) + jnp.sum(alpha)

                return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))

            low = lower_program(fn_for, arrays, target)
            t0 = time.perf_counter()
            compiled = low.compile()
            seconds = time.perf_counter() - t0
            mem = compiled.memory_analysis()
            rows.append((size, name, seconds, int(mem.temp_size_in_bytes), int(mem.generated_code_size_in_bytes)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=SNOWMIKU)
    ap.add_argument("--trained", type=Path, default=None, help="an ns-train checkpoint of the capture (step-*.ckpt)")
    ap.add_argument("--gaussians", default="0,300000,1000000", help="0: the seeds; others grown around them")
    ap.add_argument("--downscales", default="4,2,1")
    ap.add_argument("--no-time", action="store_true", help="count only (the one-group walks are slow on a CPU)")
    ap.add_argument("--lane-shares", default="", help="tiles per lane to count besides the automatic (e.g. 4,16)")
    ap.add_argument("--compile", default="", help="a TPU topology (v6e:2x2) to compile the rasterizer for")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="which of the configurations to run")
    a = ap.parse_args()

    import jax
    import numpy as np

    from jax_backend import RasterizerOptions
    from jax_backend.rendering.rasterize_flat import auto_lanes

    engine = load_engine(a.data) if (a.trained or a.gaussians) and a.downscales else None
    states = []
    if a.trained and engine is not None:
        g = trained_gaussians(a.trained)
        states.append((f"trained ({int(np.asarray(g.alive).sum()):,})", g))
    for n in (int(x) for x in a.gaussians.split(",") if x and engine is not None):
        states.append((f"seeds ({int(np.asarray(engine.gaussians.alive).sum()):,})" if n == 0 else f"grown {n:,}",
                       engine.gaussians if n == 0 else grown(engine.gaussians, n)))
    shares = [int(x) for x in a.lane_shares.split(",") if x]
    print(f"# python -m benchmarks.walk {' '.join(__import__('sys').argv[1:])}")
    print(f"# {a.data.name}, view 0, 16-pixel tiles, chunk 32; jax {jax.__version__}, one CPU device per walk")
    print("| Gaussians | resolution | tiles | intersections | config | fwd slots / needed | fwd iterations | "
          "bwd slots / needed | bwd iterations | fwd s | bwd s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, g in states:
        for d in (int(x) for x in a.downscales.split(",") if x):
            geom, feats, lists, tiles, grid, isects = view_inputs(engine, g, d)
            t = grid.num_tiles
            configs = {k: v for k, v in CONFIGS.items() if k in a.configs.split(",")}
            for s in shares:
                configs[f"lanes, {s} tiles/lane"] = dict(walk="lanes", lanes=max(1, -(-t // s)))
            for name, kw in configs.items():
                fc, bc, tf, tb = run_walks(RasterizerOptions(**kw), grid, geom, feats, lists, tiles,
                                           not a.no_time and "tiles/lane" not in name)
                fc, bc = (jax.tree_util.tree_map(int, c) for c in (fc, bc))
                lanes = f" ({auto_lanes(t, grid.tile_size ** 2)} lanes)" if name == "accel-lanes" else ""
                print(f"| {label} | {grid.width}x{grid.height} | {t} | {isects:,} | {name}{lanes} | "
                      f"{fc.slots:,} / {fc.needed:,} ({fc.slots / max(fc.needed, 1):.2f}x) | {fc.iterations} | "
                      f"{bc.slots:,} / {bc.needed:,} ({bc.slots / max(bc.needed, 1):.2f}x) | {bc.iterations} | "
                      f"{tf:.3f} | {tb:.3f} |", flush=True)
    if a.compile:
        print(f"\nThe rasterizer's forward + backward compiled for {a.compile} (504x378, one view; compile-only)")
        print("| scene | config | compile s | temporaries MB | generated code KB |")
        print("|---|---|---|---|---|")
        for size, name, seconds, temp, code in compile_rows(a.compile):
            print(f"| raster-flat-{size} | {name} | {seconds:.1f} | {temp / 1e6:.1f} | {code / 1e3:.0f} |", flush=True)


if __name__ == "__main__":
    main()
