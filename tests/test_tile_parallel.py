"""One view's tiles dealt over several devices (`rendering.tile_parallel`): the same rendered
images bit for bit (under differentiation, within the projection's rounding) and the same
gradients up to summation order as one device, for both rasterizers, with a device count that
does not divide the tiles; training picks it on a CPU and keeps its state and checkpoints as on
one device."""
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_backend import OptimConfig, TrainConfig, Trainer, init_random, traced_rasterization

from jax_backend.training import state_arrays
from jax_backend.layout import cpu_cores, make_layout
from jax_backend.rendering.tile_parallel import deal
from scenes import cameras, hard_scene
from synthetic import known_scene

pytestmark = pytest.mark.devices(3)


def test_deal_gives_every_tile_once_heaviest_spread():
    work = jnp.array([5, 0, 9, 3, 7, 1, 8])
    idx = np.asarray(deal(work, 3))
    assert idx.shape == (9,)
    real = idx[idx < 7]
    assert sorted(real) == list(range(7)) and np.sum(idx == 7) == 2  # two padding tiles
    blocks = idx.reshape(3, 3)
    assert sorted(blocks[:, 0]) == [2, 4, 6]  # the three heaviest tiles start the three devices' shares


@pytest.mark.parametrize("rasterizer", ["flat", "standard"])
def test_dealt_tiles_render_and_differentiate_as_one_device(rasterizer):
    w, h = 77, 53  # 5 x 4 tiles: 3 devices need a padding tile
    scene = hard_scene()
    vms, Ks = cameras(w, h, n=2)
    args = [jnp.asarray(scene[k], jnp.float32) for k in ("means", "quats", "scales", "opacities", "colors")]
    target = jnp.asarray(np.random.default_rng(0).uniform(0, 1, (2, h, w, 3)), jnp.float32)

    def run(devices):
        def loss(*a):
            img, alpha, meta = traced_rasterization(*a, vms, Ks, w, h, rasterizer=rasterizer, isect_capacity=1 << 12,
                                             render_mode="RGB+ED", layout=make_layout(tile_devices=devices))
            return jnp.mean((img[..., :3] - target) ** 2) + jnp.mean(alpha * img[..., 3:]), (img, alpha, meta)

        (_, (img, alpha, meta)), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4), has_aux=True))(*args)
        assert not bool(np.any(meta["overflow"]))
        return np.asarray(img), np.asarray(alpha), [np.asarray(g) for g in grads]

    def render(devices):
        img, alpha, _ = jax.jit(lambda *a: traced_rasterization(*a, vms, Ks, w, h, rasterizer=rasterizer, isect_capacity=1 << 12,
                                                         render_mode="RGB+ED", layout=make_layout(tile_devices=devices)))(*args)
        return np.asarray(img), np.asarray(alpha)

    img1, alpha1, grads1 = run(1)
    shown1 = render(1)
    for devices in (2, 3):
        for a, b in zip(render(devices), shown1):  # a render (eval, viewer): bit for bit
            np.testing.assert_array_equal(a, b)
        img, alpha, grads = run(devices)
        # under differentiation the gradient leaves the dealt backward split by rows (a training
        # step's layout, `tile_parallel.gathered`), and XLA runs the projection on each device's
        # rows too: its conics round differently by ~1e-6 relative, which the hard scene's huge
        # splats amplify, and a few pixels cross alpha thresholds (measured: 6.3e-4 in colour,
        # 1.5e-4 in alpha, 3.1e-6 on average over the image)
        np.testing.assert_allclose(img, img1, atol=2e-3)
        np.testing.assert_allclose(alpha, alpha1, atol=5e-4)
        assert np.abs(img - img1).mean() < 2e-5
        # the per-Gaussian sums are added in another tile order: the hard scene's huge splats sum
        # conic gradients that cancel, and one device walking the tiles in the dealt order differs
        # from the row-major order by the same 3e-4 of the largest entry (measured) as 2 or 3 devices
        for g, g1 in zip(grads, grads1):
            np.testing.assert_allclose(g, g1, rtol=1e-4, atol=5e-4 * np.abs(g1).max())


def test_training_deals_tiles_on_a_cpu_and_keeps_one_devices_state(tmp_path, monkeypatch):
    monkeypatch.delenv("JAXGS_TILE_DEVICES", raising=False)  # the machine's default (conftest sets 1 for workers)
    _, train, test = known_scene(views=8)
    cfg = TrainConfig(max_steps=40, steps_per_block=10, sh_degree=1, sh_degree_interval=10,
                      optim=OptimConfig().with_eps(1e-6))  # see test_parallel: rounding noise stays put
    g = init_random(256, -1, 1, sh_degree=1, capacity=512)
    auto = Trainer(cfg, train, g, scene_extent=1.5, log=lambda m: None)
    assert auto.layout.tile_devices == make_layout().tile_devices == min(len(jax.local_devices()), cpu_cores()) > 1
    one = Trainer(cfg, train, g, scene_extent=1.5, log=lambda m: None, layout=make_layout(tile_devices=1))
    for _ in range(3):
        ma, _ = auto.run_block()
        mo, _ = one.run_block()
    np.testing.assert_allclose(ma["loss"], mo["loss"], rtol=1e-4)
    leaf = auto.state.gaussians.params["means"]
    assert len(leaf.devices()) == 1  # what the plugin and checkpoints read: one device's copy
    np.testing.assert_allclose(np.asarray(leaf), np.asarray(one.state.gaussians.params["means"]), atol=1e-4)
    path = state_arrays.save(auto, tmp_path / "ckpt.npz")
    again = Trainer(cfg, train, g, scene_extent=1.5, log=lambda m: None)
    state_arrays.restore(again, path)
    assert again.step == auto.step
    m1, _ = auto.run_block()
    m2, _ = again.run_block()
    np.testing.assert_array_equal(m1["loss"], m2["loss"])


def test_training_splits_the_gaussians_rows_over_the_tile_devices():
    """Each tile device keeps and updates its share of the per-Gaussian rows (parameters, Adam's
    moments, statistics); an odd capacity is padded with dead slots so the rows split evenly, and
    the run trains as on one device."""
    _, train, _ = known_scene(views=8)
    cfg = TrainConfig(max_steps=30, steps_per_block=10, sh_degree=1, sh_degree_interval=10,
                      optim=OptimConfig().with_eps(1e-6))
    g = init_random(255, -1, 1, sh_degree=1, capacity=511)
    two = Trainer(cfg, train, g, scene_extent=1.5, log=lambda m: None, layout=make_layout(tile_devices=2))
    one = Trainer(cfg, train, g, scene_extent=1.5, log=lambda m: None, layout=make_layout(tile_devices=1))
    assert two.state.gaussians.capacity == 512 and one.state.gaussians.capacity == 511
    for _ in range(2):
        m2, _ = two.run_block()
        m1, _ = one.run_block()
        np.testing.assert_allclose(m2["loss"], m1["loss"], rtol=1e-4)
        assert m2["num_alive"] == m1["num_alive"] == 255
    leaves = jax.tree_util.tree_leaves(two.device_state)
    split = [x for x in leaves if x.ndim and x.shape[0] == 512]
    assert len(split) >= 10  # parameters, alive, Adam's two moments of each parameter, statistics
    for x in split:
        assert [s.data.shape[0] for s in x.addressable_shards] == [256, 256]
    assert two.device_state.step.sharding.is_fully_replicated
    np.testing.assert_allclose(np.asarray(two.state.gaussians.params["means"])[:511],
                               np.asarray(one.state.gaussians.params["means"]), atol=1e-4)


def test_the_environment_sets_the_automatic_tile_devices(monkeypatch):
    """$JAXGS_TILE_DEVICES bounds the automatic count (several jobs sharing the cores set 1); a
    value that is not a positive whole number stops with one line naming the variable."""
    monkeypatch.setenv("JAXGS_TILE_DEVICES", "1")
    assert make_layout().tile_devices == 1
    monkeypatch.setenv("JAXGS_TILE_DEVICES", "64")  # more than the host's devices: all of them
    assert make_layout().tile_devices == len(jax.local_devices())
    monkeypatch.setenv("JAXGS_TILE_DEVICES", "2")
    assert make_layout(replicas=2).tile_devices == 1  # data parallelism keeps one tile device
    for bad in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv("JAXGS_TILE_DEVICES", bad)
        with pytest.raises(ValueError, match=f"JAXGS_TILE_DEVICES='{bad}'"):
            make_layout()


def test_a_layout_is_one_value_checked_once():
    """The counts: replicas x tile devices past the host's devices stops with one line naming
    both, a count past them names the setting; automatic counts follow the platform; the layout is
    hashable (part of every program's cache key) and moves to other devices whole."""
    with pytest.raises(ValueError, match="replicas 3 x tile_devices 2 need 6 devices; this host has 4"):
        make_layout(replicas=3, tile_devices=2)
    both = make_layout(replicas=2, tile_devices=2)  # a 2 x 2 mesh: each replica's Gaussians over 2 devices
    assert both.mesh().devices.shape == (2, 2) and both.data_parallel and both.rows_multiple == 2
    assert make_layout(replicas=2).tile_devices == 1  # automatic: 1
    with pytest.raises(ValueError, match="replicas must be between 0 .automatic. and 4"):
        make_layout(replicas=5)
    with pytest.raises(ValueError, match="tile_devices must be between 0 .automatic. and 4"):
        make_layout(tile_devices=9)
    assert make_layout(tile_devices=9, clamp_tile_devices=True).tile_devices == 4
    layout = make_layout(replicas=2)
    assert hash(layout) == hash(make_layout(replicas=2)) and layout.data_parallel and layout.platform == "cpu"
    moved = layout.on(jax.local_devices()[2:])
    assert moved.devices == tuple(jax.local_devices()[2:4]) and moved.replicas == 2
    with pytest.raises(ValueError, match="uses 2 devices; the target has 1"):
        layout.on(jax.local_devices()[:1])


def test_use_cpu_cores_gives_one_cpu_device_per_core_and_a_spare():
    code = ("import jax; from jax_backend.devices import use_cpu_cores, cpu_cores;"
            "n = use_cpu_cores(); print(n, len(jax.local_devices()), cpu_cores(), use_cpu_cores())")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0, out.stderr
    asked, devices, cores, again = map(int, out.stdout.split())
    assert asked == devices == cores + 1 and again == 0  # once the backend runs it changes nothing


def test_eager_dealt_render_takes_arrays_committed_to_one_device():
    """The plugin renders (eval during training, the viewer) from the trainer's state, a copy
    committed to one device; dealing its tiles over several devices moves it there (the same
    image as one device)."""
    from jax_backend import render_gaussians

    _, train, _ = known_scene(views=2)
    g = jax.device_put(init_random(256, -1, 1, sh_degree=1, capacity=512), jax.local_devices()[0])
    kw = dict(sh_degree=1, depth=False)
    one = render_gaussians(g, train.viewmats[0], train.Ks[0], train.width, train.height,
                           layout=make_layout(tile_devices=1), **kw)
    two = render_gaussians(g, train.viewmats[0], train.Ks[0], train.width, train.height,
                           layout=make_layout(tile_devices=2), **kw)
    np.testing.assert_array_equal(np.asarray(two[0]), np.asarray(one[0]))


def test_a_block_with_the_rows_split_compiles_for_other_devices_with_its_share_of_the_state():
    """`aot.lower_block` builds a tile-dealing trainer's block for other devices (here two other CPU
    devices; a TPU topology's the same way: benchmarks/accelerator_compile.py block-shard4) with
    the state placed as the trainer places it: each device's arguments hold its half of the
    per-Gaussian rows, so they are about half of one device's."""
    from jax_backend.training import aot

    _, train, _ = known_scene(views=4)
    cfg = TrainConfig(max_steps=100, steps_per_block=2, sh_degree=1, sh_degree_interval=10)
    g = init_random(4000, -1, 1, sh_degree=1, capacity=8192)
    sizes = {}
    for n in (1, 2):
        tr = Trainer(cfg, train, g, scene_extent=1.5, log=lambda m: None, layout=make_layout(tile_devices=n))
        target = jax.local_devices()[2:2 + n]
        compiled = aot.lower_block(tr, 2, target).compile()
        sizes[n] = compiled.memory_analysis().argument_size_in_bytes
        assert {d.id for d in compiled.input_shardings[0][2].gaussians.alive.device_set} == {d.id for d in target}
    state = 8192 * (3 + 3 + 4 + 1 + 3 + 9) * 4 * 3  # parameters and Adam's two moments, float32
    assert sizes[1] - sizes[2] > 0.4 * state, sizes


def test_the_loss_of_large_images_is_split_by_rows_and_trains_as_one_device(monkeypatch):
    """On a CPU dealing tiles, a large image's loss is computed by rows on each tile device
    (`step.split_for_the_loss`); the run trains as on one device. The threshold is lowered so that
    the known scene's small images take that path."""
    from jax_backend.training import step

    monkeypatch.setattr(step, "LOSS_ROWS_MIN_PIXELS", 0)
    layout = make_layout(tile_devices=2)
    text = jax.jit(lambda x: step.split_for_the_loss(layout, x, None)[0]).lower(jnp.zeros((1, 8, 6, 3))).as_text()
    assert '[{}, {"tiles"}, {}, {}]' in text  # the image's rows (H) over the tile devices
    _, train, _ = known_scene(views=8)
    cfg = TrainConfig(max_steps=30, steps_per_block=10, sh_degree=1, sh_degree_interval=10,
                      optim=OptimConfig().with_eps(1e-6))
    g = init_random(256, -1, 1, sh_degree=1, capacity=512)
    two = Trainer(cfg, train, g, scene_extent=1.5, log=lambda m: None, layout=layout)
    one = Trainer(cfg, train, g, scene_extent=1.5, log=lambda m: None, layout=make_layout(tile_devices=1))
    for _ in range(2):
        m2, _ = two.run_block()
        m1, _ = one.run_block()
        np.testing.assert_allclose(m2["loss"], m1["loss"], rtol=1e-4)
    np.testing.assert_allclose(np.asarray(two.state.gaussians.params["means"]),
                               np.asarray(one.state.gaussians.params["means"]), atol=1e-4)
