"""The exported splat in tools nobody here wrote (slow: real commands, npm packages, a browser).

- PlayCanvas's `splat-transform` reads the PLY `ns-export gaussian-splat` wrote (count, SH bands,
  no NaN or inf, and its per-column statistics of the activated values: exp(scale), sigmoid(
  opacity), 0.5 + C0 * f_dc, as the PLY's values give them) and converts it to .spz, which it
  reads back with the same count.
- GaussianSplats3D (three.js) in headless Chromium (WebGL through SwiftShader) draws the PLY from
  an evaluation camera of nerfstudio's dataparser frame, pose and intrinsics given exactly; the
  drawing is compared with jax-gs's render of that view. The same PLY with its axes, colours,
  scales or opacities written wrongly must fall below the floor: the test shows, every run, that
  it would catch each (at SH degree 3). Skipped for now: VIEWER_NOT_YET says why.
Both for SH degree 3 (the viewer draws up to degree 2), SH degree 0 and the antialiased mode.
The npm packages are pinned and installed once into JAXGS_NPM_CACHE (~/.cache/jax-gs/npm)."""
import base64
import functools
import hashlib
import http.server
import io
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("nerfstudio")
torch = pytest.importorskip("torch")

from commands import BIN, FOX, run_command  # noqa: E402

pytestmark = pytest.mark.slow

PACKAGES = {"@playcanvas/splat-transform": "3.7.0", "@mkkellogg/gaussian-splats-3d": "0.4.7", "three": "0.187.0"}
VIEWER_PAGE = Path(__file__).parent / "data" / "splat_viewer" / "index.html"
C0 = 0.28209479177387814
# to be set from the honest figure once the viewer draws correctly (VIEWER_NOT_YET)
PSNR_FLOOR = 25.0
TRAIN = ["--vis", "tensorboard", "--machine.device-type", "cpu", "--pipeline.model.num-random", "3000",
         "--pipeline.model.steps-per-block", "20", "--pipeline.model.background-color", "black",
         "--max-num-iterations", "40", "--steps-per-save", "1000"]
MODES = {"sh3": [], "sh0": ["--pipeline.model.sh-degree", "0"],
         "antialiased": ["--pipeline.model.rasterize-mode", "antialiased"]}


@pytest.fixture(scope="module")
def npm_tools():
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are not installed (scripts/system_deps.sh installs them)")
    pins = [f"{k}@{v}" for k, v in PACKAGES.items()]
    base = Path(os.environ.get("JAXGS_NPM_CACHE", Path.home() / ".cache" / "jax-gs" / "npm"))
    folder = base / hashlib.sha1(" ".join(pins).encode()).hexdigest()[:12]
    if not (folder / "node_modules" / ".bin" / "splat-transform").exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(folder), *pins], check=True,
                       capture_output=True, timeout=900)
    return folder


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """mode -> (config.yml, splat.ply): the fox trained briefly and exported in that mode (once)."""
    root = tmp_path_factory.mktemp("third_party")

    @functools.lru_cache(maxsize=None)
    def export(mode):
        run_command([BIN / "ns-train", "jax-gs", "--data", FOX, "--output-dir", root, "--timestamp", mode, *TRAIN,
                     *MODES[mode], "nerfstudio-data"])
        config = root / "fox" / "jax-gs" / mode / "config.yml"
        run_command([BIN / "ns-export", "gaussian-splat", "--load-config", config, "--output-dir", root / mode])
        return config, root / mode / "splat.ply"

    return export


def splat_transform(tools: Path, *args) -> str:
    out = subprocess.run([str(tools / "node_modules" / ".bin" / "splat-transform"), "-q", *map(str, args)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def read_ply(path: Path) -> dict:
    from plyfile import PlyData

    v = PlyData.read(str(path))["vertex"]
    return {name: np.asarray(v[name]) for name in v.data.dtype.names}


@pytest.mark.parametrize("mode", ["sh3", "sh0"])  # the antialiased mode writes the same layout
def test_splat_transform_reads_the_export_as_written_and_converts_it(npm_tools, exports, mode, tmp_path):
    _, ply = exports(mode)
    mine = read_ply(ply)
    n = len(mine["x"])
    info = json.loads(splat_transform(npm_tools, ply, "--stats", "json", "null"))
    assert info["numGaussians"] == n and info["gaussian"]
    assert info["shBands"] == (0 if mode == "sh0" else 3)
    stats = info["stats"][0]
    cols, data = stats["columns"], stats["data"]
    assert not any(data["nanCount"]) and not any(data["infCount"]), "NaN or inf in the export"
    # splat-transform's statistics are of the activated values: jax-gs's parameters as it reads them
    activated = {"x": mine["x"], "z": mine["z"], "scale_0": np.exp(mine["scale_0"]),
                 "opacity": 1 / (1 + np.exp(-mine["opacity"])), "f_dc_1": 0.5 + C0 * mine["f_dc_1"]}
    for name, values in activated.items():
        i = cols.index(name)
        # the activations are monotonic, so the extremes map exactly; the means of the positions too
        # (splat-transform's mean of the scales is a geometric one, its median a histogram's)
        got, want = [data["min"][i], data["max"][i]], [values.min(), values.max()]
        if name in ("x", "z"):
            got, want = got + [data["mean"][i]], want + [values.mean()]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)
    spz = tmp_path / "splat.spz"
    splat_transform(npm_tools, ply, spz)
    back = json.loads(splat_transform(npm_tools, spz, "--info", "json", "null"))
    assert back["numGaussians"] == n and back["shBands"] == info["shBands"]


def broken(ply: Path, what: str, out: Path) -> Path:
    """The PLY with one thing written the way a wrong exporter would."""
    from plyfile import PlyData

    data = PlyData.read(str(ply))
    v = data["vertex"].data
    if what == "axes":  # OpenCV camera axes for OpenGL ones: the scene turned about x
        v["y"], v["z"] = -v["y"], -v["z"]
    elif what == "colours":  # the colour itself where the SH DC coefficient belongs
        for c in range(3):
            v[f"f_dc_{c}"] = 0.5 + C0 * v[f"f_dc_{c}"]
    elif what == "scales":  # scales as they are, not their logarithms
        for c in range(3):
            v[f"scale_{c}"] = np.exp(v[f"scale_{c}"])
    elif what == "opacities":  # opacity as it is, not its logit
        v["opacity"] = 1 / (1 + np.exp(-v["opacity"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    data.write(str(out))
    return out


def jax_gs_view(config: Path):
    """(jax-gs's render of the first evaluation view [H, W, 3] in [0, 1], the view as the page
    reads it), from the trained run."""
    from nerfstudio.utils.eval_utils import eval_setup

    _, pipeline, _, _ = eval_setup(config, test_mode="test")
    cameras = pipeline.datamanager.eval_dataset.cameras
    cam = cameras[0:1]
    with torch.no_grad():
        rgb = pipeline.model.get_outputs_for_camera(cam)["rgb"].cpu().numpy()
    c2w = np.eye(4)
    c2w[:3] = cam.camera_to_worlds[0].cpu().numpy()
    model = pipeline.model.config
    view = {"width": int(cam.width[0]), "height": int(cam.height[0]), "fx": float(cam.fx[0]), "fy": float(cam.fy[0]),
            "cx": float(cam.cx[0]), "cy": float(cam.cy[0]), "camera_to_world": c2w.tolist(),
            "background": [0.0, 0.0, 0.0], "antialiased": model.rasterize_mode == "antialiased",
            "sh_degree": min(int(model.sh_degree), 2)}  # GaussianSplats3D draws up to degree 2
    return np.clip(rgb, 0, 1), view


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def viewer_draws(tools: Path, ply: Path, view: dict, site: Path) -> np.ndarray:
    """GaussianSplats3D's drawing of `ply` from `view` in headless Chromium: [H, W, 3] in [0, 1]."""
    import time

    from PIL import Image
    from browser import WEBGL_FLAGS, Browser, find_chromium

    if find_chromium() is None:
        pytest.fail("no chromium: .ci/run installs it (apt-get install chromium)")
    site.mkdir(parents=True, exist_ok=True)
    shutil.copy(VIEWER_PAGE, site / "index.html")
    shutil.copy(ply, site / "splat.ply")
    (site / "view.json").write_text(json.dumps(view))
    if not (site / "node_modules").exists():
        (site / "node_modules").symlink_to(tools / "node_modules")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    browser = Browser(view["width"], view["height"], flags=WEBGL_FLAGS)
    try:
        browser.open(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        result, end = None, time.time() + 120
        while result is None and time.time() < end:
            time.sleep(0.5)
            result = browser.evaluate("window.result || null")
    finally:
        browser.close()
        server.shutdown()
    assert result is not None, "the page drew nothing in 120 s"
    assert result.startswith("data:image/png;base64,"), result[:2000]
    image = Image.open(io.BytesIO(base64.b64decode(result.split(",", 1)[1]))).convert("RGB")
    assert image.size == (view["width"], view["height"]), image.size
    return np.asarray(image, np.float32) / 255.0


def psnr(a, b) -> float:
    return float(-10 * np.log10(np.mean((np.asarray(a, np.float64) - b) ** 2) + 1e-12))


VIEWER_NOT_YET = ("GaussianSplats3D 0.4.7 in headless Chromium (SwiftShader) draws four hand-made splats "
                  "cut and drops two of them (all four counted and sorted, no console error), so its drawing "
                  "cannot yet be compared with jax-gs's render (issue 32)")


@pytest.mark.skip(reason=VIEWER_NOT_YET)
@pytest.mark.parametrize("mode", list(MODES))
def test_gaussiansplats3d_draws_the_export_as_jax_gs_renders(npm_tools, exports, mode, tmp_path):
    config, ply = exports(mode)
    mine, view = jax_gs_view(config)
    drawn = viewer_draws(npm_tools, ply, view, tmp_path / "good")
    good = psnr(drawn, mine)
    # the broken PLYs once (at SH 3), each draw costing CI some 10 s
    wrong = {what: psnr(viewer_draws(npm_tools, broken(ply, what, tmp_path / "broken" / f"{what}.ply"), view,
                                     tmp_path / what), mine)
             for what in (("axes", "colours", "scales", "opacities") if mode == "sh3" else ())}
    print(f"{mode}: GaussianSplats3D against jax-gs's render: {good:.1f} dB; written wrongly: "
          + ", ".join(f"{k} {v:.1f} dB" for k, v in wrong.items()))
    assert good >= PSNR_FLOOR, (good, wrong)
    for what, value in wrong.items():
        assert value < PSNR_FLOOR, f"a PLY with wrong {what} still drew at {value:.1f} dB: the test cannot see it"
