"""2DGS beside 3DGS through the plain commands: `ns-train jax-2dgs` and `ns-train jax-gs` on the same
capture, steps and recipe, then `ns-eval` (held-out PSNR) and `ns-export tsdf` (a mesh from the
rendered depth) for each.

    python -m benchmarks.surfels sphere --steps 1000   # blender-data sphere with known geometry
    python -m benchmarks.surfels fox --steps 1500      # the bundled fox (no ground-truth geometry)
    python -m benchmarks.surfels weights --steps 1500  # the 2DGS loss weights, on the engine alone
    python -m benchmarks.surfels objects --steps 3000  # Mitsuba-rendered objects of known geometry

`objects`: `tools/known_geometry.py` renders textured objects (a floor, a box, a sphere, a cylinder, a
plate 2 cm thick) with Mitsuba 3 from 96 views into a nerfstudio-data capture (its truth beside it;
generated once into OUT/objects), every 8th view held out. `jax-2dgs` and `jax-gs` train the same
steps, then `jax-gs` again for as many steps as 2DGS's wall-clock time bought it (its steps' time
grows as it densifies, so no probe predicts it); each run is evaluated and meshed (`ns-export tsdf`
at full resolution over the objects' box, in voxels of 1 cm). Over the held-out views' pixels that see one surface (Mitsuba's AOVs): the median
error of the rendered depth (expected; 2DGS also the median depth) and of the normals (2DGS: its
disks'; 3DGS: its depth's); the mesh against the true meshes (exact point-to-triangle distances):
accuracy, completeness, Chamfer and the F-score at 2 cm (world units: the objects span 2.4); 2DGS's
mesh also from its median depth (`--depth-output-name median_depth`, the paper's choice).

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


def _train_eval_mesh(method: str, data: Path, out: Path, steps: int, recipe: list, dataparser: list,
                     mesh: bool = True) -> dict:
    log = out / f"{method}.log"
    extra = ["--pipeline.model.normal-start", str(round(steps * 7000 / 30000))] if method == "jax-2dgs" else []
    train_s = _run([BIN / "ns-train", method, "--data", data, "--output-dir", out, "--timestamp", "run",
                    "--max-num-iterations", steps, "--vis", "tensorboard", "--viewer.quit-on-train-completion",
                    "True", "--optimizers.means.scheduler.max-steps", steps, *recipe, *extra, *dataparser], log)
    run = out / data.name / method / "run"
    _run([BIN / "ns-eval", "--load-config", run / "config.yml", "--output-path", run / "eval.json"], log)
    mesh_s = _run([BIN / "ns-export", "tsdf", "--load-config", run / "config.yml", "--output-dir", run / "mesh",
                   "--texture-method", "tsdf"], log) if mesh else None
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


def _objects_geometry(run: Path, capture: Path) -> dict:
    """Depth and normal errors of the run's held-out renders against Mitsuba's truth, in world units."""
    import torch
    from nerfstudio.utils.eval_utils import eval_setup

    from jax_backend import depth_to_normals
    from nerfstudio_jaxgs.cameras import cameras_to_opencv
    from tools.known_geometry import dataparser_frame, load_truth

    truth = load_truth(capture)
    R, _, scale = dataparser_frame(run)
    _, pipeline, _, _ = eval_setup(run / "config.yml", test_mode="test")
    cameras = pipeline.datamanager.eval_dataset.cameras
    if cameras.size != len(truth["views"]):
        raise RuntimeError(f"{cameras.size} evaluation views against {len(truth['views'])} with truth")
    depth_err, median_err, angles = [], [], []
    for i in range(cameras.size):
        vm, K, _, _ = cameras_to_opencv(cameras[i:i + 1])
        with torch.no_grad():
            out = pipeline.model.get_outputs_for_camera(cameras[i:i + 1])
        ok = truth["valid"][i] & (out["accumulation"][..., 0].numpy() > 0.5)
        depth = out["depth"][..., 0].numpy()
        depth_err.append(np.abs(depth / scale - truth["depth"][i])[ok])
        if "median_depth" in out:
            median_err.append(np.abs(out["median_depth"][..., 0].numpy() / scale - truth["depth"][i])[ok])
        if "normals" in out:
            normals = out["normals"].numpy() * 2.0 - 1.0  # shown as (n + 1) / 2
        else:  # 3DGS: the normals of its rendered depth, camera -> the run's world (R^T n)
            normals = np.asarray(depth_to_normals(depth, K[0])) @ vm[0, :3, :3]
        normals = normals @ R  # the run's frame -> the capture's world: R^T n
        normals /= np.maximum(np.linalg.norm(normals, axis=-1, keepdims=True), 1e-12)
        cos = np.clip(np.sum(normals * truth["normals"][i], -1), -1, 1)
        angles.append(np.degrees(np.arccos(cos))[ok])
    return dict(gaussians=int(np.asarray(pipeline.model.gaussians.alive).sum()),
                depth=float(np.median(np.concatenate(depth_err))),
                median_depth=float(np.median(np.concatenate(median_err))) if median_err else None,
                normal=float(np.median(np.concatenate(angles))))


VOXEL = 0.01  # the TSDF's voxel, world units (the objects span 2.4)


def _objects_mesh(run: Path, meshes: dict, log: Path, depth_name: str = "depth") -> dict:
    """`ns-export tsdf` over the objects' box (voxels of `VOXEL`, full-resolution depth), its mesh
    against the true meshes in world units."""
    from plyfile import PlyData

    from tools.known_geometry import dataparser_frame, mesh_distances

    R, t, scale = dataparser_frame(run)
    world = np.concatenate([m.vertices for m in meshes.values()])
    lo, hi = world.min(0) - 0.03, world.max(0) + 0.03
    corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
    box = scale * (corners @ R.T + t)  # in the run's frame
    voxels = np.ceil((box.max(0) - box.min(0)) / (VOXEL * scale)).astype(int)
    mesh_dir = run / f"mesh_{depth_name}"
    seconds = _run([BIN / "ns-export", "tsdf", "--load-config", run / "config.yml", "--output-dir", mesh_dir,
                    "--texture-method", "tsdf", "--downscale-factor", 1, "--resolution", *voxels,
                    "--depth-output-name", depth_name, "--bounding-box-min", *box.min(0).round(4),
                    "--bounding-box-max", *box.max(0).round(4)], log)
    ply = PlyData.read(str(mesh_dir / "tsdf_mesh.ply"))
    v = np.stack([ply["vertex"][c] for c in "xyz"], 1).astype(np.float64)
    faces = np.stack(ply["face"]["vertex_indices"]).astype(np.int64)
    v = (v / scale - t) @ R  # the run's frame -> world: R^T (p / s - t)
    return dict(mesh_distances(v, faces, meshes), seconds=seconds)


def objects(steps: int, out: Path) -> None:
    from tools.known_geometry import load_meshes, write_capture

    data = out / "objects"
    if not (data / "truth.npz").exists():
        write_capture(data, log=lambda *_: None)
    meshes = load_meshes(data)
    dataparser = ["nerfstudio-data", "--eval-mode", "interval", "--eval-interval", "8"]
    recipe = ["--pipeline.model.steps-per-block", "100", "--pipeline.model.background-color", "black"]
    print(f"Mitsuba-rendered objects (tools/known_geometry.py: 96 views of 256x192, every 8th held out); "
          f"jax-2dgs and jax-gs {steps} steps each, then jax-gs for 2DGS's wall-clock time; depth and normals: "
          f"medians over the held-out pixels that see one surface; mesh: ns-export tsdf, 1 cm voxels, world "
          f"units (the objects span 2.4), F-score at 2 cm")
    print("| method | steps | train s | held-out PSNR | SSIM | depth error | median-depth error | "
          "normal error (deg) | mesh accuracy | completeness | Chamfer | F-score | Gaussians | tsdf s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    wall = {}
    for method, n in (("jax-2dgs", steps), ("jax-gs", steps), ("jax-gs", None)):
        if n is None:  # as many steps as 2DGS's wall-clock time buys 3DGS (its time a step grows as it densifies)
            n = int(round(steps * wall["jax-2dgs"] / wall["jax-gs"], -2))
        (out / f"{n}").mkdir(exist_ok=True)
        r = _train_eval_mesh(method, data, out / f"{n}", n, recipe, dataparser, mesh=False)
        wall.setdefault(method, r["train_s"])
        g = _objects_geometry(r["run"], data)
        m = _objects_mesh(r["run"], meshes, out / f"{n}" / f"{method}.log")
        median = "" if g["median_depth"] is None else f"{g['median_depth']:.4f}"
        print(f"| {method} | {n} | {r['train_s']:.0f} | {r['psnr']:.2f} | {r['ssim']:.3f} | "
              f"{g['depth']:.4f} | {median} | {g['normal']:.1f} | {m['accuracy']:.4f} | {m['completeness']:.4f} | "
              f"{m['chamfer']:.4f} | {m['fscore']:.3f} | {g['gaussians']} | {m['seconds']:.0f} |", flush=True)
        if g["median_depth"] is not None:  # 2DGS: the mesh from the median depth too
            m = _objects_mesh(r["run"], meshes, out / f"{n}" / f"{method}.log", "median_depth")
            print(f"| {method}, mesh of the median depth | | | | | | | | {m['accuracy']:.4f} | "
                  f"{m['completeness']:.4f} | {m['chamfer']:.4f} | {m['fscore']:.3f} | | {m['seconds']:.0f} |",
                  flush=True)


def main(scene: tyro.conf.Positional[Literal["sphere", "fox", "weights", "objects"]], steps: int = 1000,
         out: Path = Path("outputs/bench_surfels")) -> None:
    """One scene's runs (module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    {"sphere": sphere, "fox": fox, "weights": weights, "objects": objects}[scene](steps, out.resolve())


if __name__ == "__main__":
    cli(main, "surfels")
