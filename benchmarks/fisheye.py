"""A fisheye capture trained both ways, side by side in one run: jax-gs's native fisheye
(`--pipeline.model.fisheye native`, the default: the original images, the whole frame) and
nerfstudio's undistortion (`undistorted`, splatfacto's path: a pinhole crop of each image), each
through `ns-train jax-gs`'s own path (nerfstudio's dataparser and datamanager, the plugin, the
engine) with the same recipe and steps.

The capture: the bundled fox redrawn through a KB4 fisheye (k1-k4 = 0.12, 0.03, 0, 0), each image
undistorted from the fox's own lens first and the fisheye's focal lengths chosen so that every
fisheye pixel sees into the fox's image (`tools.captures.write_fisheye_capture(fill=True)`):
a fisheye frame filled with real content, as wide as the fox's corners allow. Every 8th view is
held out (nerfstudio-data's interval split).

Printed:
- coverage: the fraction of each fisheye frame's pixels whose rays each path trains on (native:
  all; undistorted: those whose ray lands inside nerfstudio's undistorted image);
- held-out PSNR as `ns-eval` computes it for each run (native: on the full fisheye frame;
  undistorted: on its undistorted crop), and both runs' Gaussians measured both ways: rendered as
  the fisheye on the full frame, and as the undistorted pinhole on the crop;
- for lenses wider than this capture's (equidistant, 4:3 frames), the coverage nerfstudio's
  undistortion (its `_undistort_image`, balance 0) leaves, with no training.

    python -m benchmarks.fisheye [--steps 1000]
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import tempfile
from pathlib import Path

import numpy as np

from tools.captures import COEFFS, diagonal_fov, fisheye_pixels_to_pinhole, write_fisheye_capture
from benchmarks.features import FOX, method_config, train

FOX_SIZE = (135, 240)  # width, height


def intrinsics(cameras, i: int) -> np.ndarray:
    return cameras[i].get_intrinsics_matrices().numpy().astype(np.float64)


def covered(K_fish, coeffs, w: int, h: int, K_pin, w_pin: int, h_pin: int) -> float:
    """The fraction of a fisheye frame's pixels whose rays land inside the pinhole image."""
    p = fisheye_pixels_to_pinhole(K_fish, coeffs, w, h, K_pin)
    finite = np.isfinite(p).all(-1)
    inside = finite & (p[..., 0] >= 0) & (p[..., 0] <= w_pin) & (p[..., 1] >= 0) & (p[..., 1] <= h_pin)
    return float(inside.mean())


def psnr_of(model, cameras, images) -> float:
    """Mean over the views of each view's PSNR (as ns-eval averages), the model's render of each
    camera against its image (uint8 RGB)."""
    values = []
    for i, image in enumerate(images):
        rgb = model.get_outputs_for_camera(cameras[i:i + 1])["rgb"].detach().cpu().numpy()
        target = image.cpu().numpy()[..., :3].astype(np.float64) / 255.0
        values.append(-10 * np.log10(np.mean((rgb.astype(np.float64) - target) ** 2)))
    return float(np.mean(values))


def lens_coverage(fov_degrees: float, width=400, height=300) -> tuple:
    """(the fraction of an equidistant fisheye frame (diagonal field of view `fov_degrees`) that
    nerfstudio's undistorted image keeps, its focal length over the fisheye's: the undistorted
    image's pixels per radian at the centre, as a fraction of the fisheye's)."""
    import torch
    from nerfstudio.cameras.cameras import Cameras, CameraType
    from nerfstudio.data.datamanagers.full_images_datamanager import _undistort_image

    f = 0.5 * np.hypot(width, height) / np.radians(fov_degrees / 2)
    K = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])
    camera = Cameras(camera_to_worlds=torch.eye(4)[None, :3], fx=f, fy=f, cx=width / 2, cy=height / 2,
                     width=width, height=height, camera_type=CameraType.FISHEYE)[0]
    coeffs = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    coeffs[0] = 1e-9  # nerfstudio undistorts only a camera with a non-zero coefficient; as good as zero
    K_pin, image, _ = _undistort_image(camera, coeffs, {}, np.zeros((height, width, 3), np.uint8), K.copy())
    return covered(K, coeffs[:4], width, height, K_pin, image.shape[1], image.shape[0]), K_pin[0, 0] / f


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--frames", type=int, default=None, help="the first this many fox frames (default: all)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        capture = Path(tmp) / "fox-fisheye"
        K_fish, _, K_fox = write_fisheye_capture(FOX, capture, a.frames, COEFFS, fill=True)
        print(f"capture: the fox as an OPENCV_FISHEYE capture, k1-k4 {COEFFS}, focal {K_fish[0, 0]:.1f} px "
              f"(the fox's {K_fox[0, 0]:.1f}), diagonal field of view {diagonal_fov(K_fish, COEFFS, *FOX_SIZE):.0f} deg; "
              f"{a.steps} steps each, the main job's recipe", flush=True)
        base, optimizers = method_config("fox", a.steps)
        runs = {}
        for mode in ("native", "undistorted"):
            pipeline, steps_per_s, _ = train("fox", capture, dataclasses.replace(base, fisheye=mode),
                                             copy.deepcopy(optimizers), a.steps)
            runs[mode] = dict(pipeline=pipeline, steps_per_s=steps_per_s,
                              eval=pipeline.get_average_eval_image_metrics()["psnr"],
                              gaussians=int(pipeline.engine.state.gaussians.alive.sum()))
            print(f"{mode:12s} ns-eval PSNR {runs[mode]['eval']:.2f} dB, {runs[mode]['gaussians']} Gaussians, "
                  f"{steps_per_s:.2f} steps/s", flush=True)

        fish_dm, pin_dm = runs["native"]["pipeline"].datamanager, runs["undistorted"]["pipeline"].datamanager
        fish_cams, pin_cams = fish_dm.eval_dataset.cameras, pin_dm.eval_dataset.cameras
        fish_images = [d["image"] for d in fish_dm.cached_eval]
        pin_images = [d["image"] for d in pin_dm.cached_eval]
        w, h = int(fish_cams.width[0]), int(fish_cams.height[0])
        coverage = np.mean([covered(intrinsics(fish_cams, i), COEFFS, w, h, intrinsics(pin_cams, i),
                                    int(pin_cams.width[i]), int(pin_cams.height[i])) for i in range(len(fish_cams))])
        for mode, r in runs.items():
            model = r["pipeline"].model
            setting = model.config.fisheye
            model.config.fisheye = "native"  # the fisheye cameras drawn as fisheyes, whichever way it trained
            r["full"] = psnr_of(model, fish_cams, fish_images)
            model.config.fisheye = setting
            r["crop"] = psnr_of(model, pin_cams, pin_images)
            r["coverage"] = 1.0 if mode == "native" else coverage

    print(f"\n| fox as a KB4 fisheye, {a.steps} steps | trains on (of each frame) | ns-eval PSNR | "
          f"PSNR, full fisheye frame | PSNR, undistorted crop | Gaussians | steps/s |\n|---|---|---|---|---|---|---|")
    for mode, r in runs.items():
        where = "full frame" if mode == "native" else "crop"
        print(f"| {mode} | {100 * r['coverage']:.1f}% | {r['eval']:.2f} ({where}) | {r['full']:.2f} | {r['crop']:.2f} | "
              f"{r['gaussians']} | {r['steps_per_s']:.2f} |")
    print("\n| equidistant lens, 4:3, diagonal field of view | of each frame, nerfstudio's undistorted image keeps | "
          "its centre's resolution, of the fisheye's |\n|---|---|---|")
    for fov in (100, 120, 150, 170):
        kept, resolution = lens_coverage(fov)
        print(f"| {fov} deg | {100 * kept:.1f}% | {resolution:.2f} |")


if __name__ == "__main__":
    main()
