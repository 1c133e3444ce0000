"""`ns-train jax-gs` with nerfstudio's colmap and blender-data dataparsers (slow: real commands).

- COLMAP: a text model written from the fox capture's poses and intrinsics (OPENCV camera, with
  its distortion) plus a point cloud, so the seed-point path is taken.
- blender-data: a small synthetic scene rendered from known Gaussians by the dense reference
  renderer, RGBA PNGs composited by nerfstudio onto white.
"""
import json
import shutil
from pathlib import Path

import pytest
import torch

from captures import write_blender_scene, write_colmap_scene, write_downscaled_copies  # noqa: E402
from commands import BIN, run_command  # noqa: E402
COMMON = ["--vis", "tensorboard", "--viewer.quit-on-train-completion", "True", "--steps-per-save", "1000",
          "--pipeline.model.steps-per-block", "25"]


def _run(args):
    return run_command(args)


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
