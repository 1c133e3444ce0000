"""Checkpoints of the full training state (parameters, Adam moments, density statistics, RNG key,
step, view order) as one .npz, written atomically. Resuming gives the same next block."""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .fileio import atomic_write

FORMAT = "jax-gs-checkpoint-1"


class CheckpointError(ValueError):
    pass


def _named_leaves(tree):
    return [(jax.tree_util.keystr(p), x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]]


def save_checkpoint(path, state, meta: dict | None = None) -> Path:
    arrays = {f"a{i}": np.asarray(x) for i, (_, x) in enumerate(_named_leaves(state))}
    names = [name for name, _ in _named_leaves(state)]
    header = {"format": FORMAT, "names": names, "meta": meta or {}}
    buf = io.BytesIO()
    np.savez(buf, __header__=np.frombuffer(json.dumps(header).encode(), np.uint8), **arrays)
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


def restore_into(template, arrays: dict, path="checkpoint"):
    """Fill a state of the same structure and shapes as the saved one."""
    leaves = []
    for name, x in _named_leaves(template):
        if name not in arrays:
            raise CheckpointError(f"{path}: has no entry {name} (saved by another configuration?)")
        a = arrays[name]
        if a.shape != np.shape(x):
            raise CheckpointError(f"{path}: entry {name} has shape {a.shape}, expected {np.shape(x)}")
        leaves.append(jnp.asarray(a, dtype=getattr(x, "dtype", None)))
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(template), leaves)
