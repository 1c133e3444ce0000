"""Every jax-gs program compiled for TPU and GPU on this host, without either (deviceless
ahead-of-time compilation: libtpu, `pip install -e ".[tpu]"`; XLA's GPU compiler, `pip install -e
".[gpu]"`), beside the same program compiled for this CPU: compile seconds, generated code, device
memory for arguments / outputs / temporaries, and whether it fits one chip. For a GPU also the
kernel launches per call counted from the optimised HLO (`benchmarks/launches.py`), the HLO while
loops, and for a train block the launches of one training step (its scan body). For every train
block the collectives of one step and the bytes each device sends for them (ring algorithms:
`hlo_checks.collective_traffic`).

Targets: "cpu"; TPU topologies by name ("v5e:2x2", "v6e:2x2"); GPUs "h200" and "a100", whose
XLA target configs (GpuTargetConfigProto text, every figure with its source) are in
`benchmarks/gpu_targets/`.

Programs (`PROGRAMS`), on a capture of fern's size (20 views of 504x378) unless said:
  raster-{flat,standard}-{100k,1m}: `rasterization` forward + backward (sum of the image and alpha)
    at 504x378, 100k / 1M Gaussians of realistic sizes (`benchmarks.rasterizer.realistic_scene`);
  block-default, block-mcmc, block-2dgs: the train block `ns-train jax-gs` / `jax-gs-mcmc` /
    `jax-2dgs` runs (the plugin's own settings; 100 steps, SH degree 3, 100k Gaussians (2DGS:
    disks, its normal consistency on), density control at its end);
  refine-default, refine-mcmc: density control alone (run again when the slots run out);
  render: the eval / viewer render (RGB + expected depth, SH degree 3, 100k Gaussians);
  block-dp4: the default block data parallel over four chips (`--machine.num-devices 4`: the replica mesh);
  block-shard4: the default block with the Gaussians' rows (parameters, Adam's moments,
    statistics) split over four chips, which deal each view's tiles (`Layout.tile_devices` 4);
    block-shard16 the same over 16 chips, block-dp4xshard4 4 replicas with each one's rows over 4
    chips (a 4 x 4 mesh: 4 views a step); not in the default list: a 16-chip target, "v6e:4x4",
    whose chips are 4 hosts' 4 each (a program on 4 of its chips does not compile: libtpu wants
    the target's device ids);
  seed-raster-100k: the seed article's code (github.com/ghif/jax-gs, its `fast_tpu_rasterizer`),
    forward + backward of the sum of its image, on raster-flat-100k's scene and view; only with
    `--seed-dir` (or JAXGS_SEED_DIR), a checkout of that repository kept outside this one, with
    `chex` importable (e.g. `pip install --target DIR chex toolz`, DIR on PYTHONPATH).

Every compile runs in its own process, one after another in this one run.

    python -m benchmarks.accelerator_compile [--targets cpu v5e:2x2 v6e:2x2 h200 a100] [--programs ...] [--out FILE]
    python -m benchmarks.accelerator_compile --targets v5e:2x2 --fit 250000 500000 1000000 2000000  # sized to fit
        [--fit-programs block-default block-shard4] [--fit-sizes 504x378 1297x840]

Compile-only: nothing here has run on a TPU or a GPU. The figures say how long XLA takes to
compile for one on this host, how much device memory the compiled program asks for, and (GPU) how
many kernels it would launch; not how fast it runs.
"""
from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import subprocess
import sys
import time

WIDTH, HEIGHT = 504, 378
VIEWS = 20
HBM_GIB = {"v5e": 16, "v6e": 32, "v5p": 95, "v4": 32, "h200": 141e9 / 2**30, "a100": 80}  # memory per chip
GPU_TARGETS = ("h200", "a100")  # benchmarks/gpu_targets/<name>.txtpb
PROGRAMS = ["raster-flat-100k", "block-default", "block-2dgs", "render", "refine-default", "block-mcmc", "block-dp4", "block-shard4",
            "raster-standard-100k", "refine-mcmc", "raster-flat-1m", "raster-standard-1m", "raster-pallas-100k",
            "raster-pallas-10k", "raster-flat-10k", "raster-standard-10k", "block-default-10k"]
SEED = "seed-raster-100k"  # the seed article's rasterizer (`--seed-dir`)
SHARD16 = "block-shard16"  # the rows over 16 chips: only for a 16-chip target
DP4XSHARD4 = "block-dp4xshard4"  # 4 replicas x the rows over 4 chips: a 16-chip target
SIXTEEN = [SHARD16, DP4XSHARD4]


def scene_views(n: int, width: int = WIDTH, height: int = HEIGHT):
    """Gaussians (`realistic_scene`) and VIEWS cameras around its camera (small turns and shifts),
    for images of width x height (the focal length scaled with the width: the same field of view)."""
    import numpy as np

    from benchmarks.rasterizer import realistic_scene

    means, quats, scales, opacities, colors, viewmat, K = realistic_scene(n)
    K = K.copy()
    K[:, 0, 0] *= width / WIDTH
    K[:, 1, 1] *= width / WIDTH
    K[:, 0, 2], K[:, 1, 2] = width / 2, height / 2
    viewmats = np.repeat(viewmat, VIEWS, 0)
    for i in range(VIEWS):
        a = (i - VIEWS / 2) * 0.01
        c, s = np.cos(a), np.sin(a)
        viewmats[i, :3, :3] = np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
        viewmats[i, 0, 3] = 0.02 * (i - VIEWS / 2)
    return means, quats, scales, opacities, colors, viewmats, np.repeat(K, VIEWS, 0)


def trainer_for(method: str, n: int, replicas: int = 1, width: int = WIDTH, height: int = HEIGHT,
                isect_capacity=1 << 20, tile_devices: int = 1):
    """The `Trainer` `ns-train <method>` builds (the plugin's settings), on a fern-size capture
    with n Gaussians alive, its layout `replicas` data-parallel copies or the Gaussians' rows split
    over `tile_devices` chips (which deal each view's tiles)."""
    import numpy as np

    from jax_backend import Trainer, make_dataset, make_layout
    from jax_backend.rendering import next_pow2
    from jax_backend.training.gaussians import Gaussians
    from jax_backend.training.initialization import init_from_points
    from nerfstudio_jaxgs import config as methods
    from nerfstudio_jaxgs.settings import train_config

    spec = {"jax-gs": methods.jax_gs_method, "jax-gs-mcmc": methods.jax_gs_mcmc_method,
            "jax-2dgs": methods.jax_2dgs_method}[method]
    model = spec.config.pipeline.model
    cfg = train_config(model, max_steps=spec.config.max_num_iterations, num_train_data=VIEWS,
                       optimizers=spec.config.optimizers)
    means, quats, scales, opacities, colors, viewmats, Ks = scene_views(n, width, height)
    g = init_from_points(means, colors, sh_degree=cfg.sh_degree, capacity=next_pow2(n))
    import jax.numpy as jnp

    pad = g.capacity - n
    params = dict(g.params, scales=jnp.concatenate([jnp.log(jnp.asarray(scales, jnp.float32)),
                                                    jnp.zeros((pad, 3))]))
    g = Gaussians(params, g.alive)
    data = make_dataset(np.zeros((VIEWS, height, width, 3), np.uint8), viewmats, Ks)
    # one device renders a view (a chip) unless the rows are split; the CPU column compiles the same program
    tr = Trainer(cfg, data, g, 1.0, isect_capacity=isect_capacity, log=lambda *_: None,
                 layout=make_layout(replicas=replicas, tile_devices=tile_devices))
    tr.state = tr.state._replace(step=jnp.int32(10_000))  # full resolution, SH degree 3, density control live
    if isect_capacity is None:  # sized at full resolution, as the Trainer does when the resolution changes
        tr.size_buffer_ahead()
    return tr


SMALL_W, SMALL_H = 64, 48  # the small compile checks' image size


def small_cameras(views: int):
    """(viewmats [views, 4, 4], Ks [views, 3, 3]) float32 of the small compile checks: cameras 3
    units in front of the scene, side by side (0.2 units across)."""
    import numpy as np

    viewmats = np.repeat(np.eye(4, dtype=np.float32)[None], views, 0)
    viewmats[:, 2, 3] = 3.0
    viewmats[:, 0, 3] = np.linspace(-0.1, 0.1, views) if views > 1 else 0.0
    Ks = np.repeat(np.array([[[60.0, 0, SMALL_W / 2], [0, 60.0, SMALL_H / 2], [0, 0, 1]]], np.float32), views, 0)
    return viewmats, Ks


def small_trainer(strategy: str = "default", corrections: bool = False, surfels: bool = False, **strategy_kw):
    """A `Trainer` of 2,000 Gaussians (2,048 slots) on 3 views of 64x48, density control live
    (step 600), for compile checks in the tests; `corrections`: pose corrections (SO3xR3) and
    bilateral grids on (their contractions in the program); `surfels`: 2DGS disks, with the normal
    consistency and the depth distortion both on."""
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import Surfels2D, Trainer, TrainConfig, init_from_points, make_dataset, make_layout, make_strategy
    from jax_backend.training.bilateral import BilateralGridConfig
    from jax_backend.training.cameras import CameraOptConfig

    points = np.random.default_rng(0).normal(size=(2000, 3)) * 0.5
    viewmats, Ks = small_cameras(3)
    data = make_dataset(np.zeros((3, SMALL_H, SMALL_W, 3), np.uint8), viewmats, Ks)
    extra = dict(camera_opt=CameraOptConfig(mode="SO3xR3"), bilateral=BilateralGridConfig(enabled=True, shape=(4, 4, 4))) \
        if corrections else {}
    if surfels:
        extra["splats"] = Surfels2D(normal_start=0, distortion_lambda=0.1, distortion_start=0)
    cfg = TrainConfig(max_steps=1000, steps_per_block=5, strategy=make_strategy(strategy, **strategy_kw),
                      background="random", **extra)
    capacity = 4096 if strategy_kw.get("budget") else 2048
    tr = Trainer(cfg, data, init_from_points(points, sh_degree=3, capacity=capacity), 1.0, isect_capacity=1 << 15,
                 log=lambda *_: None, layout=make_layout(tile_devices=1))
    tr.state = tr.state._replace(step=jnp.int32(600))  # density control live
    return tr


def small_render_programs(n: int = 2000):
    """{"render": the eval / viewer render (RGB + expected depth, SH 3), "raster": forward +
    backward of a render's sum, "raster-fisheye": the same through a fisheye camera with its four
    coefficients (an argument), "raster-2dgs": forward + backward of a 2DGS render (the same
    points as surfels: colours, expected depth, normals, surface normals, distortion, median)}:
    (the function built for a layout, `fn(layout)`; float32 arguments) from one of `small_cameras`."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import traced_rasterization, traced_rasterization_2dgs

    rng = np.random.default_rng(0)
    viewmat, K = small_cameras(1)
    width, height = SMALL_W, SMALL_H
    args = [np.asarray(a, np.float32) for a in (rng.normal(size=(n, 3)) * 0.5, np.tile([1.0, 0, 0, 0], (n, 1)),
                                                np.full((n, 3), 0.02), np.full(n, 0.5), np.zeros((n, 16, 3)), viewmat, K)]

    def render(layout):
        return lambda m, q, s, o, c, vm, K: traced_rasterization(
            m, q, s, o, c, vm, K, width, height, sh_degree=3, render_mode="RGB+ED", isect_capacity=1 << 15,
            layout=layout)[:2]

    def raster(layout, camera_model="pinhole"):
        def loss(m, q, s, o, c, vm, K, distortion=None):
            img, alpha, _ = traced_rasterization(m, q, s, o, c, vm, K, width, height, sh_degree=3,
                                                 isect_capacity=1 << 15, layout=layout, camera_model=camera_model,
                                                 distortion=distortion)
            return jnp.sum(img) + jnp.sum(alpha)

        return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))

    def raster_2dgs(layout):
        def loss(m, q, s, o, c, vm, K):
            out = traced_rasterization_2dgs(m, q, s, o, c, vm, K, width, height, sh_degree=3, render_mode="RGB+ED",
                                            isect_capacity=1 << 15, layout=layout)
            return sum(jnp.sum(x) for x in out[:6])

        return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))

    kb4 = np.asarray([0.04, -0.012, 0.003, -0.0004], np.float32)
    return {"render": (render, args), "raster": (raster, args),
            "raster-fisheye": (lambda layout: raster(layout, "fisheye"), args + [kb4]),
            "raster-2dgs": (raster_2dgs, args)}


def seed_program(n: int = 100_000):
    """(function, its float32 arguments) of the seed code's rasterizer, forward + backward, on the
    scene and view of `raster-flat-100k`: its parameters as it keeps them (log scales, opacity
    logits, SH degree 0 from the colours)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    seed = os.environ.get("JAXGS_SEED_DIR")
    if not seed or not os.path.isdir(os.path.join(seed, "jax_gs")):
        raise SystemExit("seed-raster-100k needs --seed-dir: a checkout of github.com/ghif/jax-gs")
    sys.path.insert(0, seed)
    from jax_gs.core.camera import Camera
    from jax_gs.core.gaussians import Gaussians
    from jax_gs.renderer.renderer import render

    means, quats, scales, opacities, colors, viewmats, Ks = scene_views(n)
    sh = np.zeros((n, 1, 3), np.float32)
    sh[:, 0] = (colors - 0.5) / 0.28209479177387814
    K = Ks[0]
    args = (means, np.log(scales), quats, np.log(opacities / (1 - opacities))[:, None], sh, viewmats[0])

    def loss(m, s, q, o, c, w2c):
        cam = Camera(W=WIDTH, H=HEIGHT, fx=float(K[0, 0]), fy=float(K[1, 1]), cx=float(K[0, 2]), cy=float(K[1, 2]),
                     W2C=w2c, full_proj=jnp.eye(4))
        image, _ = render(Gaussians(means=m, scales=s, quaternions=q, opacities=o, sh_coeffs=c), cam,
                          fast_tpu_rasterizer=True, sh_degree=0)
        return jnp.sum(image)

    return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4)), [np.asarray(a, np.float32) for a in args]


def target_devices(name: str) -> list:
    """The compile-only devices of a target: a TPU topology ("v5e:2x2") or a GPU of
    `GPU_TARGETS` (one device)."""
    from jax_backend import topology_devices

    if name in GPU_TARGETS:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_targets", f"{name}.txtpb")
        with open(path) as f:
            return topology_devices("", platform="cuda", target_config=f.read(), topology="1x1x1")
    return topology_devices(name)


def lower_program(fn_for, arrays, target):
    """`fn_for(layout)` (a function built for a layout) on `arrays`, lowered for this host's CPU
    (`target` None) or for the first of `target`'s devices."""
    import jax

    from jax_backend import Layout, local_layout
    from jax_backend.devices import abstract

    if target is None:
        return jax.jit(fn_for(local_layout())).lower(*arrays)
    layout = Layout(target[:1])
    spec = abstract(arrays, jax.sharding.SingleDeviceSharding(target[0]))
    return jax.jit(fn_for(layout)).trace(*spec).lower(lowering_platforms=(layout.lowering_platform,))


SIZES = {"10k": 10_000, "100k": 100_000, "1m": 1_000_000}


@functools.lru_cache(maxsize=None)  # built once per process: compiled, then (GPU) run for the trip counts
def raster_program(program: str):
    """(function, its float32 arguments, info) of a `raster-<rasterizer>-<size>` or `render` program."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import traced_rasterization
    from jax_backend.rendering import count_intersections
    from jax_backend.rendering.isect_buffer import size_for

    if program == "render":
        rasterizer, n = "auto", 100_000
    else:
        _, rasterizer, size = program.split("-")
        n = SIZES[size]
    means, quats, scales, opacities, colors, viewmats, Ks = scene_views(n)
    cap = size_for(int(count_intersections(means, quats, scales, opacities, viewmats[:1], Ks[:1], WIDTH,
                                                HEIGHT)[0]))
    if program == "render":  # SH coefficients, as the eval and the viewer render them
        sh = np.zeros((n, 16, 3), np.float32)
        args = (means, quats, scales, opacities, sh, viewmats[:1], Ks[:1])

        def fn_for(layout):
            return lambda m, q, s, o, c, vm, K: traced_rasterization(
                m, q, s, o, c, vm, K, WIDTH, HEIGHT, sh_degree=3, render_mode="RGB+ED", isect_capacity=cap,
                layout=layout)[:2]
    else:
        args = (means, quats, scales, opacities, colors, viewmats[:1], Ks[:1])

        def fn_for(layout):
            def loss(m, q, s, o, c, vm, K):
                img, alpha, _ = traced_rasterization(m, q, s, o, c, vm, K, WIDTH, HEIGHT, isect_capacity=cap,
                                                     rasterizer=rasterizer, layout=layout)
                return jnp.sum(img) + jnp.sum(alpha)

            return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))
    return fn_for, [np.asarray(a, np.float32) for a in args], {"gaussians": n, "capacity": cap,
                                                               "rasterizer": rasterizer}


def lowered(program: str, target, gaussians: int = 100_000, size=(WIDTH, HEIGHT)):
    """`program` lowered for `target` devices (None: this host's CPU); `gaussians` and `size` for
    the blocks (`--fit`)."""
    if program == "seed-raster-100k":
        fn, arrays = seed_program()
        return lower_program(lambda layout: fn, arrays, target), {"gaussians": 100_000, "code": "ghif/jax-gs"}
    if program.startswith("raster-") or program == "render":
        fn_for, arrays, info = raster_program(program)
        return lower_program(fn_for, arrays, target), info
    kind, variant, *rest = program.split("-")
    if rest:  # block-default-10k: that many Gaussians
        gaussians = SIZES[rest[0]]
    method = {"mcmc": "jax-gs-mcmc", "2dgs": "jax-2dgs"}.get(variant, "jax-gs")
    default = gaussians == 100_000 and tuple(size) == (WIDTH, HEIGHT)
    # other sizes: the buffer the Trainer sizes itself (twice what the most demanding view needs)
    counts = {"replicas": 1, "tile_devices": 1}
    for part in variant.split("x"):  # dp4, shard16, dp4xshard4
        for prefix, key in (("dp", "replicas"), ("shard", "tile_devices")):
            if part.startswith(prefix) and part[len(prefix):].isdigit():
                counts[key] = int(part[len(prefix):])
    tr = trainer_for(method, gaussians, width=size[0], height=size[1], **counts,
                     isect_capacity=(1 << 20) if default else None)
    info = {"gaussians": gaussians, "size": f"{size[0]}x{size[1]}", "capacity": tr.capacity,
            "isect_capacity": tr.isect_capacity,
            "steps": tr.cfg.steps_per_block, "devices": tr.layout.replicas * tr.layout.tile_devices}
    from jax_backend.training import aot

    if kind == "block":
        return aot.lower_block(tr, tr.cfg.steps_per_block, target), info
    return aot.lower_refine(tr, target), info


def gpu_launches(program: str, hlo: str, info: dict) -> dict:
    """Launch counts of a program compiled for a GPU (`launches`): per call, and for a train block
    per step (its scan body; density control at the block's end is in the per-call figure). The
    XLA rasterizers' data-dependent walks take trip counts measured on this CPU under the GPU's
    platform policy."""
    from benchmarks import launches as L

    trips = {}
    if program.startswith("raster-") and info.get("rasterizer") in ("flat", "standard"):
        from jax_backend import Layout

        fn_for, arrays, _ = raster_program(program)
        trips = L.measure_trips(fn_for(Layout((L.PlatformOnly("gpu"),))), *arrays)
    count = L.launches(hlo, trips)
    row = {"launches": count.launches, "while_loops": count.while_loops, "data_dependent_loops": count.data_dependent,
           "unmeasured_loops": count.unmeasured, "trips": trips,
           "triton_kernels": hlo.count('custom_call_target="__gpu$xla.gpu.triton"')}
    if "steps" in info:
        body = L.loop_body(hlo, info["steps"])
        if body:
            row["launches_per_step"] = L.launches(hlo, trips, body).launches
    return row


def measure(program: str, target_name: str, gaussians: int = 100_000, size=(WIDTH, HEIGHT)) -> dict:
    """Runs in the child process: compile one program for one target."""
    import jax

    # the trainer is built on this host's CPU devices first (block-dp4's CPU column runs over four)
    jax.config.update("jax_num_cpu_devices", 16 if program in SIXTEEN else 4)
    target = None if target_name == "cpu" else target_devices(target_name)
    t0 = time.perf_counter()
    low, info = lowered(program, target, gaussians, size)
    t1 = time.perf_counter()
    compiled = low.compile()
    t2 = time.perf_counter()
    mem = compiled.memory_analysis()
    # lower_s: building the inputs (for a block: the Trainer) and lowering; compile_s: XLA alone
    row = {"program": program, "target": target_name, "lower_s": t1 - t0, "compile_s": t2 - t1, **info}
    for k in ("generated_code_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes",
              "temp_size_in_bytes", "alias_size_in_bytes"):
        row[k] = int(getattr(mem, k, 0) or 0) if mem is not None else None
    chip = target_name.split(":")[0]
    if chip in HBM_GIB and mem is not None:
        per_chip = row["argument_size_in_bytes"] + row["output_size_in_bytes"] + row["temp_size_in_bytes"] \
            - row["alias_size_in_bytes"]
        row["hbm_bytes"] = per_chip
        row["fits"] = per_chip + row["generated_code_size_in_bytes"] < HBM_GIB[chip] * 2**30
    if "steps" in info:  # a train block: what one step (the scan's body) sends between devices
        row.update(step_traffic(compiled.as_text(), info["steps"]))
    if target_name in GPU_TARGETS:
        row.update(gpu_launches(program, compiled.as_text(), info))
    return row


def step_traffic(hlo: str, steps: int) -> dict:
    """The collectives of one training step of a compiled block (its scan's body), and the bytes
    each device sends for them (`hlo_checks.collective_traffic`: ring algorithms)."""
    from benchmarks import hlo_checks
    from benchmarks import launches as L

    body = L.loop_body(hlo, steps)
    if body is None:
        return {}
    traffic = hlo_checks.collective_traffic(hlo, body)
    whole = hlo_checks.collective_traffic(hlo)  # each instruction once: the step's, plus the block's own
    step = sum(sent for _, sent in traffic.values())
    return {"step_collectives": {op: n for op, (n, _) in traffic.items()}, "step_sent_bytes": step,
            # outside the steps' loop: density control at the block's end and the block's setup
            "block_end_sent_bytes": sum(sent for _, sent in whole.values()) - step}


def _mb(x):
    return "-" if x is None else f"{x / 1e6:.1f}"


def table(rows: list, targets: list) -> str:
    by = {(r["program"], r["target"]): r for r in rows}
    programs = [p for p in PROGRAMS + [SEED] + SIXTEEN if any((p, t) in by for t in targets)]
    head = "| program | " + " | ".join(f"{t} compile s" for t in targets) + " | " + " | ".join(
        f"{t} code / args / temp MB" for t in targets if t != "cpu") + " | fits one chip |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for p in programs:
        cells = [f"{by[(p, t)]['compile_s']:.1f}" if (p, t) in by and "error" not in by[(p, t)] else "fail"
                 for t in targets]
        mems, fits = [], []
        for t in targets:
            if t == "cpu":
                continue
            r = by.get((p, t))
            if r is None or "error" in r:
                mems.append("-")
                continue
            mems.append(f"{_mb(r['generated_code_size_in_bytes'])} / {_mb(r['argument_size_in_bytes'])} / "
                        f"{_mb(r['temp_size_in_bytes'])}")
            fits.append(f"{t.split(':')[0]} {'yes' if r.get('fits') else 'no'}")
        lines.append(f"| {p} | " + " | ".join(cells) + " | " + " | ".join(mems) + f" | {', '.join(fits)} |")
    return "\n".join(lines)


def launch_table(rows: list) -> str:
    """Kernel launches per call (and per training step) of the programs compiled for a GPU."""
    lines = ["| program | target | launches per call | per training step | HLO while loops (data-dependent) "
             "| Triton kernels | measured trips (fwd / bwd) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "launches" not in r:
            continue
        trips = " / ".join(f"{r['trips'][k]:.1f}" for k in ("forward", "backward") if k in r["trips"]) or "-"
        step = f"{r['launches_per_step']:.0f}" if "launches_per_step" in r else "-"
        lines.append(f"| {r['program']} | {r['target']} | {r['launches']:.0f} | {step} | {r['while_loops']} "
                     f"({r['data_dependent_loops']}) | {r['triton_kernels']} | {trips} |")
    return "\n".join(lines)


def fit(a):
    """The train blocks' HBM per chip at each Gaussian count and image size."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, JAX_PLATFORMS="cpu", TPU_SKIP_MDS_QUERY="1")
    target = next(t for t in a.targets if t != "cpu")
    chip = target.split(":")[0]
    print(f"# train blocks (100 steps, SH 3, 20 views) compiled for {target}: HBM per chip (arguments + outputs + "
          f"temporaries + code) against {HBM_GIB[chip]} GiB; block-shardK: the Gaussians' rows split over K chips",
          flush=True)
    for program, size, n in itertools.product(a.fit_programs, a.fit_sizes, a.fit):
        out = subprocess.run([sys.executable, "-m", "benchmarks.accelerator_compile", "--child", program, target,
                              "--gaussians", str(n), "--size", size], capture_output=True, text=True, cwd=root,
                             env=env)
        if out.returncode:
            print(f"{program} {size:>9} {n:>9}: FAILED: {out.stderr.strip().splitlines()[-1][:300]}", flush=True)
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        total = r["hbm_bytes"] + r["generated_code_size_in_bytes"]
        print(f"{program} {size:>9} {n:>9} Gaussians ({r['capacity']} slots, buffer {r['isect_capacity']}): "
              f"{total / 2**30:.2f} GiB (args {r['argument_size_in_bytes'] / 2**30:.2f}, "
              f"temp {r['temp_size_in_bytes'] / 2**30:.2f}), compile {r['compile_s']:.0f} s, "
              + (f"a step sends {r['step_sent_bytes'] / 1e6:.1f} MB per device, the block's end "
                 f"{r['block_end_sent_bytes'] / 1e6:.1f} MB, " if "block_end_sent_bytes" in r else "") +
              f"fits: {'yes' if r['fits'] else 'no'}", flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(r) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", nargs="+", default=["cpu", "v5e:2x2", "v6e:2x2"])
    ap.add_argument("--programs", nargs="+", default=None, choices=PROGRAMS + [SEED] + SIXTEEN,
                    help=f"default: all ({SEED} with --seed-dir)")
    ap.add_argument("--seed-dir", default=os.environ.get("JAXGS_SEED_DIR"),
                    help="a checkout of github.com/ghif/jax-gs (outside this repository): adds its rasterizer")
    ap.add_argument("--out", default=None, help="JSON lines file for the rows (default: print only)")
    ap.add_argument("--fit", nargs="+", type=int, metavar="GAUSSIANS",
                    help="instead: the default train block with these Gaussian counts at 504x378 and 1297x840, "
                         "for the first non-cpu target (the largest that fits one chip)")
    ap.add_argument("--fit-programs", nargs="+", default=["block-default"], choices=["block-default", "block-shard4"] + SIXTEEN,
                    help="the blocks --fit compiles")
    ap.add_argument("--fit-sizes", nargs="+", default=["504x378", "1297x840"], help="the image sizes --fit compiles")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--gaussians", type=int, default=100_000, help=argparse.SUPPRESS)
    ap.add_argument("--size", default=f"{WIDTH}x{HEIGHT}", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(measure(*a.child, a.gaussians, tuple(int(v) for v in a.size.split("x")))))
        return
    if a.fit:
        fit(a)
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, JAX_PLATFORMS="cpu", TPU_SKIP_MDS_QUERY="1")
    if a.seed_dir:
        env["JAXGS_SEED_DIR"] = os.path.abspath(a.seed_dir)
    if a.programs is None:
        a.programs = PROGRAMS + ([SEED] if a.seed_dir else [])
    print(f"# jax-gs programs compiled for {', '.join(a.targets)} on this host ({os.cpu_count()} cores); "
          f"one process per compile", flush=True)
    rows = []
    for program in a.programs:
        for target in a.targets:
            t0 = time.time()
            out = subprocess.run([sys.executable, "-m", "benchmarks.accelerator_compile", "--child", program, target],
                                 capture_output=True, text=True, cwd=root, env=env)
            if out.returncode:
                row = {"program": program, "target": target, "error": out.stderr.strip().splitlines()[-1][:300]}
            else:
                row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            if "error" in row:
                print(f"{program:>22} {target:>8}: FAILED ({time.time() - t0:.0f} s): {row['error']}", flush=True)
            else:
                print(f"{program:>22} {target:>8}: compile {row['compile_s']:6.1f} s (lower {row['lower_s']:.1f} s), "
                      f"code {_mb(row['generated_code_size_in_bytes'])} MB, args {_mb(row['argument_size_in_bytes'])} MB, "
                      f"out {_mb(row['output_size_in_bytes'])} MB, temp {_mb(row['temp_size_in_bytes'])} MB"
                      + (f", fits one chip: {row['fits']}" if "fits" in row else "")
                      + (f", a step sends {row['step_sent_bytes'] / 1e6:.1f} MB per device ({row['step_collectives']})"
                         if "step_sent_bytes" in row else "")
                      + (f", {row['launches']:.0f} launches ({row['while_loops']} while loops)" if "launches" in row
                         else ""), flush=True)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    print()
    print(table(rows, a.targets))
    if any("launches" in r for r in rows):
        print()
        print(launch_table(rows))
    for t in a.targets:
        if t == "cpu":
            continue
        for p in a.programs:
            by = {r["target"]: r for r in rows if r["program"] == p and r["target"] in (t, "cpu") and "error" not in r}
            if t in by and "cpu" in by:
                print(f"{p:>22}: {t} compile / cpu compile = {by[t]['compile_s'] / by['cpu']['compile_s']:.2f}x")


if __name__ == "__main__":
    main()
