"""Bad input: one line naming the file, no traceback, no prompt, nothing already written lost."""
import io
import json
import shutil
import sys

import numpy as np

import pytest
import torch

from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig  # noqa: E402
from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig  # noqa: E402
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig  # noqa: E402

from nerfstudio_jaxgs.checks import check_scene, check_views  # noqa: E402
from nerfstudio_jaxgs.errors import InputError, one_line, user_errors  # noqa: E402
from nerfstudio_jaxgs.hooks import no_prompts  # noqa: E402

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
        line = one_line(type(e), e, e.__traceback__)
    assert line is not None and str(ckpt) in line and "unreadable" in line and "\n" not in line
    assert one_line(ValueError, ValueError("x"), None) is None  # other errors keep their traceback


def test_prompts_take_their_default_when_not_interactive(monkeypatch):
    from rich.prompt import Confirm

    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    with no_prompts():
        assert Confirm.ask("Downscale the images now?", default=False) is False
        assert Confirm.ask("Go on?", default=True) is True


def test_ns_train_on_a_bad_scene_fails_inone_line(tmp_path):
    scene, meta = _small_scene(tmp_path)
    (scene / meta["frames"][2]["file_path"]).unlink()
    out = run_command([BIN / "ns-train", "jax-gs", "--data", scene, "--output-dir", tmp_path / "out",
                       "--vis", "tensorboard", "--max-num-iterations", "10"], expect_rc=1, timeout=600)
    assert "Traceback" not in out.stderr + out.stdout
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("jax-gs: error: missing image") and str(scene / meta["frames"][2]["file_path"]) in last


# ---------------------------------------------------------------- mistakes, checked in-process
# (tests/test_mistakes.py runs the real ns-* commands on each; these are the fast versions)
def _parse(scene, split="train", **kw):
    """nerfstudio's own loading of a nerfstudio-data scene, under jax-gs's translation."""
    dp = NerfstudioDataParserConfig(data=scene, **kw).setup()
    with user_errors(f"loading the scene {scene}"):
        return dp.get_dataparser_outputs(split=split)


def test_frames_with_bad_numbers_are_named(tmp_path):
    scene, meta = _small_scene(tmp_path, n=4)
    path = scene / "transforms.json"
    good = json.loads(path.read_text())

    def error_with(change):
        m = json.loads(json.dumps(good))
        change(m)
        path.write_text(json.dumps(m))
        return _error(lambda: check_scene(NerfstudioDataParserConfig(), scene))

    name = good["frames"][2]["file_path"]
    msg = error_with(lambda m: m["frames"][2]["transform_matrix"][1].__setitem__(3, float("nan")))
    assert name in msg and "non-finite" in msg
    msg = error_with(lambda m: [row.__setitem__(1, row[0]) for row in m["frames"][2]["transform_matrix"][:3]])
    assert name in msg and "singular" in msg
    assert "fl_x is 0" in error_with(lambda m: m.__setitem__("fl_x", 0))
    assert "w is -5" in error_with(lambda m: m.__setitem__("w", -5))
    msg = error_with(lambda m: m["frames"][1].__setitem__("fl_y", "abc"))
    assert good["frames"][1]["file_path"] in msg and "fl_y" in msg
    path.write_text(json.dumps(good))
    check_scene(NerfstudioDataParserConfig(), scene)  # nothing wrong


def test_what_nerfstudio_rejects_is_named_where_it_fails(tmp_path):
    scene, meta = _small_scene(tmp_path, n=4)
    path = scene / "transforms.json"
    m = json.loads(path.read_text())
    del m["frames"][1]["transform_matrix"]
    path.write_text(json.dumps(m))
    msg = _error(lambda: _parse(scene))
    assert m["frames"][1]["file_path"] in msg and "transform_matrix" in msg
    m = json.loads(json.dumps(meta))
    fx = m.pop("fl_x")
    for f in m["frames"][:3]:
        f["fl_x"] = fx
    path.write_text(json.dumps(m))
    msg = _error(lambda: _parse(scene))
    assert m["frames"][3]["file_path"] in msg and "fx not specified" in msg
    one, _ = _small_scene(tmp_path / "one", n=1)
    # one camera: nerfstudio divides by zero, or (on other machines) by the rounding its centring
    # left and loads a scene scaled by ~3e7; jax-gs's check, run before nerfstudio loads, says so
    msg = _error(lambda: check_scene(NerfstudioDataParserConfig(), one))
    assert "coincide" in msg and "--auto-scale-poses False" in msg and "transforms.json" in msg
    check_scene(NerfstudioDataParserConfig(auto_scale_poses=False), one)
    _parse(one, auto_scale_poses=False)  # the hint is right: nerfstudio then loads it


def _views(scene, split="train"):
    from nerfstudio.data.datasets.base_dataset import InputDataset

    return InputDataset(_parse(scene, split))


def test_every_image_is_checked_cheaply_and_named(tmp_path):
    from PIL import Image

    scene, meta = _small_scene(tmp_path, n=10)
    check_views(_views(scene), "training")
    check_views(_views(scene, "val"), "evaluation")
    first = scene / meta["frames"][3]["file_path"]  # (nerfstudio itself opens frame 0 for its size)
    data = first.read_bytes()
    first.write_bytes(data + b"trailing bytes after the JPEG's end")  # PIL and nerfstudio read it: so do we
    check_views(_views(scene), "training")
    first.write_bytes(data[: len(data) // 2])
    msg = _error(lambda: check_views(_views(scene), "training"))
    assert f"training image {first}" in msg and "truncated" in msg
    first.write_bytes(b"")
    assert "empty" in _error(lambda: check_views(_views(scene), "training"))
    Image.fromarray(np.zeros((10, 20, 3), np.uint8)).save(first, format="JPEG")
    msg = _error(lambda: check_views(_views(scene), "training"))
    assert str(first) in msg and "20x10 pixels" in msg and "its camera is" in msg
    held_out = _views(scene, "val").image_filenames[0]
    png = held_out.with_suffix(".png")  # a truncated PNG in its place, named as an evaluation image
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (meta["h"], meta["w"], 4), np.uint8)).save(png)
    png.write_bytes(png.read_bytes()[: len(png.read_bytes()) // 2])
    first.write_bytes(data)
    m = json.loads((scene / "transforms.json").read_text())
    for f in m["frames"]:
        if (scene / f["file_path"]).name == held_out.name:
            f["file_path"] = f"images/{png.name}"
    (scene / "transforms.json").write_text(json.dumps(m))
    msg = _error(lambda: check_views(_views(scene, "val"), "evaluation"))
    assert f"evaluation image {png}" in msg


def test_load_dir_is_checked_and_a_run_folder_is_understood(tmp_path):
    from nerfstudio_jaxgs.resume import resolve_load_dir

    assert "does not exist" in _error(lambda: resolve_load_dir(tmp_path / "nope", None))
    run = tmp_path / "run"
    models = run / "nerfstudio_models"
    models.mkdir(parents=True)
    for step in (9, 19):
        (models / f"step-{step:09d}.ckpt").write_bytes(b"x")
    (run / ".step-000000029.ckpt.123.abc.tmp").write_bytes(b"x")  # what a killed save leaves
    (run / "config.yml").write_text("x")
    assert resolve_load_dir(models, None) == (models, 19)
    assert resolve_load_dir(run, None) == (models, 19)  # the run folder: its nerfstudio_models/
    assert resolve_load_dir(run, 9) == (models, 9)
    assert "9, 19" in _error(lambda: resolve_load_dir(run, 5))
    msg = _error(lambda: resolve_load_dir(tmp_path, None))  # two levels up: says where they are
    assert "holds no checkpoints" in msg and str(models) in msg


def test_stale_temporary_files_are_removed_and_live_ones_kept(tmp_path):
    import os
    import subprocess

    from jax_backend.files import atomic_open, remove_stale_temps

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / f".splat.ply.{dead}.abcd1234.tmp"
    live = tmp_path / f".splat.ply.{os.getppid()}.abcd1234.tmp"
    other = tmp_path / f".step-000000001.ckpt.{dead}.tmp"
    for p in (stale, live, other):
        p.write_bytes(b"x")
    assert remove_stale_temps(tmp_path, "splat.ply") == [stale]
    assert live.exists() and other.exists()
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_open(target) as f:
            f.write(b"new, half")
            raise RuntimeError("killed")
    assert target.read_bytes() == b"old" and not list(tmp_path.glob(".a.bin.*"))


def test_export_writes_nerfstudios_bytes_atomically(tmp_path):
    """The exporter's PLY for a jax-gs model is byte for byte what nerfstudio's own write_ply
    writes (the reference), from one array, and no Gaussians left is one line."""
    from collections import OrderedDict

    from nerfstudio.scripts.exporter import ExportGaussianSplat

    from nerfstudio_jaxgs.export import check_output_folder, write_ply_atomic

    rng = np.random.default_rng(0)
    n = 37
    tensors = OrderedDict()
    for k in ("x", "y", "z"):
        tensors[k] = rng.normal(size=n).astype(np.float32)
    tensors["nx"] = np.zeros(n, np.float64)
    tensors["red"] = rng.integers(0, 255, n).astype(np.uint8)
    tensors["f_dc_0"] = rng.normal(size=(n, 1)).astype(np.float32)
    tensors["opacity"] = rng.normal(size=(n, 1))
    ExportGaussianSplat.write_ply(str(tmp_path / "reference.ply"), n, tensors)
    write_ply_atomic(str(tmp_path / "ours.ply"), n, tensors)
    assert (tmp_path / "ours.ply").read_bytes() == (tmp_path / "reference.ply").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours.ply", "reference.ply"]
    assert "nothing to export" in _error(lambda: write_ply_atomic(str(tmp_path / "none.ply"), 0, tensors))
    afile = tmp_path / "ours.ply"
    assert "is a file" in _error(lambda: check_output_folder(afile, "splat.ply"))
    from mistakes import read_only_folder

    ro = read_only_folder(tmp_path)
    assert str(ro) in _error(lambda: check_output_folder(ro, "splat.ply"))


def test_a_missing_load_config_isone_line(tmp_path):
    from nerfstudio.utils.eval_utils import eval_setup

    missing = tmp_path / "run" / "config.yml"
    try:
        eval_setup(missing)
    except FileNotFoundError as e:
        line = one_line(type(e), e, e.__traceback__)
    assert line == f"config file {missing} does not exist (--load-config takes the config.yml of a training run)"


def test_a_full_disk_is_one_line_and_keeps_the_previous_file(tmp_path, monkeypatch):
    """ENOSPC in an atomic write, also when it reaches the writer wrapped (as torch.save wraps it
    in a RuntimeError): DiskFullError naming the file and the bytes needed, the earlier file intact,
    no temporary file left; the excepthook prints it as one line."""
    import errno

    from jax_backend.files import DiskFullError, atomic_open, atomic_write

    target = tmp_path / "a.ply"
    atomic_write(target, b"old")

    def full(*_):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("os.fsync", full)
    with pytest.raises(DiskFullError, match=r"no space left on the device to write .*a\.ply: it needs 6\.0 kB, .* free "
                                            r"there \(the previous file is unchanged\)") as e:
        atomic_write(target, b"x" * 6000)
    assert one_line(type(e.value), e.value, e.value.__traceback__).startswith(f"no space left on the device to write {target}")
    monkeypatch.undo()

    def wrapped(f):  # what torch.save raises when the file's write fails
        try:
            f.write(b"1")
            full()
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    with pytest.raises(DiskFullError, match=r"b\.ckpt: it needs 12\.0 kB"):
        with atomic_open(tmp_path / "b.ckpt", size=lambda: 12_000) as f:
            wrapped(f)
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.ply"]
    # a write outside jax-gs's own (nerfstudio's): the path from pathlib's frame
    class Full(io.StringIO):
        def write(self, _):
            full()

    monkeypatch.setattr("pathlib.Path.open", lambda self, *a, **k: Full())
    with pytest.raises(OSError) as e:
        (tmp_path / "eval.json").write_text("{}")
    line = one_line(e.type, e.value, e.tb)
    assert line.startswith(f"no space left on the device to write {tmp_path / 'eval.json'}: ") and line.endswith(" free there")


def test_resume_command_repeats_the_run_from_its_checkpoints():
    from nerfstudio_jaxgs.resume import resume_command

    argv = ["/venv/bin/ns-train", "jax-gs", "--data", "my scene", "--max-num-iterations", "30000", "--load-dir=old",
            "--vis", "viewer", "colmap", "--downscale-factor", "4"]
    assert resume_command(argv, "jax-gs", "/out/nerfstudio_models", 17000) == (
        "ns-train jax-gs --load-dir /out/nerfstudio_models --max-num-iterations 17000 --data 'my scene' --vis viewer "
        "colmap --downscale-factor 4")


def test_interrupts_record_the_first_signal_and_restore_the_handlers():
    import os
    import signal
    import time

    from nerfstudio_jaxgs.resume import Interrupts

    before = signal.getsignal(signal.SIGTERM)
    with Interrupts() as interrupts:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(200):
            if interrupts.signal is not None:
                break
            time.sleep(0.01)
        assert interrupts.signal == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_snapshot_out_of_space_is_reported_as_such():
    """The background writer's out-of-space failure reaches the training loop as the DiskFullError
    itself (`check` after each block, `close` at the end), not as a summary of failures."""
    import errno

    from jax_backend.files import AsyncWriter, DiskFullError

    def write():
        raise DiskFullError(errno.ENOSPC, "no space left on the device to write s/step_000100.ply: it needs 1.0 MB",
                            "s/step_000100.ply")

    w = AsyncWriter()
    w.submit(write)
    with pytest.raises(DiskFullError, match="step_000100.ply: it needs 1.0 MB"):
        w.close()
    with pytest.raises(DiskFullError):
        w.check()
