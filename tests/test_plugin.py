"""The nerfstudio plugin: registration, DLPack views, and (slow) the real ns-* commands on the
bundled fox scene."""
import json
import re
import subprocess
import time

import numpy as np
import pytest
import torch

from browser import canvas as _canvas, shows_a_render as _shows_a_render  # noqa: E402
from commands import BIN, FOX, run_command  # noqa: E402
from commands import command_env as _env  # noqa: E402


def _model(num_random=200):
    from nerfstudio.data.scene_box import SceneBox

    from nerfstudio_jaxgs.model import JaxGSModelConfig

    cfg = JaxGSModelConfig(num_random=num_random, random_scale=2.0)
    return cfg.setup(scene_box=SceneBox(aabb=torch.tensor([[-1.0, -1, -1], [1, 1, 1]])), num_train_data=1,
                     seed_points=None)


def test_model_tensors_are_zero_copy_views_of_jax_arrays():
    model = _model()
    views = model._views()
    for name in ("means", "scales", "quats"):
        t = getattr(model, name)
        assert t.data_ptr() == views["_jax"][name].unsafe_buffer_pointer(), name
    assert model.opacities.shape == (200, 1) and model.features_dc.shape == (200, 3)
    assert model.features_rest.shape == (200, 15, 3)
    assert model.opacities.data_ptr() == views["_jax"]["opacities"].unsafe_buffer_pointer()
    assert model.get_param_groups() == {}


def test_seed_points_are_used():
    from nerfstudio.data.scene_box import SceneBox

    from nerfstudio_jaxgs.model import JaxGSModelConfig

    pts = torch.rand(50, 3)
    rgb = (torch.rand(50, 3) * 255).to(torch.uint8)
    model = JaxGSModelConfig().setup(scene_box=SceneBox(aabb=torch.tensor([[-1.0, -1, -1], [1, 1, 1]])),
                                     num_train_data=1, seed_points=(pts, rgb))
    assert model.num_points == 50
    np.testing.assert_allclose(model.means.numpy(), pts.numpy(), atol=1e-6)


def test_ns_train_lists_jax_gs_with_its_settings():
    out = subprocess.run([BIN / "ns-train", "jax-gs", "--help"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    for flag in ("--pipeline.model.steps-per-block", "--pipeline.model.rasterizer", "--pipeline.model.strategy",
                 "--pipeline.model.max-gaussians", "--pipeline.model.sh-degree", "--pipeline.model.background-color",
                 "--pipeline.model.densify-grad-thresh", "--optimizers.means.optimizer.lr",
                 "--optimizers.means.scheduler.max-steps"):
        assert flag in out.stdout, flag
    for gone in ("--pipeline.model.grow-grad2d", "--pipeline.model.refine-start", "--pipeline.model.absgrad "):
        assert gone not in out.stdout, gone  # one name per idea: splatfacto's
    listing = subprocess.run([BIN / "ns-train", "--help"], capture_output=True, text=True, timeout=300).stdout
    assert {"jax-gs", "jax-gs-fast", "jax-gs-big", "jax-gs-mcmc"} <= set(re.findall(r"jax-gs[\w-]*", listing))


def _run(args):
    return run_command(args)


def viewer_shows_the_render(config, tmp_path, timeout=300):
    from browser import Browser, find_chromium, free_port, wait_for_port

    if find_chromium() is None:  # the viewer check is part of the test: no browser, no pass
        pytest.fail("no chromium to look at the viewer with (Debian: apt-get install chromium; .ci/run installs it)")
    port = free_port()
    log = open(tmp_path / "viewer.log", "w")
    viewer = subprocess.Popen([str(BIN / "ns-viewer"), "--load-config", str(config), "--viewer.websocket-port",
                               str(port)], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                              env=_env())
    browser = None
    try:
        wait_for_port(port, timeout, viewer)
        browser = Browser()
        browser.open(f"http://127.0.0.1:{port}")
        end, shots, res = time.time() + timeout, [], (0, 0)
        while time.time() < end:
            time.sleep(2)
            shots.append(browser.screenshot())
            # the viewer sends a coarse frame while the camera settles, then one at its "Max res"
            # (512 px): the panel says which it shows
            found = re.findall(r"Resolution:\s*(\d+)\s*[x\u00d7]\s*(\d+)", browser.text())
            res = tuple(map(int, found[-1])) if found else (0, 0)
            if max(res) >= 500 and _shows_a_render(_canvas(shots[-1])):
                break
        (tmp_path / "viewer.png").write_bytes(shots[-1])
        assert max(res) >= 500, f"the viewer never showed a full-resolution frame (last: {res})"
        assert shots and _shows_a_render(_canvas(shots[-1])), f"no rendered frame in {tmp_path / 'viewer.png'}"
        assert not _shows_a_render(_canvas(shots[0])) or len(shots) == 1  # the check tells the two apart
    finally:
        if browser is not None:
            browser.close()
        viewer.terminate()
        try:
            viewer.wait(30)
        except subprocess.TimeoutExpired:
            viewer.kill()
        log.close()


def _fails_in_one_line(args):
    out = run_command(args, expect_rc=1, timeout=600)
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    return out.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_train_export_view_resume_eval_on_the_bundled_scene(tmp_path):
    common = ["--vis", "tensorboard", "--machine.device-type", "cpu", "--viewer.quit-on-train-completion", "True",
              "--pipeline.model.num-random", "5000", "--pipeline.model.random-scale", "1.0",
              # a 200-step run from Gaussians at 10% opacity: on splatfacto's random training background
              # they are still half transparent, and the render checks below look at them on black
              "--pipeline.model.background-color", "black",
              "--pipeline.model.steps-per-block", "50", "--output-dir", tmp_path]
    data = ["nerfstudio-data", "--eval-mode", "interval", "--eval-interval", "8"]
    # an eval image at step 100: nerfstudio's eval render during training, from the trainer's state
    _run([BIN / "ns-train", "jax-gs", "--data", FOX, "--max-num-iterations", "200", "--timestamp", "a", *common,
          "--pipeline.model.snapshot-every", "100", "--steps-per-eval-image", "100", *data])
    run = tmp_path / "fox" / "jax-gs" / "a"
    ckpt = run / "nerfstudio_models" / "step-000000199.ckpt"
    assert ckpt.exists()
    state = torch.load(ckpt, weights_only=True)  # torch tensors only
    assert state["step"] == 199
    # snapshots written in the background: a PLY and a preview of the first held-out view (the
    # fox is portrait) at steps 100 and 200
    from PIL import Image

    from jax_backend import read_ply

    snaps = run / "snapshots"
    assert sorted(p.name for p in snaps.iterdir()) == ["preview_000100.png", "preview_000200.png",
                                                        "step_000100.ply", "step_000200.ply"]
    preview = np.asarray(Image.open(snaps / "preview_000200.png").convert("RGB"))
    assert preview.shape[0] > preview.shape[1] > 100 and preview.std() > 5  # a portrait frame, not flat
    assert read_ply(snaps / "step_000200.ply")["means"].shape[0] > 1000

    # ns-export gaussian-splat: the standard PLY, read the way splat viewers read it
    _run([BIN / "ns-export", "gaussian-splat", "--load-config", run / "config.yml", "--output-dir", tmp_path / "export"])
    from plyfile import PlyData

    from jax_backend.files.ply import property_names

    vertex = PlyData.read(str(tmp_path / "export" / "splat.ply"))["vertex"]
    assert [p.name for p in vertex.properties] == property_names(15)
    assert vertex.count > 1000

    # the viewer's path: load the checkpoint as ns-viewer does and render one frame
    from nerfstudio.utils.eval_utils import eval_setup

    _, pipeline, _, step = eval_setup(run / "config.yml", test_mode="test")
    cams = pipeline.datamanager.eval_dataset.cameras
    out = pipeline.model.get_outputs_for_camera(cams[0:1])
    h, w = int(cams.height[0]), int(cams.width[0])
    assert out["rgb"].shape == (h, w, 3) and out["depth"].shape == (h, w, 1) and out["accumulation"].shape == (h, w, 1)
    assert float(out["accumulation"].mean()) > 0.3 and float(out["rgb"].std()) > 0.02
    # after 200 steps (from a random start, Gaussians at 10% opacity) a training view is well on
    # its way from a black frame
    train = pipeline.datamanager.cached_train[0]
    gt = train["image"].numpy() / 255.0
    pred = pipeline.model.get_outputs_for_camera(pipeline.datamanager.train_dataset.cameras[0:1])["rgb"].numpy()
    assert np.mean((pred - gt) ** 2) < 0.8 * np.mean(gt**2)

    # the viewer as a person meets it: ns-viewer on the checkpoint, its page in headless Chromium
    viewer_shows_the_render(run / "config.yml", tmp_path)

    # resume: 100 more steps from the checkpoint
    _run([BIN / "ns-train", "jax-gs", "--data", FOX, "--max-num-iterations", "100", "--timestamp", "b",
          "--load-dir", run / "nerfstudio_models", *common, *data])
    resumed = tmp_path / "fox" / "jax-gs" / "b" / "nerfstudio_models" / "step-000000299.ckpt"
    assert resumed.exists()
    assert int(torch.load(resumed, weights_only=True)["pipeline"]["_model.jaxgs.trained_steps"]) == 300

    # a corrupt checkpoint: ns-export and ns-train --load-dir fail with one line naming it, and the
    # PLY already exported is left as it was
    import yaml

    cfg = yaml.load((run / "config.yml").read_text(), Loader=yaml.Loader)
    cfg.timestamp = "corrupt"
    bad = tmp_path / "fox" / "jax-gs" / "corrupt" / "nerfstudio_models" / "step-000000199.ckpt"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    (bad.parents[1] / "config.yml").write_text(yaml.dump(cfg))
    ply = (tmp_path / "export" / "splat.ply").read_bytes()
    line = _fails_in_one_line([BIN / "ns-export", "gaussian-splat", "--load-config", bad.parents[1] / "config.yml",
                               "--output-dir", tmp_path / "export"])
    assert line.startswith("jax-gs: error: checkpoint") and str(bad) in line
    assert (tmp_path / "export" / "splat.ply").read_bytes() == ply
    line = _fails_in_one_line([BIN / "ns-train", "jax-gs", "--data", FOX, "--max-num-iterations", "10",
                               "--timestamp", "c", "--load-dir", bad.parent, *common, *data])
    assert line.startswith("jax-gs: error: checkpoint") and str(bad) in line

    # ns-eval writes PSNR and SSIM (and, with --render-output-path, its renders)
    _run([BIN / "ns-eval", "--load-config", run / "config.yml", "--output-path", tmp_path / "eval.json",
          "--render-output-path", tmp_path / "eval_renders"])
    results = json.loads((tmp_path / "eval.json").read_text())["results"]
    assert results["psnr"] > 7 and 0 < results["ssim"] <= 1  # a black frame scores 5.5 dB on the fox
    assert _frames_show_the_scene(tmp_path / "eval_renders", at_least=8)

    # ns-render (needs ffmpeg even for images): interpolate and a camera path
    common_render = ["--load-config", run / "config.yml", "--output-format", "images", "--image-format", "png"]
    _run([BIN / "ns-render", "interpolate", *common_render, "--output-path", tmp_path / "interp",
          "--interpolation-steps", "2", "--frame-rate", "4"])
    assert _frames_show_the_scene(tmp_path / "interp", at_least=4)
    # (ns-render spiral asserts a ray-sampling datamanager in nerfstudio 1.1.5: it fails the same way
    # for splatfacto, whose FullImageDatamanager jax-gs shares)
    path = tmp_path / "camera_path.json"
    _write_camera_path(run, path)
    _run([BIN / "ns-render", "camera-path", *common_render, "--camera-path-filename", path, "--output-path",
          tmp_path / "path"])
    assert _frames_show_the_scene(tmp_path / "path", at_least=3)
    # the same path through fisheye cameras (the render panel's "fisheye"): drawn as equidistant fisheyes
    fisheye_path = tmp_path / "fisheye_path.json"
    fisheye_path.write_text(path.read_text().replace('"camera_type": "perspective"', '"camera_type": "fisheye"'))
    _run([BIN / "ns-render", "camera-path", *common_render, "--camera-path-filename", fisheye_path, "--output-path",
          tmp_path / "fisheye"])
    assert _frames_show_the_scene(tmp_path / "fisheye", at_least=3)
    from PIL import Image

    pin, fish = (np.asarray(Image.open(sorted((tmp_path / d).rglob("*.png"))[0]).convert("RGB"), float)
                 for d in ("path", "fisheye"))
    assert pin.shape == fish.shape and np.abs(pin - fish).mean() > 1.5  # a wider view than the pinhole (2.9)


def _frames_show_the_scene(folder, at_least: int) -> bool:
    """Rendered frames of the fox: enough of them, each lit and varied (not black, not flat)."""
    from PIL import Image

    frames = sorted(p for p in folder.rglob("*") if p.suffix in (".png", ".jpg"))
    assert len(frames) >= at_least, (folder, [p.name for p in frames])
    for p in frames:
        im = np.asarray(Image.open(p).convert("RGB"), np.float64)
        assert im.mean() > 20 and im.std() > 10, (p, im.mean(), im.std())
    return True


def _write_camera_path(run, path):
    """nerfstudio's camera-path file (what the viewer's render panel writes): three of the
    training cameras, in the dataparser's world frame."""
    from nerfstudio.utils.eval_utils import eval_setup

    _, pipeline, _, _ = eval_setup(run / "config.yml", test_mode="test")
    cams = pipeline.datamanager.train_dataset.cameras
    keyframes = []
    for i in (0, 10, 20):
        c2w = np.eye(4)
        c2w[:3] = cams.camera_to_worlds[i].numpy()
        fov = float(2 * np.degrees(np.arctan(0.5 * float(cams.height[i]) / float(cams.fy[i]))))
        keyframes.append({"camera_to_world": c2w.reshape(-1).tolist(), "fov": fov,
                          "aspect": float(cams.width[i] / cams.height[i])})
    path.write_text(json.dumps({"camera_type": "perspective", "render_height": int(cams.height[0]),
                                "render_width": int(cams.width[0]), "camera_path": keyframes, "fps": 3,
                                "seconds": 1.0}))


@pytest.mark.slow
def test_ns_train_on_four_devices(tmp_path):
    """nerfstudio's own --machine.num-devices 4 on four forced CPU devices: one process (no torch
    DDP launch), pmap over the four; trains and checkpoints."""
    args = [BIN / "ns-train", "jax-gs", "--data", FOX, "--max-num-iterations", "40", "--timestamp", "p",
            "--vis", "tensorboard", "--viewer.quit-on-train-completion", "True", "--output-dir", tmp_path,
            "--machine.num-devices", "4", "--pipeline.model.steps-per-block", "20",
            "--pipeline.model.num-random", "3000", "--pipeline.model.random-scale", "1.0"]
    out = run_command(args, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    assert "data parallel: 4 device(s) x 1 view(s) per step" in out.stdout
    ckpt = tmp_path / "fox" / "jax-gs" / "p" / "nerfstudio_models" / "step-000000039.ckpt"
    state = torch.load(ckpt, weights_only=True)["pipeline"]
    assert int(state["_model.jaxgs.trained_steps"]) == 40
    assert int(state["_model.jaxgs.train.gaussians.alive"].sum()) == 3000


def test_viewer_is_not_locked_out_while_a_block_runs():
    """nerfstudio's train lock (which the viewer takes to render) is free while the compiled block
    runs, and held only while the model switches to the new Gaussians."""
    import threading
    from types import SimpleNamespace

    from jax_backend import RefineInfo
    from nerfstudio_jaxgs.pipeline import JaxGSPipeline

    lock = threading.Lock()
    seen = {}

    def free():
        got = lock.acquire(blocking=False)
        if got:
            lock.release()
        return got

    def run_block(n):
        seen["during_block"] = free()
        m = {"loss": np.ones(n), "psnr": np.ones(n), "num_alive": 5, "num_intersections": np.ones(n)}
        return m, RefineInfo(*[0] * len(RefineInfo._fields))

    def publish():
        seen["during_sync"] = free()

    fake = SimpleNamespace(engine=SimpleNamespace(run_block=run_block), _publish=publish)
    out = JaxGSPipeline.train_block(fake, 10, 100, publish_lock=lock)
    assert seen == {"during_block": True, "during_sync": False} and out["gaussian_count"] == 5


def test_a_viewer_render_while_training_runs_on_one_device(monkeypatch):
    """While ns-train trains (its trainer gave the model a view timer), a render the viewer's render
    thread asks for runs on one device: dealt over the devices a block runs on, it waited for the
    block's end (#56). Other renders (eval, ns-viewer) use the render layout."""
    import threading

    from nerfstudio.cameras.cameras import Cameras

    from nerfstudio_jaxgs.render_places import live_render

    model = _model()
    used, timed = [], []
    place = model.places.gaussians
    monkeypatch.setattr(model.places, "gaussians", lambda g, layout: used.append(layout) or place(g, layout))
    c2w = torch.eye(4)[:3]
    c2w[2, 3] = 6.0
    camera = Cameras(camera_to_worlds=c2w[None], fx=60.0, fy=60.0, cx=32.0, cy=24.0, width=64, height=48)

    class RenderThread(threading.Thread):  # as nerfstudio's render thread, whose (hooked) run is a live render
        def run(self):
            with live_render():
                model.get_outputs_for_camera(camera)

    def viewer_render():
        thread = RenderThread()
        thread.start()
        thread.join()

    viewer_render()  # no training in this process: the render layout
    model.get_outputs_for_camera(camera)
    model.view_timer = timed.append  # as the pipeline does when its trainer trains with the viewer (time_live_renders)
    model.get_outputs_for_camera(camera)  # eval's, between blocks
    viewer_render()
    live = model.places.live
    assert used == [model.places.shared] * 3 + [live] and len(timed) == 1
    assert (live.replicas, live.tile_devices) == (1, 1)


def test_viewer_first_view_check_tells_an_empty_view():
    """The viewer moves a client to a training camera only when its view sees nothing: a camera
    looking at the Gaussians sees them, the same camera turned away does not."""
    from nerfstudio.cameras.cameras import Cameras

    from nerfstudio_jaxgs.viewer import sees_the_scene

    model = _model(num_random=2000)  # random Gaussians in the cube [-1, 1]^3

    def camera(forward):
        # OpenGL camera-to-world at (0, 0, 4): looking along -z (towards the cube) or +z (away)
        c2w = torch.eye(4)[:3]
        c2w[:3, 3] = torch.tensor([0.0, 0.0, 4.0])
        if forward < 0:
            c2w[:3, :3] = torch.diag(torch.tensor([1.0, -1.0, -1.0]))  # turned around
        return Cameras(camera_to_worlds=c2w[None], fx=100.0, fy=100.0, cx=64.0, cy=48.0, width=128, height=96)

    assert sees_the_scene(model, camera(+1))
    assert not sees_the_scene(model, camera(-1))


@pytest.mark.slow
def test_viewer_opens_on_a_forward_facing_capture(tmp_path):
    """The reported empty canvas: a forward-facing capture trained briefly, opened in ns-viewer in
    a real browser, shows the scene (the viewer starts at a training camera when viser's default
    view sees nothing)."""
    from captures import write_forward_facing_scene

    scene = tmp_path / "ff"
    write_forward_facing_scene(scene, width=128, height=96, focal=120.0, textured=True)
    _run([BIN / "ns-train", "jax-gs", "--data", scene, "--max-num-iterations", "100", "--timestamp", "a",
          "--vis", "tensorboard", "--machine.device-type", "cpu", "--pipeline.model.steps-per-block", "50",
          "--output-dir", tmp_path, "nerfstudio-data"])
    viewer_shows_the_render(tmp_path / "ff" / "jax-gs" / "a" / "config.yml", tmp_path)


@pytest.mark.parametrize("sh_degree", [0, 3])
@pytest.mark.parametrize("color_mode", ["sh_coeffs", "rgb"])
def test_nerfstudio_exporter_writes_the_colours_jax_gs_renders(tmp_path, monkeypatch, sh_degree, color_mode):
    """`ns-export gaussian-splat` (nerfstudio's own code) on a jax-gs model: the PLY's DC is the
    model's at every SH degree (splatfacto reads a colour logit at degree 0; jax-gs keeps SH
    coefficients), read back with plyfile; in rgb mode the colours are those jax-gs renders."""
    import plyfile
    import nerfstudio.scripts.exporter as exporter
    from nerfstudio.data.scene_box import SceneBox

    from jax_backend.rendering import SH_C0
    from nerfstudio_jaxgs.model import JaxGSModelConfig

    cfg = JaxGSModelConfig(num_random=300, random_scale=2.0, sh_degree=sh_degree)
    model = cfg.setup(scene_box=SceneBox(aabb=torch.tensor([[-1.0, -1, -1], [1, 1, 1]])), num_train_data=1,
                      seed_points=None)
    pipeline = type("P", (), {"model": model})()
    monkeypatch.setattr(exporter, "eval_setup", lambda *a, **kw: (None, pipeline, None, None))
    exporter.ExportGaussianSplat(load_config=tmp_path / "unused.yml", output_dir=tmp_path,
                                 ply_color_mode=color_mode).main()
    v = plyfile.PlyData.read(str(tmp_path / "splat.ply"))["vertex"]
    dc = model.features_dc.numpy()
    keep = np.isin(model.means.numpy()[:, 0], v["x"])  # the exporter leaves out non-finite and faint rows
    assert keep.sum() == len(v["x"]) > 0
    if color_mode == "sh_coeffs":
        got = np.stack([v[f"f_dc_{i}"] for i in range(3)], -1)
        np.testing.assert_allclose(got, dc[keep], rtol=1e-6, atol=1e-7)
    else:
        rendered = np.clip(dc[keep] * SH_C0 + 0.5, 0, 1)  # the colour jax-gs draws from the DC term
        got = np.stack([v["red"], v["green"], v["blue"]], -1).astype(np.float64) / 255
        assert np.abs(got - rendered).max() <= 1 / 255 + 1e-6


def test_depth_of_empty_pixels_is_the_far_depth_as_splatfacto():
    """`get_outputs`' depth: expected depth where something is drawn, and (as splatfacto) the
    image's largest depth where nothing is, so the viewer's depth colormap and `ns-render`'s
    depth output read the same as splatfacto's."""
    from nerfstudio.cameras.cameras import Cameras

    model = _model(num_random=300)  # random Gaussians in the cube [-1, 1]^3
    c2w = torch.eye(4)[:3]
    c2w[:3, 3] = torch.tensor([0.0, 0.0, 6.0])  # the cube small in the middle of the image
    out = model.get_outputs(Cameras(camera_to_worlds=c2w[None], fx=60.0, fy=60.0, cx=64.0, cy=48.0, width=128,
                                    height=96))
    depth, acc = out["depth"][..., 0].numpy(), out["accumulation"][..., 0].numpy()
    empty, drawn = acc == 0, acc > 0
    assert empty.any() and drawn.any()
    assert np.all(depth[empty] == depth.max())
    assert depth[drawn].min() > 4.0 and depth.max() < 8.0  # the cube's depths, seen from z = 6


@pytest.mark.parametrize("sh_degree", [0, 1, 3])
def test_exported_ply_renders_what_the_model_renders(tmp_path, monkeypatch, sh_degree):
    """`ns-export gaussian-splat` at SH degree 0, 1 and 3, read back by an independent reader
    (plyfile) and drawn by the dense float64 reference renderer, gives the image the model renders
    through `get_outputs` (view-dependent colours included)."""
    import plyfile
    import jax.numpy as jnp
    import nerfstudio.scripts.exporter as exporter
    from nerfstudio.cameras.cameras import Cameras
    from nerfstudio.data.scene_box import SceneBox

    import reference
    from nerfstudio_jaxgs.model import JaxGSModelConfig

    cfg = JaxGSModelConfig(num_random=150, random_scale=2.0, sh_degree=sh_degree)
    model = cfg.setup(scene_box=SceneBox(aabb=torch.tensor([[-1.0, -1, -1], [1, 1, 1]])), num_train_data=1,
                      seed_points=None)
    g = model.gaussians
    rng = np.random.default_rng(sh_degree)
    params = dict(g.params, shN=jnp.asarray(rng.normal(size=g.params["shN"].shape) * 0.4, jnp.float32),
                  sh0=jnp.asarray(rng.normal(size=g.params["sh0"].shape) * 0.8, jnp.float32),
                  scales=g.params["scales"] + 1.5, opacities=g.params["opacities"] + 2.0)
    model.publish(g._replace(params=params), 10**6)  # the full SH degree renders
    pipeline = type("P", (), {"model": model})()
    monkeypatch.setattr(exporter, "eval_setup", lambda *a, **kw: (None, pipeline, None, None))
    exporter.ExportGaussianSplat(load_config=tmp_path / "unused.yml", output_dir=tmp_path,
                                 ply_color_mode="sh_coeffs").main()

    v = plyfile.PlyData.read(str(tmp_path / "splat.ply"))["vertex"]
    col = lambda *names: np.stack([np.asarray(v[n], np.float64) for n in names], -1)  # noqa: E731
    rest = sorted((p.name for p in v.properties if p.name.startswith("f_rest_")), key=lambda n: int(n[7:]))
    k = len(rest) // 3
    assert k == (sh_degree + 1) ** 2 - 1
    sh = col("f_dc_0", "f_dc_1", "f_dc_2")[:, None]
    if k:
        sh = np.concatenate([sh, col(*rest).reshape(-1, 3, k).transpose(0, 2, 1)], 1)  # f_rest channel-major
    c2w = torch.eye(4)[:3]
    c2w[:3, 3] = torch.tensor([0.3, -0.2, 4.0])
    w, h = 64, 48
    out = model.get_outputs(Cameras(camera_to_worlds=c2w[None], fx=50.0, fy=50.0, cx=31.0, cy=25.0, width=w,
                                    height=h))
    opengl = np.eye(4)
    opengl[:3] = c2w.numpy()
    opengl[:3, 1:3] *= -1  # OpenGL camera axes -> OpenCV
    K = np.array([[50.0, 0, 31.0], [0, 50.0, 25.0], [0, 0, 1]])
    ref, _ = reference.render(col("x", "y", "z"), col("rot_0", "rot_1", "rot_2", "rot_3"),
                              np.exp(col("scale_0", "scale_1", "scale_2")), 1 / (1 + np.exp(-col("opacity")[:, 0])),
                              sh, np.linalg.inv(opengl), K, w, h, sh_degree=sh_degree,
                              background=model.background_color.numpy())
    got = out["rgb"].numpy()
    assert np.ptp(got) > 0.15  # the Gaussians are in view
    np.testing.assert_allclose(got, np.clip(ref, 0, 1), atol=1e-4)


@pytest.mark.parametrize("fisheye", ["native", "undistorted"])
def test_each_camera_kind_renders_with_its_model_or_stops_naming_it(fisheye):
    """A render of a camera the rasterizers cannot draw stops with one line naming its type; the
    others render as the dense float64 reference draws them: a perspective camera and a fisheye
    with coefficients under "undistorted" (nerfstudio's datamanager undistorted its image and
    rewrote its intrinsics) as pinholes, a fisheye with coefficients under "native" and one with
    none (which nerfstudio never undistorts) as fisheyes with their k1-k4."""
    from nerfstudio.cameras.cameras import Cameras, CameraType

    import reference
    from nerfstudio_jaxgs.errors import InputError

    model = _model()
    model.config.fisheye = fisheye
    c2w = torch.eye(4)[:3]
    c2w[2, 3] = 2.2  # near: the Gaussians up to 60 degrees off axis

    def camera(kind, distortion=None):
        return Cameras(camera_to_worlds=c2w[None], fx=14.0, fy=14.0, cx=16.0, cy=12.0, width=32, height=24,
                       camera_type=kind, distortion_params=distortion)

    for kind, name in [(CameraType.EQUIRECTANGULAR, "an EQUIRECTANGULAR camera"),
                       (CameraType.OMNIDIRECTIONALSTEREO_L, "an OMNIDIRECTIONALSTEREO_L camera")]:
        with pytest.raises(InputError, match=f"the camera to render is {name}: jax-gs draws perspective and fisheye"):
            model.get_outputs_for_camera(camera(kind))
    coeffs = [0.1, 0.01, -0.004, 0.001]
    g = model.gaussians
    means, quats, scales, opacities = (np.asarray(g.params[k])[np.asarray(g.alive)] for k in
                                       ("means", "quats", "scales", "opacities"))
    sh = np.concatenate([np.asarray(g.params["sh0"]), np.asarray(g.params["shN"])], 1)[np.asarray(g.alive)]
    opengl = np.eye(4)
    opengl[:3] = c2w.numpy()
    opengl[:3, 1:3] *= -1
    K = np.array([[14.0, 0, 16.0], [0, 14.0, 12.0], [0, 0, 1]])
    renders = []
    for kind, dist, drawn in [
            (CameraType.PERSPECTIVE, None, ("pinhole", None)),
            (CameraType.FISHEYE, None, ("fisheye", np.zeros(4))),
            (CameraType.FISHEYE624, None, ("fisheye", np.zeros(4))),
            (CameraType.FISHEYE, coeffs + [0, 0], ("fisheye", coeffs) if fisheye == "native" else ("pinhole", None))]:
        renders.append(out := model.get_outputs_for_camera(camera(kind, None if dist is None else torch.tensor([dist]))))
        ref, _ = reference.render(means, quats, np.exp(scales), 1 / (1 + np.exp(-opacities)), sh,
                                  np.linalg.inv(opengl), K, 32, 24, sh_degree=model._sh_degree_now(),
                                  background=model.background_color.numpy(), camera_model=drawn[0],
                                  distortion=drawn[1])
        assert np.ptp(out["rgb"].numpy()) > 0.1, kind  # the Gaussians are in view
        np.testing.assert_allclose(out["rgb"].numpy(), np.clip(ref, 0, 1), atol=1e-4, err_msg=str((kind, dist)))
    pinhole, equidistant, _, kb4 = (r["rgb"].numpy() for r in renders)
    assert np.abs(pinhole - equidistant).mean() > 0.03  # the models differ here (0.054)
    if fisheye == "native":
        assert np.abs(kb4 - equidistant).mean() > 0.007  # and the coefficients count (0.015)
