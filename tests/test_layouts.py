"""Captures in the layouts users download, built from the bundled fox (and a synthetic blender
scene), loaded the way `ns-train jax-gs` loads them: nerfstudio's dataparser and datamanager under
jax-gs's pipeline (input checks, one-line errors, background). What nerfstudio accepts, jax-gs
accepts. (`test_dataparsers.py` trains on some of them end to end.)"""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest


from commands import FOX  # noqa: E402
from captures import (write_blender_scene, write_colmap_scene, write_downscaled_copies,  # noqa: E402
                      write_fisheye_scene, write_forward_facing_scene)


def _pipeline(dataparser, **model_settings):
    from nerfstudio.data.datamanagers.full_images_datamanager import FullImageDatamanagerConfig

    from nerfstudio_jaxgs.model import JaxGSModelConfig
    from nerfstudio_jaxgs.pipeline import JaxGSPipelineConfig

    cfg = JaxGSPipelineConfig(datamanager=FullImageDatamanagerConfig(dataparser=dataparser, cache_images_type="uint8"),
                              model=JaxGSModelConfig(**model_settings))
    return cfg.setup(device="cpu", test_mode="val")


def _train_images(pipeline):
    return [np.asarray(d["image"]) for d in pipeline.datamanager.cached_train]


def _fox_copy(dst: Path, images_dir="images") -> dict:
    meta = json.loads((FOX / "transforms.json").read_text())
    shutil.copytree(FOX / "images", dst / images_dir)
    return meta


def test_colmap_with_only_downscaled_images(tmp_path):
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig

    from nerfstudio_jaxgs.errors import InputError

    write_colmap_scene(tmp_path)
    write_downscaled_copies(tmp_path / "images", tmp_path / "images_4", 4)
    shutil.rmtree(tmp_path / "images")
    images = _train_images(_pipeline(ColmapDataParserConfig(data=tmp_path, downscale_factor=4)))
    assert len(images) > 50 and images[0].shape[0] < 70  # the fox is 240 high: a quarter, undistorted
    # without the factor nerfstudio reads images/: one line that says which flag to pass
    with pytest.raises(InputError, match=r"images/ does not exist, the scene has images_4/: pass the dataparser "
                                         r"--downscale-factor 4"):
        _pipeline(ColmapDataParserConfig(data=tmp_path))


def test_evaluating_all_views_after_their_undistortion(tmp_path):
    """A distorted COLMAP capture (the fox's OPENCV camera) whose undistorted images are smaller
    than their files: once an evaluation has undistorted the evaluation views (nerfstudio changes
    their cameras' width and height to the undistorted size), evaluating all of them (what
    `ns-train` does every `steps-per-eval-all-images`, 5000) still works. It used to stop the run
    at step 5000, re-checking the files against the changed cameras (snowmiku: 1008x756 files,
    1007x755 undistorted)."""
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig

    write_colmap_scene(tmp_path)
    pipeline = _pipeline(ColmapDataParserConfig(data=tmp_path, colmap_path=Path("colmap/sparse/0")))
    dm = pipeline.datamanager
    files = [tuple(np.asarray(_image_size(p))) for p in dm.eval_dataset.image_filenames]
    dm.cached_eval  # noqa: B018  (undistorts them, as the first evaluation does)
    cams = dm.eval_dataset.cameras
    assert (int(cams.width[0]), int(cams.height[0])) != files[0]  # the cameras now say the undistorted size
    metrics = pipeline.get_average_eval_image_metrics(step=1)
    assert np.isfinite(metrics["psnr"])


def _image_size(path):
    from PIL import Image

    with Image.open(path) as im:
        return im.size


def test_colmap_with_full_and_downscaled_images(tmp_path):
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig

    write_colmap_scene(tmp_path)
    write_downscaled_copies(tmp_path / "images", tmp_path / "images_2", 2)
    full = _train_images(_pipeline(ColmapDataParserConfig(data=tmp_path)))
    half = _train_images(_pipeline(ColmapDataParserConfig(data=tmp_path, downscale_factor=2)))
    assert len(full) == len(half) and abs(full[0].shape[0] / half[0].shape[0] - 2) < 0.1


def test_nerfstudio_data_with_only_downscaled_images(tmp_path):
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    meta = _fox_copy(tmp_path, "full")
    write_downscaled_copies(tmp_path / "full", tmp_path / "images_2", 2)
    shutil.rmtree(tmp_path / "full")
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    images = _train_images(_pipeline(NerfstudioDataParserConfig(data=tmp_path, downscale_factor=2)))
    assert len(images) > 50 and images[0].shape[0] < 130


def test_nerfstudio_data_with_per_frame_intrinsics(tmp_path):
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    meta = _fox_copy(tmp_path)
    keys = ("fl_x", "fl_y", "cx", "cy", "w", "h", "k1", "k2", "p1", "p2", "camera_model")
    for i, f in enumerate(meta["frames"]):
        f.update({k: meta[k] for k in keys if k in meta})
        f["fl_x"] = f["fl_y"] = meta["fl_x"] * (1.0 + 0.01 * (i % 3))  # really per frame
    for k in keys:
        meta.pop(k, None)
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    pipeline = _pipeline(NerfstudioDataParserConfig(data=tmp_path))
    fx = pipeline.datamanager.train_dataset.cameras.fx.reshape(-1)
    assert len(set(np.round(fx.numpy(), 3))) == 3


def test_nerfstudio_data_with_masks(tmp_path):
    from PIL import Image

    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    meta = _fox_copy(tmp_path)
    (tmp_path / "masks").mkdir()
    for f in meta["frames"]:
        m = np.full((meta["h"], meta["w"]), 255, np.uint8)
        m[:, : meta["w"] // 3] = 0  # the left third is not to be trained on
        name = Path(f["file_path"]).with_suffix(".png").name
        Image.fromarray(m, "L").save(tmp_path / "masks" / name)
        f["mask_path"] = f"masks/{name}"
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    pipeline = _pipeline(NerfstudioDataParserConfig(data=tmp_path))
    mask = np.asarray(pipeline.datamanager.cached_train[0]["mask"])[..., 0]
    assert 0.2 < 1 - mask.mean() < 0.45  # about a third masked out (after undistortion)


@pytest.mark.parametrize("alpha_color", ["white", "black", None])
def test_blender_rgba_follows_the_alpha_color(tmp_path, alpha_color):
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

    write_blender_scene(tmp_path)
    pipeline = _pipeline(BlenderDataParserConfig(data=tmp_path, alpha_color=alpha_color))
    images = _train_images(pipeline)
    expected = {"white": (1.0, 1.0, 1.0), "black": (0.0, 0.0, 0.0), None: "random"}[alpha_color]
    assert pipeline.backgrounds.training == expected
    if alpha_color is None:  # RGBA kept: the engine composites on its random background
        assert images[0].shape[-1] == 4
    else:
        assert images[0].shape[-1] == 3 and np.all(images[0][0, 0] == (255 if alpha_color == "white" else 0))
        np.testing.assert_allclose(pipeline.model.background_color.numpy(), expected)  # eval and previews too


def _viser_default_camera(width=64, height=48):
    """The camera a new viser client starts with: (-3, 3, -3) viser units = (-0.3, 0.3, -0.3) in
    nerfstudio's scene, looking at the origin, +z up (nerfstudio's), three.js's 50-degree vertical fov."""
    import torch
    from nerfstudio.cameras.cameras import Cameras

    pos = np.array([-0.3, 0.3, -0.3])
    forward = -pos / np.linalg.norm(pos)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    c2w = np.stack([right, up, -forward, pos], 1)  # OpenGL camera axes
    f = 0.5 * height / np.tan(np.radians(25.0))
    return Cameras(camera_to_worlds=torch.tensor(c2w, dtype=torch.float32)[None], fx=f, fy=f, cx=width / 2,
                   cy=height / 2, width=width, height=height)


def test_viser_s_default_view_misses_a_forward_facing_capture(tmp_path):
    """Why the viewer showed an empty canvas on forward-facing captures, and what it does now: the
    default camera sees none of the Gaussians (while it does see a 360-degree capture's), a
    training camera sees them, so a new client is moved there (nerfstudio_jaxgs/viewer.py)."""
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from nerfstudio_jaxgs.viewer import sees_the_scene

    write_forward_facing_scene(tmp_path)
    pipeline = _pipeline(NerfstudioDataParserConfig(data=tmp_path, load_3D_points=True))
    model = pipeline.model
    assert model.num_points == 3000  # started on the wall
    assert not sees_the_scene(model, _viser_default_camera())
    assert sees_the_scene(model, pipeline.datamanager.train_dataset.cameras[0:1])
    fox = _pipeline(NerfstudioDataParserConfig(data=FOX))  # 360 degrees: random Gaussians around the origin
    assert sees_the_scene(fox.model, _viser_default_camera())


def test_rgba_pngs_among_rgb_jpegs_train(tmp_path):
    """nerfstudio reads a capture whose images are partly RGBA PNGs: so does jax-gs (the RGB ones
    are opaque), up to the engine's on-device dataset."""
    from PIL import Image

    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    meta = _fox_copy(tmp_path)
    for f in meta["frames"][::3]:
        jpg = tmp_path / f["file_path"]
        rgba = np.concatenate([np.asarray(Image.open(jpg)), np.full((meta["h"], meta["w"], 1), 200, np.uint8)], -1)
        Image.fromarray(rgba, "RGBA").save(jpg.with_suffix(".png"))
        jpg.unlink()
        f["file_path"] = str(Path(f["file_path"]).with_suffix(".png"))
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    pipeline = _pipeline(NerfstudioDataParserConfig(data=tmp_path))
    assert {im.shape[-1] for im in _train_images(pipeline)} == {3, 4}
    images = np.asarray(pipeline.start_engine(10).data.images)
    centre = images[:, images.shape[1] // 2, images.shape[2] // 2, 3]
    assert images.shape[-1] == 4 and set(centre.tolist()) == {200, 255}


def test_camera_optimizer_reaches_the_engine_and_the_viewer(tmp_path):
    """splatfacto's --pipeline.model.camera-optimizer.mode SO3xR3 with its camera_opt optimizer
    group: the engine learns per-view corrections, the model's nerfstudio CameraOptimizer (what the
    viewer draws the training cameras with) follows them, and checkpoints carry them."""
    from nerfstudio.cameras.camera_optimizers import CameraOptimizerConfig
    from nerfstudio.data.datamanagers.full_images_datamanager import FullImageDatamanagerConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from nerfstudio_jaxgs.config import OPTIMIZERS
    from nerfstudio_jaxgs.checkpoint_entries import PREFIX
    from nerfstudio_jaxgs.model import JaxGSModelConfig
    from nerfstudio_jaxgs.pipeline import JaxGSPipelineConfig

    model = JaxGSModelConfig(camera_optimizer=CameraOptimizerConfig(mode="SO3xR3"), num_random=500, steps_per_block=10)
    cfg = JaxGSPipelineConfig(datamanager=FullImageDatamanagerConfig(dataparser=NerfstudioDataParserConfig(data=FOX),
                                                                     cache_images_type="uint8"), model=model)
    pipeline = cfg.setup(device="cpu", test_mode="val")
    engine = pipeline.start_engine(100, OPTIMIZERS)
    assert engine.cfg.camera_opt.mode == "SO3xR3" and engine.cfg.camera_opt.optimizer.warmup_steps == 1000
    pipeline.train_block(10, 100)
    deltas = np.asarray(engine.state.cameras.deltas)
    assert deltas.shape == (len(pipeline.datamanager.train_dataset), 6) and np.abs(deltas).max() > 0
    np.testing.assert_allclose(pipeline.model.camera_optimizer.pose_adjustment.detach().numpy(), deltas)
    saved = pipeline.state_dict()  # the checkpoint nerfstudio writes
    assert any(k.endswith(".cameras.deltas") for k in saved)
    # the training state in place of the shown Gaussians, and every other module's entries as torch makes them
    assert not any(k.startswith(f"_model.{PREFIX}.gaussians") for k in saved)
    import torch

    torchs = torch.nn.Module.state_dict(pipeline)
    assert {k for k in torchs if not k.startswith(f"_model.{PREFIX}.")} <= set(saved)


def test_camera_resolution_scale_reaches_the_engine():
    """`--pipeline.datamanager.camera-res-scale-factor 0.5` (honoured, as in splatfacto): the
    engine trains on the half-size images with the half-size intrinsics."""
    from nerfstudio.data.datamanagers.full_images_datamanager import FullImageDatamanagerConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from nerfstudio_jaxgs.model import JaxGSModelConfig
    from nerfstudio_jaxgs.pipeline import JaxGSPipelineConfig

    meta = json.loads((FOX / "transforms.json").read_text())
    dm = FullImageDatamanagerConfig(dataparser=NerfstudioDataParserConfig(data=FOX), cache_images_type="uint8",
                                    camera_res_scale_factor=0.5)
    pipeline = JaxGSPipelineConfig(datamanager=dm, model=JaxGSModelConfig()).setup(device="cpu", test_mode="val")
    data = pipeline.start_engine(100).data
    cams = pipeline.datamanager.train_dataset.cameras
    assert (data.width, data.height) == (int(cams.width[0]), int(cams.height[0]))
    assert abs(data.width - meta["w"] / 2) <= 2 and abs(data.height - meta["h"] / 2) <= 2
    np.testing.assert_allclose(np.asarray(data.Ks)[0, 0, 0], float(cams.fx[0]), rtol=1e-5)
    assert abs(float(cams.fx[0]) - meta["fl_x"] / 2) < 0.05 * meta["fl_x"]


def _pinhole_mismatch(undistorted, K_u, original, K_o):
    """Mean absolute difference (0-255) between an undistorted image with intrinsics K_u and the
    pinhole original with K_o redrawn at K_u, where both have content."""
    import cv2

    h, w = undistorted.shape[:2]
    xs, ys = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    rays = np.stack([(xs - K_u[0, 2]) / K_u[0, 0], (ys - K_u[1, 2]) / K_u[1, 1]], -1)
    px = (rays[..., 0] * K_o[0, 0] + K_o[0, 2] - 0.5).astype(np.float32)
    py = (rays[..., 1] * K_o[1, 1] + K_o[1, 2] - 0.5).astype(np.float32)
    redrawn = cv2.remap(np.ascontiguousarray(original), px, py, cv2.INTER_LINEAR)
    oh, ow = original.shape[:2]
    inside = (px > 2) & (px < ow - 3) & (py > 2) & (py < oh - 3) & (undistorted[..., :3].max(-1) > 0)
    assert inside.mean() > 0.5
    return float(np.abs(undistorted[..., :3].astype(float) - redrawn.astype(float))[inside].mean())


def _train_evaluate_render(pipeline):
    """One 5-step block, one evaluation (finite loss and PSNR), and the model's render of the next
    evaluation camera: (that camera, the render)."""
    pipeline.start_engine(5)
    stats = pipeline.train_block(5, 5)
    assert np.isfinite(stats["loss"])
    metrics, _ = pipeline.get_eval_image_metrics_and_images(step=5)
    assert np.isfinite(metrics["psnr"])
    camera, _ = pipeline.datamanager.next_eval_image(step=5)
    return camera, pipeline.model.get_outputs_for_camera(camera)


def test_undistorted_opencv_fisheye_capture_trains_evaluates_and_renders(tmp_path):
    """An OPENCV_FISHEYE capture with --pipeline.model.fisheye undistorted, end to end in one
    process: nerfstudio's datamanager undistorts it,
    and the engine trains on those images with the intrinsics after undistortion (the undistorted
    image agrees with the pinhole original seen through them; through the fisheye's own intrinsics
    it would not); evaluation, the viewer's render and the snapshot preview take the same cameras."""
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    K_o, originals = write_fisheye_scene(tmp_path)
    pipeline = _pipeline(NerfstudioDataParserConfig(data=tmp_path), fisheye="undistorted")
    pipeline.model.config.steps_per_block = 5
    dm = pipeline.datamanager
    engine = pipeline.start_engine(5)
    cams = dm.train_dataset.cameras
    K_u = cams.get_intrinsics_matrices()[0].numpy().astype(np.float64)
    assert abs(K_u[0, 0] - K_o[0, 0]) > 2  # undistortion changed the focal length
    np.testing.assert_allclose(np.asarray(engine.data.Ks[0]), K_u, rtol=1e-5)
    image = np.asarray(dm.cached_train[0]["image"])
    original = originals[Path(dm.train_dataset.image_filenames[0]).name]
    good = _pinhole_mismatch(image, K_u, original, K_o)
    wrong = _pinhole_mismatch(image, K_o, original, K_o)  # the image drawn as if its intrinsics were the fisheye's
    assert good < 8 and wrong > 2 * good, (good, wrong)

    pipeline.model.config.snapshot_every = 5
    snapshots = pipeline.make_snapshots(tmp_path / "snapshots")  # before anything reads the evaluation images
    dm.cached_eval  # noqa: B018  (undistorts them, as the first evaluation would)
    eval_K = dm.eval_dataset.cameras.get_intrinsics_matrices()[0].numpy()
    np.testing.assert_allclose(np.asarray(snapshots.camera[1]), eval_K, rtol=1e-5)
    snapshots.close()

    camera, out = _train_evaluate_render(pipeline)
    assert out["rgb"].shape == (int(camera.height), int(camera.width), 3)


def _fisheye_mismatch(fisheye_image, K, distortion, original, K_o):
    """Mean absolute difference (0-255) between a fisheye image drawn by jax-gs's fisheye camera
    (intrinsics K, k1-k4 `distortion`: `camera_projection`) and the pinhole original (K_o) it was
    made from, over the original's pixels the fisheye sees."""
    import cv2

    from jax_backend.rendering.projection import camera_projection

    oh, ow = original.shape[:2]
    xs, ys = np.meshgrid(np.arange(2, ow - 2, 3) + 0.5, np.arange(2, oh - 2, 3) + 0.5)
    x, y = (xs - K_o[0, 2]) / K_o[0, 0], (ys - K_o[1, 2]) / K_o[1, 1]
    (u, v), _ = camera_projection("fisheye", x.ravel(), y.ravel(), np.ones(x.size), K, ow, oh, np.asarray(distortion))
    u, v = np.asarray(u).reshape(x.shape) - 0.5, np.asarray(v).reshape(x.shape) - 0.5
    h, w = fisheye_image.shape[:2]
    seen = (u > 1) & (u < w - 2) & (v > 1) & (v < h - 2)
    drawn = cv2.remap(np.ascontiguousarray(fisheye_image[..., :3]), u.astype(np.float32), v.astype(np.float32),
                      cv2.INTER_LINEAR)
    at = original[(ys - 0.5).astype(int), (xs - 0.5).astype(int)]
    inside = seen & (drawn.max(-1) > 0)
    assert inside.mean() > 0.5
    return float(np.abs(drawn.astype(float) - at.astype(float))[inside].mean())


def test_native_opencv_fisheye_capture_trains_on_its_whole_frame(tmp_path):
    """An OPENCV_FISHEYE capture under the default --pipeline.model.fisheye native: nerfstudio's
    datamanager caches its images as they are (every pixel, no mask), the cameras keep their
    intrinsics and coefficients, and the engine draws its views as fisheyes with them (the image
    seen through jax-gs's fisheye camera agrees with the pinhole original it was made from; without
    the coefficients it would not); training, evaluation and the snapshot preview take the whole
    frame."""
    from PIL import Image

    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    coeffs = (0.12, 0.03, 0.0, 0.0)
    K_o, originals = write_fisheye_scene(tmp_path, coeffs=coeffs)
    pipeline = _pipeline(NerfstudioDataParserConfig(data=tmp_path))
    pipeline.model.config.steps_per_block = 5
    dm = pipeline.datamanager
    engine = pipeline.start_engine(5)
    assert engine.cfg.camera_model == "fisheye"
    cams = dm.train_dataset.cameras
    np.testing.assert_allclose(cams.distortion_params.numpy()[:, :4], np.tile(coeffs, (len(cams), 1)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(engine.data.distortions), cams.distortion_params.numpy()[:, :4])
    np.testing.assert_allclose(np.asarray(engine.data.Ks[0]), K_o, rtol=1e-5)  # the capture's own
    name = dm.train_dataset.image_filenames[0]
    image = np.asarray(dm.cached_train[0]["image"])
    np.testing.assert_array_equal(image, np.asarray(Image.open(name).convert("RGB")))  # as it is on disk
    assert "mask" not in dm.cached_train[0] and bool(np.asarray(engine.data.masks).all())  # every pixel trains
    original = originals[Path(name).name]
    good = _fisheye_mismatch(image, np.asarray(engine.data.Ks[0]), np.asarray(engine.data.distortions[0]), original, K_o)
    wrong = _fisheye_mismatch(image, np.asarray(engine.data.Ks[0]), np.zeros(4), original, K_o)
    assert good < 8 and wrong > 1.5 * good, (good, wrong)

    pipeline.model.config.snapshot_every = 5
    snapshots = pipeline.make_snapshots(tmp_path / "snapshots")
    np.testing.assert_allclose(np.asarray(snapshots.camera[4]), coeffs, rtol=1e-6)
    snapshots.close()
    eval_name = dm.eval_dataset.image_filenames[0]
    np.testing.assert_array_equal(np.asarray(dm.cached_eval[0]["image"]), np.asarray(Image.open(eval_name).convert("RGB")))
    assert bool(dm.eval_dataset.cameras.distortion_params.any())  # theirs again after caching

    _, out = _train_evaluate_render(pipeline)
    assert out["rgb"].shape == original.shape  # the whole frame


def test_a_run_trains_one_camera_model(tmp_path):
    """A capture whose views would draw with two camera models (here an OPENCV_FISHEYE one with
    one frame's coefficients all zero, under --pipeline.model.fisheye undistorted: nerfstudio
    undistorts the others but not that one) stops before any compute with one line naming it."""
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from nerfstudio_jaxgs.errors import InputError

    write_fisheye_scene(tmp_path)
    meta = json.loads((tmp_path / "transforms.json").read_text())
    coeffs = [meta.pop(k) for k in ("k1", "k2", "k3", "k4")]
    for f in meta["frames"]:  # per-frame coefficients; the first frame's (a training view's) all zero
        f["distortion_params"] = coeffs + [0.0, 0.0] if f is not meta["frames"][0] else [0.0] * 6
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="draws as a (fisheye|pinhole) camera and .* as a (pinhole|fisheye) one: "
                                         "jax-gs trains one camera model per run"):
        _pipeline(NerfstudioDataParserConfig(data=tmp_path), fisheye="undistorted")
    assert _pipeline(NerfstudioDataParserConfig(data=tmp_path)).datamanager is not None  # native: all fisheyes


def test_each_host_reads_and_undistorts_only_its_share_of_the_views(tmp_path, monkeypatch):
    """With several JAX processes, a host caches (reads and undistorts, through nerfstudio's own
    datamanager) only its share of the training views (every N-th, `host_views`), hands the engine
    those images with their intrinsics after undistortion, and keeps them in the dataset's cameras
    as nerfstudio does; the scene extent is every host's cameras'."""
    import jax
    from types import SimpleNamespace

    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    import nerfstudio_jaxgs.pipeline as plugin_pipeline

    write_fisheye_scene(tmp_path)
    reference = _pipeline(NerfstudioDataParserConfig(data=tmp_path), fisheye="undistorted").datamanager
    everything = [np.asarray(d["image"]) for d in reference.cached_train]  # one process reads all
    K_all = reference.train_dataset.cameras.get_intrinsics_matrices().numpy()

    pipeline = _pipeline(NerfstudioDataParserConfig(data=tmp_path), fisheye="undistorted")
    dm, seen = pipeline.datamanager, {}
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    monkeypatch.setattr(plugin_pipeline, "build_engine",
                        lambda config, start, data, extent, *a, **kw: seen.update(data=data, extent=extent) or
                        SimpleNamespace(kept_gaussians=lambda: start.gaussians, step=0, cameras=None))
    pipeline.start_engine(5)
    mine = list(range(1, len(everything), 2))
    data = seen["data"]
    assert len(dm.cached_train) == data.num_views == len(mine)  # read: this host's share alone
    np.testing.assert_array_equal(np.asarray(data.images), np.stack([everything[i] for i in mine]))
    np.testing.assert_allclose(np.asarray(data.Ks), K_all[mine], rtol=1e-5)
    np.testing.assert_allclose(dm.train_dataset.cameras.get_intrinsics_matrices().numpy()[mine], K_all[mine],
                               rtol=1e-5)
    assert len(dm.train_dataset) == len(everything)  # the full dataset stays (the viewer's cameras)
    from jax_backend import scene_extent
    from nerfstudio_jaxgs.cameras import cameras_to_opencv

    assert seen["extent"] == pytest.approx(max(scene_extent(cameras_to_opencv(reference.train_dataset.cameras)[0]),
                                               1e-3))


@pytest.mark.parametrize("frame", ["nerfstudio", "capture"])
def test_init_ply_starts_from_the_ply_s_gaussians(tmp_path, frame):
    """--pipeline.model.init-ply: the model starts from the PLY's Gaussians (SH bands cut to the
    model's degree), as they are ("nerfstudio" frame) or moved by the dataparser's transform and
    scale ("capture" frame: a PLY of another trainer in the COLMAP frame)."""
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from jax_backend import read_ply, write_ply
    from scenes import hard_scene

    scene = hard_scene(n=50, seed=1)
    raw = dict(means=scene["means"], scales=np.log(scene["scales"]), quats=scene["quats"],
               opacities=np.log(scene["opacities"] / (1 - scene["opacities"])), sh0=scene["sh"][:, :1],
               shN=scene["sh"][:, 1:])
    ply = tmp_path / "start.ply"
    write_ply(ply, raw)
    pipeline = _pipeline(NerfstudioDataParserConfig(data=FOX), init_ply=ply, init_ply_frame=frame, sh_degree=1)
    g = pipeline.model.gaussians
    n = int(np.asarray(g.alive).sum())
    written = read_ply(ply)["means"].astype(np.float64)  # write_ply leaves out the invisible ones
    assert n == len(written) > 40 and g.params["shN"].shape[1] == 3
    means = np.asarray(g.params["means"])[:n]
    if frame == "nerfstudio":
        np.testing.assert_allclose(means, written, atol=1e-6)
    else:
        out = pipeline.datamanager.train_dataparser_outputs
        T, s = out.dataparser_transform.numpy().astype(np.float64), float(out.dataparser_scale)
        np.testing.assert_allclose(means, s * (written @ T[:3, :3].T + T[:3, 3]), atol=1e-5)
        assert np.abs(means - written).max() > 0.1  # the fox's transform is not the identity
    assert np.asarray(pipeline.model.means).shape == (n, 3)  # the torch views follow


def test_init_ply_that_is_not_a_splat_stops_naming_it(tmp_path):
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from jax_backend import UserFacingError

    bad = tmp_path / "points.ply"
    bad.write_bytes(b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nend_header\n0\n")
    with pytest.raises(UserFacingError, match=str(bad)):
        _pipeline(NerfstudioDataParserConfig(data=FOX), init_ply=bad)


def test_the_benchmarks_filled_fisheye_capture_sees_the_fox_in_every_pixel(tmp_path):
    """The fisheye benchmark's capture (`tools.captures`): the fox undistorted, then redrawn
    through a KB4 fisheye whose focal lengths leave no pixel outside the fox's image (the corners hold content, not black), as
    wide as fits: its diagonal field of view is the fox's pinhole one."""
    from PIL import Image

    from tools.captures import COEFFS, diagonal_fov, fisheye_pixels_to_pinhole, write_fisheye_capture

    K_fish, originals, K = write_fisheye_capture(FOX, tmp_path, 2, COEFFS, fill=True)
    meta = json.loads((tmp_path / "transforms.json").read_text())
    w, h = meta["w"], meta["h"]
    p = fisheye_pixels_to_pinhole(K_fish, COEFFS, w, h, K)
    assert p[..., 0].min() >= 0.5 and p[..., 0].max() <= w - 0.5 and p[..., 1].min() >= 0.5 and p[..., 1].max() <= h - 0.5
    assert max(p[..., 0].min(), w - p[..., 0].max(), p[..., 1].min(), h - p[..., 1].max()) < 1.0  # as wide as fits
    for f in meta["frames"]:
        image = np.asarray(Image.open(tmp_path / f["file_path"]))
        assert image[:3, :3].max() > 0 and image[-3:, -3:].max() > 0 and image[:3, -3:].max() > 0
    pinhole_fov = np.degrees(np.arctan(np.hypot(K[0, 2], K[1, 2]) / K[0, 0]) * 2)
    assert abs(diagonal_fov(K_fish, COEFFS, w, h) - pinhole_fov) < 5  # the fisheye reaches the fox's corners
