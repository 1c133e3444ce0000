"""`ns-train jax-gs` with nerfstudio's colmap and blender-data dataparsers (slow: real commands).

- COLMAP: a text model written from the fox capture's poses and intrinsics (OPENCV camera, with
  its distortion) plus a point cloud, so the seed-point path is taken.
- blender-data: a small synthetic scene rendered from known Gaussians by the dense reference
  renderer, RGBA PNGs composited by nerfstudio onto white.
"""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from commands import BIN, FOX, run_command  # noqa: E402
COMMON = ["--vis", "tensorboard", "--viewer.quit-on-train-completion", "True", "--steps-per-save", "1000",
          "--pipeline.model.steps-per-block", "25"]


def _run(args):
    return run_command(args)


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


def _alive_count(ckpt: Path) -> int:
    state = torch.load(ckpt, weights_only=True)["pipeline"]
    return int(state["_model.jaxgs.train.gaussians.alive"].sum())


@pytest.mark.slow
def test_colmap_scene_from_the_fox_poses(tmp_path):
    scene = tmp_path / "scene"
    n = write_colmap_scene(scene)
    _run([BIN / "ns-train", "jax-gs", "--data", scene, "--output-dir", tmp_path / "out", "--timestamp", "a",
          "--max-num-iterations", "50", *COMMON, "colmap"])
    ckpt = tmp_path / "out" / "scene" / "jax-gs" / "a" / "nerfstudio_models" / "step-000000049.ckpt"
    assert _alive_count(ckpt) == n  # started from the COLMAP points (no densification before step 500)
    out = _run([BIN / "ns-eval", "--load-config", ckpt.parents[1] / "config.yml", "--output-path", tmp_path / "e.json"])
    assert json.loads((tmp_path / "e.json").read_text())["results"]["psnr"] > 7, out.stdout[-2000:]


@pytest.mark.slow
def test_colmap_capture_with_only_downscaled_images(tmp_path):
    """What LLFF-style downloads look like: sparse/0 (here colmap/sparse/0) and images_4/ only."""
    scene = tmp_path / "scene"
    write_colmap_scene(scene)
    write_downscaled_copies(scene / "images", scene / "images_4", 4)
    shutil.rmtree(scene / "images")
    _run([BIN / "ns-train", "jax-gs", "--data", scene, "--output-dir", tmp_path / "out", "--timestamp", "a",
          "--max-num-iterations", "50", *COMMON, "colmap", "--downscale-factor", "4"])
    run = tmp_path / "out" / "scene" / "jax-gs" / "a"
    _run([BIN / "ns-eval", "--load-config", run / "config.yml", "--output-path", tmp_path / "e.json"])
    assert json.loads((tmp_path / "e.json").read_text())["results"]["psnr"] > 7


@pytest.mark.slow
def test_blender_data_synthetic_scene(tmp_path):
    scene = tmp_path / "synth"
    write_blender_scene(scene)
    # the plain command: blender-data composites the RGBA images on white, and jax-gs follows
    _run([BIN / "ns-train", "jax-gs", "--data", scene, "--output-dir", tmp_path / "out", "--timestamp", "a",
          "--max-num-iterations", "300", "--pipeline.model.num-downscales", "0",
          "--pipeline.model.num-random", "2000", "--pipeline.model.random-scale", "2.0", *COMMON, "blender-data"])
    run = tmp_path / "out" / "synth" / "jax-gs" / "a"
    assert (run / "nerfstudio_models" / "step-000000299.ckpt").exists()
    _run([BIN / "ns-eval", "--load-config", run / "config.yml", "--output-path", tmp_path / "e.json"])
    psnr = json.loads((tmp_path / "e.json").read_text())["results"]["psnr"]
    # white background vs a scene covering a fraction of the frame: the untrained model (random
    # Gaussians at 10% opacity on white) scores about 12 dB
    assert psnr > 16, psnr
