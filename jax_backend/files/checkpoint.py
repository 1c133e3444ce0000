"""Checkpoint files: named arrays (a training state's `named_arrays`) and a JSON meta in one .npz,
written atomically; reading names the file when it is missing, truncated or not ours."""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from ..errors import UserFacingError
from .fileio import atomic_write

FORMAT = "jax-gs-checkpoint-1"


class CheckpointError(UserFacingError, ValueError):
    """A checkpoint that is missing, unreadable, not ours, or does not fit the state it is loaded
    into; the message names the file (and the entry)."""


def save_checkpoint(path, arrays: dict, meta: dict | None = None) -> Path:
    """Write {name: array} and a JSON-able `meta` to `path` atomically. Returns the path."""
    names = list(arrays)
    header = {"format": FORMAT, "names": names, "meta": meta or {}}
    buf = io.BytesIO()
    np.savez(buf, __header__=np.frombuffer(json.dumps(header).encode(), np.uint8),
             **{f"a{i}": np.asarray(arrays[name]) for i, name in enumerate(names)})
    return atomic_write(path, buf.getvalue())


def read_checkpoint(path):
    """-> ({leaf name: array}, meta). Clear errors for missing, truncated or foreign files."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        with np.load(path) as z:
            header = json.loads(bytes(z["__header__"]).decode())
            if header.get("format") != FORMAT:
                raise CheckpointError(f"{path}: not a jax-gs checkpoint (format {header.get('format')!r})")
            arrays = {name: z[f"a{i}"] for i, name in enumerate(header["names"])}
    except CheckpointError:
        raise
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: unreadable or truncated checkpoint ({type(e).__name__}: {e})") from None
    return arrays, header["meta"]
