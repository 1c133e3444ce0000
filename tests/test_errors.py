"""Bad input: one line naming the file, no traceback, no prompt, nothing already written lost."""
import json
import shutil
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("nerfstudio")

from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig  # noqa: E402
from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig  # noqa: E402
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig  # noqa: E402

from nerfstudio_jaxgs.errors import InputError, _one_line, check_scene, no_prompts, user_errors  # noqa: E402

from commands import BIN, FOX, run_command  # noqa: E402


def _small_scene(tmp_path, n=3):
    meta = json.loads((FOX / "transforms.json").read_text())
    meta["frames"] = sorted(meta["frames"], key=lambda f: f["file_path"])[:n]
    scene = tmp_path / "scene"
    (scene / "images").mkdir(parents=True)
    for f in meta["frames"]:
        shutil.copy(FOX / f["file_path"], scene / f["file_path"])
    (scene / "transforms.json").write_text(json.dumps(meta))
    return scene, meta


def _error(fn):
    with pytest.raises(InputError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_good_scene_passes(tmp_path):
    scene, _ = _small_scene(tmp_path)
    check_scene(NerfstudioDataParserConfig(), scene)


def test_missing_scene_folder_and_transforms(tmp_path):
    assert str(tmp_path / "nope") in _error(lambda: check_scene(NerfstudioDataParserConfig(), tmp_path / "nope"))
    msg = _error(lambda: check_scene(NerfstudioDataParserConfig(), tmp_path))
    assert "no transforms.json" in msg and str(tmp_path) in msg


def test_scene_without_images_and_with_a_missing_image(tmp_path):
    scene, meta = _small_scene(tmp_path)
    missing = scene / meta["frames"][1]["file_path"]
    missing.unlink()
    msg = _error(lambda: check_scene(NerfstudioDataParserConfig(), scene))
    assert str(missing) in msg and "1 of 3" in msg
    shutil.rmtree(scene / "images")
    assert "no images" in _error(lambda: check_scene(NerfstudioDataParserConfig(), scene))


def test_unreadable_transforms(tmp_path):
    scene, _ = _small_scene(tmp_path)
    path = scene / "transforms.json"
    path.write_text(path.read_text()[:200])
    msg = _error(lambda: check_scene(NerfstudioDataParserConfig(), scene))
    assert str(path) in msg and "not valid JSON" in msg and "line" in msg
    path.write_text(json.dumps({"fl_x": 1.0}))
    assert "no list of frames" in _error(lambda: check_scene(NerfstudioDataParserConfig(), scene))


def test_blender_and_colmap_layouts(tmp_path):
    msg = _error(lambda: check_scene(BlenderDataParserConfig(), tmp_path))
    assert "transforms_train.json" in msg
    (tmp_path / "transforms_train.json").write_text(json.dumps({"frames": [{"file_path": "./train/r_0"}]}))
    assert str(tmp_path / "train" / "r_0.png") in _error(lambda: check_scene(BlenderDataParserConfig(), tmp_path))
    assert "colmap" in _error(lambda: check_scene(ColmapDataParserConfig(), tmp_path))


def test_user_errors_name_the_file(tmp_path):
    from PIL import Image

    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not a jpeg")
    with pytest.raises(InputError, match="bad.jpg"):
        with user_errors("reading the training images"):
            Image.open(bad)
    with pytest.raises(InputError, match="gone.png"):
        with user_errors("reading the training images"):
            open(tmp_path / "gone.png")


def test_truncated_checkpoint_is_one_line_naming_it(tmp_path):
    ckpt = tmp_path / "step-000000009.ckpt"
    torch.save({"step": 9, "pipeline": {"x": torch.zeros(1000)}}, ckpt)
    ckpt.write_bytes(ckpt.read_bytes()[:300])
    try:
        torch.load(ckpt, map_location="cpu")
    except Exception as e:  # noqa: BLE001
        line = _one_line(type(e), e, e.__traceback__)
    assert line is not None and str(ckpt) in line and "unreadable" in line and "\n" not in line
    assert _one_line(ValueError, ValueError("x"), None) is None  # other errors keep their traceback


def test_prompts_take_their_default_when_not_interactive(monkeypatch):
    from rich.prompt import Confirm

    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    with no_prompts():
        assert Confirm.ask("Downscale the images now?", default=False) is False
        assert Confirm.ask("Go on?", default=True) is True


def test_ns_train_on_a_bad_scene_fails_in_one_line(tmp_path):
    scene, meta = _small_scene(tmp_path)
    (scene / meta["frames"][2]["file_path"]).unlink()
    out = run_command([BIN / "ns-train", "jax-gs", "--data", scene, "--output-dir", tmp_path / "out",
                       "--vis", "tensorboard", "--max-num-iterations", "10"], expect_rc=1, timeout=600)
    assert "Traceback" not in out.stderr + out.stdout
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("jax-gs: error: missing image") and str(scene / meta["frames"][2]["file_path"]) in last
