"""A real capture through jax-gs's own pipeline: snowmiku (97 phone photos, 1008x756, COLMAP
SIMPLE_RADIAL, 25,784 seed points) loaded as `ns-train jax-gs --data snowmiku colmap --colmap-path
sparse/0 --downscale-factor 4` loads it (nerfstudio's dataparser and datamanager, undistorted), at
several Gaussian counts and at splatfacto's three training resolutions (quarter, half, full).

    python -m benchmarks.capture profile [--gaussians 25000,100000,300000,1000000] [--downscales 4,2,1]
        [--steps 4] [--repeat 3] [--data ../shared/data/snowmiku] [--without-ssim] [--tile-size 16] [--trace]
    python -m benchmarks.capture walk [--trained CKPT] [--gaussians 0,300000,1000000] [--downscales 4,2,1]
        [--no-time] [--lane-shares 4,8,16] [--compile v6e:2x2] [--configs cpu,accel-1group,accel-lanes]

## profile: where a training step's time goes
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

With --trace, one block is also traced with JAX's profiler and each device's busy share of it is
printed: the time its thread spent inside XLA's operations, the rest going to the runtime between
operations and to waiting for the other device.

## walk: what the flat rasterizer's walk does, in each platform's configuration
On snowmiku (loaded as `ns-train jax-gs ... colmap --downscale-factor 4` loads it), for Gaussian
states (the 25,784 seeds; a trained state read from an `ns-train` checkpoint, `--trained`; 300k
and 1M grown around the seeds as `benchmarks.capture profile` grows them) at quarter, half and
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
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from pathlib import Path
from typing import Optional

from benchmarks.harness import cli, timed

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


def profile_step(engine, n: int, downscale: int, steps: int, repeat: int, without_ssim: bool = False,
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


def profile(data: Path = SNOWMIKU, gaussians: str = "25000,100000,300000,1000000", downscales: str = "4,2,1",
            steps: int = 4, repeat: int = 3, without_ssim: bool = False, trace: bool = False,
            tile_size: int = 16) -> None:
    """Where a training step's time goes (module docstring). `steps`: in each timed block;
    `without_ssim`: also the whole step with ssim_lambda 0; `trace`: also one block traced with
    JAX's profiler (each device's busy share of the step); `tile_size`: jax-gs's 16, 0 automatic
    (jax-gs-fast's)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    engine = load_engine(data)
    import jax

    print(f"# {data.name}: {engine.data.num_views} training views {engine.data.width}x{engine.data.height}, "
          f"{int(engine.gaussians.alive.sum())} seed Gaussians; jax {jax.__version__}, "
          f"{engine.layout.tile_devices} CPU device(s) dealing each view's tiles; seconds per step")
    print("| Gaussians | resolution | whole step | projection+SH | binning (sort) | blend fwd | blend bwd | "
          "loss (L1+SSIM) grad | Adam (all slots) | density control (per step) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for n in (int(x) for x in gaussians.split(",")):
        for d in (int(x) for x in downscales.split(",")):
            r = profile_step(engine, n, d, steps, repeat, without_ssim, tile_size, trace)
            rows.append(r)
            print(f"| {n:,} | {r['width']}x{r['height']} | {r['step']:.3f} | {r['projection']:.3f} | "
                  f"{r['binning']:.3f} | {r['blend_forward']:.3f} | {r['blend_backward']:.3f} | {r['loss']:.3f} | "
                  f"{r['adam']:.3f} | {r['density_control']:.4f} |"
                  + (f" whole step without SSIM: {r['step_without_ssim']:.3f}" if without_ssim else "")
                  + (" devices busy: " + ", ".join(f"{b:.0%}" for b in r["busy"]) if trace else ""), flush=True)
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


def walk(data: Path = SNOWMIKU, trained: Optional[Path] = None, gaussians: str = "0,300000,1000000",
         downscales: str = "4,2,1", no_time: bool = False, lane_shares: str = "", compile: str = "",
         configs: str = ",".join(CONFIGS)) -> None:
    """The flat rasterizer's walk in each platform's configuration (module docstring). `trained`:
    an ns-train checkpoint of the capture (step-*.ckpt); `gaussians`: 0 the seeds, others grown
    around them; `no_time`: count only (the one-group walks are slow on a CPU); `lane_shares`: tiles
    per lane to count besides the automatic (e.g. 4,16); `compile`: a TPU topology (v6e:2x2) to
    compile the rasterizer for; `configs`: which configurations to run."""
    import jax
    import numpy as np

    from jax_backend import RasterizerOptions
    from jax_backend.rendering.rasterize_flat import auto_lanes

    engine = load_engine(data) if (trained or gaussians) and downscales else None
    states = []
    if trained and engine is not None:
        g = trained_gaussians(trained)
        states.append((f"trained ({int(np.asarray(g.alive).sum()):,})", g))
    for n in (int(x) for x in gaussians.split(",") if x and engine is not None):
        states.append((f"seeds ({int(np.asarray(engine.gaussians.alive).sum()):,})" if n == 0 else f"grown {n:,}",
                       engine.gaussians if n == 0 else grown(engine.gaussians, n)))
    shares = [int(x) for x in lane_shares.split(",") if x]
    print(f"# {data.name}, view 0, 16-pixel tiles, chunk 32; jax {jax.__version__}, one CPU device per walk")
    print("| Gaussians | resolution | tiles | intersections | config | fwd slots / needed | fwd iterations | "
          "bwd slots / needed | bwd iterations | fwd s | bwd s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, g in states:
        for d in (int(x) for x in downscales.split(",") if x):
            geom, feats, lists, tiles, grid, isects = view_inputs(engine, g, d)
            t = grid.num_tiles
            runs = {k: v for k, v in CONFIGS.items() if k in configs.split(",")}
            for s in shares:
                runs[f"lanes, {s} tiles/lane"] = dict(walk="lanes", lanes=max(1, -(-t // s)))
            for name, kw in runs.items():
                fc, bc, tf, tb = run_walks(RasterizerOptions(**kw), grid, geom, feats, lists, tiles,
                                           not no_time and "tiles/lane" not in name)
                fc, bc = (jax.tree_util.tree_map(int, c) for c in (fc, bc))
                lanes = f" ({auto_lanes(t, grid.tile_size ** 2)} lanes)" if name == "accel-lanes" else ""
                print(f"| {label} | {grid.width}x{grid.height} | {t} | {isects:,} | {name}{lanes} | "
                      f"{fc.slots:,} / {fc.needed:,} ({fc.slots / max(fc.needed, 1):.2f}x) | {fc.iterations} | "
                      f"{bc.slots:,} / {bc.needed:,} ({bc.slots / max(bc.needed, 1):.2f}x) | {bc.iterations} | "
                      f"{tf:.3f} | {tb:.3f} |", flush=True)
    if compile:
        print(f"\nThe rasterizer's forward + backward compiled for {compile} (504x378, one view; compile-only)")
        print("| scene | config | compile s | temporaries MB | generated code KB |")
        print("|---|---|---|---|---|")
        for size, name, seconds, temp, code in compile_rows(compile):
            print(f"| raster-flat-{size} | {name} | {seconds:.1f} | {temp / 1e6:.1f} | {code / 1e3:.0f} |", flush=True)


if __name__ == "__main__":
    cli({"profile": profile, "walk": walk}, "capture")
