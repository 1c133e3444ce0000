import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_backend import CheckpointError, DefaultStrategy, MCMCStrategy, Snapshots, TrainConfig, Trainer, init_random, read_ply

from jax_backend.training import state_arrays
from synthetic import heldout_psnr, known_scene


@pytest.fixture(scope="module")
def scene():
    return known_scene()


def _trainer(train, strategy, capacity, max_steps, log=print, **kw):
    cfg = TrainConfig(max_steps=max_steps, steps_per_block=50, sh_degree=0, strategy=strategy, **kw)
    return Trainer(cfg, train, init_random(128, -1, 1, sh_degree=0, capacity=capacity), scene_extent=1.5, log=log)


@pytest.mark.parametrize("kind", ["default", "mcmc", "antialiased"])
def test_training_converges_on_heldout_views(scene, kind):
    gt, train, test = scene
    if kind in ("default", "antialiased"):  # antialiased: the default strategy through Mip-Splatting's filter
        strategy = DefaultStrategy(refine_start=100, refine_stop=800, refine_every=100, reset_every=10**6)
        tr = _trainer(train, strategy, 2048, 800, rasterize_mode="antialiased" if kind == "antialiased" else "classic")
    else:
        strategy = MCMCStrategy(budget=512, refine_start=100, refine_stop=1500, refine_every=50)
        tr = _trainer(train, strategy, 512, 1200)
    before = heldout_psnr(tr, test)
    log = []
    tr.train(callback=lambda t, m, i: log.append((t.step, float(m["psnr"].mean()), m["num_alive"], i)))
    after = heldout_psnr(tr, test)
    # over seeds 0-2 the MCMC run ends 18.6-19.8 dB from 13.6 (the view order and noise differ)
    assert after > before + 4.5, (before, after)
    # training PSNR too (the first block already learns; MCMC on this 2-core host: +3.93 dB, at this commit and the
    # ones before it, bit for bit)
    assert log[-1][1] > log[0][1] + 3.5
    alive = [a for _, _, a, _ in log]
    assert alive[-1] > 128  # densification grew the model
    if kind != "mcmc":
        assert any(i.n_pruned > 0 for *_, i in log) and any(i.n_split > 0 for *_, i in log)


def test_capacity_grows_and_keeps_state(scene):
    _, train, _ = scene
    msgs = []
    tr = _trainer(train, DefaultStrategy(refine_start=0, refine_every=50, grow_grad2d=0.0), 128, 100, log=msgs.append)
    tr.run_block()  # every Gaussian is a candidate: needs 256 slots
    assert tr.state.gaussians.capacity == 256 and any("capacity grown 128 -> 256" in m for m in msgs)
    assert int(jnp.sum(tr.state.gaussians.alive)) > 128
    before = state_arrays.state_arrays(tr)
    tr.grow_capacity(512)
    after = state_arrays.state_arrays(tr)
    assert sorted(before) == sorted(after)
    grown = [k for k in before if before[k].shape != after[k].shape]
    # every parameter, the alive mask, both statistics and both Adam moments of every group
    assert len(grown) == 6 + 1 + 2 + 2 * 6, grown
    for k, a in before.items():
        b = after[k]
        if k in grown:
            assert a.shape[0] == 256 and b.shape[0] == 512, k
            np.testing.assert_array_equal(b[:256], a, err_msg=k)  # carried over
            assert not np.any(b[256:]) or k.endswith("['quats']"), k  # new slots: zeros (dead)
        else:
            np.testing.assert_array_equal(a, b, err_msg=k)  # step, key, Adam counts untouched
    assert not after[".gaussians.alive"][256:].any()


def test_mcmc_grows_the_capacity_instead_of_capping_at_it(scene):
    _, train, _ = scene
    msgs = []
    tr = _trainer(train, MCMCStrategy(budget=1000, refine_start=0, refine_every=50), 128, 100, log=msgs.append)
    _, info = tr.run_block()  # the 128 slots are full: +5% needs 134
    assert tr.state.gaussians.capacity == 256 and any("capacity grown 128 -> 256" in m for m in msgs)
    assert int(jnp.sum(tr.state.gaussians.alive)) == 134 and info.n_added == 6


def test_overflowing_block_is_run_again_with_a_larger_buffer(scene):
    _, train, _ = scene
    msgs = []
    small = _trainer(train, DefaultStrategy(), 256, 100, log=msgs.append)
    small.isect_capacity = 64
    big = _trainer(train, DefaultStrategy(), 256, 100)
    m_small, _ = small.run_block()
    m_big, _ = big.run_block()
    assert any("intersection buffer too small" in m for m in msgs) and small.isect_capacity > 64
    assert not m_small["overflow"].any()
    np.testing.assert_allclose(m_small["loss"], m_big["loss"], rtol=1e-5)


def test_the_block_donates_its_state(scene):
    """The block program's input state is donated: after a block the arrays it was given are
    deleted (one copy of the state in device memory while a block runs)."""
    _, train, _ = scene
    tr = _trainer(train, DefaultStrategy(), 256, 100)
    given = tr.device_state.gaussians.params["means"]
    tr.run_block(5)
    assert given.is_deleted()
    assert tr.step == 5 and not tr.device_state.gaussians.params["means"].is_deleted()


def test_the_automatic_tile_size_trains_as_gsplats_16_pixel_tiles(scene):
    """tile_size 0: the Trainer picks 8-pixel tiles for the flat rasterizer on a CPU and 16
    elsewhere (`auto_tile_size`); a block with 8-pixel tiles trains as one with 16 (each step's
    images are the same at any tile size; only the order of the gradient sums differs)."""
    from jax_backend.rendering.composite import auto_tile_size

    assert (auto_tile_size("flat", "cpu"), auto_tile_size("flat", "tpu"), auto_tile_size("pallas", "gpu")) == (8, 16, 16)
    _, train, _ = scene
    auto = _trainer(train, DefaultStrategy(), 256, 100, tile_size=0)
    plain = _trainer(train, DefaultStrategy(), 256, 100)
    assert (auto.cfg.tile_size, plain.cfg.tile_size) == (8, 16)
    m_auto, _ = auto.run_block(20)
    m_plain, _ = plain.run_block(20)
    assert m_auto["num_intersections"].mean() > m_plain["num_intersections"].mean()  # smaller tiles, more pairs
    np.testing.assert_allclose(m_auto["loss"], m_plain["loss"], rtol=1e-4)


def test_the_buffer_is_sized_for_the_most_demanding_view():
    """View 0 sees a few Gaussians, another view all of them up close: the first block must not
    have to run again with a larger buffer."""
    from scenes import intrinsics, look_at

    from jax_backend import make_dataset

    w, h = 128, 96
    far, near = look_at([0, 0, -30.0], [0, 0, 0]), look_at([0, 0, -2.5], [0, 0, 0])
    K = intrinsics(w, h, 100.0)
    data = make_dataset([np.zeros((h, w, 3), np.uint8)] * 2, np.stack([far, near]), np.stack([K, K]))
    msgs = []
    cfg = TrainConfig(max_steps=20, steps_per_block=10, sh_degree=0, strategy=DefaultStrategy())
    tr = Trainer(cfg, data, init_random(4000, -1, 1, sh_degree=0), scene_extent=1.5, log=msgs.append)
    m, _ = tr.run_block()
    assert not any("intersection buffer too small" in x for x in msgs), msgs
    assert tr.isect_capacity >= int(m["num_intersections"].max())


def test_resume_gives_the_same_next_block(scene, tmp_path):
    _, train, _ = scene
    strategy = DefaultStrategy(refine_start=40, refine_every=50)
    a = _trainer(train, strategy, 256, 300)
    a.run_block()
    state_arrays.save(a, tmp_path / "ckpt.npz")
    a.run_block()
    b = _trainer(train, strategy, 256, 300)
    state_arrays.restore(b, tmp_path / "ckpt.npz")
    assert b.step == 50
    b.run_block()
    for x, y in zip(jax.tree_util.tree_leaves(a.state), jax.tree_util.tree_leaves(b.state)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_corrupt_checkpoint_gives_a_clear_error(scene, tmp_path):
    _, train, _ = scene
    tr = _trainer(train, DefaultStrategy(), 256, 100)
    path = state_arrays.save(tr, tmp_path / "ckpt.npz")
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="ckpt.npz"):
        state_arrays.restore(tr, path)
    with pytest.raises(CheckpointError, match="not found"):
        state_arrays.restore(tr, tmp_path / "missing.npz")


def test_snapshots_are_written_in_the_background(scene, tmp_path, monkeypatch):
    import threading

    import jax_backend.training.snapshots as snapshots_mod

    _, train, _ = scene
    original = snapshots_mod._write_snapshot
    release = threading.Event()

    def held(*args):  # a write that cannot finish until training is over
        release.wait(timeout=120)
        original(*args)

    monkeypatch.setattr(snapshots_mod, "_write_snapshot", held)
    tr = _trainer(train, DefaultStrategy(), 256, 150)
    tr.run_block()
    snaps = Snapshots(tmp_path, every=50)
    tr.train(callback=snaps)  # would wait 2 x 120 s if the loop waited for the writes
    assert snaps.writer.done == 0 and not list(tmp_path.glob("*.ply"))  # training ended before any write
    release.set()
    snaps.close()
    plys = sorted(tmp_path.glob("step_*.ply"))
    assert [p.name for p in plys] == ["step_000100.ply", "step_000150.ply"]
    assert read_ply(plys[-1])["means"].shape[0] == int(jnp.sum(tr.state.gaussians.alive))
    assert (tmp_path / "preview_000150.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_kill_during_write_leaves_previous_file_intact(tmp_path):
    target = tmp_path / "snapshot.bin"
    code = (
        "import sys; from jax_backend.files import atomic_write\n"
        "i = 0\n"
        "while True:\n"
        "    atomic_write(sys.argv[1], bytes([i % 256]) * (8 << 20)); i += 1\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)])
    try:
        deadline = time.time() + 60
        while not target.exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    data = target.read_bytes()
    assert len(data) == 8 << 20 and data.count(data[:1]) == len(data)  # one whole version


def test_a_run_never_ends_on_a_refinement(scene):
    """200 steps with an opacity reset every 100: the reset at 100 happens, the one that would fall
    on the last step does not, and the run ends with the opacities it trained."""
    _, train, _ = scene
    strategy = DefaultStrategy(refine_start=0, refine_every=100, reset_every=100)
    tr = _trainer(train, strategy, 256, 200)
    infos = []
    tr.train(callback=lambda t, m, i: infos.append(i))
    assert [i.opacity_reset for i in infos] == [False, True, False, False]  # blocks ending at 50, 100, 150, 200
    assert not infos[-1].refined
    o = np.asarray(jax.nn.sigmoid(tr.state.gaussians.params["opacities"]))[np.asarray(tr.state.gaussians.alive)]
    assert o.max() > 0.05  # trained back up after the reset at 100, not cut to 0.01 at the end


def test_coarse_to_fine_training_resolution(scene):
    from jax_backend.training.data import downscale_views

    _, train, _ = scene
    views = jnp.arange(2)
    masks = np.broadcast_to(train.masks[:2], train.images[:2].shape[:3])  # the dataset's [V, 1, W]: rows alike
    images, masks, Ks, w, h = downscale_views(train.images[views], masks, train.Ks[views], 2)
    full = np.asarray(train.images[:2], np.float32) / 255.0
    H, W = full.shape[1] // 2 * 2, full.shape[2] // 2 * 2
    expect = full[:, :H, :W].reshape(2, H // 2, 2, W // 2, 2, -1).mean((2, 4))
    np.testing.assert_allclose(np.asarray(images), expect, atol=1e-6)
    assert (w, h) == (W // 2, H // 2) and masks.shape == (2, h, w)
    np.testing.assert_allclose(np.asarray(Ks)[:, :2], np.asarray(train.Ks[:2])[:, :2] / 2)
    # a run with one downscale level trains at half resolution for its first 50 steps
    tr = _trainer(train, DefaultStrategy(refine_start=10**6), 256, 100, num_downscales=1, resolution_schedule=50)
    coarse, _ = tr.run_block()
    fine, _ = tr.run_block()
    assert coarse["num_intersections"].mean() < 0.7 * fine["num_intersections"].mean()


def test_short_runs_reach_full_resolution_by_their_middle():
    splatfacto = dict(num_downscales=2, resolution_schedule=3000)
    long_run = TrainConfig(max_steps=30000, **splatfacto)  # splatfacto's schedule, unchanged
    assert [long_run.downscale_at(s) for s in (0, 2999, 3000, 5999, 6000)] == [4, 4, 2, 2, 1]
    short = TrainConfig(max_steps=2000, **splatfacto)  # levels of 500 steps: full resolution from 1000
    assert [short.downscale_at(s) for s in (0, 499, 500, 999, 1000, 1999)] == [4, 4, 2, 2, 1, 1]
    assert TrainConfig(max_steps=1, **splatfacto).downscale_at(0) == 4  # (degenerate runs still work)
    assert TrainConfig(max_steps=2000).downscale_at(0) == 1
    # full resolution for the last 15% only (levels of 850 steps; jax-gs-fast's 10%: test_settings)
    fast = TrainConfig(max_steps=2000, full_resolution_at=0.85, **splatfacto)
    assert [fast.downscale_at(s) for s in (0, 849, 850, 1699, 1700, 1999)] == [4, 4, 2, 2, 1, 1]
    assert TrainConfig(max_steps=30000, full_resolution_at=0.85, **splatfacto).steps_per_level == 3000


def test_diverging_training_stops_naming_the_step_and_the_arrays(scene):
    """A learning rate that blows the scales up: run_block raises NonFiniteError naming the step
    range and the parameters, and the trainer keeps the state from before the block."""
    from dataclasses import replace

    from jax_backend import NonFiniteError, OptimConfig
    from jax_backend.training.optim import GroupConfig

    _, train, _ = scene
    tr = _trainer(train, DefaultStrategy(), 256, 100, optim=replace(OptimConfig(), scales=GroupConfig(1e30)))
    tr.cfg = replace(tr.cfg, steps_per_block=10)
    before = jax.device_get(tr.state.gaussians.params)
    with pytest.raises(NonFiniteError) as e:
        tr.run_block(10)
    msg = str(e.value)
    assert "diverged" in msg and "steps 0-9" in msg and "scales" in msg, msg
    assert tr.step == 0
    after = jax.device_get(tr.state.gaussians.params)
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_images_with_and_without_alpha_train_together():
    """RGBA among RGB images (nerfstudio reads both): those without alpha are opaque."""
    from jax_backend import make_dataset

    rgb = np.full((4, 5, 3), 10, np.uint8)
    rgba = np.full((4, 5, 4), 20, np.uint8)
    eye = np.eye(4, dtype=np.float32)
    data = make_dataset([rgb, rgba], np.stack([eye, eye]), np.stack([np.eye(3, dtype=np.float32)] * 2))
    images = np.asarray(data.images)
    assert images.shape == (2, 4, 5, 4)
    assert (images[0, ..., :3] == 10).all() and (images[0, ..., 3] == 255).all() and (images[1] == 20).all()
