"""The user-mistake table: each case builds, from copies of the bundled fox, what a user plausibly
gets wrong, and says which real ns-* command to run, what its exit status must be, what the last
line of its output must name, and which files already written must be left byte-identical.

`python tests/mistakes.py [NAME...]` runs the cases and prints one row each (the slow test
`test_mistakes.py` asserts them)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from commands import BIN, FOX, command_env  # noqa: E402

QUICK = ["--vis", "tensorboard", "--machine.device-type", "cpu", "--pipeline.model.num-random", "2000",
         "--pipeline.model.steps-per-block", "10", "--pipeline.model.background-color", "black"]


@dataclass
class Case:
    args: list  # the command
    culprit: str  # the last line must contain it
    rc: int = 1
    keep: List[Path] = field(default_factory=list)  # must be byte-identical afterwards
    after: Optional[Callable[[], None]] = None  # extra checks (assertions) once the command has ended
    last_line_starts: str = "jax-gs: error: "  # "": the last line is not checked (nor tracebacks)
    interrupt: Optional[list] = None  # [(text, signal), ...]: send each signal once a line holds its text
    outcome: dict = field(default_factory=dict)  # the output and last line, for `after` to read


@dataclass
class Mistake:
    name: str
    build: Callable[[Path, "Trained"], Case]
    needs_run: bool = False  # needs the shared trained run


@dataclass
class Trained:
    """One short jax-gs run on the fox (checkpoint at step 19) and its export."""

    run: Path
    export: Path

    @property
    def config(self) -> Path:
        return self.run / "config.yml"

    @property
    def ckpt(self) -> Path:
        return self.run / "nerfstudio_models" / "step-000000019.ckpt"


def train_once(root: Path) -> Trained:
    run = root / "trained" / "fox" / "jax-gs" / "t"
    if not (run / "nerfstudio_models" / "step-000000019.ckpt").exists():
        _check([BIN / "ns-train", "jax-gs", "--data", FOX, "--max-num-iterations", "20", "--timestamp", "t",
                "--output-dir", root / "trained", *QUICK, "nerfstudio-data"])
    export = root / "trained" / "export"
    if not (export / "splat.ply").exists():
        _check([BIN / "ns-export", "gaussian-splat", "--load-config", run / "config.yml", "--output-dir", export])
    return Trained(run, export)


def _check(args):
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=command_env(),
                         stdin=subprocess.DEVNULL, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{args[0]} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


# ---------------------------------------------------------------- scenes built from the fox
def fox_copy(tmp: Path, name="scene", frames=None) -> tuple[Path, dict]:
    """A copy of the fox (images and transforms.json), optionally only some frames."""
    meta = json.loads((FOX / "transforms.json").read_text())
    meta["frames"] = sorted(meta["frames"], key=lambda f: f["file_path"])
    if frames is not None:
        meta["frames"] = [meta["frames"][i] for i in frames]
    scene = tmp / name
    (scene / "images").mkdir(parents=True)
    for f in meta["frames"]:
        shutil.copy(FOX / f["file_path"], scene / f["file_path"])
    write_meta(scene, meta)
    return scene, meta


def write_meta(scene: Path, meta: dict) -> None:
    (scene / "transforms.json").write_text(json.dumps(meta, indent=1))


def eval_frame_indices(n: int) -> list:
    """nerfstudio-data's default split (fraction 0.9) of n frames sorted by name: the eval ones."""
    from nerfstudio.data.utils.dataparsers_utils import get_train_eval_split_fraction

    return get_train_eval_split_fraction(list(range(n)), 0.9)[1].tolist()


def train_args(scene: Path, tmp: Path, *extra, steps=10):
    return [BIN / "ns-train", "jax-gs", "--data", scene, "--max-num-iterations", str(steps), "--output-dir",
            tmp / "out", *QUICK, *extra, "nerfstudio-data"]


def _nan_pose(tmp, _):
    scene, meta = fox_copy(tmp)
    meta["frames"][5]["transform_matrix"][0][3] = float("nan")
    write_meta(scene, meta)
    return Case(train_args(scene, tmp), meta["frames"][5]["file_path"])


def _singular_rotation(tmp, _):
    scene, meta = fox_copy(tmp)
    m = meta["frames"][7]["transform_matrix"]
    for r in range(3):
        m[r][1] = m[r][0]  # two equal columns
    write_meta(scene, meta)
    return Case(train_args(scene, tmp), meta["frames"][7]["file_path"])


def _no_transform_matrix(tmp, _):
    scene, meta = fox_copy(tmp)
    del meta["frames"][4]["transform_matrix"]
    write_meta(scene, meta)
    return Case(train_args(scene, tmp), meta["frames"][4]["file_path"])


def _frame_without_fl_x(tmp, _):
    scene, meta = fox_copy(tmp)
    fx = meta.pop("fl_x")
    for i, f in enumerate(meta["frames"]):
        if i != 9:
            f["fl_x"] = fx
    write_meta(scene, meta)
    return Case(train_args(scene, tmp), meta["frames"][9]["file_path"])


def _zero_focal_length(tmp, _):
    scene, meta = fox_copy(tmp)
    meta["fl_y"] = 0
    write_meta(scene, meta)
    return Case(train_args(scene, tmp), "fl_y")


def _equirectangular_capture(tmp, _):
    scene, meta = fox_copy(tmp)
    meta["camera_model"] = "EQUIRECTANGULAR"
    write_meta(scene, meta)
    return Case(train_args(scene, tmp), "EQUIRECTANGULAR camera")


def _camera_path(path: Path, camera_type: str):
    """A camera path as the viewer's render panel writes it, of one camera looking at the fox."""
    c2w = np.eye(4)
    c2w[:3, 3] = [0.0, 0.0, 1.0]
    path.write_text(json.dumps({"camera_type": camera_type, "render_height": 48, "render_width": 64, "fps": 1,
                                "seconds": 1.0, "camera_path": [{"camera_to_world": c2w.reshape(-1).tolist(),
                                                                 "fov": 50.0, "aspect": 64 / 48}]}))
    return path


def _render_camera_path(t: Trained, tmp: Path, camera_type: str):
    path = _camera_path(tmp / "path.json", camera_type)
    return [BIN / "ns-render", "camera-path", "--load-config", t.config, "--camera-path-filename", path,
            "--output-path", tmp / "out.mp4"]


def _equirectangular_camera_path(tmp, t: Trained):
    return Case(_render_camera_path(t, tmp, "equirectangular"), "EQUIRECTANGULAR camera")


def _init_ply_cut_short(tmp, t: Trained):
    """--pipeline.model.init-ply of a PLY cut short (a copy interrupted): one line naming it."""
    ply = tmp / "start.ply"
    data = (t.export / "splat.ply").read_bytes()
    ply.write_bytes(data[: len(data) // 2])
    return Case(train_args(FOX, tmp, "--pipeline.model.init-ply", ply), f"{ply}: truncated")


def _truncate(path: Path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _truncated_training_image(tmp, _):
    scene, meta = fox_copy(tmp)
    path = scene / meta["frames"][2]["file_path"]
    _truncate(path)
    return Case(train_args(scene, tmp), str(path))


def _truncated_eval_image(tmp, _):
    scene, meta = fox_copy(tmp)
    i = eval_frame_indices(len(meta["frames"]))[1]
    path = scene / meta["frames"][i]["file_path"]
    _truncate(path)
    return Case(train_args(scene, tmp), f"evaluation image {path}")


def _empty_image(tmp, _):
    scene, meta = fox_copy(tmp)
    path = scene / meta["frames"][3]["file_path"]
    path.write_bytes(b"")
    return Case(train_args(scene, tmp), str(path))


def _image_of_another_size(tmp, _):
    from PIL import Image

    scene, meta = fox_copy(tmp)
    path = scene / meta["frames"][6]["file_path"]
    im = Image.open(path)
    im.resize((im.width // 2, im.height // 2)).save(path)
    return Case(train_args(scene, tmp), str(path))


def _stale_width_and_height(tmp, _):
    scene, meta = fox_copy(tmp)
    meta["w"], meta["h"] = meta["w"] * 2, meta["h"] * 2  # the images were resized, the file was not
    write_meta(scene, meta)
    return Case(train_args(scene, tmp), str(scene / meta["frames"][0]["file_path"]))


def _image_folder_instead_of_image(tmp, _):
    scene, meta = fox_copy(tmp)
    path = scene / meta["frames"][8]["file_path"]
    path.unlink()
    path.mkdir()
    return Case(train_args(scene, tmp), str(path))


def _missing_mask(tmp, _):
    from PIL import Image

    scene, meta = fox_copy(tmp)
    (scene / "masks").mkdir()
    for i, f in enumerate(meta["frames"]):
        f["mask_path"] = f"masks/{Path(f['file_path']).stem}.png"
        if i != 10:
            Image.new("L", (meta["w"], meta["h"]), 255).save(scene / f["mask_path"])
    write_meta(scene, meta)
    return Case(train_args(scene, tmp), str(scene / meta["frames"][10]["mask_path"]))


def _mask_of_another_size(tmp, _):
    from PIL import Image

    scene, meta = fox_copy(tmp)
    (scene / "masks").mkdir()
    for i, f in enumerate(meta["frames"]):
        f["mask_path"] = f"masks/{Path(f['file_path']).stem}.png"
        size = (meta["w"], meta["h"]) if i != 11 else (meta["w"] // 2, meta["h"] // 2)
        Image.new("L", size, 255).save(scene / f["mask_path"])
    write_meta(scene, meta)
    return Case(train_args(scene, tmp), str(scene / meta["frames"][11]["mask_path"]))


def _one_image_scene(tmp, _):
    scene, meta = fox_copy(tmp, frames=[0])
    write_meta(scene, meta)
    return Case(train_args(scene, tmp), str(scene))


def _small_scene(tmp, _):
    """Two images: both train, none is left for evaluation, and the run says so."""
    scene, meta = fox_copy(tmp, frames=[0, 30])
    write_meta(scene, meta)
    return Case(train_args(scene, tmp, "--timestamp", "two"), "evaluation", rc=0, last_line_starts="",
                after=lambda: _small_scene_after(tmp))


def _small_scene_after(tmp):
    run = tmp / "out" / "scene" / "jax-gs" / "two"
    assert (run / "nerfstudio_models" / "step-000000009.ckpt").exists(), "the two-image run left no checkpoint"


def _eval_without_eval_views(tmp, _):
    scene, meta = fox_copy(tmp, frames=[0, 30])
    write_meta(scene, meta)
    _check(train_args(scene, tmp, "--timestamp", "two"))
    config = tmp / "out" / "scene" / "jax-gs" / "two" / "config.yml"
    return Case([BIN / "ns-eval", "--load-config", config, "--output-path", tmp / "eval.json"], "evaluation")


def _load_dir_missing(tmp, _):
    return Case(train_args(FOX, tmp, "--load-dir", tmp / "no" / "such" / "nerfstudio_models"),
                str(tmp / "no" / "such" / "nerfstudio_models"))


def _load_config_missing(tmp, _):
    # a jax-gs run's path with a mistyped timestamp (a path naming no jax-gs method keeps nerfstudio's own
    # error: the one-line wording acts on jax-gs's runs alone, tests/test_hooks.py)
    missing = tmp / "outputs" / "fox" / "jax-gs" / "nope" / "config.yml"
    return Case([BIN / "ns-export", "gaussian-splat", "--load-config", missing, "--output-dir", tmp / "export"],
                str(missing))


def read_only_folder(tmp: Path) -> Path:
    """A folder no file can be created in: a chmod 555 one, or (root ignores permission bits)
    /sys, where even root cannot create files."""
    import tempfile

    out = tmp / "ro"
    out.mkdir()
    os.chmod(out, 0o555)
    for folder in (out, Path("/sys")):
        try:
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError:
            return folder
    raise RuntimeError("no read-only folder on this machine")


def _export_into_read_only_folder(tmp, t: Trained):
    out = read_only_folder(tmp)
    return Case([BIN / "ns-export", "gaussian-splat", "--load-config", t.config, "--output-dir", out], str(out))


def _export_onto_a_file(tmp, t: Trained):
    out = tmp / "afile"
    out.write_text("not a folder")
    return Case([BIN / "ns-export", "gaussian-splat", "--load-config", t.config, "--output-dir", out], str(out),
                keep=[out])


# Runs an ns-* command's entry point in a process that meets `fault` when it is about to fsync a
# temporary file (".<target>.<pid>.<random>.tmp"). KILLED_AT_FSYNC: a SIGKILL, the moment of a kill
# that would do most harm, the new file written and the old one not yet replaced (with an in-place
# writer there is no such moment and the target is overwritten: the case fails).
AT_TEMP_FSYNC = """
import errno, os, signal, sys
from importlib.metadata import entry_points
real = os.fsync
def fsync(fd):
    if os.readlink(f"/proc/self/fd/{{fd}}").endswith(".tmp"):
        {fault}
    real(fd)
os.fsync = fsync
command = sys.argv[1]
sys.argv = sys.argv[1:]
next(e for e in entry_points(group="console_scripts") if e.name == command).load()()
"""
KILLED_AT_FSYNC = AT_TEMP_FSYNC.format(fault="os.kill(os.getpid(), signal.SIGKILL)")


def killed_at_fsync(command: str, *args):
    return [sys.executable, "-c", KILLED_AT_FSYNC, command, *args]


def _kill_during_export(tmp, t: Trained):
    out = tmp / "export"
    shutil.copytree(t.export, out)
    ply = out / "splat.ply"
    return Case(killed_at_fsync("ns-export", "gaussian-splat", "--load-config", t.config, "--output-dir", out), "",
                rc=-signal.SIGKILL, keep=[ply], last_line_starts="", after=lambda: _export_again_cleans_up(t, out))


def _export_again_cleans_up(t: Trained, out: Path):
    left = sorted(p.name for p in out.iterdir())
    assert len(left) == 2 and left[1] == "splat.ply", f"no temporary file beside splat.ply after the kill: {left}"
    _check([BIN / "ns-export", "gaussian-splat", "--load-config", t.config, "--output-dir", out])
    left = sorted(p.name for p in out.iterdir())
    assert left == ["splat.ply"], f"export folder after a killed and a good export: {left}"


def _kill_during_checkpoint_write(tmp, t: Trained):
    """Killed while saving step 29 over step 19 (save-only-latest, nerfstudio's default): step 19
    stays as it was, and resuming from the folder works and removes the killed save's leftovers."""
    run = tmp / "out" / "fox" / "jax-gs" / "k"
    shutil.copytree(t.run, run)
    models = run / "nerfstudio_models"
    resume = train_args(FOX, tmp, "--load-dir", models, "--timestamp", "k", "--steps-per-save", "10", steps=10)
    return Case(killed_at_fsync("ns-train", *[str(a) for a in resume[1:]]), "", rc=-signal.SIGKILL,
                keep=[models / "step-000000019.ckpt"], last_line_starts="",
                after=lambda: _resume_after_kill(run, resume))


def _resume_after_kill(run: Path, resume):
    models = run / "nerfstudio_models"
    left = sorted(p.name for p in models.iterdir())
    assert left == ["step-000000019.ckpt"], f"{models} after the kill: {left}"
    assert list(run.glob(".step-*.tmp")), "the kill left no temporary file: it did not happen mid-save"
    _check(resume)
    assert sorted(p.name for p in models.iterdir()) == ["step-000000029.ckpt"]
    _no_temp_left(run)


def _no_temp_left(run):
    left = [p.name for p in run.glob(".*.tmp")]
    assert not left, f"temporary files left in {run}: {left}"


def _load_dir_is_the_run_folder(tmp, t: Trained):
    return Case(train_args(FOX, tmp, "--load-dir", t.run, "--steps-per-save", "1000"), "", rc=0,
                last_line_starts="", keep=[t.ckpt])


def _diverging_learning_rate(tmp, t: Trained):
    """A learning rate that blows the Gaussians up: the run stops with the step and the array, and
    the good checkpoint it resumed from (save-only-latest would delete it) is untouched."""
    run = tmp / "out" / "fox" / "jax-gs" / "d"
    shutil.copytree(t.run, run)
    good = run / "nerfstudio_models" / "step-000000019.ckpt"
    return Case(train_args(FOX, tmp, "--load-dir", run / "nerfstudio_models", "--timestamp", "d",
                           "--steps-per-save", "10", "--optimizers.scales.optimizer.lr", "1e30", steps=30),
                "scales", keep=[good], after=lambda: _only(run / "nerfstudio_models", ["step-000000019.ckpt"]))


def _only(folder, names):
    left = sorted(p.name for p in folder.iterdir())
    assert left == names, f"{folder}: {left}"


# The same, the fsync failing with ENOSPC (as a full disk reports a write it could not place):
# where no small file system can be mounted.
FULL_AT_FSYNC = AT_TEMP_FSYNC.format(fault="raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))")


def small_disk(folder: Path, size: int) -> bool:
    """Mount a tmpfs of `size` bytes on `folder` (made if missing), unmounted when this process
    ends. False where this machine cannot mount (not root): the cases then inject ENOSPC."""
    import atexit

    folder.mkdir(parents=True, exist_ok=True)
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                        capture_output=True).returncode == 0 if shutil.which("mount") else False
    if ok:
        atexit.register(subprocess.run, ["umount", "-l", str(folder)], capture_output=True)
    return ok


def _tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _command(args, full: bool):
    """`args` as they are (on a full small disk), or through FULL_AT_FSYNC."""
    return args if full else [sys.executable, "-c", FULL_AT_FSYNC, Path(args[0]).name, *map(str, args[1:])]


def _disk_full_during_checkpoint(tmp, t: Trained):
    """Resumed into a run folder on a disk with room for the checkpoint it holds but not for the
    next: the run ends with the checkpoint's path and sizes, the old checkpoint intact, no
    temporary file left."""
    ckpt = t.ckpt.stat().st_size
    disk = tmp / "disk"
    mounted = small_disk(disk, _tree_bytes(t.run) + ckpt // 2 + (1 << 18))
    run = disk / "fox" / "jax-gs" / "f"
    shutil.copytree(t.run, run)
    models = run / "nerfstudio_models"
    args = [BIN / "ns-train", "jax-gs", "--data", FOX, "--max-num-iterations", "10", "--output-dir", disk,
            "--timestamp", "f", "--load-dir", models, "--steps-per-save", "10", *QUICK, "nerfstudio-data"]
    return Case(_command(args, mounted), f"no space left on the device to write {models / 'step-000000029.ckpt'}",
                keep=[models / "step-000000019.ckpt"],
                after=lambda: (_only(models, ["step-000000019.ckpt"]), _no_temp_left(run)))


def _disk_full_during_export(tmp, t: Trained):
    """ns-export onto a disk that holds the previous PLY but not a second one."""
    ply = t.export / "splat.ply"
    disk = tmp / "disk"
    mounted = small_disk(disk, ply.stat().st_size * 3 // 2)
    out = disk / "export"
    shutil.copytree(t.export, out)
    args = [BIN / "ns-export", "gaussian-splat", "--load-config", t.config, "--output-dir", out]
    return Case(_command(args, mounted), f"no space left on the device to write {out / 'splat.ply'}",
                keep=[out / "splat.ply"], after=lambda: _only(out, ["splat.ply"]))


def colmap_fox(tmp: Path, binary: bool = True) -> tuple[Path, Path]:
    """The fox as a COLMAP capture (its poses and intrinsics; binary through nerfstudio's own
    writer): (scene, model folder)."""
    from nerfstudio.data.utils import colmap_parsing_utils as colmap
    from captures import write_colmap_scene

    scene = tmp / "colmap_scene"
    write_colmap_scene(scene, num_points=200)
    model = scene / "colmap" / "sparse" / "0"
    if binary:
        colmap.write_model(*colmap.read_model(str(model), ".txt"), str(model), ".bin")
        for f in model.glob("*.txt"):
            f.unlink()
    return scene, model


def colmap_args(scene: Path, tmp: Path):
    return [BIN / "ns-train", "jax-gs", "--data", scene, "--max-num-iterations", "10", "--output-dir", tmp / "out",
            *QUICK, "colmap"]


def _colmap_images_cut_short(tmp, _):
    scene, model = colmap_fox(tmp)
    f = model / "images.bin"
    f.write_bytes(f.read_bytes()[: f.stat().st_size * 2 // 3])
    return Case(colmap_args(scene, tmp), f"COLMAP model file {f} is cut short: it declares")


def _colmap_cameras_empty(tmp, _):
    scene, model = colmap_fox(tmp)
    (model / "cameras.bin").write_bytes(b"")
    return Case(colmap_args(scene, tmp), f"COLMAP model file {model / 'cameras.bin'} is empty")


def _colmap_points_not_colmap(tmp, _):
    scene, model = colmap_fox(tmp)
    (model / "points3D.bin").write_text("# a PLY or text file saved under the binary name\n1 0.5 0.5 0.5 255 0 0 0.1\n")
    return Case(colmap_args(scene, tmp), f"{model / 'points3D.bin'} is not a COLMAP binary model")


def _colmap_cameras_text_garbled(tmp, _):
    scene, model = colmap_fox(tmp, binary=False)
    (model / "cameras.txt").write_text("1 OPENCV 240 two-hundred 1 2 3 4 5 6 7 8\n")
    return Case(colmap_args(scene, tmp), f"{model / 'cameras.txt'} is not a COLMAP text model")


def _ctrl_c_during_training(tmp, t: Trained):
    """Ctrl-C while the first block trains: the block ends, a checkpoint of step 10 is written, the
    last line names it and the command that resumes; that command then ends where an uninterrupted
    run ends (the shared run's step 19, array for array)."""
    args = [BIN / "ns-train", "jax-gs", "--data", FOX, "--max-num-iterations", "20", "--timestamp", "c",
            "--output-dir", tmp / "out", *QUICK, "nerfstudio-data"]
    models = tmp / "out" / "fox" / "jax-gs" / "c" / "nerfstudio_models"
    case = Case(args, f"checkpoint {models / 'step-000000009.ckpt'}; resume with: ns-train jax-gs --load-dir {models}",
                rc=128 + signal.SIGINT, last_line_starts="jax-gs: stopped by Ctrl-C after 10 of 20 steps",
                interrupt=[(TRAINING_STARTS, signal.SIGINT)])
    case.after = lambda: _resume_as_printed(case.outcome, models, t)
    return case


TRAINING_STARTS = "[jax-gs] training steps"  # the line the trainer prints before its first block


def _ctrl_c_twice(tmp, _):
    """A second Ctrl-C while the first block still runs: the process ends at once (128 + SIGINT),
    with no checkpoint and no temporary file written."""
    args = [BIN / "ns-train", "jax-gs", "--data", FOX, "--max-num-iterations", "20", "--timestamp", "c2",
            "--output-dir", tmp / "out", *QUICK, "nerfstudio-data"]
    run = tmp / "out" / "fox" / "jax-gs" / "c2"
    return Case(args, "nothing saved since the last checkpoint", rc=128 + signal.SIGINT,
                last_line_starts="[jax-gs] Ctrl-C again: stopped at once",
                interrupt=[(TRAINING_STARTS, signal.SIGINT), ("stopping at the end of this block", signal.SIGINT)],
                after=lambda: (_no_checkpoint(run), _no_temp_left(run)))


def _no_checkpoint(run: Path):
    left = sorted(p.name for p in run.glob("nerfstudio_models/*"))
    assert not left, f"checkpoints written after a second Ctrl-C: {left}"


def _resume_as_printed(out: dict, models: Path, t: Trained):
    import shlex

    import torch

    assert out["output"].find("stopping at the end of this block") < out["output"].find("first block"), \
        "the first Ctrl-C was not acknowledged while the block ran"
    assert "resume with: " in out["last"], f"the last line names no resume command: {out['last']!r}"
    command = shlex.split(out["last"].split("resume with: ", 1)[1])
    assert command[:2] == ["ns-train", "jax-gs"] and "--max-num-iterations" in command, command
    _check([BIN / command[0], *command[1:]])
    resumed = torch.load(models / "step-000000019.ckpt", weights_only=False, map_location="cpu")["pipeline"]
    straight = torch.load(t.ckpt, weights_only=False, map_location="cpu")["pipeline"]
    assert resumed.keys() == straight.keys()
    for k, v in straight.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(resumed[k], v), f"{k} differs from the uninterrupted run's"


MISTAKES = [
    Mistake("nan_pose", _nan_pose),
    Mistake("singular_rotation", _singular_rotation),
    Mistake("no_transform_matrix", _no_transform_matrix),
    Mistake("frame_without_fl_x", _frame_without_fl_x),
    Mistake("zero_focal_length", _zero_focal_length),
    Mistake("equirectangular_capture", _equirectangular_capture),
    Mistake("equirectangular_camera_path", _equirectangular_camera_path, needs_run=True),
    Mistake("init_ply_cut_short", _init_ply_cut_short, needs_run=True),
    Mistake("truncated_training_image", _truncated_training_image),
    Mistake("truncated_eval_image", _truncated_eval_image),
    Mistake("empty_image", _empty_image),
    Mistake("image_of_another_size", _image_of_another_size),
    Mistake("stale_width_and_height", _stale_width_and_height),
    Mistake("image_folder_instead_of_image", _image_folder_instead_of_image),
    Mistake("missing_mask", _missing_mask),
    Mistake("mask_of_another_size", _mask_of_another_size),
    Mistake("one_image_scene", _one_image_scene),
    Mistake("small_scene", _small_scene),
    Mistake("eval_without_eval_views", _eval_without_eval_views),
    Mistake("load_dir_missing", _load_dir_missing),
    Mistake("load_config_missing", _load_config_missing),
    Mistake("export_into_read_only_folder", _export_into_read_only_folder, needs_run=True),
    Mistake("export_onto_a_file", _export_onto_a_file, needs_run=True),
    Mistake("kill_during_export", _kill_during_export, needs_run=True),
    Mistake("kill_during_checkpoint_write", _kill_during_checkpoint_write, needs_run=True),
    Mistake("load_dir_is_the_run_folder", _load_dir_is_the_run_folder, needs_run=True),
    Mistake("diverging_learning_rate", _diverging_learning_rate, needs_run=True),
    Mistake("disk_full_during_checkpoint", _disk_full_during_checkpoint, needs_run=True),
    Mistake("disk_full_during_export", _disk_full_during_export, needs_run=True),
    Mistake("colmap_images_cut_short", _colmap_images_cut_short),
    Mistake("colmap_cameras_empty", _colmap_cameras_empty),
    Mistake("colmap_points_not_colmap", _colmap_points_not_colmap),
    Mistake("colmap_cameras_text_garbled", _colmap_cameras_text_garbled),
    Mistake("ctrl_c_during_training", _ctrl_c_during_training, needs_run=True),
    Mistake("ctrl_c_twice", _ctrl_c_twice),
]


@dataclass
class Outcome:
    rc: int
    last: str
    output: str
    seconds: float


def run_case(case: Case, timeout=600) -> Outcome:
    """Run the command and return what it did."""
    import threading

    t0 = time.time()
    proc = subprocess.Popen([str(a) for a in case.args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=command_env(), stdin=subprocess.DEVNULL)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    chunks, pending = [], list(case.interrupt or [])
    for line in proc.stdout:  # line by line, to send each interrupt when its line comes
        chunks.append(line)
        if pending and pending[0][0] in line:
            proc.send_signal(pending.pop(0)[1])
    proc.wait()
    timer.cancel()
    output = "".join(chunks)
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    return Outcome(proc.returncode, lines[-1] if lines else "", output, time.time() - t0)


def check_outcome(case: Case, out: Outcome, before: dict) -> List[str]:
    """What is wrong with the outcome (empty: the case passes)."""
    problems = []
    if out.rc != case.rc:
        problems.append(f"exit status {out.rc}, expected {case.rc}")
    if case.last_line_starts:
        if "Traceback" in out.output:
            problems.append("a traceback was printed")
        if not out.last.startswith(case.last_line_starts) or case.culprit not in out.last:
            problems.append(f"last line does not name {case.culprit!r}")
    elif case.culprit and case.culprit not in out.output:
        problems.append(f"output does not mention {case.culprit!r}")
    case.outcome.update(output=out.output, last=out.last)
    for path, data in before.items():
        if not path.exists() or path.read_bytes() != data:
            problems.append(f"{path} changed")
    if case.after is not None:
        try:
            case.after()
        except AssertionError as e:
            problems.append(str(e))
        except Exception as e:  # noqa: BLE001  one case's surprise fails that case, not the whole table
            problems.append(f"checking after the run raised {type(e).__name__}: {e}")
    return problems


def try_mistake(m: Mistake, tmp: Path, trained: Optional[Trained]) -> tuple[Outcome, List[str]]:
    try:
        case = m.build(tmp, trained)
    except Exception as e:  # noqa: BLE001
        return Outcome(-999, f"building the case failed: {e!r}"[:300], "", 0.0), ["the case could not be built"]
    before = {p: p.read_bytes() for p in case.keep}
    out = run_case(case)
    return out, check_outcome(case, out, before)


if __name__ == "__main__":
    import tempfile

    names = sys.argv[1:]
    root = Path(tempfile.mkdtemp(prefix="mistakes-"))
    chosen = [m for m in MISTAKES if not names or m.name in names]
    trained = train_once(root) if any(m.needs_run for m in chosen) else None
    for m in chosen:
        tmp = root / m.name
        tmp.mkdir()
        out, problems = try_mistake(m, tmp, trained)
        print(f"{'ok  ' if not problems else 'FAIL'} {m.name:32s} rc={out.rc:3d} {out.seconds:5.1f}s | {out.last[:150]}")
        for p in problems:
            print(f"       - {p}")
        sys.stdout.flush()
