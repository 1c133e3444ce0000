"""nerfstudio's settings, splatfacto's names, translated into what the backend takes.

Every field jax-gs inherits from `SplatfactoModelConfig` either drives the backend (`strategy`,
`train_config`, `layout`, the initialisation in `initial.py`) or, until jax-gs implements it, stops the run
with one line naming it when it is set away from its default (`UNSUPPORTED`). `--optimizers.*`
(splatfacto's parameter groups) become the backend's Adam groups. No math: a table and checks.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional, Union


from .errors import InputError

# splatfacto's settings jax-gs does not implement yet, with what to do instead
UNSUPPORTED = {
    "output_depth_during_training": "jax-gs renders training views inside a compiled block and outputs nothing "
                                    "per step; depth is always in the outputs outside training",
}

# nerfstudio's full-image datamanager settings that work in jax-gs as in splatfacto (nerfstudio's
# own code reads them: the resolution scale rescales the cameras and the cached images the engine
# takes; the rest choose evaluation images, caching and threads) ...
DATAMANAGER_HONOURED = ("data", "dataparser", "camera_res_scale_factor", "eval_num_images_to_sample_from",
                        "eval_num_times_to_repeat_images", "eval_image_indices", "cache_images", "cache_images_type",
                        "max_thread_workers", "masks_on_gpu", "images_on_gpu")
# ... of which these with a difference worth a line in the README's settings table ...
DATAMANAGER_NOTES = {
    "cache_images": "where the training images stay while jax-gs trains: \"gpu\" (nerfstudio's default) on the device, "
                    "unless they would take over half of its memory (`--pipeline.model.device-memory-gb`: then in host "
                    "memory, with one line saying so); \"cpu\" (which nerfstudio also picks for over 500 images) in host "
                    "memory, each block's views copied to the device while the block before trains. The same results "
                    "either way",
}
# ... and those it does not honour: the engine draws the training views itself, on the device
DATAMANAGER_UNSUPPORTED = {
    "train_cameras_sampling_strategy": "jax-gs draws the training views on the device, each step a random "
                                       "view (\"random\"); farthest-point sampling is not implemented",
    "train_cameras_sampling_seed": "jax-gs draws the training views on the device from --pipeline.model.seed",
    "fps_reset_every": "jax-gs draws the training views on the device; farthest-point sampling is not implemented",
}

# splatfacto's settings that only the default (clone/split/prune) strategy uses
DEFAULT_STRATEGY_ONLY = ("densify_grad_thresh", "use_absgrad", "densify_size_thresh", "n_split_samples",
                         "cull_scale_thresh", "cull_screen_size", "split_screen_size", "stop_screen_size_at",
                         "reset_alpha_every")

# newer splatfacto's MCMC settings (its names), which only the MCMC strategy uses
MCMC_ONLY = ("max_gs_num", "noise_lr", "mcmc_opacity_reg", "mcmc_scale_reg")

# splatfacto's optimizer groups -> the backend's parameter groups
OPTIMIZER_GROUPS = {"means": "means", "scales": "scales", "quats": "quats", "opacities": "opacities",
                    "features_dc": "sh0", "features_rest": "shN"}


def _flag(name: str) -> str:
    return "--pipeline.model." + name.replace("_", "-")


def _default(config, name: str):
    f = {f.name: f for f in dataclasses.fields(config)}[name]
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _changed(config, name: str) -> bool:
    return getattr(config, name) != _default(config, name)


# the flag of each setting a kind of splat checks (`SplatKind.check`'s SettingError names them as the
# backend does), and what to do instead where the kind's own words do not say it in flags
KIND_SETTINGS = {"camera_model": ("fisheye", " (--pipeline.model.fisheye undistorted)"),
                 "depth_mode": ("normals_from", "")}


def check_kind(config) -> None:
    """InputError naming the flag of the first setting the config's kind of splat cannot train with
    (its rules are the kind's own: `SplatKind.check`). A fisheye drawn natively counts as a fisheye
    camera whatever the capture, as the run would draw one."""
    from jax_backend.training.splat_kind import SettingError

    try:
        config.splat_kind().check("fisheye" if config.fisheye == "native" else "pinhole", config.rasterize_mode)
    except SettingError as e:
        name, hint = KIND_SETTINGS.get(e.setting, (e.setting, ""))
        raise InputError(f"{_flag(name)} {getattr(config, name)}: {e}{hint}") from None


def check_supported(config) -> None:
    """InputError naming the first setting jax-gs cannot honour."""
    for name, why in UNSUPPORTED.items():
        if _changed(config, name):
            raise InputError(f"{_flag(name)} {getattr(config, name)}: {why}")
    check_kind(config)
    for name, switch in (("max_gauss_ratio", "use_scale_regularization"), ("grid_shape", "use_bilateral_grid")):
        if _changed(config, name) and not getattr(config, switch):
            raise InputError(f"{_flag(name)} {getattr(config, name)}: it only matters with {_flag(switch)} True")
    if config.strategy != "mcmc":
        for name in MCMC_ONLY:
            if _changed(config, name):
                raise InputError(f"{_flag(name)} {getattr(config, name)}: only the MCMC strategy uses it "
                                 f"(--pipeline.model.strategy mcmc, or ns-train jax-gs-mcmc)")
    if config.strategy != "default":
        for name in DEFAULT_STRATEGY_ONLY:
            if _changed(config, name):
                raise InputError(f"{_flag(name)} {getattr(config, name)}: only the default strategy uses it "
                                 f"(this run uses --pipeline.model.strategy {config.strategy})")


def check_datamanager(config) -> None:
    """InputError naming the first `--pipeline.datamanager.*` setting jax-gs cannot honour (set away
    from nerfstudio's default)."""
    for name, why in DATAMANAGER_UNSUPPORTED.items():
        if hasattr(config, name) and _changed(config, name):
            raise InputError(f"--pipeline.datamanager.{name.replace('_', '-')} {getattr(config, name)}: {why}")


def strategy(config, num_train_data: int):
    """(name, settings) for `jax_backend.make_strategy`, from splatfacto's names."""
    common = dict(refine_start=config.warmup_length, refine_every=config.refine_every,
                  refine_stop=config.stop_split_at, budget=config.max_gaussians)
    if config.strategy == "mcmc":
        return "mcmc", dict(common, budget=config.max_gs_num or config.max_gaussians,  # newer splatfacto's name first
                            min_opacity=config.cull_alpha_thresh, absgrad=False, noise_lr=config.noise_lr,
                            opacity_reg=config.mcmc_opacity_reg, scale_reg=config.mcmc_scale_reg)
    return "default", dict(
        common,
        prune_opa=config.cull_alpha_thresh,
        grow_grad2d=config.densify_grad_thresh,
        absgrad=config.use_absgrad,
        grow_scale3d=config.densify_size_thresh,
        prune_scale3d=config.cull_scale_thresh,
        grow_scale2d=config.split_screen_size,
        prune_scale2d=config.cull_screen_size,
        refine_scale2d_stop=config.stop_screen_size_at,
        reset_every=config.reset_alpha_every * config.refine_every,
        pause_after_reset=num_train_data + config.refine_every,  # as splatfacto
        n_split_samples=config.n_split_samples,
    )


def group_config(group: str, optimizers: dict, default):
    """`jax_backend.training.optim.GroupConfig` of splatfacto's optimizer group `group`
    (`--optimizers.GROUP.*`: Adam, with an optional ExponentialDecayScheduler, warm-up included);
    `default` (a GroupConfig) when the group is not given; InputError naming anything else."""
    from nerfstudio.engine.optimizers import AdamOptimizerConfig
    from nerfstudio.engine.schedulers import ExponentialDecaySchedulerConfig

    entry = (optimizers or {}).get(group)
    if entry is None:
        return default
    opt, sched = entry.get("optimizer"), entry.get("scheduler")
    where = f"--optimizers.{group.replace('_', '-')}"
    if type(opt) is not AdamOptimizerConfig:
        raise InputError(f"{where}.optimizer: jax-gs trains with Adam only, got {type(opt).__name__}")
    if opt.weight_decay or opt.max_norm is not None:
        raise InputError(f"{where}.optimizer: weight-decay and max-norm are not supported")
    settings = dict(lr=opt.lr, eps=opt.eps, lr_final=None)
    if sched is not None:
        if type(sched) is not ExponentialDecaySchedulerConfig:
            raise InputError(f"{where}.scheduler: only the exponential decay is supported, got {type(sched).__name__}")
        settings.update(lr_final=sched.lr_final if sched.lr_final is not None else opt.lr,
                        decay_steps=sched.max_steps, warmup_steps=sched.warmup_steps,
                        lr_pre_warmup=sched.lr_pre_warmup, ramp=sched.ramp)
    return dataclasses.replace(default, **settings)


def optim_config(optimizers: dict):
    """`jax_backend.OptimConfig`: the Gaussians' groups from nerfstudio's `--optimizers.*`."""
    from jax_backend import OptimConfig

    base = OptimConfig()
    return dataclasses.replace(base, **{param: group_config(group, optimizers, getattr(base, param))
                                        for group, param in OPTIMIZER_GROUPS.items()})


def bilateral_config(config, optimizers: dict):
    """`jax_backend.training.bilateral.BilateralGridConfig` from splatfacto's use_bilateral_grid,
    grid_shape and `bilateral_grid` optimizer group."""
    from jax_backend.training.bilateral import BilateralGridConfig

    if not config.use_bilateral_grid:
        return BilateralGridConfig()
    return BilateralGridConfig(enabled=True, shape=tuple(int(s) for s in config.grid_shape),
                               optimizer=group_config("bilateral_grid", optimizers, BilateralGridConfig().optimizer))


def camera_opt_config(camera_optimizer, optimizers: dict):
    """`jax_backend.training.cameras.CameraOptConfig` from nerfstudio's CameraOptimizerConfig (mode,
    penalties) and splatfacto's `camera_opt` optimizer group (`--optimizers.camera-opt.*`)."""
    from jax_backend.training.cameras import CameraOptConfig

    c = camera_optimizer
    settings = dict(mode=c.mode, trans_l2_penalty=c.trans_l2_penalty, rot_l2_penalty=c.rot_l2_penalty)
    if c.mode == "off":
        return CameraOptConfig(**settings)
    return CameraOptConfig(**settings, optimizer=group_config("camera_opt", optimizers, CameraOptConfig().optimizer))


class Machine(NamedTuple):
    """nerfstudio's `--machine.*` flags as jax-gs runs them (`machine`): one process per host, never
    torch's DDP processes or process group."""

    replicas: int  # data-parallel devices on this host: --machine.num-devices, else the model's num-devices (0: all)
    processes: int  # JAX processes training together (jax.distributed): --machine.num-machines
    process_id: Optional[int]  # this one's index (--machine.machine-rank); None: JAX finds it (dist-url auto)
    coordinator: Optional[str]  # process 0's HOST:PORT (--machine.dist-url); None: JAX finds it or one process


def machine(machine_config, model_config) -> Machine:
    """The run's `Machine` from nerfstudio's machine config and the model's num-devices, with one
    line naming the flags that do not go together. `--machine.num-devices N` would start N torch DDP
    processes (CUDA only): jax-gs trains on N local JAX devices in one process instead.
    `--machine.num-machines N --machine.machine-rank R --machine.dist-url tcp://HOST:PORT` (or
    `auto` on a TPU pod slice) would start torch's process group: jax-gs starts JAX's multi-host
    runtime instead (`jax.distributed`), every process's devices train one program."""
    from jax_backend.training.distributed import coordinator_address

    m, devices = machine_config, model_config.num_devices
    if m.num_devices > 1 and devices not in (0, m.num_devices):
        raise InputError(f"--machine.num-devices {m.num_devices} and --pipeline.model.num-devices {devices} "
                         f"disagree")
    replicas = m.num_devices if m.num_devices > 1 else devices
    if m.num_machines <= 1:
        return Machine(replicas, 1, 0, None)
    n, rank = m.num_machines, m.machine_rank
    if not 0 <= rank < n:
        raise InputError(f"--machine.machine-rank {rank}: must be between 0 and {n - 1} (--machine.num-machines {n})")
    if m.num_devices > 1:
        raise InputError(f"--machine.num-devices {m.num_devices} with --machine.num-machines {n}: each host's one "
                         f"jax-gs process trains on all its JAX devices; leave it at 1")
    try:
        coordinator = coordinator_address(m.dist_url)
    except ValueError as e:
        raise InputError(str(e)) from None
    return Machine(replicas, n, None if coordinator is None else rank, coordinator)


def layout(config, for_rendering: bool = False, replicas: Optional[int] = None):
    """The run's `jax_backend.Layout` from `replicas` (data-parallel devices: `Machine.replicas`;
    None: the model's num-devices) and tile-devices, 0 meaning automatic for either; one line
    naming the settings when they do not fit this host. `for_rendering`: the layout the viewer's and eval's renders
    use (one replica, tile-devices fitted to this host's devices: a config written on a larger
    machine still renders here)."""
    from jax_backend import make_layout

    try:
        if for_rendering:
            return make_layout(replicas=1, tile_devices=config.tile_devices, clamp_tile_devices=True)
        replicas = config.num_devices if replicas is None else replicas
        return make_layout(replicas=replicas, tile_devices=config.tile_devices)
    except ValueError as e:
        text = str(e).replace("replicas", "num-devices").replace("tile_devices", "tile-devices")
        raise InputError(f"device settings (num-devices {replicas} from --machine.num-devices or "
                         f"--pipeline.model.num-devices, --pipeline.model.tile-devices {config.tile_devices}): "
                         f"{text}") from None


def training_background(config, data_background=None):
    """What the backend composites training renders on: "black" | "white" | "random" | (r, g, b).
    "auto": the dataparser's alpha colour when it composites RGBA images on one, else "random"
    (splatfacto's default)."""
    if config.background_color != "auto":
        return config.background_color
    return tuple(float(c) for c in data_background) if data_background is not None else "random"


class Backgrounds(NamedTuple):
    """A run's backgrounds, resolved once (`backgrounds`)."""

    training: Union[str, tuple]  # what training renders are composited on (`training_background`)
    rendered: tuple  # (r, g, b) behind renders outside training: eval, previews, the viewer's first frame


def backgrounds(config, data_background=None) -> Backgrounds:
    """The backgrounds of a run with `config`, whose dataparser composites RGBA images on
    `data_background` ((r, g, b) in [0, 1]; None when it does not): outside training the training
    background, black for "random"."""
    training = training_background(config, data_background)
    if isinstance(training, tuple):
        return Backgrounds(training, training)
    return Backgrounds(training, (1.0, 1.0, 1.0) if training == "white" else (0.0, 0.0, 0.0))


def train_config(config, *, max_steps: int, num_train_data: int, optimizers: dict, background=None,
                 camera_model: str = "pinhole"):
    """`jax_backend.TrainConfig` of a model config, in one pass: for a run ending at `max_steps` on
    `num_train_data` views drawn as `camera_model`, with nerfstudio's `--optimizers` and the colour
    the run's training background (`backgrounds(...).training`; None: the config's with no dataparser
    colour)."""
    from jax_backend import TrainConfig, make_strategy

    check_supported(config)
    if not 0.0 < config.full_resolution_at <= 1.0:
        raise InputError(f"--pipeline.model.full-resolution-at {config.full_resolution_at}: a fraction of the run, "
                         "in (0, 1]")
    if config.tile_size < 0:
        raise InputError(f"--pipeline.model.tile-size {config.tile_size}: pixels (16 as gsplat, 8), or 0 for automatic")
    name, settings = strategy(config, num_train_data)
    try:
        strat = make_strategy(name, **settings)
    except ValueError as e:
        raise InputError(str(e)) from None
    return TrainConfig(max_steps=max_steps, steps_per_block=config.steps_per_block, rasterizer=config.rasterizer,
                       rasterize_mode=config.rasterize_mode, tile_size=config.tile_size,
                       max_gauss_ratio=config.max_gauss_ratio if config.use_scale_regularization else 0.0,
                       camera_opt=camera_opt_config(config.camera_optimizer, optimizers),
                       bilateral=bilateral_config(config, optimizers),
                       sh_degree=config.sh_degree, sh_degree_interval=config.sh_degree_interval,
                       ssim_lambda=config.ssim_lambda, background=backgrounds(config).training if background is None else background,
                       strategy=strat, num_downscales=config.num_downscales,
                       resolution_schedule=config.resolution_schedule,
                       full_resolution_at=config.full_resolution_at, optim=optim_config(optimizers),
                       splats=config.splat_kind(), camera_model=camera_model, seed=config.seed)


def images_place(config, datamanager) -> tuple:
    """(where, device bytes) for the engine's training images (`jax_backend.Trainer`'s `images`
    and `device_bytes`): "host" for --pipeline.datamanager.cache-images cpu (which nerfstudio also
    chooses itself for over 500 images), else "auto" (on the device unless they would take over
    half of it); --pipeline.model.device-memory-gb (0: what the device reports) in bytes."""
    gb = float(config.device_memory_gb)
    if not gb >= 0:
        raise InputError(f"--pipeline.model.device-memory-gb {config.device_memory_gb}: must be 0 (what the device "
                         f"reports) or a size in GiB")
    where = "host" if getattr(datamanager, "cache_images", "gpu") == "cpu" else "auto"
    return where, (int(gb * 2**30) if gb > 0 else None)
