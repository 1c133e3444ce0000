"""Bad input ends a jax-gs run with one line naming the file, not a traceback from deep inside
nerfstudio, PIL or torch, and never with an interactive prompt nobody can answer.

- `check_scene` looks at the scene before nerfstudio's dataparser does, for what nerfstudio itself
  reports with a traceback: the folder, the JSON files the nerfstudio-data and blender-data parsers
  read, the images they list (any of the files nerfstudio would read), COLMAP's model folder. It
  never rejects what nerfstudio loads; where nerfstudio's own loading fails later, `user_errors`
  names the file (and, for a missing images/ folder beside images_N/, the flag to pass).
- `user_errors` turns the file errors that still happen later (an image that cannot be decoded, a
  checkpoint that cannot be read) into `InputError`.
- `install_excepthook` prints an `InputError`, or a failed `torch.load` in nerfstudio's own
  checkpoint loading, as one line (`jax-gs: error: ...`) and exits with status 1.
- `no_prompts` answers nerfstudio's yes/no questions with their default when stdin is not a
  terminal, saying so, instead of waiting for an answer.
"""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path


class InputError(Exception):
    """Bad user input (a scene, an image, a checkpoint); the message names the file."""


_IMAGE_DIRS = ("images_2", "images_4", "images_8")


def _read_json(path: Path, role: str):
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read {role} {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise InputError(f"{role} {path} is not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{role} {path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None


def _check_listed_images(paths, listing: Path):
    """`paths`: for each frame, the candidate files (any one existing is enough)."""
    if not paths:
        raise InputError(f"{listing} lists no frames")
    missing = [cands[0] for cands in paths if not any(c.is_file() for c in cands)]
    if len(missing) == len(paths):
        raise InputError(f"the scene has no images: none of the {len(paths)} images listed in {listing} exist "
                         f"(first: {missing[0]})")
    if missing:
        raise InputError(f"missing image {missing[0]} (listed in {listing}; {len(missing)} of {len(paths)} missing)")


def _frames(meta, path: Path):
    frames = meta.get("frames") if isinstance(meta, dict) else None
    if not isinstance(frames, list) or not all(isinstance(f, dict) and "file_path" in f for f in frames):
        raise InputError(f"{path} has no list of frames with file_path entries")
    return frames


def check_scene(dataparser, data=None) -> None:
    """Raise InputError if the scene a dataparser config points at is clearly unusable."""
    name = type(dataparser).__name__
    data = Path(data or getattr(dataparser, "data", None) or "")
    if not str(data) or not data.exists():
        raise InputError(f"scene {data} does not exist")
    if name == "NerfstudioDataParserConfig":
        path = data if data.suffix == ".json" else data / "transforms.json"
        root = path.parent
        if not path.is_file():
            raise InputError(f"no transforms.json in scene folder {data} (for a COLMAP scene, add `colmap` "
                             f"after the ns-train options)")
        frames = _frames(_read_json(path, "transforms file"), path)
        cands = []
        for f in frames:
            p = Path(f["file_path"])
            cands.append([root / p] + [root / d / p.name for d in _IMAGE_DIRS])  # nerfstudio's downscaled copies
        _check_listed_images(cands, path)
    elif name == "BlenderDataParserConfig":
        path = data / "transforms_train.json"
        if not path.is_file():
            raise InputError(f"no transforms_train.json in blender scene folder {data}")
        for split in ("train", "val", "test"):
            p = data / f"transforms_{split}.json"
            if p.is_file():
                frames = _frames(_read_json(p, "transforms file"), p)
                _check_listed_images([[data / (f["file_path"].replace("./", "") + ".png")] for f in frames], p)
    elif name == "ColmapDataParserConfig":
        model = data / dataparser.colmap_path
        if not model.is_dir():
            raise InputError(f"no COLMAP model folder {model} (expected cameras, images and points3D .bin/.txt)")
        for part in ("cameras", "images"):
            if not any((model / f"{part}{ext}").is_file() for ext in (".bin", ".txt")):
                raise InputError(f"COLMAP model {model} has no {part}.bin or {part}.txt")


@contextlib.contextmanager
def user_errors(what: str):
    """Turn file errors raised while reading user input into one-line InputErrors."""
    try:
        yield
    except InputError:
        raise
    except FileNotFoundError as e:
        raise InputError(f"{what}: missing file {e.filename}{_downscaled_hint(e.filename)}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{what}: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except OSError as e:  # PIL's UnidentifiedImageError is an OSError and names the file
        name = getattr(e, "filename", None)
        raise InputError(f"{what}: {name + ': ' if name else ''}{e.strerror or e}") from None


def _downscaled_hint(filename) -> str:
    """When a file's folder is missing but downscaled copies of it exist (images_4/ ...), say so."""
    if not filename:
        return ""
    folder = Path(filename).parent
    if folder.exists() or not folder.parent.is_dir():
        return ""
    copies = sorted(d.name for d in folder.parent.glob(folder.name + "_*") if d.is_dir())
    if not copies:
        return ""
    return (f" ({folder.name}/ does not exist, the scene has {', '.join(c + '/' for c in copies)}: pass the "
            f"dataparser --downscale-factor {copies[0].rsplit('_', 1)[-1]} to train on those)")


def _checkpoint_paths(tb):
    """(file a failing torch.load was reading, checkpoint nerfstudio was loading), from the traceback."""
    torch_path = load_path = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "load" and frame.f_code.co_filename.replace("\\", "/").endswith("torch/serialization.py"):
            f = frame.f_locals.get("f")
            if isinstance(f, (str, Path)):
                torch_path = f
        p = frame.f_locals.get("load_path")  # nerfstudio's eval_load_checkpoint and Trainer._load_checkpoint
        if isinstance(p, Path):
            load_path = p
        tb = tb.tb_next
    return torch_path, load_path


def _one_line(exc_type, exc, tb):
    torch_path, load_path = _checkpoint_paths(tb)
    if isinstance(exc, InputError) or (type(exc).__module__.startswith("jax_backend.")
                                       and exc_type.__name__ in ("CheckpointError", "PlyError")):
        return f"{exc} ({load_path})" if load_path is not None and str(load_path) not in str(exc) else str(exc)
    if isinstance(exc, Exception) and torch_path is not None:
        reason = str(exc).strip().splitlines()[0].split(". ")[0] if str(exc).strip() else exc_type.__name__
        return f"checkpoint {torch_path} is unreadable (truncated or not a checkpoint): {reason}"
    return None


def install_excepthook() -> None:
    if getattr(sys.excepthook, "_jaxgs", False):
        return
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        line = _one_line(exc_type, exc, tb)
        if line is None:
            return previous(exc_type, exc, tb)
        sys.stderr.write(f"jax-gs: error: {line}\n")
        sys.stderr.flush()

    hook._jaxgs = True
    sys.excepthook = hook


@contextlib.contextmanager
def no_prompts():
    """While active, rich's Confirm.ask returns its default when stdin is not a terminal."""
    from rich.prompt import Confirm

    interactive = sys.stdin is not None and sys.stdin.isatty()
    if interactive:
        yield
        return
    original = Confirm.ask

    def ask(prompt="", *args, default=False, **kwargs):
        if "downscale the images" in str(prompt):  # nerfstudio would exit(1) without a word on "no"
            raise InputError("the downscaled images the dataparser's --downscale-factor asks for do not exist "
                             "(nerfstudio offers to make them when run in a terminal; or use ns-process-data, or "
                             "leave out --downscale-factor)")
        sys.stderr.write(f"jax-gs: non-interactive run, answering {'yes' if default else 'no'} to: {prompt}\n")
        return bool(default) if default is not ... else False

    Confirm.ask = ask
    try:
        yield
    finally:
        Confirm.ask = original
