"""The scenes and programs the tests' compile checks and the benchmarks share: a scene of
realistic Gaussians (`realistic_scene`) and its views, the trainers `ns-train` builds on it, the
small programs of the compile tests, and lowering for a compile-only target (a TPU topology or a
GPU of `gpu_targets/`) on this host."""
from __future__ import annotations

import functools
import os

WIDTH, HEIGHT = 504, 378  # fern's size, the benchmarks' scene
VIEWS = 20
GPU_TARGETS = ("h200", "a100")  # tools/gpu_targets/<name>.txtpb
SIZES = {"10k": 10_000, "100k": 100_000, "1m": 1_000_000}


def realistic_scene(n: int, seed: int = 0):
    """n Gaussians on surfaces, sized like a trained 3DGS scene: half on a unit sphere 3 units in
    front of the camera, half on a wall behind it that fills the view. Each Gaussian is a disc
    about as wide as the spacing of its neighbours on the surface (log-normal spread, one thin
    axis), opacities spread over (0, 1). Projected radii run from ~1 to ~40 pixels."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n_sphere = n // 2
    d = rng.normal(size=(n_sphere, 3))
    sphere = d / np.linalg.norm(d, axis=1, keepdims=True)
    wall_w, wall_h = 6.0, 4.5
    wall = np.stack([rng.uniform(-wall_w / 2, wall_w / 2, n - n_sphere), rng.uniform(-wall_h / 2, wall_h / 2, n - n_sphere),
                     np.full(n - n_sphere, 2.0)], -1)
    means = np.concatenate([sphere, wall])
    spacing = np.concatenate([np.full(n_sphere, np.sqrt(4 * np.pi / n_sphere)),
                              np.full(n - n_sphere, np.sqrt(wall_w * wall_h / (n - n_sphere)))])
    scales = spacing[:, None] * np.exp(rng.normal(-0.5, 0.4, (n, 3)))
    scales[:, 2] *= 0.1
    quats = rng.normal(size=(n, 4))
    opacities = 1 / (1 + np.exp(-rng.normal(0.0, 1.5, n)))
    colors = rng.uniform(0, 1, (n, 3))
    viewmat = np.eye(4)
    viewmat[2, 3] = 3.0
    f = 0.9 * WIDTH
    K = np.array([[f, 0, WIDTH / 2], [0, f, HEIGHT / 2], [0, 0, 1]])
    return means, quats, scales, opacities, colors, viewmat[None], K[None]


def scene_views(n: int, width: int = WIDTH, height: int = HEIGHT):
    """Gaussians (`realistic_scene`) and VIEWS cameras around its camera (small turns and shifts),
    for images of width x height (the focal length scaled with the width: the same field of view)."""
    import numpy as np

    means, quats, scales, opacities, colors, viewmat, K = realistic_scene(n)
    K = K.copy()
    K[:, 0, 0] *= width / WIDTH
    K[:, 1, 1] *= width / WIDTH
    K[:, 0, 2], K[:, 1, 2] = width / 2, height / 2
    viewmats = np.repeat(viewmat, VIEWS, 0)
    for i in range(VIEWS):
        a = (i - VIEWS / 2) * 0.01
        c, s = np.cos(a), np.sin(a)
        viewmats[i, :3, :3] = np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
        viewmats[i, 0, 3] = 0.02 * (i - VIEWS / 2)
    return means, quats, scales, opacities, colors, viewmats, np.repeat(K, VIEWS, 0)


def trainer_for(method: str, n: int, replicas: int = 1, width: int = WIDTH, height: int = HEIGHT,
                isect_capacity=1 << 20, tile_devices: int = 1):
    """The `Trainer` `ns-train <method>` builds (the plugin's settings), on a fern-size capture
    with n Gaussians alive, its layout `replicas` data-parallel copies or the Gaussians' rows split
    over `tile_devices` chips (which deal each view's tiles)."""
    import numpy as np

    from jax_backend import Trainer, make_dataset, make_layout
    from jax_backend.array_ops import next_pow2
    from jax_backend.training.gaussians import Gaussians
    from jax_backend.training.initialization import init_from_points
    from nerfstudio_jaxgs import config as methods
    from nerfstudio_jaxgs.settings import train_config

    spec = {"jax-gs": methods.jax_gs_method, "jax-gs-mcmc": methods.jax_gs_mcmc_method,
            "jax-2dgs": methods.jax_2dgs_method}[method]
    model = spec.config.pipeline.model
    cfg = train_config(model, max_steps=spec.config.max_num_iterations, num_train_data=VIEWS,
                       optimizers=spec.config.optimizers)
    means, quats, scales, opacities, colors, viewmats, Ks = scene_views(n, width, height)
    g = init_from_points(means, colors, sh_degree=cfg.sh_degree, capacity=next_pow2(n))
    import jax.numpy as jnp

    pad = g.capacity - n
    params = dict(g.params, scales=jnp.concatenate([jnp.log(jnp.asarray(scales, jnp.float32)),
                                                    jnp.zeros((pad, 3))]))
    g = Gaussians(params, g.alive)
    data = make_dataset(np.zeros((VIEWS, height, width, 3), np.uint8), viewmats, Ks)
    # one device renders a view (a chip) unless the rows are split; the CPU column compiles the same program
    tr = Trainer(cfg, data, g, 1.0, isect_capacity=isect_capacity, log=lambda *_: None,
                 layout=make_layout(replicas=replicas, tile_devices=tile_devices))
    tr.state = tr.state._replace(step=jnp.int32(10_000))  # full resolution, SH degree 3, density control live
    if isect_capacity is None:  # sized at full resolution, as the Trainer does when the resolution changes
        tr.size_buffer_ahead()
    return tr


SMALL_W, SMALL_H = 64, 48  # the small compile checks' image size


def small_cameras(views: int):
    """(viewmats [views, 4, 4], Ks [views, 3, 3]) float32 of the small compile checks: cameras 3
    units in front of the scene, side by side (0.2 units across)."""
    import numpy as np

    viewmats = np.repeat(np.eye(4, dtype=np.float32)[None], views, 0)
    viewmats[:, 2, 3] = 3.0
    viewmats[:, 0, 3] = np.linspace(-0.1, 0.1, views) if views > 1 else 0.0
    Ks = np.repeat(np.array([[[60.0, 0, SMALL_W / 2], [0, 60.0, SMALL_H / 2], [0, 0, 1]]], np.float32), views, 0)
    return viewmats, Ks


def small_trainer(strategy: str = "default", corrections: bool = False, surfels: bool = False, **strategy_kw):
    """A `Trainer` of 2,000 Gaussians (2,048 slots) on 3 views of 64x48, density control live
    (step 600), for compile checks in the tests; `corrections`: pose corrections (SO3xR3) and
    bilateral grids on (their contractions in the program); `surfels`: 2DGS disks, with the normal
    consistency and the depth distortion both on."""
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import Surfels2D, Trainer, TrainConfig, init_from_points, make_dataset, make_layout, make_strategy
    from jax_backend.training.bilateral import BilateralGridConfig
    from jax_backend.training.cameras import CameraOptConfig

    points = np.random.default_rng(0).normal(size=(2000, 3)) * 0.5
    viewmats, Ks = small_cameras(3)
    data = make_dataset(np.zeros((3, SMALL_H, SMALL_W, 3), np.uint8), viewmats, Ks)
    extra = dict(camera_opt=CameraOptConfig(mode="SO3xR3"), bilateral=BilateralGridConfig(enabled=True, shape=(4, 4, 4))) \
        if corrections else {}
    if surfels:
        extra["splats"] = Surfels2D(normal_start=0, distortion_lambda=0.1, distortion_start=0)
    cfg = TrainConfig(max_steps=1000, steps_per_block=5, strategy=make_strategy(strategy, **strategy_kw),
                      background="random", **extra)
    capacity = 4096 if strategy_kw.get("budget") else 2048
    tr = Trainer(cfg, data, init_from_points(points, sh_degree=3, capacity=capacity), 1.0, isect_capacity=1 << 15,
                 log=lambda *_: None, layout=make_layout(tile_devices=1))
    tr.state = tr.state._replace(step=jnp.int32(600))  # density control live
    return tr


def small_render_programs(n: int = 2000):
    """{"render": the eval / viewer render (RGB + expected depth, SH 3), "raster": forward +
    backward of a render's sum, "raster-fisheye": the same through a fisheye camera with its four
    coefficients (an argument), "raster-2dgs": forward + backward of a 2DGS render (the same
    points as surfels: colours, expected depth, normals, surface normals, distortion, median)}:
    (the function built for a layout, `fn(layout)`; float32 arguments) from one of `small_cameras`."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import traced_rasterization, traced_rasterization_2dgs

    rng = np.random.default_rng(0)
    viewmat, K = small_cameras(1)
    width, height = SMALL_W, SMALL_H
    args = [np.asarray(a, np.float32) for a in (rng.normal(size=(n, 3)) * 0.5, np.tile([1.0, 0, 0, 0], (n, 1)),
                                                np.full((n, 3), 0.02), np.full(n, 0.5), np.zeros((n, 16, 3)), viewmat, K)]

    def render(layout):
        return lambda m, q, s, o, c, vm, K: traced_rasterization(
            m, q, s, o, c, vm, K, width, height, sh_degree=3, render_mode="RGB+ED", isect_capacity=1 << 15,
            layout=layout)[:2]

    def raster(layout, camera_model="pinhole"):
        def loss(m, q, s, o, c, vm, K, distortion=None):
            img, alpha, _ = traced_rasterization(m, q, s, o, c, vm, K, width, height, sh_degree=3,
                                                 isect_capacity=1 << 15, layout=layout, camera_model=camera_model,
                                                 distortion=distortion)
            return jnp.sum(img) + jnp.sum(alpha)

        return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))

    def raster_2dgs(layout):
        def loss(m, q, s, o, c, vm, K):
            out = traced_rasterization_2dgs(m, q, s, o, c, vm, K, width, height, sh_degree=3, render_mode="RGB+ED",
                                            isect_capacity=1 << 15, layout=layout)
            return sum(jnp.sum(x) for x in out[:6])

        return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))

    kb4 = np.asarray([0.04, -0.012, 0.003, -0.0004], np.float32)
    return {"render": (render, args), "raster": (raster, args),
            "raster-fisheye": (lambda layout: raster(layout, "fisheye"), args + [kb4]),
            "raster-2dgs": (raster_2dgs, args)}


def target_devices(name: str) -> list:
    """The compile-only devices of a target: a TPU topology ("v5e:2x2") or a GPU of
    `GPU_TARGETS` (one device)."""
    from jax_backend import topology_devices

    if name in GPU_TARGETS:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_targets", f"{name}.txtpb")
        with open(path) as f:
            return topology_devices("", platform="cuda", target_config=f.read(), topology="1x1x1")
    return topology_devices(name)


def lower_program(fn_for, arrays, target):
    """`fn_for(layout)` (a function built for a layout) on `arrays`, lowered for this host's CPU
    (`target` None) or for the first of `target`'s devices."""
    import jax

    from jax_backend import Layout, local_layout
    from jax_backend.devices import abstract

    if target is None:
        return jax.jit(fn_for(local_layout())).lower(*arrays)
    layout = Layout(target[:1])
    spec = abstract(arrays, jax.sharding.SingleDeviceSharding(target[0]))
    return jax.jit(fn_for(layout)).trace(*spec).lower(lowering_platforms=(layout.lowering_platform,))



@functools.lru_cache(maxsize=None)  # built once per process: compiled, then (GPU) run for the trip counts
def raster_program(program: str):
    """(function, its float32 arguments, info) of a `raster-<rasterizer>-<size>` or `render` program."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import traced_rasterization
    from jax_backend.rendering import count_intersections
    from jax_backend.rendering.isect_buffer import size_for

    if program == "render":
        rasterizer, n = "auto", 100_000
    else:
        _, rasterizer, size = program.split("-")
        n = SIZES[size]
    means, quats, scales, opacities, colors, viewmats, Ks = scene_views(n)
    cap = size_for(int(count_intersections(means, quats, scales, opacities, viewmats[:1], Ks[:1], WIDTH,
                                                HEIGHT)[0]))
    if program == "render":  # SH coefficients, as the eval and the viewer render them
        sh = np.zeros((n, 16, 3), np.float32)
        args = (means, quats, scales, opacities, sh, viewmats[:1], Ks[:1])

        def fn_for(layout):
            return lambda m, q, s, o, c, vm, K: traced_rasterization(
                m, q, s, o, c, vm, K, WIDTH, HEIGHT, sh_degree=3, render_mode="RGB+ED", isect_capacity=cap,
                layout=layout)[:2]
    else:
        args = (means, quats, scales, opacities, colors, viewmats[:1], Ks[:1])

        def fn_for(layout):
            def loss(m, q, s, o, c, vm, K):
                img, alpha, _ = traced_rasterization(m, q, s, o, c, vm, K, WIDTH, HEIGHT, isect_capacity=cap,
                                                     rasterizer=rasterizer, layout=layout)
                return jnp.sum(img) + jnp.sum(alpha)

            return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))
    return fn_for, [np.asarray(a, np.float32) for a in args], {"gaussians": n, "capacity": cap,
                                                               "rasterizer": rasterizer}
