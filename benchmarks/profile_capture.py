"""Where a training step's time goes on a real capture (#53, part 1): snowmiku (97 phone photos,
1008x756, COLMAP SIMPLE_RADIAL, 25,784 seed points) loaded through jax-gs's own pipeline as
`ns-train jax-gs --data snowmiku colmap --colmap-path sparse/0 --downscale-factor 4` loads it
(nerfstudio's dataparser and datamanager, undistorted), at several Gaussian counts and at
splatfacto's three training resolutions (quarter, half, full: num_downscales 2, 1, 0).

For each (Gaussians, resolution):
- the whole training step as a run pays it (`Trainer.run_block`: the run's layout, each view's
  tiles dealt over the cores; density control off inside the timed block), per step;
- its pieces, each jitted alone on one view and one device (a piece alone is not always what it
  costs inside the step; read them as shares, the step row is what a run pays): projection with
  the SH colours; binning (its sort); the blend forward; the blend backward (forward + backward
  of an L1 loss, minus the forward); the photometric loss (L1 + SSIM) with its gradient (called
  in a loop, as a block calls it); Adam's update of every slot; density control (once per block
  of `steps_per_block` steps, shown per step);
- the intersections per tile of that view (mean, 99th percentile, max, coefficient of variation)
  against the (Gaussian, pixel-row) work the flat rasterizer walks: every tile in a group walks to
  the group's longest list (on a CPU about 16 tiles a group, heaviest first; on an accelerator
  one group: every tile to the longest list). "Useful share" = intersections / padded slots.

Gaussians beyond the 25,784 seeds are drawn around the seeds (each a seed's colour, position
jittered by its scale, scales shrunk by the cube root of the growth), opacities as the seeds'
(0.1): a scene as densification grows it early in training, not a converged one (where more
Gaussians are opaque and the blend stops earlier).

    python -m benchmarks.profile_capture [--gaussians 25000,100000,300000,1000000] [--downscales 4,2,1]
        [--steps 4] [--repeat 3] [--data ../shared/data/snowmiku] [--without-ssim] [--tile-size 16] [--trace]

With --trace, one block is also traced with JAX's profiler and each device's busy share of it is
printed: the time its thread spent inside XLA's operations, the rest going to the runtime between
operations and to waiting for the other device.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time
from pathlib import Path

from .profile_step import timed

ROOT = Path(__file__).resolve().parents[1]
SNOWMIKU = ROOT.parent / "shared" / "data" / "snowmiku"


def load_engine(data: Path):
    """The engine `ns-train jax-gs` builds for the capture (its Trainer, dataset and seed Gaussians)."""
    from nerfstudio.data.datamanagers.full_images_datamanager import FullImageDatamanagerConfig
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig

    from nerfstudio_jaxgs.config import OPTIMIZERS
    from nerfstudio_jaxgs.model import JaxGSModelConfig
    from nerfstudio_jaxgs.pipeline import JaxGSPipelineConfig

    dp = ColmapDataParserConfig(data=data, colmap_path=Path("sparse/0"), downscale_factor=4)
    cfg = JaxGSPipelineConfig(datamanager=FullImageDatamanagerConfig(dataparser=dp, cache_images_type="uint8"),
                              model=JaxGSModelConfig())
    pipeline = cfg.setup(device="cpu", test_mode="val")
    return pipeline.start_engine(30_000, OPTIMIZERS)


def grown(seed, n: int, key_seed: int = 0):
    """`n` Gaussians: the seed's alive ones, then ones drawn around them (module docstring)."""
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import Gaussians

    alive = np.asarray(seed.alive)
    p = {k: np.asarray(v)[alive] for k, v in seed.params.items()}
    m = len(p["means"])
    if n <= m:
        out = {k: v[:n] for k, v in p.items()}
    else:
        rng = np.random.default_rng(key_seed)
        parent = rng.integers(0, m, n - m)
        shrink = math.log((n / m) ** (1.0 / 3.0))
        extra = {k: v[parent] for k, v in p.items()}
        extra["means"] = extra["means"] + rng.normal(size=(n - m, 3)) * np.exp(extra["scales"])
        extra["scales"] = extra["scales"] - shrink
        out = {k: np.concatenate([p[k], extra[k]]) for k in p}
        out["scales"][:m] -= shrink
    return Gaussians({k: jnp.asarray(v, jnp.float32) for k, v in out.items()}, jnp.ones(n, bool))


def tile_stats(lengths, platform_groups: int) -> dict:
    """Intersections per tile, and the slots the flat rasterizer walks (groups of equal size,
    heaviest first, each to its longest list; `platform_groups` 1: one group)."""
    import numpy as np

    lengths = np.asarray(lengths, np.int64)
    t = len(lengths)
    order = np.sort(lengths)[::-1]
    groups = max(1, min(platform_groups, t))
    size = -(-t // groups)
    padded = sum(size * int(order[i]) for i in range(0, t, size))  # each group to its longest (its first)
    total = int(lengths.sum())
    return {"tiles": t, "intersections": total, "mean": float(lengths.mean()), "p99": float(np.percentile(lengths, 99)),
            "max": int(lengths.max()), "cv": float(lengths.std() / max(lengths.mean(), 1e-9)),
            "padded": padded, "useful": total / max(padded, 1)}


def step_time(tr, steps: int, repeat: int, warmup: int = 1) -> float:
    """Seconds per step of `tr`'s blocks of `steps` steps, after `warmup` untimed blocks (the
    first compiles; a block that comes near the intersection buffer grows it, and the next
    compiles again)."""
    import jax

    for _ in range(warmup):
        tr.run_block(steps)
    jax.block_until_ready(tr.device_state)
    t0 = time.perf_counter()
    reps = max(1, repeat // 2)
    for _ in range(reps):
        tr.run_block(steps)
    jax.block_until_ready(tr.device_state)
    return (time.perf_counter() - t0) / (reps * steps)


def in_a_loop(fn, x, steps: int, repeat: int) -> float:
    """Seconds per call of `fn` (x -> like x) called `steps` times in a row inside one compiled
    loop, as a training block calls the loss: XLA's CPU convolution (SSIM's blur) is several times
    slower as a program's top-level operation than inside a loop (0.57 against 0.03-0.05 s for the
    full-resolution loss here, 2026-12-06)."""
    import jax

    def chain(x):
        return jax.lax.fori_loop(0, steps, lambda i, y: y - 1e-3 * fn(y), x)

    return timed(jax.jit(chain), x, repeat=repeat) / steps


def device_busy(trace_dir: str) -> list:
    """From a JAX profiler trace (`create_perfetto_trace`): for each thread that ran XLA's
    operations, the share of the traced span it spent in them. The rest is the runtime between
    operations (dispatching the next one) and waiting for the other devices."""
    import collections
    import glob
    import gzip
    import json

    path = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)[0]
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    spans, fusions = collections.defaultdict(list), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and not e["name"].startswith("$") and "ThunkExecutor" not in e["name"]:
            spans[e["tid"]].append((e["ts"], e["ts"] + e.get("dur", 0)))
            fusions[e["tid"]] += "fusion" in e["name"]
    devices = [s for tid, s in spans.items() if fusions[tid] >= 100]  # not the Python thread's or helpers'
    if not devices:
        return []
    start = min(a for s in devices for a, _ in s)
    end = max(b for s in devices for _, b in s)
    shares = []
    for s in devices:
        s.sort()
        busy, (lo, hi) = 0.0, s[0]
        for a, b in s[1:]:
            if a > hi:
                busy, lo = busy + hi - lo, a
            hi = max(hi, b)
        shares.append((busy + hi - lo) / max(end - start, 1e-9))
    return sorted(shares, reverse=True)


def traced_busy(tr, steps: int) -> list:
    """`device_busy` of one block of `steps` steps of `tr` (already compiled)."""
    import tempfile

    import jax

    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            tr.run_block(steps)
            jax.block_until_ready(tr.device_state)
        return device_busy(d)


def profile(engine, n: int, downscale: int, steps: int, repeat: int, without_ssim: bool = False,
            tile_size: int = 16, trace: bool = False) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import Trainer, activated, photometric_loss, traced_rasterization
    from jax_backend.rendering.binning import bin_gaussians
    from jax_backend.rendering.projection import project_gaussians
    from jax_backend.rendering.rasterize_flat import auto_groups
    from jax_backend.rendering.sh import sh_to_color
    from jax_backend.rendering.tiles import TileGrid
    from jax_backend.training.data import downscaled_cameras

    levels = int(round(math.log2(downscale)))
    base = engine.cfg
    cfg = dataclasses.replace(base, num_downscales=levels, resolution_schedule=10**9, steps_per_block=steps,
                              tile_size=tile_size,
                              strategy=dataclasses.replace(base.strategy, refine_start=10**9))
    g = grown(engine.gaussians, n)
    tr = Trainer(cfg, engine.data, g, engine.scene_extent, layout=engine.layout, log=lambda *a: None)
    row = {"gaussians": n, "downscale": downscale}

    # the whole step, as the run pays it
    row["step"] = step_time(tr, steps, repeat)
    row["isect_capacity"] = tr.isect_capacity
    if trace:
        row["busy"] = traced_busy(tr, steps)
    if without_ssim:  # the same step with the SSIM term left out of the loss (ssim_lambda 0)
        plain = Trainer(dataclasses.replace(cfg, ssim_lambda=0.0), engine.data, g, engine.scene_extent,
                        layout=engine.layout, log=lambda *a: None)
        row["step_without_ssim"] = step_time(plain, steps, repeat)

    # the pieces, on view 0 at this resolution, one device
    data = tr.data
    Ks, W, H = downscaled_cameras(data.Ks, data.width, data.height, downscale)
    vm, K = jnp.asarray(data.viewmats[0]), jnp.asarray(Ks[0])
    gs = tr.gaussians
    means, quats, scales, opac, sh = activated(gs.params, gs.alive)
    tile = tr.cfg.tile_size  # as the run trains (the Trainer's pick when the setting is 0: automatic)
    cap, grid = tr.isect_capacity, TileGrid(W, H, tile)
    image = jnp.asarray(np.asarray(data.images[0])[::downscale, ::downscale][:H, :W, :3], jnp.float32) / 255.0

    @jax.jit
    def project(means, quats, scales, opac, sh):
        proj = project_gaussians(means, quats, scales, opac, vm, K, W, H, 0.01, 0.3, "classic")
        campos = -vm[:3, :3].T @ vm[:3, 3]
        return proj, sh_to_color(sh, means - campos, active_degree=3)

    @jax.jit
    def project_and_bin(means, quats, scales, opac, sh):
        proj, colors = project(means, quats, scales, opac, sh)
        return bin_gaussians(jax.lax.stop_gradient(proj), grid, cap, "cpu"), colors

    def render(means, quats, scales, opac, sh):
        return traced_rasterization(means, quats, scales, opac, sh, vm[None], K[None], W, H, sh_degree=3,
                                    isect_capacity=cap, rasterizer="flat", tile_size=tile)[0][0]

    fwd = jax.jit(render)
    grad = jax.jit(jax.grad(lambda *p: jnp.abs(render(*p) - image).mean(), argnums=(0, 1, 2, 3, 4)))
    splats = (means, quats, scales, opac, sh)
    t_proj = timed(project, *splats, repeat=repeat)
    t_bin = timed(project_and_bin, *splats, repeat=repeat)
    t_fwd = timed(fwd, *splats, repeat=repeat)
    t_grad = timed(grad, *splats, repeat=repeat)
    render_img = jnp.clip(fwd(*splats), 0, 1)
    t_loss = in_a_loop(jax.grad(lambda x: photometric_loss(x, image, None, 0.2)), render_img, steps, repeat)
    state = tr.state
    tx = tr.opt.gaussians
    ones = jax.tree_util.tree_map(jnp.ones_like, state.gaussians.params)
    t_adam = timed(jax.jit(lambda s: tx.update(ones, s, state.gaussians.params)), state.opt_state, repeat=repeat)
    refine = tr.make_refine()
    t_refine = timed(refine, np.float32(tr.scene_extent), state, jnp.int32(0), repeat=max(1, repeat // 2))
    row.update(projection=t_proj, binning=t_bin - t_proj, blend_forward=t_fwd - t_bin, blend_backward=t_grad - t_fwd,
               loss=t_loss, adam=t_adam, density_control=t_refine / base.steps_per_block)
    bins, _ = project_and_bin(*splats)
    lengths = np.asarray(bins.tile_end) - np.asarray(bins.tile_start)
    row["tiles_cpu"] = tile_stats(lengths, auto_groups(len(lengths), "cpu"))
    row["tiles_accel"] = tile_stats(lengths, 1)
    row["width"], row["height"], row["tile"] = W, H, tile
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=SNOWMIKU)
    ap.add_argument("--gaussians", default="25000,100000,300000,1000000")
    ap.add_argument("--downscales", default="4,2,1")
    ap.add_argument("--steps", type=int, default=4, help="steps in each timed block")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--without-ssim", action="store_true", help="also time the whole step with ssim_lambda 0")
    ap.add_argument("--trace", action="store_true",
                    help="also trace one block with JAX's profiler: each device's busy share of the step")
    ap.add_argument("--tile-size", type=int, default=16, help="tile edge in pixels (jax-gs's 16; 0: automatic, jax-gs-fast's)")
    a = ap.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    engine = load_engine(a.data)
    import jax

    print(f"# python -m benchmarks.profile_capture --gaussians {a.gaussians} --downscales {a.downscales} "
          f"--steps {a.steps} --repeat {a.repeat} --tile-size {a.tile_size}" + (" --without-ssim" if a.without_ssim else "")
          + (" --trace" if a.trace else ""))
    print(f"# {a.data.name}: {engine.data.num_views} training views {engine.data.width}x{engine.data.height}, "
          f"{int(engine.gaussians.alive.sum())} seed Gaussians; jax {jax.__version__}, "
          f"{engine.layout.tile_devices} CPU device(s) dealing each view's tiles; seconds per step")
    print("| Gaussians | resolution | whole step | projection+SH | binning (sort) | blend fwd | blend bwd | "
          "loss (L1+SSIM) grad | Adam (all slots) | density control (per step) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for n in (int(x) for x in a.gaussians.split(",")):
        for d in (int(x) for x in a.downscales.split(",")):
            r = profile(engine, n, d, a.steps, a.repeat, a.without_ssim, a.tile_size, a.trace)
            rows.append(r)
            print(f"| {n:,} | {r['width']}x{r['height']} | {r['step']:.3f} | {r['projection']:.3f} | "
                  f"{r['binning']:.3f} | {r['blend_forward']:.3f} | {r['blend_backward']:.3f} | {r['loss']:.3f} | "
                  f"{r['adam']:.3f} | {r['density_control']:.4f} |"
                  + (f" whole step without SSIM: {r['step_without_ssim']:.3f}" if a.without_ssim else "")
                  + (" devices busy: " + ", ".join(f"{b:.0%}" for b in r["busy"]) if a.trace else ""), flush=True)
    tile = rows[0]["tile"] if rows else 16
    print(f"\nIntersections per {tile}x{tile} tile (view 0) and the slots the flat rasterizer walks")
    print("| Gaussians | resolution | tiles | intersections | mean | p99 | max | CV | CPU: padded slots (useful) | "
          "accelerator, one group: padded slots (useful) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        c, t = r["tiles_cpu"], r["tiles_accel"]
        print(f"| {r['gaussians']:,} | {r['width']}x{r['height']} | {c['tiles']} | {c['intersections']:,} | "
              f"{c['mean']:.0f} | {c['p99']:.0f} | {c['max']} | {c['cv']:.2f} | {c['padded']:,} ({c['useful']:.0%}) | "
              f"{t['padded']:,} ({t['useful']:.0%}) |")


if __name__ == "__main__":
    main()
