"""Whether two checkouts compile the same XLA programs: the rasterizers' forward and forward+backward
and training blocks, compiled in each tree (one process each) for this CPU and for compile-only
targets (a TPU topology, a GPU of `tools/gpu_targets`), and compared instruction by
instruction (source locations, metadata and the instructions' names left out: names are numbered
as a program is traced, and a branch traced and dropped at lowering renumbers what follows). Where
the instructions are equal, the speed is equal whatever a noisy host's timings say; where they
differ, the differing lines are printed, and `benchmarks.versus` times them.

    git worktree add /tmp/before <commit>
    python -m tools.same_programs --before /tmp/before [--gaussians 10000] [--targets cpu v6e:2x2 h200]
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import inspect
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def instructions(compiled_text: str) -> str:
    """The optimised HLO's instructions without source locations (file and line tables, metadata),
    every name (%...) numbered in order of first appearance."""
    text = re.sub(r", metadata=\{[^}]*\}", "", compiled_text)
    text = "\n".join(line for line in text.splitlines() if not re.match(r"^\d+ ", line) and
                     not line.startswith("HloModule"))
    text = re.sub(r"stack_frame_id=\d+", "", text)
    names: dict = {}
    return re.sub(r"%([A-Za-z_][\w.\-]*)", lambda m: names.setdefault(m.group(1), f"%{len(names)}"), text)


def programs(n: int) -> dict:
    """Runs in the child: {program: (sha1 of its instructions, number of instruction lines)}."""
    import jax
    import jax.numpy as jnp

    try:
        from tools.programs import HEIGHT, WIDTH, realistic_scene
    except ImportError:  # a tree from before tools/: its scene in benchmarks.rasterizer
        from benchmarks.rasterizer import HEIGHT, WIDTH, realistic_scene
    from benchmarks.train import build_trainer
    import jax_backend
    from jax_backend import rasterization
    from jax_backend.training import aot

    # the traced entry point and the buffer argument's name in either tree
    rasterization = getattr(jax_backend, "traced_rasterization", rasterization) if hasattr(
        jax_backend.rendering, "traced_rasterization") else rasterization
    kw = "isect_capacity" if "isect_capacity" in inspect.signature(rasterization).parameters else "capacity"
    args = [jnp.asarray(a, jnp.float32) for a in realistic_scene(n)]
    out, texts = {}, {}
    for r in ("flat", "standard"):
        def loss(means, quats, scales, opacities, colors, r=r):
            img, _, _ = rasterization(means, quats, scales, opacities, colors, args[5], args[6], WIDTH, HEIGHT,
                                      rasterizer=r, **{kw: 1 << 17})
            return jnp.mean((img - 0.5) ** 2)

        for mode, fn in (("forward", jax.jit(loss)), ("fwd+bwd", jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4))))):
            text = instructions(fn.lower(*args[:5]).compile().as_text())
            out[f"rasterizer {r} {mode}, N={n}"] = fingerprint(text)
            texts[f"rasterizer {r} {mode}, N={n}"] = text
    tr = build_trainer(n, "flat", 20)
    if hasattr(tr, "lower_block"):
        lowered = tr.lower_block(20)
    else:  # compiling for a trainer's devices in its own module
        lowered = aot.lower_block(tr, 20)
    text = instructions(lowered.compile().as_text())
    texts[f"training block (flat, 20 steps), N={n}"] = text
    out[f"training block (flat, 20 steps), N={n}"] = fingerprint(text)
    # 2DGS's block, both geometry terms on (the kind of splat under either tree's name for it)
    import dataclasses

    terms = dict(normal_start=0, distortion_lambda=0.1, distortion_start=0)
    kind = ({"splats": jax_backend.Surfels2D(**terms)} if hasattr(jax_backend, "Surfels2D")
            else {"surfels": jax_backend.SurfelConfig(**terms)})
    disks = type(tr)(dataclasses.replace(tr.cfg, **kind), tr.data, tr.gaussians, tr.scene_extent, layout=tr.layout)
    lowered = disks.lower_block(20) if hasattr(disks, "lower_block") else aot.lower_block(disks, 20)
    text = instructions(lowered.compile().as_text())
    texts[f"2DGS training block (flat, 20 steps), N={n}"] = text
    out[f"2DGS training block (flat, 20 steps), N={n}"] = fingerprint(text)
    return out, texts


def fingerprint(text: str):
    return hashlib.sha1(text.encode()).hexdigest(), text.count("\n")


def small_programs(target_name: str) -> dict:
    """Runs in the child: {program: instructions} of the compile checks' small programs (renders,
    the rasterizers' forward + backward, the train blocks of both strategies, with pose corrections
    and bilateral grids, and 2DGS's), compiled for `target_name` ("cpu": this host)."""
    try:
        from tools.programs import lower_program, small_render_programs, small_trainer, target_devices
    except ImportError:  # a tree from before tools/
        from benchmarks.accelerator_compile import lower_program, small_render_programs, small_trainer, target_devices
    from jax_backend.training import aot

    target = None if target_name == "cpu" else target_devices(target_name)
    texts = {}
    for name, (fn_for, arrays) in small_render_programs().items():
        texts[f"{name} (small)"] = instructions(lower_program(fn_for, arrays, target).compile().as_text())
    for name, kw in (("default", {}), ("mcmc", {"strategy": "mcmc"}), ("corrections", {"corrections": True}),
                     ("2dgs", {"surfels": True})):
        tr = small_trainer(**kw)
        texts[f"train block {name} (small)"] = instructions(aot.lower_block(tr, 5, target).compile().as_text())
    return texts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="a checkout of the commit to compare against")
    ap.add_argument("--gaussians", type=int, default=10_000)
    ap.add_argument("--targets", nargs="+", default=["cpu"],
                    help="cpu, TPU topologies (v6e:2x2) and GPUs of tools/gpu_targets (h200); the N-Gaussian "
                         "programs on cpu only")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        out, texts = programs(a.gaussians) if "cpu" in a.targets else ({}, {})
        for target in a.targets:
            for prog, text in small_programs(target).items():
                texts[f"{target}: {prog}"] = text
                out[f"{target}: {prog}"] = fingerprint(text)
        print(json.dumps({"digests": out, "texts": texts}))
        return
    from benchmarks.harness import tree_env

    res = {}
    for name, tree in (("before", a.before), ("after", HERE)):
        env = tree_env(tree)  # each tree's process: its own code first
        # no source locations in the programs: a Triton kernel's IR carries them (the checkout's path, lines)
        env["JAX_TRACEBACK_IN_LOCATIONS_LIMIT"] = "0"
        # this file is run from the after tree in both: it reads each tree's own library and benchmarks
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--before", "-", "--child",
                              "--gaussians", str(a.gaussians), "--targets", *a.targets], capture_output=True, text=True, cwd=tree, env=env)
        if out.returncode:
            raise RuntimeError(f"{tree} failed:\n{out.stderr[-3000:]}")
        res[name] = json.loads(out.stdout.strip().splitlines()[-1])
    texts = {name: r["texts"] for name, r in res.items()}
    res = {name: r["digests"] for name, r in res.items()}
    print(f"# before: {a.before}; after: {HERE}; optimised HLO instructions compared (source locations left out)")
    print("| program | instructions before | after | the same |")
    print("|---|---|---|---|")
    differ = []
    for prog, (digest, lines) in res["before"].items():
        d2, l2 = res["after"][prog]
        print(f"| {prog} | {lines} | {l2} | {'yes' if digest == d2 else 'no'} |")
        if digest != d2:
            differ.append(prog)
    for prog in differ:
        diff = [line for line in difflib.unified_diff(texts["before"][prog].splitlines(),
                                                        texts["after"][prog].splitlines(), lineterm="", n=0)
                if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        print(f"\n{prog}: {len(diff)} lines differ; the first 8:")
        print("\n".join(diff[:8]))


if __name__ == "__main__":
    main()
