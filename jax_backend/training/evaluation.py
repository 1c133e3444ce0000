"""Looking at a trainer's state: its Gaussians rendered from a camera, and their PSNR on held-out
views."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .gaussians import render_gaussians, render_surfels
from .loss import psnr
from .trainer import Trainer


def render(trainer: Trainer, viewmat, K, width: int, height: int, background=None, render_mode: str = "RGB+ED",
           distortion=None):
    """The trainer's current Gaussians from one camera at the current SH degree, as training draws
    them (its rasterizer, mode, camera model and layout; `render_gaussians`; `distortion`: a
    fisheye's k1-k4). 2DGS disks (`cfg.surfels`): (RGB + expected depth, alpha) of `render_surfels`."""
    s = trainer.cfg.surfels
    if s is not None:
        out = render_surfels(trainer.gaussians, viewmat, K, width, height, sh_degree=trainer.sh_degree,
                             background=background, rasterizer=trainer.cfg.rasterizer, layout=trainer.layout,
                             near_plane=s.near_plane, depth_mode=s.depth_mode)
        if render_mode not in ("RGB", "RGB+ED"):
            raise ValueError(f"2DGS evaluation renders 'RGB' or 'RGB+ED', got {render_mode!r}")
        rgb = out["rgb"] if render_mode == "RGB" else np.concatenate([out["rgb"], out["depth"]], -1)
        return rgb, out["accumulation"]
    return render_gaussians(trainer.gaussians, viewmat, K, width, height, sh_degree=trainer.sh_degree,
                            background=background, render_mode=render_mode, rasterizer=trainer.cfg.rasterizer,
                            rasterize_mode=trainer.cfg.rasterize_mode, layout=trainer.layout,
                            camera_model=trainer.cfg.camera_model, distortion=distortion)


def heldout_psnr(trainer: Trainer, images, viewmats, Ks, distortions=None) -> float:
    """Mean PSNR of the trainer's current Gaussians against uint8 images [H,W,3] seen from the
    given cameras (`distortions` [V,4]: fisheyes' k1-k4, drawn with the trainer's camera model)."""
    vals = []
    distortions = [None] * len(images) if distortions is None else distortions
    for im, vm, K, dist in zip(images, viewmats, Ks, distortions):
        image, _ = render(trainer, vm, K, im.shape[1], im.shape[0], render_mode="RGB", distortion=dist)
        vals.append(float(psnr(jnp.clip(image, 0.0, 1.0), jnp.asarray(im[..., :3], jnp.float32) / 255.0)))
    return float(np.mean(vals))
