"""Captures in the layouts real ones ship in, written for the tests (and the benchmarks that train
on them): the fox as a COLMAP text model and as a larger phone-sized capture, images_N/ copies, a
synthetic blender-data scene, a forward-facing capture, an OPENCV_FISHEYE capture. One home, so
that no test module imports another."""
import json
import shutil
from pathlib import Path

import numpy as np

from commands import FOX


def write_colmap_scene(dst: Path, num_points=400, seed=0) -> int:
    """The fox capture as a COLMAP text model: dst/images, dst/colmap/sparse/0/*.txt."""
    from nerfstudio.data.utils.colmap_parsing_utils import qvec2rotmat

    meta = json.loads((FOX / "transforms.json").read_text())
    frames = sorted(meta["frames"], key=lambda f: f["file_path"])
    (dst / "images").mkdir(parents=True)
    model = dst / "colmap" / "sparse" / "0"
    model.mkdir(parents=True)
    m = meta
    (model / "cameras.txt").write_text(
        f"1 OPENCV {m['w']} {m['h']} {m['fl_x']} {m['fl_y']} {m['cx']} {m['cy']} {m['k1']} {m['k2']} {m['p1']} {m['p2']}\n")
    lines, centres = [], []
    for i, f in enumerate(frames, start=1):
        c2w = np.array(f["transform_matrix"], np.float64)
        c2w[:3, 1:3] *= -1  # OpenGL -> OpenCV camera axes
        w2c = np.linalg.inv(c2w)
        q = _rotmat_to_qvec(w2c[:3, :3])
        assert np.allclose(qvec2rotmat(q), w2c[:3, :3], atol=1e-5)  # the capture's rotations are orthonormal to ~1e-6
        t = w2c[:3, 3]
        name = Path(f["file_path"]).name
        shutil.copy(FOX / f["file_path"], dst / "images" / name)
        lines.append(f"{i} {_num(q)} {_num(t)} 1 {name}\n\n")
        centres.append(c2w[:3, 3])
    (model / "images.txt").write_text("".join(lines))
    centres = np.array(centres)
    rng = np.random.default_rng(seed)
    radius = np.linalg.norm(centres - centres.mean(0), axis=1).max()
    pts = centres.mean(0) + rng.uniform(-0.4, 0.4, (num_points, 3)) * radius
    rgb = rng.integers(0, 256, (num_points, 3))
    (model / "points3D.txt").write_text("".join(
        f"{i + 1} {_num(p)} {c[0]} {c[1]} {c[2]} 0.5\n" for i, (p, c) in enumerate(zip(pts, rgb))))
    return num_points


def _rotmat_to_qvec(R):
    """COLMAP's (w, x, y, z) from a rotation matrix."""
    w = np.sqrt(max(0.0, 1 + R[0, 0] + R[1, 1] + R[2, 2])) / 2
    x = np.copysign(np.sqrt(max(0.0, 1 + R[0, 0] - R[1, 1] - R[2, 2])) / 2, R[2, 1] - R[1, 2])
    y = np.copysign(np.sqrt(max(0.0, 1 - R[0, 0] + R[1, 1] - R[2, 2])) / 2, R[0, 2] - R[2, 0])
    z = np.copysign(np.sqrt(max(0.0, 1 - R[0, 0] - R[1, 1] + R[2, 2])) / 2, R[1, 0] - R[0, 1])
    q = np.array([w, x, y, z])
    return q / np.linalg.norm(q)


def _num(values):
    return " ".join(f"{float(v):.17g}" for v in values)


def write_downscaled_copies(src: Path, dst: Path, factor: int):
    """The images of `src` downscaled by `factor` into `dst` (what images_N/ folders hold)."""
    from PIL import Image

    dst.mkdir(parents=True)
    for p in sorted(src.iterdir()):
        im = Image.open(p)
        im.resize((im.width // factor, im.height // factor), Image.LANCZOS).save(dst / p.name)


def write_blender_scene(dst: Path, width=64, height=64, views=(12, 2, 3), seed=0):
    """A synthetic blender-format scene: transforms_{train,val,test}.json and RGBA PNGs."""
    from PIL import Image

    from reference import render as render_reference
    from scenes import look_at

    rng = np.random.default_rng(seed)
    n = 60
    means = rng.normal(size=(n, 3)) * 0.4
    quats = rng.normal(size=(n, 4))
    scales = np.exp(rng.normal(-2.0, 0.3, (n, 3)))
    opac = rng.uniform(0.7, 0.95, n)
    colors = rng.uniform(0, 1, (n, 3))
    angle_x = 0.69
    focal = 0.5 * width / np.tan(0.5 * angle_x)
    K = np.array([[focal, 0, width / 2], [0, focal, height / 2], [0, 0, 1.0]])
    k = 0
    for split, count in zip(("train", "val", "test"), views):
        (dst / split).mkdir(parents=True)
        frames = []
        for i in range(count):
            a = 2 * np.pi * k / sum(views)
            k += 1
            pos = np.array([4 * np.sin(a), 4 * np.cos(a), 1.5 + 0.3 * np.sin(3 * a)])  # z up, as Blender
            vm = look_at(pos, np.zeros(3), up=(0.0, 0.0, -1.0))
            rgb, alpha = render_reference(means, quats, scales, opac, colors, vm, K, width, height)
            alpha = alpha[..., None]
            rgba = np.concatenate([np.clip(rgb / np.maximum(alpha, 1e-6), 0, 1), alpha], -1)  # straight alpha
            Image.fromarray((rgba * 255 + 0.5).astype(np.uint8), "RGBA").save(dst / split / f"r_{i}.png")
            c2w = np.linalg.inv(vm)
            c2w[:3, 1:3] *= -1  # OpenCV -> OpenGL (Blender) camera axes
            frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": c2w.tolist()})
        (dst / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": angle_x, "frames": frames}))


def write_forward_facing_scene(dst: Path, width=64, height=48, textured=False, focal=60.0):
    """A forward-facing capture (LLFF-like) in nerfstudio-data format: 12 cameras on a small plane,
    all looking the same way at a wall of points 4 units in front of them (its point cloud is the
    capture's sparse_pc.ply, so the Gaussians start on the wall). Images are flat grey (only the
    geometry matters), or with `textured` the wall's coloured Gaussians rendered from each camera
    by jax-gs's rasterizer (a scene to look at)."""
    from PIL import Image

    (dst / "images").mkdir(parents=True)
    rng = np.random.default_rng(0)
    n, w, h = (8000, 4.0, 3.0) if textured else (3000, 2.0, 1.5)  # textured: wide enough to fill a viewer
    wall = np.stack([rng.uniform(-w, w, n), rng.uniform(-h, h, n), rng.uniform(-4.2, -3.8, n)], -1)
    colours = rng.integers(60, 256, (len(wall), 3)) if textured else np.tile([200, 120, 80], (len(wall), 1))
    c2ws = []
    for x, y in [(x, y) for x in np.linspace(-0.3, 0.3, 4) for y in np.linspace(-0.2, 0.2, 3)]:
        c2w = np.eye(4)
        c2w[:3, 3] = [x, y, 0.0]  # OpenGL axes: looking along -z
        c2ws.append(c2w)
    images = (_render_wall(wall, colours, c2ws, width, height, focal) if textured
              else [np.full((height, width, 3), 128, np.uint8)] * len(c2ws))
    frames = []
    for i, (c2w, im) in enumerate(zip(c2ws, images)):
        Image.fromarray(im).save(dst / "images" / f"{i:03d}.png")
        frames.append({"file_path": f"images/{i:03d}.png", "transform_matrix": c2w.tolist()})
    lines = ["ply", "format ascii 1.0", f"element vertex {len(wall)}", "property float x", "property float y",
             "property float z", "property uchar red", "property uchar green", "property uchar blue", "end_header"]
    lines += [f"{p[0]:.5f} {p[1]:.5f} {p[2]:.5f} {c[0]} {c[1]} {c[2]}" for p, c in zip(wall, colours)]
    (dst / "sparse_pc.ply").write_text("\n".join(lines) + "\n")
    meta = {"fl_x": focal, "fl_y": focal, "cx": width / 2, "cy": height / 2, "w": width, "h": height,
            "frames": frames, "ply_file_path": "sparse_pc.ply"}
    (dst / "transforms.json").write_text(json.dumps(meta))


def _render_wall(points, colours, c2ws, width, height, focal):
    """The wall's points as opaque Gaussians (sigma 8 cm), rendered from OpenGL camera-to-worlds."""
    import jax.numpy as jnp

    from jax_backend import rasterization

    n = len(points)
    flip = np.diag([1.0, -1.0, -1.0, 1.0])  # OpenGL -> OpenCV camera axes
    viewmats = np.stack([np.linalg.inv(c2w @ flip) for c2w in c2ws]).astype(np.float32)
    K = np.array([[focal, 0, width / 2], [0, focal, height / 2], [0, 0, 1]], np.float32)
    rgb, _, _ = rasterization(jnp.asarray(points, jnp.float32), jnp.tile(jnp.array([1.0, 0, 0, 0]), (n, 1)),
                              jnp.full((n, 3), 0.08), jnp.full((n,), 0.95), jnp.asarray(colours / 255.0, jnp.float32),
                              jnp.asarray(viewmats), jnp.asarray(np.stack([K] * len(c2ws))), width, height)
    return [np.asarray(np.clip(im, 0, 1) * 255 + 0.5, np.uint8) for im in np.asarray(rgb)]


def write_fisheye_scene(dst: Path, frames=12, coeffs=(0.12, 0.03, 0.0, 0.0)) -> tuple:
    """An OPENCV_FISHEYE capture made from the fox (`tools.captures.write_fisheye_capture`):
    each fox image taken as a pinhole image (intrinsics K) and redrawn through the fisheye model
    (same K, coefficients `coeffs`). Returns (K, the pinhole images by name)."""
    from tools.captures import write_fisheye_capture

    K, originals, _ = write_fisheye_capture(FOX, dst, frames, coeffs)
    return K, originals


def write_large_capture(dst, copies: int = 3, scale: int = 4):
    """A nerfstudio-data capture larger than the fox: its frames `copies` times over, each image
    upscaled `scale` times (JPEG, as phones write them), the intrinsics scaled to match."""
    from PIL import Image

    meta = json.loads((FOX / "transforms.json").read_text())
    for key in ("fl_x", "fl_y", "cx", "cy", "w", "h"):
        meta[key] = meta[key] * scale
    (dst / "images").mkdir(parents=True)
    frames = []
    for copy in range(copies):
        for f in meta["frames"]:
            im = Image.open(FOX / f["file_path"]).convert("RGB")
            name = f"images/{copy}_{f['file_path'].split('/')[-1].rsplit('.', 1)[0]}.jpg"
            im.resize((im.width * scale, im.height * scale), Image.BICUBIC).save(dst / name, quality=92)
            frames.append(dict(f, file_path=name))
    meta["frames"] = frames
    (dst / "transforms.json").write_text(json.dumps(meta))
    return len(frames)
