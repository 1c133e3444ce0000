"""One call on an accelerator (or, with --tiny, a rehearsal on the CPU): exactness of the three
rasterizers against the float64 reference, their speed and peak device memory (the flat one in
its accelerator walk, lanes, and in the one-group walk it replaced, side by side), the engine's
training steps/s, the same renders and a training step through gsplat's CUDA `rasterization`
when it is importable, and the plugin's GPU path (torch and JAX on one device, DLPack zero copy).
Writes `device_check.json` and `device_check.md` to --out; every section records its own error
instead of stopping the run.

    python -m benchmarks.device_check --out $OUT
    python -m benchmarks.device_check --tiny --out /tmp/dc        # CPU rehearsal, small sizes
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RASTERIZERS = ("pallas", "flat", "standard")  # pallas: the GPU default (Triton), timed beside gsplat's CUDA
# what is timed: the flat rasterizer in its accelerator walk (lanes) and in the one it replaced (one group)
TIMED = {"pallas": ("pallas", {}), "flat": ("flat", dict(walk="lanes")),
         "flat-1group": ("flat", dict(walk="groups", groups=1)), "standard": ("standard", {})}
PARAMS = ("means", "quats", "scales", "opacities", "colors")  # the gradients compared with the CPU's
sys.path.insert(0, str(ROOT / "tests"))  # reference.py, scenes.py: the independent float64 renderer


def _timed(fn, repeats: int, sync):
    fn()
    sync()  # warm-up (compile) outside the timing
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def exactness(width, height, n):
    """As tests/test_rasterizer.py's hard scene: max abs error of every rasterizer (colour and
    alpha) against the float64 reference; each rasterizer's gradients of every parameter on the
    default device against the same program built for and run on the CPU (relative max abs
    difference), and whether a second run on the device gives the same bits (the Pallas backward
    adds with atomics, whose order a GPU does not fix: docs/gpu.md)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from reference import render as reference
    from scenes import cameras, hard_scene

    from jax_backend import Layout, rasterization, traced_rasterization
    from jax_backend.rendering.isect_buffer import size_for

    s = hard_scene(n=n)
    vms, Ks = cameras(width, height, n=3)
    out = {}
    for r in RASTERIZERS:
        img, alpha, meta = rasterization(s["means"], s["quats"], s["scales"], s["opacities"], s["colors"], vms, Ks,
                                         width, height, rasterizer=r)
        err = 0.0
        for c in range(len(vms)):
            ref_img, ref_alpha = reference(s["means"], s["quats"], s["scales"], s["opacities"], s["colors"], vms[c],
                                           Ks[c], width, height)
            err = max(err, float(np.abs(np.asarray(img[c]) - ref_img).max()),
                      float(np.abs(np.asarray(alpha[c, ..., 0]) - ref_alpha).max()))
        out[f"{r}_max_abs_error"] = err

        cap = size_for(int(np.max(np.asarray(meta["num_intersections"]))))

        def grads(r=r, layout=None):
            def loss(m, q, sc, o, c):
                im, a, _ = traced_rasterization(m, q, sc, o, c, vms, Ks, width, height, rasterizer=r,
                                                isect_capacity=cap, layout=layout)
                return jnp.mean(im ** 2) + jnp.mean(a)

            g = jax.grad(loss, argnums=(0, 1, 2, 3, 4))(*[jnp.asarray(s[k], jnp.float32) for k in PARAMS])
            return {k: np.asarray(v) for k, v in zip(PARAMS, g)}

        here, again = grads(), grads()
        cpu_device = jax.devices("cpu")[0]
        with jax.default_device(cpu_device):  # built for the CPU (pallas: interpreted)
            cpu = grads(layout=Layout((cpu_device,)))
        for k in PARAMS:  # every parameter's gradient against the CPU's, and a second run on the device against the first
            out[f"{r}_grad_{k}_vs_cpu_rel"] = float(np.abs(here[k] - cpu[k]).max()) / max(float(np.abs(cpu[k]).max()), 1e-12)
            out[f"{r}_grad_{k}_repeat_bit_identical"] = bool(np.array_equal(here[k], again[k]))
    return out


def rasterizer_speed(sizes, repeats):
    import jax
    import jax.numpy as jnp

    from tools.programs import realistic_scene
    from jax_backend import RasterizerOptions, rasterization, traced_rasterization
    from jax_backend.rendering.isect_buffer import size_for

    rows = []
    for n, width, height in sizes:
        args = [jnp.asarray(a, jnp.float32) for a in realistic_scene(n)]
        K = args[6].at[:, 0, 2].set(width / 2).at[:, 1, 2].set(height / 2).at[:, 0, 0].set(0.9 * width).at[:, 1, 1].set(0.9 * width)
        _, _, meta = rasterization(*args[:6], K, width, height)
        cap = size_for(int(meta["num_intersections"][0]))
        for r, (rasterizer, options) in TIMED.items():
            def loss(*p, rasterizer=rasterizer, options=RasterizerOptions(**options)):
                im, _, _ = traced_rasterization(*p, args[5], K, width, height, rasterizer=rasterizer, isect_capacity=cap,
                                                options=options)
                return jnp.mean((im - 0.5) ** 2)

            fwd = jax.jit(loss)
            bwd = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))
            row = {"n": n, "size": f"{width}x{height}", "rasterizer": r, "intersections": int(meta["num_intersections"][0])}
            for name, fn in (("forward_ms", fwd), ("fwd_bwd_ms", bwd)):
                out = {}

                def call(fn=fn, out=out):
                    out["v"] = fn(*args[:5])

                row[name] = 1e3 * _timed(call, repeats, lambda out=out: jax.block_until_ready(out["v"]))
            row["peak_device_mib"] = _peak_device_mib()
            rows.append(row)
            print(row, flush=True)
    return rows


def _peak_device_mib():
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use", 0) / 2**20


def training_speed(n, steps):
    import jax

    from benchmarks.train import build_trainer

    tr = build_trainer(n, "flat", steps)
    tr.run_block(steps)
    jax.block_until_ready(tr.state)
    t0 = time.perf_counter()
    tr.run_block(steps)
    jax.block_until_ready(tr.state)
    return {"n": n, "steps": steps, "steps_per_s": steps / (time.perf_counter() - t0), "peak_device_mib": _peak_device_mib()}


def gsplat_speed(sizes, repeats):
    """gsplat's `rasterization` on the same Gaussians and camera: forward, and forward + backward +
    Adam step, timed with torch.cuda.synchronize."""
    import torch

    if not torch.cuda.is_available():
        return {"skipped": "torch sees no CUDA device"}
    from gsplat import rasterization as gs_rasterization

    from tools.programs import realistic_scene

    rows = []
    for n, width, height in sizes:
        means, quats, scales, opac, colors, vm, K = (torch.tensor(a, dtype=torch.float32, device="cuda")
                                                    for a in realistic_scene(n))
        K = K.clone()
        K[:, 0, 0] = K[:, 1, 1] = 0.9 * width
        K[:, 0, 2], K[:, 1, 2] = width / 2, height / 2
        params = [p.clone().requires_grad_(True) for p in (means, quats, scales, opac, colors)]
        opt = torch.optim.Adam(params, lr=1e-4)

        def forward():
            with torch.no_grad():
                gs_rasterization(*params, vm, K, width, height)

        def step():
            im, _, _ = gs_rasterization(*params, vm, K, width, height)
            loss = ((im - 0.5) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

        torch.cuda.reset_peak_memory_stats()
        row = {"n": n, "size": f"{width}x{height}",
               "forward_ms": 1e3 * _timed(forward, repeats, torch.cuda.synchronize),
               "train_step_ms": 1e3 * _timed(step, repeats, torch.cuda.synchronize),
               "peak_torch_mib": torch.cuda.max_memory_allocated() / 2**20}
        rows.append(row)
        print(row, flush=True)
    return rows


def plugin_path():
    """torch and JAX on one device: a JAX array seen by torch through DLPack without a copy."""
    import jax.numpy as jnp

    from nerfstudio_jaxgs.bridge import to_torch

    x = jnp.arange(1024, dtype=jnp.float32) * 2.0
    t = to_torch(x)
    return {"jax_device": str(list(x.devices())[0]), "torch_device": str(t.device),
            "zero_copy": t.data_ptr() == x.unsafe_buffer_pointer(), "values_equal": bool(float(t[-1]) == 2046.0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true", help="CPU rehearsal sizes")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    from jax_backend import share_gpu_memory

    share_gpu_memory()  # as the plugin does before JAX starts: torch shares the GPU in the plugin section
    import jax

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.tiny:
        sizes, exact, train = [(2000, 160, 120)], (77, 53, 120), (2000, 5)
    else:
        sizes = [(10_000, 504, 378), (100_000, 504, 378), (300_000, 504, 378), (1_000_000, 1297, 840)]
        exact, train = (77, 53, 120), (100_000, 50)
    report = {"date": time.strftime("%Y-%m-%d"), "jax": jax.__version__, "backend": jax.default_backend(),
              "devices": [str(d) for d in jax.devices()], "env": {k: os.environ.get(k) for k in
                                                                 ("XLA_PYTHON_CLIENT_PREALLOCATE", "JAX_PLATFORMS")}}
    sections = {
        "exactness": lambda: exactness(*exact),
        "rasterizers": lambda: rasterizer_speed(sizes, a.repeats),
        "training": lambda: training_speed(*train),
        "gsplat": lambda: gsplat_speed(sizes, a.repeats),
        "plugin_path": plugin_path,
    }
    for name, fn in sections.items():
        t0 = time.perf_counter()
        try:
            report[name] = fn()
        except Exception as e:  # one broken section must not lose the others' figures
            report[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
        print(f"[{name}] {time.perf_counter() - t0:.0f} s", flush=True)
        (out / "device_check.json").write_text(json.dumps(report, indent=1))
    lines = [f"# device check {report['date']}: {report['devices']}, jax {report['jax']}", ""]
    for key in ("exactness", "training", "plugin_path"):
        lines.append(f"- {key}: {json.dumps(report[key])[:500]}")
    lines += ["", "| N | size | rasterizer | forward ms | fwd+bwd ms | gsplat fwd ms | gsplat train step ms |", "|---|---|---|---|---|---|---|"]
    gs = {(r["n"], r["size"]): r for r in report["gsplat"]} if isinstance(report["gsplat"], list) else {}
    for r in report["rasterizers"] if isinstance(report["rasterizers"], list) else []:
        g = gs.get((r["n"], r["size"]), {})
        lines.append(f"| {r['n']} | {r['size']} | {r['rasterizer']} | {r['forward_ms']:.1f} | {r['fwd_bwd_ms']:.1f} | "
                     f"{g.get('forward_ms', float('nan')):.1f} | {g.get('train_step_ms', float('nan')):.1f} |")
    (out / "device_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
