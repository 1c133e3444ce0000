"""Bad input ends a jax-gs run with one line naming the file, frame or setting, not a traceback
from deep inside nerfstudio, PIL or torch, and never with an interactive prompt nobody can answer.
(The checks themselves are in `checks.py`.)

- `user_errors` turns what nerfstudio's loaders raise on bad input (file errors, and the
  assertions, KeyErrors and arithmetic errors of its dataparsers and datasets) into `InputError`,
  naming the frame or file nerfstudio was reading, taken from its own variables where it failed.
- `one_line` words an `InputError`, a jax_backend error meant for users (a checkpoint or PLY that
  cannot be read, training that diverged), a failed `torch.load` in nerfstudio's own checkpoint
  loading, a full disk or a missing `--load-config` as one line; jax-gs's excepthook
  (`hooks.install_excepthook`) prints it (`jax-gs: error: ...`) and exits with status 1.
"""
from __future__ import annotations

import contextlib
import io
import json
import struct
from pathlib import Path


class InputError(Exception):
    """Bad user input (a scene, an image, a checkpoint); the message names the file."""


@contextlib.contextmanager
def user_errors(what: str):
    """Turn errors raised while nerfstudio reads user input into one-line InputErrors."""
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
    except Exception as e:  # noqa: BLE001
        line = _colmap_failure(e) or _nerfstudio_failure(e)
        if line is None:
            raise
        raise InputError(f"{what}: {line}") from None


_COLMAP_READERS = {"read_cameras_binary": "cameras", "read_images_binary": "images", "read_points3D_binary": "points",
                   "read_cameras_text": "cameras", "read_images_text": "images", "read_points3D_text": "points"}


def _colmap_failure(exc: BaseException):
    """One line for an exception raised while nerfstudio's COLMAP reader parsed a model file: the
    file, and whether it is empty, cut short or not a COLMAP model. None for other exceptions."""
    tb, reader = exc.__traceback__, None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name in _COLMAP_READERS and code.co_filename.endswith("colmap_parsing_utils.py"):
            reader = tb.tb_frame
        tb = tb.tb_next
    if reader is None:
        return None
    local = reader.f_locals
    path = Path(local.get("path_to_model_file") or local.get("path"))
    size = path.stat().st_size if path.is_file() else 0
    if size == 0:
        return f"COLMAP model file {path} is empty"
    what = _COLMAP_READERS[reader.f_code.co_name]
    error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}".rstrip(": ")
    if reader.f_code.co_name.endswith("_text"):
        line = str(local.get("line", "")).strip()
        return f"{path} is not a COLMAP text model ({error}{f' at the line {line[:60]!r}' if line else ''})"
    with open(path, "rb") as f:
        count = int.from_bytes(f.read(8), "little") if size >= 8 else None
    if count is None or count >= 1 << 32:  # a record count no capture has: another kind of file
        return f"{path} is not a COLMAP binary model (its first 8 bytes do not hold a count of {what}: {error})"
    if isinstance(exc, struct.error):
        return f"COLMAP model file {path} is cut short: it declares {count} {what} but ends after {size} bytes"
    return f"{path} is not a readable COLMAP binary model ({error})"


# nerfstudio source lines whose failure has a known cause, and what to say
_HINTS = {
    "scale_factor /=": "all camera positions coincide (a scene of one image?), so nerfstudio cannot scale the "
                       "poses; add images, or pass --auto-scale-poses False after the dataparser's name",
}


def _nerfstudio_failure(exc: BaseException):
    """One line for an exception raised inside nerfstudio's data code (dataparsers, datasets,
    datamanagers) while it reads the scene: what it was reading (the frame, image or mask, from
    its own local variables) and why. None for exceptions raised elsewhere."""
    import traceback

    tb, inner = exc.__traceback__, None
    while tb is not None:
        if "/nerfstudio/data/" in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
            inner = tb
        tb = tb.tb_next
    if inner is None:
        return None
    local = inner.tb_frame.f_locals
    culprit = None
    frame = local.get("frame")
    if isinstance(frame, dict) and "file_path" in frame:
        culprit = f"frame {frame['file_path']}"
    else:
        for key in ("mask_filepath", "image_filename", "filepath", "fname", "filename"):
            if isinstance(local.get(key), (str, Path)):
                culprit = str(local[key])
                break
    source = traceback.extract_tb(inner, limit=1)[0].line or ""
    reason = next((hint for code, hint in _HINTS.items() if code in source), None)
    if reason is None:
        text = str(exc).strip().splitlines()[0].strip() if str(exc).strip() else ""
        if isinstance(exc, KeyError):
            reason = f"has no {text} entry"
        elif isinstance(exc, AssertionError) and text:
            reason = text
        else:
            reason = f"{type(exc).__name__}{': ' + text if text else ''} (in nerfstudio: {source.strip()})"
    return f"{culprit}: {reason}" if culprit else reason


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


def _raised_in(tb, fragment: str) -> bool:
    while tb is not None:
        if fragment in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
            return True
        tb = tb.tb_next
    return False


def _missing_config(exc, tb):
    """The --load-config path, when nerfstudio's eval_setup failed to read it."""
    if not isinstance(exc, FileNotFoundError):
        return None
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "eval_setup":
            path = tb.tb_frame.f_locals.get("config_path")
            if path is not None and str(path) == str(exc.filename):
                return path
        tb = tb.tb_next
    return None


def _disk_full(exc, tb):
    """One line for a write that ran out of space outside jax-gs's own writers (nerfstudio's
    config.yml, its logs, ns-eval's JSON): the file, and what is free. None for other errors."""
    from jax_backend.files import out_of_space
    from jax_backend.files.fileio import disk_full_error

    if not isinstance(exc, Exception) or not out_of_space(exc):
        return None
    path, e = None, exc
    while e is not None and path is None:  # the OSError's own file name ...
        path = getattr(e, "filename", None) if isinstance(e, OSError) else None
        e = e.__cause__ or e.__context__
    files = []  # ... or the Path a pathlib write was writing, or the innermost open file's name
    while path is None and tb is not None:
        local = tb.tb_frame.f_locals
        if isinstance(local.get("self"), Path) and tb.tb_frame.f_code.co_filename.endswith("pathlib.py"):
            path = local["self"]
        files += [v.name for v in local.values() if isinstance(v, io.IOBase) and isinstance(getattr(v, "name", None), str)]
        tb = tb.tb_next
    path = path if path is not None else (files[-1] if files else None)
    if path is None:
        return "no space left on the device (a write failed with ENOSPC)"
    return str(disk_full_error(path, atomic=False))


def one_line(exc_type, exc, tb):
    """The one line that says what went wrong, for an error meant for the user; None for any other
    (which keeps its traceback)."""
    torch_path, load_path = _checkpoint_paths(tb)
    from jax_backend.errors import UserFacingError

    if isinstance(exc, (InputError, UserFacingError)):
        return f"{exc} ({load_path})" if load_path is not None and str(load_path) not in str(exc) else str(exc)
    full = _disk_full(exc, tb)
    if full is not None:
        return full
    config = _missing_config(exc, tb)
    if config is not None:
        return f"config file {config} does not exist (--load-config takes the config.yml of a training run)"
    if isinstance(exc, OSError) and exc.filename and _raised_in(tb, "/nerfstudio/scripts/"):
        return f"{exc.filename}: {exc.strerror or exc}"  # e.g. an output folder ns-export cannot make
    if isinstance(exc, Exception) and torch_path is not None:
        reason = str(exc).strip().splitlines()[0].split(". ")[0] if str(exc).strip() else exc_type.__name__
        return f"checkpoint {torch_path} is unreadable (truncated or not a checkpoint): {reason}"
    return None
