"""Every jax-gs program compiled for TPU and GPU on this host, without either (deviceless
ahead-of-time compilation: libtpu, `pip install -e ".[tpu]"`; XLA's GPU compiler, `pip install -e
".[gpu]"`), beside the same program compiled for this CPU: compile seconds, generated code, device
memory for arguments / outputs / temporaries, and whether it fits one chip. For a GPU also the
kernel launches per call counted from the optimised HLO (`tools/launches.py`), the HLO while
loops, and for a train block the launches of one training step (its scan body). For every train
block the collectives of one step and the bytes each device sends for them (ring algorithms:
`hlo_checks.collective_traffic`).

Targets: "cpu"; TPU topologies by name ("v5e:2x2", "v6e:2x2"); GPUs "h200" and "a100", whose
XLA target configs (GpuTargetConfigProto text, every figure with its source) are in
`tools/gpu_targets/`.

Programs (`PROGRAMS`), on a capture of fern's size (20 views of 504x378) unless said:
  raster-{flat,standard}-{100k,1m}: `rasterization` forward + backward (sum of the image and alpha)
    at 504x378, 100k / 1M Gaussians of realistic sizes (`tools.programs.realistic_scene`);
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
    python -m benchmarks.accelerator_compile --targets v5e:2x2 --fit-gaussians 250000 500000 1000000 2000000  # sized to fit
        [--fit-programs block-default block-shard4] [--fit-sizes 504x378 1297x840]

Compile-only: nothing here has run on a TPU or a GPU. The figures say how long XLA takes to
compile for one on this host, how much device memory the compiled program asks for, and (GPU) how
many kernels it would launch; not how fast it runs.
"""
from __future__ import annotations

import itertools
import os
import sys
import time
from typing import List, Optional

from benchmarks.harness import append_row, cli, in_process

from tools.programs import (GPU_TARGETS, HEIGHT, SIZES, WIDTH, lower_program, raster_program, scene_views,
                            target_devices, trainer_for)

HBM_GIB = {"v5e": 16, "v6e": 32, "v5p": 95, "v4": 32, "h200": 141e9 / 2**30, "a100": 80}  # memory per chip
PROGRAMS = ["raster-flat-100k", "block-default", "block-2dgs", "render", "refine-default", "block-mcmc", "block-dp4", "block-shard4",
            "raster-standard-100k", "refine-mcmc", "raster-flat-1m", "raster-standard-1m", "raster-pallas-100k",
            "raster-pallas-10k", "raster-flat-10k", "raster-standard-10k", "block-default-10k"]
SEED = "seed-raster-100k"  # the seed article's rasterizer (`--seed-dir`)
SHARD16 = "block-shard16"  # the rows over 16 chips: only for a 16-chip target
DP4XSHARD4 = "block-dp4xshard4"  # 4 replicas x the rows over 4 chips: a 16-chip target
SIXTEEN = [SHARD16, DP4XSHARD4]


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
    from tools import launches as L

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
    from tools import hlo_checks
    from tools import launches as L

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


def _compiled(program: str, target: str, env: dict, **kwargs) -> dict:
    """`measure` in a process of its own; a failure as a row with its error."""
    try:
        return in_process("benchmarks.accelerator_compile:measure", env=env, program=program, target_name=target,
                          **kwargs)
    except RuntimeError as e:
        return {"program": program, "target": target, "error": str(e).strip().splitlines()[-1][:300]}


def fit(targets: List[str], fit_programs: List[str], fit_sizes: List[str], gaussians: List[int],
        out: Optional[str]) -> None:
    """The train blocks' HBM per chip at each Gaussian count and image size."""
    env = {"TPU_SKIP_MDS_QUERY": "1"}
    target = next(t for t in targets if t != "cpu")
    chip = target.split(":")[0]
    print(f"# train blocks (100 steps, SH 3, 20 views) compiled for {target}: HBM per chip (arguments + outputs + "
          f"temporaries + code) against {HBM_GIB[chip]} GiB; block-shardK: the Gaussians' rows split over K chips",
          flush=True)
    for program, size, n in itertools.product(fit_programs, fit_sizes, gaussians):
        r = _compiled(program, target, env, gaussians=n, size=[int(v) for v in size.split("x")])
        if "error" in r:
            print(f"{program} {size:>9} {n:>9}: FAILED: {r['error']}", flush=True)
            continue
        total = r["hbm_bytes"] + r["generated_code_size_in_bytes"]
        print(f"{program} {size:>9} {n:>9} Gaussians ({r['capacity']} slots, buffer {r['isect_capacity']}): "
              f"{total / 2**30:.2f} GiB (args {r['argument_size_in_bytes'] / 2**30:.2f}, "
              f"temp {r['temp_size_in_bytes'] / 2**30:.2f}), compile {r['compile_s']:.0f} s, "
              + (f"a step sends {r['step_sent_bytes'] / 1e6:.1f} MB per device, the block's end "
                 f"{r['block_end_sent_bytes'] / 1e6:.1f} MB, " if "block_end_sent_bytes" in r else "") +
              f"fits: {'yes' if r['fits'] else 'no'}", flush=True)
        append_row(out, r)


def main(targets: List[str] = ["cpu", "v5e:2x2", "v6e:2x2"], programs: Optional[List[str]] = None,
         seed_dir: Optional[str] = os.environ.get("JAXGS_SEED_DIR"), out: Optional[str] = None,
         fit_gaussians: Optional[List[int]] = None, fit_programs: List[str] = ["block-default"],
         fit_sizes: List[str] = ["504x378", "1297x840"]) -> None:
    """Every program compiled for every target, one process per compile (`programs`: of PROGRAMS,
    default all, the seed's with `seed_dir`: a checkout of github.com/ghif/jax-gs kept outside this
    repository; `out`: a JSON lines file for the rows). With `fit_gaussians`, instead: the blocks of
    `fit_programs` (block-default, block-shard4, 16-chip ones) with these Gaussian counts at each
    of `fit_sizes`, for the first non-cpu target (the largest that fits one chip)."""
    known = PROGRAMS + [SEED] + SIXTEEN
    unknown = sorted(set(programs or []) - set(known))
    if unknown:
        raise SystemExit(f"--programs {' '.join(unknown)}: not one of {' '.join(known)}")
    if fit_gaussians:
        return fit(targets, fit_programs, fit_sizes, fit_gaussians, out)
    env = {"TPU_SKIP_MDS_QUERY": "1"}
    if seed_dir:
        env["JAXGS_SEED_DIR"] = os.path.abspath(seed_dir)
    programs = programs or PROGRAMS + ([SEED] if seed_dir else [])
    print(f"# jax-gs programs compiled for {', '.join(targets)} on this host ({os.cpu_count()} cores); "
          f"one process per compile", flush=True)
    rows = []
    for program in programs:
        for target in targets:
            t0 = time.time()
            row = _compiled(program, target, env)
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
            append_row(out, row)
    print()
    print(table(rows, targets))
    if any("launches" in r for r in rows):
        print()
        print(launch_table(rows))
    for t in targets:
        if t == "cpu":
            continue
        for p in programs:
            by = {r["target"]: r for r in rows if r["program"] == p and r["target"] in (t, "cpu") and "error" not in r}
            if t in by and "cpu" in by:
                print(f"{p:>22}: {t} compile / cpu compile = {by[t]['compile_s'] / by['cpu']['compile_s']:.2f}x")


if __name__ == "__main__":
    cli(main, "accelerator_compile")
