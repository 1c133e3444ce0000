"""JAX's persistent compilation cache in one documented folder, so a second run of the same
configuration (ns-train, ns-eval, ns-viewer, ns-export, the tests) loads its XLA programs from disk
instead of compiling them again.

The folder: `$JAXGS_COMPILATION_CACHE` when set ("off" disables the cache), else JAX's own
`$JAX_COMPILATION_CACHE_DIR` when set, else `$XDG_CACHE_HOME/jax-gs/xla` (`~/.cache/jax-gs/xla`).
Entries are keyed by the program, the JAX/XLA version, the devices and the XLA flags, so a stale
entry is never used; the folder is bounded (least recently used entries go first) and shared
safely by concurrent processes (JAX locks it). A corrupt entry only costs a recompile."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

ENV = "JAXGS_COMPILATION_CACHE"
MAX_BYTES = 4 << 30  # the folder's bound
MIN_COMPILE_SECS = 0.2  # programs faster to compile than this are not worth a file


def compilation_cache_folder() -> Optional[Path]:
    """The folder the cache uses (None: disabled), from the environment as the module says."""
    value = os.environ.get(ENV)
    if value is not None:
        return None if value.strip().lower() in ("", "off", "0", "none") else Path(value).expanduser()
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return Path(os.environ["JAX_COMPILATION_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jax-gs" / "xla"


def enable_compilation_cache(folder=None) -> Optional[Path]:
    """Turn on JAX's persistent compilation cache in `folder` (default: `compilation_cache_folder()`).
    Call before the first compilation; returns the folder, or None when disabled or when the
    folder cannot be made (then every program compiles as usual)."""
    import jax

    folder = compilation_cache_folder() if folder is None else Path(folder)
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        log.warning(f"compilation cache off: cannot use {folder} ({e.strerror or e})")
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return folder
