"""jax-gs backend: 3D Gaussian Splatting in pure JAX (no torch, no nerfstudio).

Import everything a user needs from here:

    from jax_backend import rasterization                      # render (gsplat's signature)
    from jax_backend import rasterization_2dgs                 # 2D Gaussian Splatting's surfels (gsplat's too)
    from jax_backend import Trainer, TrainConfig, make_dataset, make_strategy, init_from_points

Packages: `layout` (how a run is laid out on devices: one `Layout` value), `devices` (compile-only
topology devices, CPU cores, GPU memory), `rendering` (projection, SH, binning, the blend rule, the three rasterizers and the entry
point), `training` (Gaussians, loss, optimizer, strategies, data, step, trainer), `files` (PLY,
checkpoints, atomic and background writes).

The names below are imported on first use, so importing `jax_backend` (as nerfstudio does for
every ns-* command through the plugin) does not import JAX."""
from __future__ import annotations

import importlib

# public name -> the module that defines it
_EXPORTS = {
    "UserFacingError": "errors",
    "CheckpointError": "files",
    "enable_compilation_cache": "files",
    "PlyError": "files",
    "read_checkpoint": "files",
    "read_ply": "files",
    "save_checkpoint": "files",
    "write_ply": "files",
    "rasterization_2dgs": "rendering",
    "traced_rasterization_2dgs": "rendering",
    "count_intersections_2dgs": "rendering",
    "depth_to_normals": "rendering",
    "RASTERIZERS": "rendering",
    "RASTERIZE_MODES": "rendering",
    "RENDER_MODES": "rendering",
    "RasterizerOptions": "rendering",
    "rasterization": "rendering",
    "count_intersections": "rendering",
    "traced_rasterization": "rendering",
    "Layout": "layout",
    "make_layout": "layout",
    "local_layout": "layout",
    "topology_devices": "devices",
    "share_gpu_memory": "devices",
    "use_cpu_cores": "devices",
    "skip_absent_accelerators": "devices",
    "Dataset": "training.data",
    "ViewPlan": "training.data",
    "make_dataset": "training.data",
    "scene_extent": "training.data",
    "PARAM_NAMES": "training.gaussians",
    "Gaussians": "training.gaussians",
    "activated": "training.gaussians",
    "alive_first": "training.gaussians",
    "init_from_points": "training.initialization",
    "init_random": "training.initialization",
    "init_from_params": "training.initialization",
    "transform_params": "training.initialization",
    "random_init_box": "training.initialization",
    "render_gaussians": "training.splat_kind",
    "render_surfels": "training.splat_kind",
    "Render": "training.splat_kind",
    "SplatKind": "training.splat_kind",
    "GAUSSIANS_3D": "training.splat_kind",
    "Surfels2D": "training.splat_kind",
    "as_surfels": "training.surfels",
    "SURFEL_THICKNESS": "training.surfels",
    "rgb_to_sh0": "training.gaussians",
    "sh0_to_rgb": "training.gaussians",
    "photometric_loss": "training.loss",
    "psnr": "training.loss",
    "scale_regularization": "training.loss",
    "ssim": "training.loss",
    "OptimConfig": "training.optim",
    "crossed": "training.schedule",
    "sh_degree_at": "training.schedule",
    "NonFiniteError": "training.trainer",
    "Snapshots": "training.snapshots",
    "TrainState": "training.state",
    "from_named_arrays": "training.state_arrays",
    "gaussians_arrays": "training.state_arrays",
    "gaussians_from_arrays": "training.state_arrays",
    "named_arrays": "training.state_arrays",
    "BACKGROUNDS": "training.train_config",
    "TrainConfig": "training.train_config",
    "STRATEGIES": "training.strategy",
    "DefaultStrategy": "training.strategy",
    "MCMCStrategy": "training.strategy",
    "RefineInfo": "training.strategy",
    "Strategy": "training.strategy",
    "make_strategy": "training.strategy",
    "Trainer": "training.trainer",
    "initialize_from_env": "training.distributed",
    "host_views": "training.distributed",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'jax_backend' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
