"""Captures for the benchmarks and the tests: the fox redrawn as an OPENCV_FISHEYE capture
(`write_fisheye_capture`, KB4 coefficients `COEFFS` by default), and a small loader for
nerfstudio-format captures without nerfstudio (`load_transforms`: undistorts with OpenCV, OpenGL
camera-to-world poses to OpenCV world-to-camera, the scene centred on the cameras; `ns-train`
reads captures through nerfstudio's own dataparsers instead)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

COEFFS = (0.12, 0.03, 0.0, 0.0)  # the fisheye captures' KB4 coefficients k1-k4


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


def fisheye_pixels_to_pinhole(K_fisheye, coeffs, width: int, height: int, K_pinhole):
    """[height, width, 2]: where each fisheye pixel's ray (centre at +0.5, nerfstudio's convention;
    OpenCV's KB4 model with k1-k4 `coeffs`) lands in a pinhole image with intrinsics K_pinhole."""
    import cv2

    def opencv(K):  # OpenCV's pixel centres are integers, nerfstudio's at +0.5
        K = np.array(K, np.float64).copy()
        K[:2, 2] -= 0.5
        return K

    xs, ys = np.meshgrid(np.arange(width, dtype=np.float64), np.arange(height, dtype=np.float64))
    fish = np.stack([xs, ys], -1).reshape(-1, 1, 2)
    out = cv2.fisheye.undistortPoints(fish, opencv(K_fisheye), np.array(coeffs, np.float64), P=opencv(K_pinhole))
    return out.reshape(height, width, 2) + 0.5


def write_fisheye_capture(src, dst, frames=None, coeffs=COEFFS, fill: bool = False):
    """An OPENCV_FISHEYE capture (nerfstudio format) made from a pinhole one: each image redrawn
    through the KB4 fisheye model with coefficients `coeffs`, as a fisheye lens in that pose would
    have seen the scene. `frames`: the first that many frames (by file name), or all.

    fill=False: the fisheye has the pinhole's intrinsics and the source is taken as a pinhole image
    (its own distortion coefficients ignored), so the fisheye's corners see past the source (black).
    fill=True: the source is undistorted first (its k1, k2, p1, p2), and the fisheye's focal lengths
    are the pinhole's scaled so that every fisheye pixel sees into the source: a fisheye frame filled
    with the scene, as wide as the source's corners allow.
    Returns (the fisheye's K, the pinhole images (RGB) by file name, the pinhole K)."""
    import cv2

    src, dst = Path(src), Path(dst)
    meta = json.loads((src / "transforms.json").read_text())
    brown = np.array([meta.pop(k, 0.0) for k in ("k1", "k2", "p1", "p2")], np.float64)
    meta["frames"] = sorted(meta["frames"], key=lambda f: f["file_path"])[:frames]
    w, h = meta["w"], meta["h"]
    K = np.array([[meta["fl_x"], 0, meta["cx"]], [0, meta["fl_y"], meta["cy"]], [0, 0, 1.0]])
    K_fish = K.copy()
    if fill:  # the largest focal scale that leaves no fisheye pixel outside the source, by bisection
        lo, hi = 1.0, 4.0
        for _ in range(30):
            s = 0.5 * (lo + hi)
            K_fish[:2, :2] = K[:2, :2] * s
            p = fisheye_pixels_to_pinhole(K_fish, coeffs, w, h, K)
            inside = (p[..., 0] >= 0.5) & (p[..., 0] <= w - 0.5) & (p[..., 1] >= 0.5) & (p[..., 1] <= h - 0.5)
            lo, hi = (lo, s) if inside.all() else (s, hi)
        K_fish[:2, :2] = K[:2, :2] * hi
    pin = (fisheye_pixels_to_pinhole(K_fish, coeffs, w, h, K) - 0.5).astype(np.float32)
    Kcv = K.copy()
    Kcv[:2, 2] -= 0.5
    (dst / "images").mkdir(parents=True)
    originals = {}
    for f in meta["frames"]:
        image = cv2.imread(str(src / f["file_path"]))
        if fill and np.any(brown):
            image = cv2.undistort(image, Kcv, brown)
        originals[Path(f["file_path"]).name] = image[..., ::-1]
        cv2.imwrite(str(dst / f["file_path"]), cv2.remap(image, pin[..., 0], pin[..., 1], cv2.INTER_LINEAR))
    meta.update(camera_model="OPENCV_FISHEYE", fl_x=float(K_fish[0, 0]), fl_y=float(K_fish[1, 1]),
                k1=coeffs[0], k2=coeffs[1], k3=coeffs[2], k4=coeffs[3])
    for key in ("camera_angle_x", "camera_angle_y"):  # the pinhole's; nerfstudio reads fl_x, fl_y
        meta.pop(key, None)
    (dst / "transforms.json").write_text(json.dumps(meta))
    return K_fish, originals, K


def diagonal_fov(K, coeffs, width: int, height: int) -> float:
    """Degrees between the rays of opposite corners of a KB4 fisheye frame (the wider diagonal)."""
    import cv2

    corners = np.array([[0, 0], [width, height], [width, 0], [0, height]], np.float64).reshape(-1, 1, 2) - 0.5
    Kcv = np.array(K, np.float64).copy()
    Kcv[:2, 2] -= 0.5
    xy = cv2.fisheye.undistortPoints(corners, Kcv, np.array(coeffs, np.float64)).reshape(-1, 2)
    theta = np.arctan(np.hypot(xy[:, 0], xy[:, 1]))
    return float(np.degrees(max(theta[0] + theta[1], theta[2] + theta[3])))
