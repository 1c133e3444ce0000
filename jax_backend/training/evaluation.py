"""Looking at a trainer's state: its Gaussians rendered from a camera, and their PSNR on held-out
views."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .loss import psnr
from .splat_kind import Render
from .trainer import Trainer


def render(trainer: Trainer, viewmat, K, width: int, height: int, background=None, depth: bool = True,
           distortion=None) -> Render:
    """The trainer's current splats from one camera at the current SH degree, as training draws
    them (its kind of splat, rasterizer, mode, camera model and layout: `SplatKind.render`;
    `distortion`: a fisheye's k1-k4; `depth`: the expected depth too)."""
    cfg = trainer.cfg
    return cfg.splats.render(trainer.gaussians, viewmat, K, width, height, sh_degree=trainer.sh_degree,
                             background=background, depth=depth, rasterizer=cfg.rasterizer,
                             rasterize_mode=cfg.rasterize_mode, layout=trainer.layout, camera_model=cfg.camera_model,
                             distortion=distortion)


def heldout_psnr(trainer: Trainer, images, viewmats, Ks, distortions=None) -> float:
    """Mean PSNR of the trainer's current Gaussians against uint8 images [H,W,3] seen from the
    given cameras (`distortions` [V,4]: fisheyes' k1-k4, drawn with the trainer's camera model)."""
    vals = []
    distortions = [None] * len(images) if distortions is None else distortions
    for im, vm, K, dist in zip(images, viewmats, Ks, distortions):
        image = render(trainer, vm, K, im.shape[1], im.shape[0], depth=False, distortion=dist).rgb
        vals.append(float(psnr(jnp.clip(image, 0.0, 1.0), jnp.asarray(im[..., :3], jnp.float32) / 255.0)))
    return float(np.mean(vals))
