"""What each recipe and quality feature costs and gives, side by side in one run: `ns-train jax-gs`'s
own path (nerfstudio's dataparser and datamanager, the plugin's settings and initialisation, its
engine) and `ns-eval`'s metrics, for each variant on the same scene and steps.

Scenes:
- `synthetic`: a blender-format object written by this script (a striped sphere, a tilted ring and
  four checkered blocks, 38,000 Gaussians inside [-1.3, 1.3]^3, rendered by jax-gs as RGBA at
  200x200 from 100 training and 20 held-out cameras 4 units away, as Blender's synthetic scenes
  are), read by `blender-data` (white background); no point cloud, so the run starts from random
  Gaussians. The base recipe is `ns-train jax-gs`'s defaults.
- `fox`: the bundled capture through `nerfstudio-data` (every 8th view held out), with the main
  job's recipe (`jax-gs-mcmc` from 20,000 random Gaussians in a 1-unit cube, full resolution,
  black background).

Variants (each the base recipe plus one change, as a user would pass it):
  default, antialiased, scale-reg, camera-opt, bilateral (with splatfacto's colour-corrected
  metrics), and for the random start: splatfacto-cube (splatfacto's 50,000 in a 10-unit cube),
  random-100k, no-absgrad (gradient threshold 0.0002), full-res (no coarse-to-fine); "a+b" for
  both changes.

    python -m benchmarks.features --scene synthetic|fox [--steps 2000] [--variants default ...]
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np

FOX = Path(__file__).resolve().parents[2] / "shared" / "data" / "fox"


def variants():
    from nerfstudio.cameras.camera_optimizers import CameraOptimizerConfig

    return {
        "default": {},
        "antialiased": dict(rasterize_mode="antialiased"),
        "scale-reg": dict(use_scale_regularization=True),
        "camera-opt": dict(camera_optimizer=CameraOptimizerConfig(mode="SO3xR3")),
        "bilateral": dict(use_bilateral_grid=True, color_corrected_metrics=True),
        "splatfacto-cube": dict(random_scale=10.0, num_random=50000),
        "random-100k": dict(num_random=100000),
        "no-absgrad": dict(use_absgrad=False, densify_grad_thresh=0.0002),
        "full-res": dict(num_downscales=0),
    }


# -- the synthetic object
def object_gaussians(seed=0):
    """(means, colours) of a striped sphere, a tilted ring and four checkered blocks."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(20000, 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    lon, lat = np.arctan2(v[:, 1], v[:, 0]), np.arcsin(v[:, 2])
    stripe = (np.floor(lon / (np.pi / 6)) + np.floor(lat / (np.pi / 8))) % 2
    sphere = 0.7 * v
    sphere_rgb = np.where(stripe[:, None] > 0, [0.9, 0.3, 0.2], [0.2, 0.5, 0.9]) * (0.6 + 0.4 * (v[:, 2:3] + 1) / 2)
    t, p = rng.uniform(0, 2 * np.pi, 10000), rng.uniform(0, 2 * np.pi, 10000)
    ring = np.stack([(1.05 + 0.1 * np.cos(p)) * np.cos(t), (1.05 + 0.1 * np.cos(p)) * np.sin(t), 0.1 * np.sin(p)], -1)
    tilt = np.radians(25)
    ring = ring @ np.array([[1, 0, 0], [0, np.cos(tilt), -np.sin(tilt)], [0, np.sin(tilt), np.cos(tilt)]]).T
    ring_rgb = np.where((np.floor(t / (np.pi / 12)) % 2)[:, None] > 0, [0.95, 0.8, 0.2], [0.3, 0.2, 0.1])
    blocks, blocks_rgb = [], []
    for cx, cy in ((0.75, 0.75), (-0.75, 0.75), (-0.75, -0.75), (0.75, -0.75)):
        u = rng.uniform(-0.15, 0.15, (2000, 3))
        face = rng.integers(0, 3, 2000)
        u[np.arange(2000), face] = np.sign(rng.uniform(-1, 1, 2000)) * 0.15  # on the cube's faces
        pts = u + [cx, cy, -0.85]
        check = (np.floor(u[:, 0] / 0.075) + np.floor(u[:, 1] / 0.075) + np.floor(u[:, 2] / 0.075)) % 2
        blocks.append(pts)
        blocks_rgb.append(np.where(check[:, None] > 0, [0.1, 0.6, 0.3], [0.9, 0.9, 0.85]))
    means = np.concatenate([sphere, ring, *blocks]).astype(np.float32)
    return means, np.concatenate([sphere_rgb, ring_rgb, *blocks_rgb]).astype(np.float32)


def write_object_scene(dst: Path, size=200, train=100, test=20, seed=0) -> Path:
    """The synthetic object as a blender-format scene (transforms_{train,val,test}.json, RGBA PNGs)."""
    import jax.numpy as jnp
    from PIL import Image

    from benchmarks.density_points import look_at
    from jax_backend import rasterization

    means, colours = object_gaussians(seed)
    n = len(means)
    angle_x = 0.6911112070083618  # Blender's synthetic scenes
    focal = 0.5 * size / np.tan(0.5 * angle_x)
    K = np.array([[focal, 0, size / 2], [0, focal, size / 2], [0, 0, 1]], np.float32)
    rng = np.random.default_rng(seed + 1)
    for split, count in (("train", train), ("test", test)):
        d = rng.normal(size=(count, 3))
        d[:, 2] = np.abs(d[:, 2]) * 0.8 - 0.1  # mostly the upper hemisphere, as Blender's
        eyes = 4.0 * d / np.linalg.norm(d, axis=1, keepdims=True)
        (dst / split).mkdir(parents=True, exist_ok=True)
        frames = []
        for i, eye in enumerate(eyes):
            vm = look_at(eye)
            rgb, alpha, _ = rasterization(jnp.asarray(means), jnp.tile(jnp.array([1.0, 0, 0, 0]), (n, 1)),
                                          jnp.full((n, 3), 0.025), jnp.full((n,), 0.9), jnp.asarray(colours),
                                          jnp.asarray(vm[None]), jnp.asarray(K[None]), size, size, render_mode="RGB")
            rgb, alpha = np.asarray(rgb[0]), np.asarray(alpha[0])
            rgba = np.concatenate([np.clip(rgb / np.maximum(alpha, 1e-6), 0, 1), alpha], -1)  # straight alpha
            Image.fromarray((rgba * 255 + 0.5).astype(np.uint8), "RGBA").save(dst / split / f"r_{i}.png")
            c2w = np.linalg.inv(vm.astype(np.float64))
            c2w[:3, 1:3] *= -1  # OpenCV -> Blender's camera axes
            frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": c2w.tolist()})
        meta = json.dumps({"camera_angle_x": angle_x, "frames": frames})
        (dst / f"transforms_{split}.json").write_text(meta)
        if split == "test":  # training runs evaluate on "val"
            (dst / "transforms_val.json").write_text(meta)
    return dst


# -- one run through the plugin's path
def method_config(scene: str, steps: int):
    """(model config, optimizers) of the scene's base recipe."""
    from nerfstudio_jaxgs.config import jax_gs_mcmc_method, jax_gs_method

    if scene == "fox":  # scripts/main_job.sh
        cfg = copy.deepcopy(jax_gs_mcmc_method.config)
        model = dataclasses.replace(cfg.pipeline.model, num_random=20000, random_scale=1.0, num_downscales=0,
                                    background_color="black")
        cfg.optimizers["means"]["scheduler"].max_steps = steps
    else:
        cfg = copy.deepcopy(jax_gs_method.config)
        model = cfg.pipeline.model
    return model, cfg.optimizers


def dataparser(scene: str, data: Path):
    if scene == "fox":
        from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

        return NerfstudioDataParserConfig(data=data, eval_mode="interval", eval_interval=8)
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

    return BlenderDataParserConfig(data=data)


def save_first_view(pipeline, path: Path) -> None:
    """The first held-out view beside its image (left: the image, right: the render), as a PNG."""
    from PIL import Image

    dm = pipeline.datamanager
    outputs = pipeline.model.get_outputs_for_camera(dm.eval_dataset.cameras[0:1].to("cpu"))
    render = outputs["rgb"].detach().cpu().numpy()
    image = dm.cached_eval[0]["image"].cpu().numpy()  # as ns-eval compares: undistorted, composited
    image = image.astype(np.float32) / 255.0 if image.dtype == np.uint8 else image
    if image.shape[-1] == 4:  # RGBA on the background the model renders on
        bg = pipeline.model.background_color.numpy()
        image = image[..., :3] * image[..., 3:] + bg * (1 - image[..., 3:])
    both = np.concatenate([image[..., :3], render], axis=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray((np.clip(both, 0, 1) * 255 + 0.5).astype(np.uint8)).save(path)


def train(scene: str, data: Path, model, optimizers, steps: int):
    """`ns-train jax-gs`'s path for `steps` steps: (the pipeline, steps/s after the first block,
    the first block's seconds)."""
    from nerfstudio.data.datamanagers.full_images_datamanager import FullImageDatamanagerConfig

    from nerfstudio_jaxgs.pipeline import JaxGSPipelineConfig

    cfg = JaxGSPipelineConfig(datamanager=FullImageDatamanagerConfig(dataparser=dataparser(scene, data),
                                                                     cache_images_type="uint8"), model=model)
    pipeline = cfg.setup(device="cpu", test_mode="val")
    pipeline.model.lpips = None  # offline machines have no LPIPS weights
    engine = pipeline.start_engine(steps, optimizers)
    t0 = time.perf_counter()
    pipeline.train_block(engine.cfg.steps_per_block, steps)
    t1 = time.perf_counter()
    while engine.step < steps:
        pipeline.train_block(min(engine.cfg.steps_per_block, steps - engine.step), steps)
    t2 = time.perf_counter()
    return pipeline, (engine.step - engine.cfg.steps_per_block) / max(t2 - t1, 1e-9), t1 - t0


def run(scene: str, data: Path, model, optimizers, steps: int, render_to=None) -> dict:
    pipeline, steps_per_s, first_block_s = train(scene, data, model, optimizers, steps)
    metrics = pipeline.get_average_eval_image_metrics()
    if render_to is not None:
        save_first_view(pipeline, render_to)
    return dict(metrics, gaussians=int(pipeline.engine.state.gaussians.alive.sum()), steps_per_s=steps_per_s,
                first_block_s=first_block_s)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scene", choices=["synthetic", "fox"], default="synthetic")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--renders", type=Path, help="save each variant's first held-out view here (image | render)")
    ap.add_argument("--variants", nargs="+", default=["default", "antialiased", "scale-reg", "camera-opt", "bilateral"])
    a = ap.parse_args()
    table = variants()
    table.update({v: {k: x for part in v.split("+") for k, x in table.get(part, {"?": 0}).items()}
                  for v in a.variants if "+" in v})  # "a+b": both changes
    unknown = [v for v in a.variants if v not in table or "?" in table[v]]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}: choose from {list(table)}")
    with tempfile.TemporaryDirectory() as tmp:
        data = FOX if a.scene == "fox" else write_object_scene(Path(tmp) / "object")
        base, optimizers = method_config(a.scene, a.steps)
        print(f"scene {a.scene}, {a.steps} steps; base recipe: {'main job (jax-gs-mcmc)' if a.scene == 'fox' else 'ns-train jax-gs'}",
              flush=True)
        rows = {}
        for name in a.variants:
            render_to = a.renders / f"{a.scene}-{name}.png" if a.renders else None
            r = run(a.scene, data, dataclasses.replace(base, **table[name]), copy.deepcopy(optimizers), a.steps,
                    render_to)
            rows[name] = r
            extra = f", cc_psnr {r['cc_psnr']:.2f}" if "cc_psnr" in r else ""
            print(f"{name:16s} PSNR {r['psnr']:.2f} dB, SSIM {r['ssim']:.3f}{extra}, {r['gaussians']} Gaussians, "
                  f"{r['steps_per_s']:.2f} steps/s (first block {r['first_block_s']:.0f} s)", flush=True)
    print(f"\n| {a.scene}, {a.steps} steps | held-out PSNR | SSIM | Gaussians | steps/s |\n|---|---|---|---|---|")
    for name, r in rows.items():
        cc = f" (cc {r['cc_psnr']:.2f})" if "cc_psnr" in r else ""
        print(f"| {name} | {r['psnr']:.2f}{cc} | {r['ssim']:.3f} | {r['gaussians']} | {r['steps_per_s']:.2f} |")


if __name__ == "__main__":
    main()
