"""What fits a device: the bytes a Gaussian, an intersection slot, a training image and a pixel of
the training resolution cost in training, read from the compiled train blocks' memory analysis
(arguments + outputs + temporaries - aliased, per device), for this CPU and compiled for TPU
v5e / v6e and an H200 (compile-only: nothing here ran on a TPU or a GPU).

Each cost is the difference between two compiles of the same block that differ in one size:
  base: jax-gs's block (100 steps, SH degree 3), 131,072 Gaussian slots, a 1,048,576-slot
        intersection buffer, 20 views of 1008x756 (snowmiku's size) on the device;
  Gaussians x2, buffer x2, 200 views (on the device, then in host memory: the block's table
  holds its 100 steps' views), 1920x1080 views; MCMC (jax-gs-mcmc's block) at both Gaussian counts.
Then the largest capture each device trains: images x resolution with the images on the device
and in host memory, for a Gaussian count, from those costs (the buffer at 4 slots a Gaussian:
twice the 2 intersections a Gaussian of a full-resolution view of snowmiku at 1M Gaussians).

    python -m benchmarks.memory_fit [--targets cpu v5e:2x2 v6e:2x2 h200] [--points base gaussians ...] [--out FILE]
"""
from __future__ import annotations

import time
from typing import List, Optional

from benchmarks.harness import append_row, cli, in_process

SLOTS, BUFFER, VIEWS, SIZE = 1 << 17, 1 << 20, 20, (1008, 756)
POINTS = {  # name: (method, slots, buffer, views, (width, height), images)
    "base": ("jax-gs", SLOTS, BUFFER, VIEWS, SIZE, "device"),
    "gaussians": ("jax-gs", 2 * SLOTS, BUFFER, VIEWS, SIZE, "device"),
    "buffer": ("jax-gs", SLOTS, 2 * BUFFER, VIEWS, SIZE, "device"),
    "views": ("jax-gs", SLOTS, BUFFER, 200, SIZE, "device"),
    "views-host": ("jax-gs", SLOTS, BUFFER, 200, SIZE, "host"),
    "1080p": ("jax-gs", SLOTS, BUFFER, VIEWS, (1920, 1080), "device"),
    "mcmc": ("jax-gs-mcmc", SLOTS, BUFFER, VIEWS, SIZE, "device"),
    "mcmc-gaussians": ("jax-gs-mcmc", 2 * SLOTS, BUFFER, VIEWS, SIZE, "device"),
}
MEMORY_GIB = {"v5e": 16, "v6e": 32, "h200": 141e9 / 2**30}  # per chip
RESOLUTIONS = {"1008x756": (1008, 756), "1920x1080": (1920, 1080), "3840x2160": (3840, 2160)}


def build(point: str):
    """The trainer of one design point, on this host's CPU (its program is then lowered for the target)."""
    import jax.numpy as jnp
    import numpy as np

    from tools.programs import scene_views
    from jax_backend import Trainer, make_dataset, make_layout
    from jax_backend.training.gaussians import Gaussians
    from jax_backend.training.initialization import init_from_points
    from nerfstudio_jaxgs import config as methods
    from nerfstudio_jaxgs.settings import train_config

    method, slots, buffer, views, (width, height), images = POINTS[point]
    spec = {"jax-gs": methods.jax_gs_method, "jax-gs-mcmc": methods.jax_gs_mcmc_method}[method]
    cfg = train_config(spec.config.pipeline.model, max_steps=spec.config.max_num_iterations, num_train_data=views,
                       optimizers=spec.config.optimizers)
    means, quats, scales, opacities, colors, viewmats, Ks = scene_views(slots, width, height)
    g = init_from_points(means, colors, sh_degree=cfg.sh_degree, capacity=slots)
    g = Gaussians(dict(g.params, scales=jnp.log(jnp.asarray(scales, jnp.float32))), g.alive)
    reps = -(-views // len(viewmats))
    data = make_dataset(np.zeros((views, height, width, 3), np.uint8), np.tile(viewmats, (reps, 1, 1))[:views],
                        np.tile(Ks, (reps, 1, 1))[:views], on_device=False)
    tr = Trainer(cfg, data, g, 1.0, isect_capacity=buffer, log=lambda *_: None,
                 layout=make_layout(replicas=1, tile_devices=1), images=images)
    tr.state = tr.state._replace(step=jnp.int32(10_000))  # full resolution, SH degree 3, density control live
    return tr


def measure(point: str, target_name: str) -> dict:
    """Compile one point's block for one target (in a child process: `compiled_point`)."""
    from tools.programs import target_devices
    from jax_backend.training import aot

    tr = build(point)
    target = None if target_name == "cpu" else target_devices(target_name)
    t0 = time.perf_counter()
    mem = aot.lower_block(tr, tr.cfg.steps_per_block, target).compile().memory_analysis()
    row = {"point": point, "target": target_name, "compile_s": time.perf_counter() - t0}
    for k in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes"):
        row[k] = int(getattr(mem, k, 0) or 0)
    row["bytes"] = (row["argument_size_in_bytes"] + row["output_size_in_bytes"] + row["temp_size_in_bytes"]
                    - row["alias_size_in_bytes"])
    return row


def costs(rows: dict) -> dict:
    """Bytes per Gaussian slot (default, MCMC), intersection slot, image (on the device), the block's
    table in host mode, and the fixed bytes at each resolution (from the base's pixel cost)."""
    b = rows["base"]["bytes"]
    w, h = SIZE
    image = (rows["views"]["bytes"] - b) / (200 - VIEWS)
    out = {"gaussian": (rows["gaussians"]["bytes"] - b) / SLOTS,
           "gaussian_mcmc": (rows["mcmc-gaussians"]["bytes"] - rows["mcmc"]["bytes"]) / SLOTS,
           "slot": (rows["buffer"]["bytes"] - b) / BUFFER,
           "image_pixel": image / (w * h),
           "host_table_pixel": (rows["views-host"]["bytes"] - (b - VIEWS * image)) / (w * h)}
    # what the base holds besides its Gaussians, buffer and images, per pixel of one view (the
    # step's per-pixel working memory): from the 1080p point
    rest = b - SLOTS * out["gaussian"] - BUFFER * out["slot"] - VIEWS * image
    rest_1080 = rows["1080p"]["bytes"] - SLOTS * out["gaussian"] - BUFFER * out["slot"] - VIEWS * image / (w * h) * 1920 * 1080
    out["step_pixel"] = (rest_1080 - rest) / (1920 * 1080 - w * h)
    out["fixed"] = rest - out["step_pixel"] * w * h
    return out


def largest(c: dict, memory: float, gaussians: int, size, host: bool, mcmc: bool = False) -> int:
    """Images of `size` a device of `memory` bytes trains with `gaussians` Gaussians (0: none)."""
    w, h = size
    per_gaussian = c["gaussian_mcmc" if mcmc else "gaussian"] + 4 * c["slot"]
    left = memory - c["fixed"] - c["step_pixel"] * w * h - gaussians * per_gaussian
    if host:  # two blocks' tables (the one training, the next one copying), whatever the capture's size
        return 10**9 if left > 2 * c["host_table_pixel"] * w * h else 0
    return max(int(left // (c["image_pixel"] * w * h)), 0)


def report(rows: list, targets: list) -> str:
    lines = ["# bytes per unit in training, from the compiled train block's memory analysis (per device):"]
    by = {t: {r["point"]: r for r in rows if r["target"] == t and "error" not in r} for t in targets}
    cost = {t: costs(by[t]) for t in targets if len(by[t]) == len(POINTS)}
    for t in targets:  # some points only (--points): a Gaussian's cost where both of its points are there
        if t in cost:
            continue
        per = {name: (by[t][big]["bytes"] - by[t][small]["bytes"]) / SLOTS
               for name, small, big in (("a Gaussian", "base", "gaussians"), ("MCMC", "mcmc", "mcmc-gaussians"))
               if {small, big} <= set(by[t])}
        if per:
            lines.append(f"{t:>9} " + ", ".join(f"{name}: {b:.0f} B" for name, b in per.items()))
    lines.append(f"{'target':>9} {'Gaussian':>9} {'(MCMC)':>8} {'buffer slot':>11} {'image px':>9} "
                 f"{'host table px':>13} {'step px':>8} {'fixed MiB':>9}")
    for t, c in cost.items():
        lines.append(f"{t:>9} {c['gaussian']:>9.0f} {c['gaussian_mcmc']:>8.0f} {c['slot']:>11.1f} "
                     f"{c['image_pixel']:>9.2f} {c['host_table_pixel']:>13.1f} {c['step_pixel']:>8.0f} "
                     f"{c['fixed'] / 2**20:>9.0f}")
    lines.append("\n# the largest capture a chip trains (jax-gs, SH degree 3, the buffer at 4 slots a Gaussian):")
    for t, c in cost.items():
        chip = t.split(":")[0]
        if chip not in MEMORY_GIB:
            continue
        memory = MEMORY_GIB[chip] * 2**30
        for n in (1_000_000, 3_000_000):
            cells = []
            for name, size in RESOLUTIONS.items():
                on_device = largest(c, memory, n, size, host=False)
                host = largest(c, memory, n, size, host=True)
                cells.append(f"{name}: {on_device} images on the device, "
                             + ("any number in host memory" if host else "does not fit"))
            lines.append(f"{chip} ({MEMORY_GIB[chip]:.0f} GiB), {n / 1e6:.0f}M Gaussians: " + "; ".join(cells))
        most = max(n for n in range(250_000, 200_000_000, 250_000)
                   if largest(c, memory, n, SIZE, host=True)) if largest(c, memory, 250_000, SIZE, True) else 0
        lines.append(f"{chip}: at most {most / 1e6:.2f}M Gaussians at 1008x756 with host images")
    return "\n".join(lines)


def compiled_point(point: str, target_name: str) -> dict:
    """`measure` in a child process of its own (`harness.in_process`), four CPU devices."""
    import jax

    jax.config.update("jax_num_cpu_devices", 4)
    return measure(point, target_name)


def main(targets: List[str] = ["cpu", "v5e:2x2", "v6e:2x2", "h200"], points: List[str] = list(POINTS),
         out: Optional[str] = None) -> None:
    """Each design point's block compiled for each target (`points`: of POINTS; the tables need
    all), one process each; `out`: a JSON lines file for the rows."""
    unknown = sorted(set(points) - set(POINTS))
    if unknown:
        raise SystemExit(f"--points {' '.join(unknown)}: not one of {' '.join(POINTS)}")
    rows = []
    for target in targets:
        for point in points:
            try:
                row = in_process("benchmarks.memory_fit:compiled_point", env={"TPU_SKIP_MDS_QUERY": "1"}, point=point,
                                 target_name=target)
                print(f"{target:>9} {point:>15}: {row['bytes'] / 2**30:.3f} GiB (args "
                      f"{row['argument_size_in_bytes'] / 2**30:.3f}, temp {row['temp_size_in_bytes'] / 2**30:.3f}), "
                      f"compile {row['compile_s']:.0f} s", flush=True)
            except RuntimeError as e:
                row = {"point": point, "target": target, "error": str(e).strip().splitlines()[-1][:300]}
                print(f"{target:>9} {point:>15}: FAILED: {row['error']}", flush=True)
            rows.append(row)
            append_row(out, row)
    print()
    print(report(rows, targets))


if __name__ == "__main__":
    cli(main, "memory_fit")
