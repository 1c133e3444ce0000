"""2DGS beside 3DGS through the plain commands: `ns-train jax-2dgs` and `ns-train jax-gs` on the same
capture, steps and recipe, then `ns-eval` (held-out PSNR) and `ns-export tsdf` (a mesh from the
rendered depth) for each.

    python -m benchmarks.surfels sphere --steps 1000   # blender-data sphere with known geometry
    python -m benchmarks.surfels fox --steps 1500      # the bundled fox (no ground-truth geometry)
    python -m benchmarks.surfels weights --steps 1500  # the 2DGS loss weights, on the engine alone

`sphere`: `tests/synthetic.write_blender_sphere`, a sphere of radius 0.8 tiled by opaque textured
disks, written as a blender-data capture (RGBA, 14 training and 2 held-out views, 64x64),
its alpha kept (`--alpha-color None`), so training composites it on a random background
(2,000 random Gaussians to start). Its
geometry is known in closed form, so the table adds, over the held-out views' pixels the sphere
covers, the median error of the rendered depth and the median angle between the rendered normals
(2DGS: the blended disk normals; 3DGS, which has none: the normals of its rendered depth,
`depth_to_normals`) and the sphere's; and the TSDF mesh's distance to the sphere (accuracy: its
vertices' mean distance to the sphere; completeness: the mean distance of points spread over the
sphere to the nearest vertex; Chamfer: their mean).
`fox`: the README's main-job recipe (20,000 random Gaussians, full resolution, black background)
with the default strategy for both.
The normal consistency starts at the paper's 7,000/30,000 of the run. Each command's output goes
to `OUT/<method>.log`.
`weights`: the engine alone (`jax_backend.Trainer`, no nerfstudio) on `synthetic.sphere_scene`
(the same sphere, 64x48, 14 training and 2 held-out views, black background) from 256 random
Gaussians: 3DGS, and 2DGS with no geometry term, the normal consistency alone and with the depth
distortion at two weights (the normal term from 1/3 of the run, the distortion from 1/5); depth
and normal errors as above (3DGS: the normals of its depth).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # synthetic.py: the sphere and its closed-form geometry
from synthetic import sphere_errors  # noqa: E402

import tyro  # noqa: E402

from benchmarks.harness import cli  # noqa: E402
BIN = Path(sys.executable).parent
METHODS = ("jax-gs", "jax-2dgs")


def _run(args, log: Path) -> float:
    start = time.perf_counter()
    with open(log, "a") as f:
        f.write(f"$ {' '.join(map(str, args))}\n")
        f.flush()
        subprocess.run([str(a) for a in args], stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                       check=True)
    return time.perf_counter() - start


def _train_eval_mesh(method: str, data: Path, out: Path, steps: int, recipe: list, dataparser: list) -> dict:
    log = out / f"{method}.log"
    extra = ["--pipeline.model.normal-start", str(round(steps * 7000 / 30000))] if method == "jax-2dgs" else []
    train_s = _run([BIN / "ns-train", method, "--data", data, "--output-dir", out, "--timestamp", "run",
                    "--max-num-iterations", steps, "--vis", "tensorboard", "--viewer.quit-on-train-completion",
                    "True", "--optimizers.means.scheduler.max-steps", steps, *recipe, *extra, *dataparser], log)
    run = out / data.name / method / "run"
    _run([BIN / "ns-eval", "--load-config", run / "config.yml", "--output-path", run / "eval.json"], log)
    mesh_s = _run([BIN / "ns-export", "tsdf", "--load-config", run / "config.yml", "--output-dir", run / "mesh",
                   "--texture-method", "tsdf"], log)
    results = json.loads((run / "eval.json").read_text())["results"]
    return dict(run=run, psnr=results["psnr"], ssim=results["ssim"], train_s=train_s, mesh_s=mesh_s)


def _mesh_vertices(path: Path) -> np.ndarray:
    from plyfile import PlyData

    v = PlyData.read(str(path))["vertex"]
    return np.stack([v["x"], v["y"], v["z"]], 1)


def _geometry(run: Path) -> dict:
    """Depth and normal errors of the run's renders of its held-out views against the sphere."""
    import torch
    from nerfstudio.utils.eval_utils import eval_setup

    from jax_backend import depth_to_normals
    from nerfstudio_jaxgs.cameras import cameras_to_opencv
    from synthetic import mesh_to_sphere

    _, pipeline, _, _ = eval_setup(run / "config.yml", test_mode="test")
    cameras = pipeline.datamanager.eval_dataset.cameras
    errors = []
    for i in range(cameras.size):
        vm, K, _, _ = cameras_to_opencv(cameras[i:i + 1])
        with torch.no_grad():
            out = pipeline.model.get_outputs_for_camera(cameras[i:i + 1])
        depth = out["depth"][..., 0].numpy()
        if "normals" in out:
            normals = out["normals"].numpy() * 2.0 - 1.0  # shown as (n + 1) / 2
        else:  # 3DGS: the normals of its rendered depth, camera -> world (R^T n)
            normals = np.asarray(depth_to_normals(depth, K[0])) @ vm[0, :3, :3]
        errors.append(sphere_errors(depth, normals, vm[0], K[0], skip_edge=True))
    depth_err, angles = (np.concatenate(e) for e in zip(*errors))
    accuracy, completeness = mesh_to_sphere(_mesh_vertices(run / "mesh" / "tsdf_mesh.ply"))
    return dict(depth=float(np.median(depth_err)), normal=float(np.median(angles)),
                accuracy=accuracy, completeness=completeness, chamfer=(accuracy + completeness) / 2)


def sphere(steps: int, out: Path) -> None:
    from synthetic import write_blender_sphere

    data = out / "sphere"
    write_blender_sphere(data)
    # RGBA kept (--alpha-color None), so training composites on a random background: on blender-data's
    # default white one, white floaters around the object cost nothing in training and showed in the
    # held-out views and the mesh
    recipe = ["--pipeline.model.num-random", "2000", "--pipeline.model.steps-per-block", "100"]
    print(f"blender-data sphere (radius 0.8, 14 training + 2 held-out views, 64x64), {steps} steps, "
          f"the normal consistency from 7/30 of the run (the paper's 7,000 of 30,000); medians over the held-out views' sphere pixels")
    print("| method | held-out PSNR | SSIM | depth error | normal error (deg) | mesh accuracy | completeness | "
          "Chamfer | train s | tsdf s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for method in METHODS:
        r = _train_eval_mesh(method, data, out, steps, recipe, ["blender-data", "--alpha-color", "None"])
        g = _geometry(r["run"])
        print(f"| {method} | {r['psnr']:.2f} | {r['ssim']:.3f} | {g['depth']:.4f} | {g['normal']:.1f} | "
              f"{g['accuracy']:.4f} | {g['completeness']:.4f} | {g['chamfer']:.4f} | {r['train_s']:.0f} | "
              f"{r['mesh_s']:.0f} |", flush=True)


def fox(steps: int, out: Path) -> None:
    recipe = ["--pipeline.model.num-random", "20000", "--pipeline.model.random-scale", "1.0",
              "--pipeline.model.num-downscales", "0", "--pipeline.model.background-color", "black"]
    print(f"the bundled fox (nerfstudio-data, every 8th view held out), {steps} steps, the main job's recipe with "
          f"the default strategy")
    print("| method | held-out PSNR | SSIM | mesh vertices | train s | tsdf s |")
    print("|---|---|---|---|---|---|")
    for method in METHODS:
        r = _train_eval_mesh(method, ROOT / "data" / "fox", out, steps, recipe,
                             ["nerfstudio-data", "--eval-mode", "interval", "--eval-interval", "8"])
        vertices = len(_mesh_vertices(r["run"] / "mesh" / "tsdf_mesh.ply"))
        print(f"| {method} | {r['psnr']:.2f} | {r['ssim']:.3f} | {vertices} | {r['train_s']:.0f} | "
              f"{r['mesh_s']:.0f} |", flush=True)


def weights(steps: int, out: Path) -> None:
    from jax_backend import DefaultStrategy, Surfels2D, TrainConfig, Trainer, depth_to_normals, init_random
    from jax_backend.training import evaluation
    from synthetic import sphere_errors, sphere_scene

    train, test = sphere_scene()
    runs = [("3DGS", None), ("2DGS, no geometry term", (0.0, 0.0)), ("2DGS, normal 0.05", (0.05, 0.0)),
            ("2DGS, normal 0.05 + distortion 0.1", (0.05, 0.1)), ("2DGS, normal 0.05 + distortion 1", (0.05, 1.0))]
    print(f"engine on tests/synthetic.sphere_scene, {steps} steps from 256 random Gaussians (normal term from step "
          f"{steps // 3}, distortion from {steps // 5}); medians over the 2 held-out views' sphere pixels")
    print("| run | held-out PSNR | depth error | normal error (deg) | Gaussians | train s |")
    print("|---|---|---|---|---|---|")
    for name, w in runs:
        surfels = None if w is None else Surfels2D(normal_lambda=w[0], normal_start=steps // 3,
                                                      distortion_lambda=w[1], distortion_start=steps // 5)
        cfg = TrainConfig(max_steps=steps, steps_per_block=50, sh_degree=0, background="black",
                          **({} if surfels is None else {"splats": surfels}),
                          strategy=DefaultStrategy(refine_start=100, refine_stop=steps * 3 // 4, refine_every=100,
                                                   reset_every=10**6))
        tr = Trainer(cfg, train, init_random(256, -1, 1, sh_degree=0, capacity=2048), scene_extent=1.5,
                     log=lambda *a: None)
        start = time.perf_counter()
        tr.train()
        seconds = time.perf_counter() - start
        errors = []
        for _, vm, K in zip(*test):
            r = evaluation.render(tr, vm, K, 64, 48)
            depth = r.depth[..., 0]
            if surfels is None:
                normals = np.asarray(depth_to_normals(depth, K)) @ vm[:3, :3]
            else:
                normals = r.extras["normals"]
            errors.append(sphere_errors(depth, normals, vm, K, skip_edge=True))
        depth_err, angles = (np.concatenate(e) for e in zip(*errors))
        psnr = evaluation.heldout_psnr(tr, *test)
        print(f"| {name} | {psnr:.2f} | {np.median(depth_err):.4f} | {np.median(angles):.1f} | {int(np.asarray(tr.gaussians.alive).sum())} | {seconds:.0f} |",
              flush=True)


def main(scene: tyro.conf.Positional[Literal["sphere", "fox", "weights"]], steps: int = 1000,
         out: Path = Path("outputs/bench_surfels")) -> None:
    """One scene's runs (module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    {"sphere": sphere, "fox": fox, "weights": weights}[scene](steps, out.resolve())


if __name__ == "__main__":
    cli(main, "surfels")
