"""A small loader for nerfstudio-format captures (transforms.json) without nerfstudio, for the
benchmarks and the multi-host script: undistorts with OpenCV, converts the OpenGL camera-to-world
poses to OpenCV world-to-camera, centres the scene on the cameras. (`ns-train` reads captures
through nerfstudio's own dataparsers instead.)"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def load_transforms(root, holdout_every: int = 8, downscale: int = 1):
    """-> dict(train=(images, viewmats, Ks), test=(...), scene_extent, bbox)."""
    import cv2
    from PIL import Image

    root = Path(root)
    meta = json.loads((root / "transforms.json").read_text())
    frames = sorted(meta["frames"], key=lambda f: f["file_path"])
    images, vms, Ks = [], [], []
    for f in frames:
        fx, fy = f.get("fl_x", meta.get("fl_x")), f.get("fl_y", meta.get("fl_y"))
        cx, cy = f.get("cx", meta.get("cx")), f.get("cy", meta.get("cy"))
        K = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1.0]])
        im = np.asarray(Image.open(root / f["file_path"]).convert("RGB"))
        dist = np.array([meta.get(k, 0.0) for k in ("k1", "k2", "p1", "p2")])
        if np.any(dist):
            im = cv2.undistort(im, K, dist)
        if downscale > 1:
            im = np.asarray(Image.fromarray(im).resize((im.shape[1] // downscale, im.shape[0] // downscale), Image.LANCZOS))
            K = K.copy()
            K[:2] /= downscale
        c2w = np.array(f["transform_matrix"], np.float64)
        c2w[:3, 1:3] *= -1  # OpenGL -> OpenCV axes
        images.append(im)
        vms.append(c2w)
        Ks.append(K)
    c2w = np.stack(vms)
    center = c2w[:, :3, 3].mean(0)
    c2w[:, :3, 3] -= center
    scale = 1.0 / np.max(np.linalg.norm(c2w[:, :3, 3], axis=1))
    c2w[:, :3, 3] *= scale
    viewmats = np.linalg.inv(c2w)
    Ks = np.stack(Ks)
    test = np.arange(len(images)) % holdout_every == 0
    pick = lambda m: ([im for im, t in zip(images, m) if t], viewmats[m], Ks[m])
    from jax_backend import scene_extent

    pos = c2w[:, :3, 3]
    return {
        "train": pick(~test),
        "test": pick(test),
        "scene_extent": scene_extent(viewmats),
        "bbox": (pos.min(0), pos.max(0)),
    }
