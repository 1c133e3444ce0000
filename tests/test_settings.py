"""Every setting a splatfacto user can pass reaches the backend or stops the run in one line:
splatfacto's model fields, `--optimizers.*`, `--machine.num-devices`, and the presets."""
import dataclasses
import typing

import numpy as np
import pytest


from nerfstudio.configs.base_config import MachineConfig  # noqa: E402
from nerfstudio.configs.method_configs import method_configs  # noqa: E402
from nerfstudio.models.base_model import ModelConfig  # noqa: E402
from nerfstudio.models.splatfacto import SplatfactoModelConfig  # noqa: E402

from nerfstudio_jaxgs.config import (OPTIMIZERS, jax_gs_big_method, jax_gs_fast_method, jax_gs_mcmc_method,  # noqa: E402
                                     jax_gs_method)
from nerfstudio_jaxgs.errors import InputError  # noqa: E402
from nerfstudio_jaxgs.model import JaxGSModelConfig  # noqa: E402
from nerfstudio_jaxgs.initial import init_settings  # noqa: E402
from nerfstudio_jaxgs.settings import (Machine, backgrounds, machine, optim_config, train_config,  # noqa: E402
                                       training_background)

NUM_TRAIN = 10


def _backend_inputs(cfg, data_background=None):
    """Everything the backend receives from a model config."""
    return (train_config(cfg, max_steps=1000, num_train_data=NUM_TRAIN, optimizers=OPTIMIZERS,
                         background=backgrounds(cfg, data_background).training),
            init_settings(cfg))


def _other_value(cfg, f):
    """A valid value of field `f` different from its current one."""
    value = getattr(cfg, f.name)
    if f.name == "camera_optimizer":
        return dataclasses.replace(value, mode="SO3xR3")
    hint = typing.get_type_hints(type(cfg))[f.name]
    if typing.get_origin(hint) is typing.Literal:
        return next(v for v in reversed(typing.get_args(hint)) if v != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value * 0.5 + 0.001
    if isinstance(value, tuple):
        return tuple(v * 2 for v in value)
    raise AssertionError(f"no other value for {f.name} = {value!r}")


SPLATFACTO_FIELDS = [f for f in dataclasses.fields(SplatfactoModelConfig)
                     if f.name not in {g.name for g in dataclasses.fields(ModelConfig)}]


def _eval_metrics(cfg):
    """The metric names the model reports for one evaluation image."""
    import torch
    from nerfstudio.data.scene_box import SceneBox

    model = cfg.setup(scene_box=SceneBox(aabb=torch.tensor([[-1.0, -1, -1], [1, 1, 1]])), num_train_data=1,
                      seed_points=None)
    model.lpips = None  # (offline machines have no LPIPS weights; not what is tested here)
    rgb = torch.rand(8, 8, 3)
    return set(model.get_image_metrics_and_images({"rgb": rgb, "background": torch.zeros(3)},
                                                  {"image": torch.rand(8, 8, 3)})[0])


# settings that act in the plugin's evaluation, not in the backend: each must change the metrics
EVAL_SETTINGS = {"color_corrected_metrics"}


@pytest.mark.parametrize("strategy", ["default", "mcmc"])
@pytest.mark.parametrize("field", SPLATFACTO_FIELDS, ids=lambda f: f.name)
def test_no_inherited_setting_is_ignored(field, strategy):
    base = JaxGSModelConfig(strategy=strategy)
    changed = dataclasses.replace(base, **{field.name: _other_value(base, field)})
    if field.name in EVAL_SETTINGS:
        assert _eval_metrics(changed) > _eval_metrics(base)  # splatfacto's cc_psnr, cc_ssim
        return
    try:
        got = _backend_inputs(changed)
    except InputError as e:
        # a one-line error naming the setting, as the user typed it
        flag = "--pipeline.model." + field.name.replace("_", "-")
        assert flag in str(e) and "\n" not in str(e), str(e)
        return
    assert got != _backend_inputs(base), f"{field.name} changed nothing the backend receives"


def test_the_settings_map_to_splatfacto_s_meaning():
    cfg = JaxGSModelConfig(warmup_length=300, refine_every=50, reset_alpha_every=20, densify_grad_thresh=0.001,
                           use_absgrad=False, cull_alpha_thresh=0.02, stop_split_at=9000, n_split_samples=3)
    s = train_config(cfg, max_steps=1000, num_train_data=NUM_TRAIN, optimizers=OPTIMIZERS).strategy
    assert (s.refine_start, s.refine_every, s.reset_every, s.grow_grad2d, s.absgrad, s.prune_opa, s.refine_stop,
            s.n_split_samples, s.pause_after_reset) == (300, 50, 1000, 0.001, False, 0.02, 9000, 3, NUM_TRAIN + 50)


def test_background_follows_the_data():
    auto = JaxGSModelConfig()
    assert training_background(auto, (1.0, 1.0, 1.0)) == (1.0, 1.0, 1.0)  # blender-data composites on white
    assert training_background(auto, None) == "random"  # splatfacto's rule otherwise
    assert training_background(JaxGSModelConfig(background_color="black"), (1.0, 1.0, 1.0)) == "black"
    # resolved once for the run: training's, and what renders outside training are drawn on
    assert backgrounds(auto, None) == ("random", (0.0, 0.0, 0.0))
    assert backgrounds(auto, [1.0, 1.0, 1.0]) == ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0))
    assert backgrounds(JaxGSModelConfig(background_color="white")) == ("white", (1.0, 1.0, 1.0))


def test_optimizers_reach_the_adam_groups():
    import copy

    from nerfstudio.engine.optimizers import RAdamOptimizerConfig

    opts = copy.deepcopy(OPTIMIZERS)
    opts["features_rest"]["optimizer"].lr = 1e-4
    opts["means"]["scheduler"].lr_final = 1e-7
    opts["means"]["scheduler"].max_steps = 5000
    opts["scales"]["optimizer"].eps = 1e-8
    o = optim_config(opts)
    assert o.shN.lr == 1e-4 and o.means.lr_final == 1e-7 and o.means.decay_steps == 5000 and o.scales.eps == 1e-8
    assert o.means.times_extent and o.opacities.lr_final is None  # no scheduler: a constant rate
    default = optim_config(OPTIMIZERS)
    assert (default.means.lr, default.sh0.lr, default.opacities.lr) == (1.6e-4, 0.0025, 0.05)
    # a warm-up works in every group, as nerfstudio's scheduler has it (one schedule: `optim.lr_schedule`)
    from jax_backend.training.optim import lr_schedule

    opts["means"]["scheduler"].warmup_steps = 100
    means = optim_config(opts).means
    assert means.warmup_steps == 100
    import torch
    sched = opts["means"]["scheduler"].setup().get_scheduler(torch.optim.Adam([torch.zeros(1, requires_grad=True)],
                                                                              lr=1.6e-4), 1.6e-4)
    steps = [0, 50, 99, 100, 2500, 5000, 6000]
    np.testing.assert_allclose([float(lr_schedule(means, 2.0, 30000)(s)) for s in steps],
                               [2.0 * 1.6e-4 * sched.lr_lambdas[0](s) for s in steps], rtol=1e-5)
    opts["quats"]["optimizer"] = RAdamOptimizerConfig(lr=1e-3)
    with pytest.raises(InputError, match="--optimizers.quats.optimizer"):
        optim_config(opts)


def test_machine_num_devices_trains_in_one_process_on_that_many_jax_devices(monkeypatch):
    """--machine.num-devices N: N JAX devices in this one process (`settings.machine`), the flag
    left as given; ns-train's launch (hooked when the config is saved) runs one process for a
    jax-gs config and leaves another method's as nerfstudio has it."""
    import sys
    import types

    from nerfstudio_jaxgs.hooks import install_one_process_launch

    cfg = jax_gs_method.config
    c = dataclasses.replace(cfg, machine=MachineConfig(num_devices=2, device_type="cpu"),
                            pipeline=dataclasses.replace(cfg.pipeline, model=JaxGSModelConfig()))
    assert c.machine.num_devices == 2 and c.pipeline.model.num_devices == 0  # nothing rewritten
    assert machine(c.machine, c.pipeline.model) == Machine(replicas=2, processes=1, process_id=0, coordinator=None)
    assert machine(MachineConfig(), JaxGSModelConfig(num_devices=3)).replicas == 3
    with pytest.raises(InputError, match="--machine.num-devices 2 and --pipeline.model.num-devices 4 disagree"):
        machine(c.machine, JaxGSModelConfig(num_devices=4))
    launched = []
    train = types.ModuleType("nerfstudio.scripts.train")
    train.launch = lambda main_func, n, machines=1, rank=0, url="auto", config=None, **kw: launched.append((n, machines))
    monkeypatch.setitem(sys.modules, "nerfstudio.scripts.train", train)
    install_one_process_launch()
    install_one_process_launch()  # a second time changes nothing
    train.launch(None, 2, 1, 0, "auto", config=c)
    train.launch(None, 2, 3, 0, "auto", config=method_configs["splatfacto"])
    assert launched == [(1, 1), (2, 3)]


def test_machine_flags_start_jax_processes_not_torchs_process_group(tmp_path, monkeypatch):
    """--machine.num-machines/--machine.machine-rank/--machine.dist-url become JAX's multi-host
    runtime (nerfstudio's launch then runs one process, no torch process group); process 0 alone
    writes the config, logs and viewer; bad values stop with one line naming the flag."""
    from jax_backend.training import distributed

    cfg = jax_gs_method.config
    one = lambda **kw: dataclasses.replace(cfg, machine=MachineConfig(device_type="cpu", **kw),  # noqa: E731
                                           output_dir=tmp_path, vis="viewer+tensorboard")
    c = one(num_machines=2, machine_rank=1, dist_url="tcp://10.0.0.2:1234")
    assert machine(c.machine, c.pipeline.model) == Machine(0, 2, 1, "10.0.0.2:1234")
    assert (c.machine.num_machines, c.machine.machine_rank) == (2, 1)  # the flags as given
    assert not (c.main_process or c.is_viewer_enabled() or c.is_tensorboard_enabled())
    c.save_config()
    assert not list(tmp_path.rglob("config.yml"))  # process 1 writes nothing
    main = one(num_machines=2, machine_rank=0, dist_url="tcp://10.0.0.2:1234")
    assert main.main_process and main.is_viewer_enabled() and main.is_tensorboard_enabled()
    auto = one(num_machines=4, dist_url="auto")  # a TPU pod slice: JAX finds the coordinator and the rank
    assert machine(auto.machine, auto.pipeline.model) == Machine(0, 4, None, None)
    auto.save_config()
    assert not list(tmp_path.rglob("config.yml")) and not auto.is_viewer_enabled()  # until JAX gives the rank
    monkeypatch.setitem(distributed._started, "process_index", 0)  # as `initialize` records it
    assert auto.main_process and auto.is_viewer_enabled()
    assert machine(one().machine, one().pipeline.model).processes == 1 and one().main_process
    for kw, match in ((dict(num_machines=2, machine_rank=2), "machine-rank 2: must be between 0 and 1"),
                      (dict(num_machines=2, dist_url="10.0.0.2"), "dist-url '10.0.0.2': give tcp://HOST:PORT"),
                      (dict(num_machines=2, num_devices=2), "num-devices 2 with --machine.num-machines 2")):
        with pytest.raises(InputError, match=match):
            one(**kw).save_config()


def test_presets():
    big, mcmc = jax_gs_big_method.config, jax_gs_mcmc_method.config
    assert (big.method_name, mcmc.method_name) == ("jax-gs-big", "jax-gs-mcmc")
    assert big.pipeline.model.cull_alpha_thresh == 0.005 and big.pipeline.model.densify_grad_thresh == 0.0005
    # the optimizer groups as nerfstudio's splatfacto / splatfacto-big set them
    from nerfstudio.configs.method_configs import method_configs

    for ours, theirs in ((jax_gs_method.config, "splatfacto"), (big, "splatfacto-big")):
        for group in ("bilateral_grid", "camera_opt"):
            assert ours.optimizers[group]["optimizer"].lr == method_configs[theirs].optimizers[group]["optimizer"].lr, \
                (theirs, group)
    assert OPTIMIZERS["bilateral_grid"]["optimizer"].lr == 2e-3  # the big preset changed a copy
    s = train_config(mcmc.pipeline.model, max_steps=1000, num_train_data=NUM_TRAIN, optimizers=OPTIMIZERS).strategy
    assert type(s).__name__ == "MCMCStrategy" and s.budget == 1_000_000 and s.min_opacity == 0.005


def test_the_fast_preset_is_splatfactos_settings_shaped_for_time_to_quality():
    fast = jax_gs_fast_method.config
    assert fast.method_name == "jax-gs-fast" and fast.max_num_iterations == 2000
    model = fast.pipeline.model
    cfg = train_config(model, max_steps=fast.max_num_iterations, num_train_data=NUM_TRAIN, optimizers=fast.optimizers)
    assert [cfg.downscale_at(s) for s in (0, 899, 900, 1799, 1800)] == [4, 4, 2, 2, 1]  # full resolution: last 10%
    assert cfg.tile_size == 0 and train_config(model.__class__(), max_steps=2000, num_train_data=NUM_TRAIN,
                                               optimizers=fast.optimizers).tile_size == 16  # jax-gs: gsplat's 16
    assert cfg.strategy.budget == 100_000 and (cfg.strategy.refine_start, cfg.strategy.refine_stop) == (300, 1700)
    assert cfg.sh_degree_interval == 500 and cfg.optim.means.decay_steps == 30000  # splatfacto's rates
    # every piece is a setting a user overrides as splatfacto's
    cfg = train_config(dataclasses.replace(model, full_resolution_at=0.5, max_gaussians=0), max_steps=2000,
                       num_train_data=NUM_TRAIN, optimizers=fast.optimizers)
    assert cfg.downscale_at(1000) == 1 and cfg.strategy.budget == 0
    with pytest.raises(InputError, match="--pipeline.model.tile-size -8: pixels"):
        train_config(dataclasses.replace(model, tile_size=-8), max_steps=2000, num_train_data=NUM_TRAIN,
                     optimizers=fast.optimizers)
    for bad in (0.0, 1.5):
        with pytest.raises(InputError, match=f"--pipeline.model.full-resolution-at {bad}: a fraction"):
            train_config(dataclasses.replace(model, full_resolution_at=bad), max_steps=2000, num_train_data=NUM_TRAIN,
                         optimizers=fast.optimizers)


def test_random_start_fills_the_scene_box_or_splatfacto_s_cube():
    import numpy as np

    from jax_backend import random_init_box
    from nerfstudio_jaxgs.initial import initial_gaussians

    box = np.array([[-1.5, -1.0, -0.5], [1.5, 1.0, 0.5]])
    g = initial_gaussians(JaxGSModelConfig(num_random=3000), None, box)  # default: the scene's box
    means = np.asarray(g.params["means"])[np.asarray(g.alive)]
    assert len(means) == 3000
    assert np.all(means >= box[0]) and np.all(means <= box[1])
    assert np.all(means.min(0) < box[0] + 0.05) and np.all(means.max(0) > box[1] - 0.05)  # all of it
    g = initial_gaussians(JaxGSModelConfig(num_random=3000, random_scale=10.0), None, box)  # splatfacto's cube
    means = np.asarray(g.params["means"])[np.asarray(g.alive)]
    assert np.abs(means).max() > 4.5 and np.abs(means).max() <= 5.0
    with pytest.raises(InputError, match="random-scale -1"):
        initial_gaussians(JaxGSModelConfig(random_scale=-1.0), None, box)
    with pytest.raises(InputError, match="scene box .* min < max"):  # a dataparser's scene-scale 0
        initial_gaussians(JaxGSModelConfig(), None, np.zeros((2, 3)))
    # seed points need no box: a degenerate one does not stop a run that starts from them
    pts = (np.random.default_rng(0).normal(size=(50, 3)), np.full((50, 3), 128, np.uint8))
    assert int(np.asarray(initial_gaussians(JaxGSModelConfig(), pts, np.zeros((2, 3))).alive).sum()) == 50
    # without a scene box: a cube around the cameras, as far from their centre as the farthest one
    from scenes import look_at

    vms = np.stack([look_at([4.0 * np.cos(a), 0.5, 4.0 * np.sin(a)], [0, 0, 0]) for a in np.linspace(0, 2 * np.pi, 8, endpoint=False)])
    lo, hi = random_init_box(viewmats=vms)
    centre = np.linalg.inv(vms)[:, :3, 3].mean(0)
    np.testing.assert_allclose((lo + hi) / 2, centre, atol=1e-9)
    np.testing.assert_allclose((hi - lo) / 2, 1.1 * 4.0, rtol=1e-6)  # 3DGS's cameras extent


def test_datamanager_settings_jax_gs_does_not_honour_stop_with_their_name():
    from nerfstudio.data.datamanagers.full_images_datamanager import FullImageDatamanagerConfig

    from nerfstudio_jaxgs.settings import check_datamanager

    from nerfstudio_jaxgs.settings import DATAMANAGER_HONOURED, DATAMANAGER_UNSUPPORTED

    # every field is either honoured or refused: a field a newer nerfstudio adds fails here
    fields = {f.name for f in dataclasses.fields(FullImageDatamanagerConfig)} - {"_target"}
    assert fields == set(DATAMANAGER_HONOURED) | set(DATAMANAGER_UNSUPPORTED), fields
    check_datamanager(FullImageDatamanagerConfig(camera_res_scale_factor=0.5, cache_images_type="uint8"))  # honoured
    for field, value in (("train_cameras_sampling_strategy", "fps"), ("train_cameras_sampling_seed", 7),
                         ("fps_reset_every", 10)):
        with pytest.raises(InputError, match=f"--pipeline.datamanager.{field.replace('_', '-')} {value}: jax-gs draws"):
            check_datamanager(FullImageDatamanagerConfig(**{field: value}))


def test_newer_splatfactos_mcmc_names_drive_the_mcmc_strategy():
    """`max-gs-num`, `noise-lr`, `mcmc-opacity-reg`, `mcmc-scale-reg` (splatfacto's names in newer
    nerfstudio) set the MCMC strategy's budget, noise and regularisers; on the default strategy
    each stops the run naming it."""
    mcmc = jax_gs_mcmc_method.config.pipeline.model
    cfg = dataclasses.replace(mcmc, max_gs_num=250_000, noise_lr=1e5, mcmc_opacity_reg=0.02, mcmc_scale_reg=0.03)
    s = train_config(cfg, max_steps=1000, num_train_data=NUM_TRAIN, optimizers=OPTIMIZERS).strategy
    assert (s.budget, s.noise_lr, s.opacity_reg, s.scale_reg) == (250_000, 1e5, 0.02, 0.03)
    assert train_config(mcmc, max_steps=1000, num_train_data=NUM_TRAIN, optimizers=OPTIMIZERS).strategy.budget == 1_000_000  # preset's
    for name, value in (("max_gs_num", 5000), ("noise_lr", 1.0), ("mcmc_opacity_reg", 0.5), ("mcmc_scale_reg", 0.5)):
        with pytest.raises(InputError, match=f"--pipeline.model.{name.replace('_', '-')} {value}: only the MCMC"):
            train_config(JaxGSModelConfig(**{name: value}), max_steps=1000, num_train_data=NUM_TRAIN, optimizers=OPTIMIZERS)

