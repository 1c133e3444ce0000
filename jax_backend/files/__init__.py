"""Files: PLY in the standard 3DGS layout, checkpoint files, atomic writes, PNG, a background
writer thread and the persistent compilation cache folder. Imports nothing else of jax_backend
but `errors`."""
from .checkpoint import CheckpointError, read_checkpoint, save_checkpoint
from .compile_cache import compilation_cache_folder, enable_compilation_cache
from .fileio import AsyncWriter, DiskFullError, atomic_open, atomic_write, out_of_space, png_bytes, remove_stale_temps
from .ply import PlyError, property_names, read_ply, write_ply

__all__ = ["CheckpointError", "read_checkpoint", "save_checkpoint", "compilation_cache_folder",
           "enable_compilation_cache", "AsyncWriter", "DiskFullError", "atomic_open", "atomic_write", "out_of_space",
           "remove_stale_temps",
           "png_bytes", "PlyError", "property_names", "read_ply", "write_ply"]
