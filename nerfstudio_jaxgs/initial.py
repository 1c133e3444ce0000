"""How a run's Gaussians start: the dataparser's seed points, random ones in the scene's box or
splatfacto's cube, or the Gaussians of a 3DGS PLY (--pipeline.model.init-ply). Settings in,
`jax_backend.Gaussians` out; the math is the backend's."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import InputError


def init_settings(config, scene_box=None) -> dict:
    """How the Gaussians start when the dataparser gives no seed points (or random_init is set):
    `num_random` uniform in `box` (lo, hi), the dataparser's `scene_box` ([2, 3]) when
    `random_scale` is 0 (jax-gs's default; None until the scene box is known), else splatfacto's
    cube `random_scale` units wide."""
    from jax_backend import random_init_box

    if config.random_scale < 0:
        raise InputError(f"--pipeline.model.random-scale {config.random_scale}: must be 0 (the scene's box) or a width > 0")
    if config.random_scale > 0:
        half = config.random_scale / 2
        box = (np.full(3, -half), np.full(3, half))
    elif scene_box is not None:
        try:
            box = random_init_box(scene_box)
        except ValueError as e:  # e.g. a dataparser's scene-scale of 0
            raise InputError(f"the dataparser's scene box cannot hold the random start: {e}; set "
                             f"--pipeline.model.random-scale to a width > 0") from None
    else:
        box = None
    return dict(random=config.random_init, num_random=config.num_random, box=box,
                sh_degree=config.sh_degree, seed=config.seed)


def initial_gaussians(config, seed_points=None, scene_box=None):
    """The Gaussians a run starts from: the dataparser's seed points (a COLMAP or PLY point cloud)
    when it has some and `random_init` is off, otherwise `init_settings`' random ones."""
    from jax_backend import init_from_points, init_random

    use_points = seed_points is not None and not config.random_init and len(seed_points[0]) > 0
    init = init_settings(config, None if use_points else scene_box)  # the box only matters for a random start
    if use_points:
        pts, rgb = (np.asarray(x.cpu() if hasattr(x, "cpu") else x) for x in seed_points)
        return init_from_points(pts, rgb, sh_degree=init["sh_degree"], seed=init["seed"])
    if init["box"] is None:
        raise ValueError("random initialisation in the scene's box needs the scene box")
    return init_random(init["num_random"], *init["box"], sh_degree=init["sh_degree"], seed=init["seed"])


def gaussians_from_ply(config, transform=None, scale: float = 1.0):
    """The Gaussians of `config.init_ply` for a run at the model's SH degree; `transform` [3, 4]
    and `scale`: the dataparser's (applied when init-ply-frame is "capture")."""
    from jax_backend import PlyError, init_from_params, read_ply, transform_params

    path = Path(config.init_ply)
    try:
        params = read_ply(path)
    except PlyError as e:
        raise PlyError(f"--pipeline.model.init-ply {e}") from None
    if config.init_ply_frame == "capture":
        if transform is None:
            raise ValueError("init-ply-frame capture: the dataparser gave no transform")
        transform = np.asarray(transform, np.float64)
        params = transform_params(params, transform[:3, :3], transform[:3, 3], float(scale))
    return init_from_params(params, sh_degree=config.sh_degree, source=f"--pipeline.model.init-ply {path}")
