"""The exported splat in a tool nobody here wrote (slow: real commands, an npm package).

PlayCanvas's `splat-transform` reads the PLY `ns-export gaussian-splat` wrote (count, SH bands, no
NaN or inf, and its per-column statistics of the activated values: exp(scale), sigmoid(opacity),
0.5 + C0 * f_dc, as the PLY's values give them) and converts it to .spz, which it reads back with
the same count, at SH degree 3 and 0. The npm package is pinned and installed once into
JAXGS_NPM_CACHE (~/.cache/jax-gs/npm).
"""
import functools
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("nerfstudio")

from commands import BIN, FOX, run_command  # noqa: E402

pytestmark = pytest.mark.slow

PACKAGES = {"@playcanvas/splat-transform": "3.7.0"}
C0 = 0.28209479177387814
TRAIN = ["--vis", "tensorboard", "--machine.device-type", "cpu", "--pipeline.model.num-random", "3000",
         "--pipeline.model.steps-per-block", "20", "--pipeline.model.background-color", "black",
         "--max-num-iterations", "40", "--steps-per-save", "1000"]
MODES = {"sh3": [], "sh0": ["--pipeline.model.sh-degree", "0"]}  # the antialiased mode writes the same layout


@pytest.fixture(scope="module")
def npm_tools():
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.fail("node and npm are not installed (scripts/system_deps.sh installs them)")
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


@pytest.mark.parametrize("mode", list(MODES))
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
