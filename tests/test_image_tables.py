"""Where training keeps its images (`image_tables`): in host memory, each block's views copied to
the device ahead of it, training is bit-identical to the images on the device; data-parallel
replicas hold the dataset once between them; "auto" keeps images off a device they would crowd."""

import jax
import numpy as np
import pytest

from jax_backend import DefaultStrategy, OptimConfig, TrainConfig, Trainer, ViewPlan, init_random, make_layout
from jax_backend.training.data import view_bucket
from jax_backend.training.image_tables import IMAGES_SHARE, where_images_go
from captures import write_large_capture
from synthetic import known_scene


@pytest.fixture(scope="module")
def scene():
    return known_scene(views=16)


def _trainer(train, images, layout=None, views_per_device=1, steps_per_block=10):
    # refinement inside the run: the images' place must not change what density control sees
    cfg = TrainConfig(max_steps=60, steps_per_block=steps_per_block, sh_degree=1, sh_degree_interval=20,
                      strategy=DefaultStrategy(refine_start=10, refine_every=20, reset_every=10**6),
                      optim=OptimConfig().with_eps(1e-6))
    g = init_random(200, -1, 1, sh_degree=1, capacity=512)
    return Trainer(cfg, train, g, scene_extent=1.5, log=lambda m: None, images=images,
                   layout=layout or make_layout(replicas=1, tile_devices=1), views_per_device=views_per_device)


def _same_training(a: Trainer, b: Trainer, blocks: int):
    for _ in range(blocks):
        ma, _ = a.run_block()
        mb, _ = b.run_block()
        np.testing.assert_array_equal(ma["view"], mb["view"])
        np.testing.assert_array_equal(ma["loss"], mb["loss"])
    for x, y in zip(jax.tree_util.tree_leaves(a.state), jax.tree_util.tree_leaves(b.state)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_host_images_train_bit_identical_to_device_images(scene):
    _, train, _ = scene
    host, device = _trainer(train, "host"), _trainer(train, "device")
    assert (host.images_where, device.images_where) == ("host", "device")
    # a block of 10 steps holds its 10 views, not the dataset's 14
    assert host.images.block_table(0, 10).images.shape[0] == 10
    _same_training(host, device, 4)  # 40 steps: past an epoch of the 16 views, through two refinements


def test_a_block_trains_the_views_drawn_ahead_of_it(scene):
    _, train, _ = scene
    tr = _trainer(train, "host", steps_per_block=20)
    ahead = tr.plan.block_views(0, 20)
    metrics, _ = tr.run_block()
    np.testing.assert_array_equal(metrics["view"], ahead)
    assert (20, 20) in tr.images._tables  # the next block's table was started during this one


@pytest.mark.devices(2)
@pytest.mark.parametrize("images", ["device", "host"])
def test_data_parallel_replicas_hold_the_dataset_once(scene, images):
    _, train, _ = scene
    par = _trainer(train, images, make_layout(replicas=2, tile_devices=1))
    table = par.images.block_table(0, 10)
    per_replica = [s.data.shape[0] for s in table.images.addressable_shards]
    assert len(per_replica) == 2  # one slice per replica device, not a copy each
    if images == "device":
        V = train.num_views  # dealt to 2 lanes: each replica holds half
        assert per_replica == [1, 1] and table.images.shape[1] == view_bucket(-(-V // 2))
        rows = [ViewPlan(V, 1, 2).lane_rows(r) for r in range(2)]
        assert sorted(set(np.concatenate(rows).tolist())) == list(range(V))
    # the same training as one device rendering both lanes' views in a batch (the replicas sum
    # their gradients in another order: equal to rounding)
    one = _trainer(train, images, make_layout(replicas=1, tile_devices=1), views_per_device=2)
    for _ in range(3):
        mp, _ = par.run_block()
        mo, _ = one.run_block()
        np.testing.assert_array_equal(mp["view"], mo["view"])
        np.testing.assert_allclose(mp["loss"], mo["loss"], rtol=1e-4)


def test_auto_keeps_images_on_the_device_while_they_take_half_of_it(scene):
    assert where_images_go("auto", 100, None)[0] == "device"  # nothing reported (a CPU): on the device
    assert where_images_go("auto", 100, int(100 / IMAGES_SHARE))[0] == "device"
    where, why = where_images_go("auto", 3 * 2**30, 4 * 2**30)
    assert where == "host" and "3.00 GiB" in why and "4.00 GiB" in why
    assert where_images_go("host", 1, 10**12)[0] == "host"
    with pytest.raises(ValueError, match="'disk'"):
        where_images_go("disk", 1, None)
    _, train, _ = scene
    tr = Trainer(TrainConfig(max_steps=10, sh_degree=0), train, init_random(64, -1, 1, sh_degree=0, capacity=64), 1.5,
                 log=lambda m: None, device_bytes=train.image_bytes)  # the images would take all of it
    assert tr.images_where == "host"


def _fox_pipeline(**settings):
    from nerfstudio.data.datamanagers.full_images_datamanager import FullImageDatamanagerConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from commands import FOX
    from nerfstudio_jaxgs.model import JaxGSModelConfig
    from nerfstudio_jaxgs.pipeline import JaxGSPipelineConfig

    cache = settings.pop("cache_images", "gpu")
    dm = FullImageDatamanagerConfig(dataparser=NerfstudioDataParserConfig(data=FOX), cache_images_type="uint8",
                                    cache_images=cache)
    model = JaxGSModelConfig(steps_per_block=10, num_random=500, **settings)
    return JaxGSPipelineConfig(datamanager=dm, model=model).setup(device="cpu", test_mode="val")


def test_fox_trains_the_same_with_its_images_on_the_host(capsys):
    """Through jax-gs's pipeline (nerfstudio's datamanager): cache-images cpu (which, on a machine
    without CUDA, nerfstudio's own caching cannot pin), and "auto" under a device memory the
    images would crowd, each train as the images on the device do, bit for bit."""
    runs = {"device": _fox_pipeline(), "cpu": _fox_pipeline(cache_images="cpu"),
            "auto": _fox_pipeline(device_memory_gb=0.004)}  # the fox's 61 images take 0.01 GiB
    rays = {name: p.datamanager.get_train_rays_per_batch() for name, p in runs.items()}  # from nerfstudio's cache
    wheres = {name: p.start_engine(100).images_where for name, p in runs.items()}
    assert wheres == {"device": "device", "cpu": "host", "auto": "host"}
    out = capsys.readouterr().out
    assert "training images (0.01 GiB) stay in host memory (--pipeline.datamanager.cache-images cpu)" in out
    assert "more than 50% of the device's 0.00 GiB: --pipeline.model.device-memory-gb)" in out
    for name, p in runs.items():
        for _ in range(2):
            p.train_block(10, 100)
        assert p.datamanager.get_train_rays_per_batch() == rays[name]  # nerfstudio's cache, views of the engine's
    states = [jax.tree_util.tree_leaves(p.engine.state) for p in runs.values()]
    for other in states[1:]:
        for x, y in zip(states[0], other):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert len(runs["cpu"].datamanager.cached_eval) > 0  # the evaluation images cached without pinning


@pytest.mark.slow
def test_ns_train_streams_a_capture_larger_than_the_device_memory_it_is_given(tmp_path):
    """ns-train on a generated capture whose images take more than half of the device memory it is
    told it has (--pipeline.model.device-memory-gb: a CPU reports none): one line says the images
    stay in host memory, and training runs, each block's views copied ahead of it."""
    from commands import BIN, run_command

    frames = write_large_capture(tmp_path / "scene")  # ~200 images of 540x960: about 0.27 GiB decoded
    out = run_command([BIN / "ns-train", "jax-gs", "--data", tmp_path / "scene", "--output-dir", tmp_path / "out",
                       "--max-num-iterations", 20, "--vis", "tensorboard", "--viewer.quit-on-train-completion", "True",
                       "--pipeline.model.steps-per-block", 10, "--pipeline.model.num-random", 5000,
                       "--pipeline.model.device-memory-gb", 0.25], timeout=900)
    text = out.stdout + out.stderr
    assert frames > 150
    line = next(line for line in text.splitlines() if "stay in host memory" in line)
    assert "more than 50% of the device's 0.25 GiB: --pipeline.model.device-memory-gb" in line, line
    assert "(10 images at most" in line, line
    assert list((tmp_path / "out").rglob("*.ckpt")), text[-2000:]
