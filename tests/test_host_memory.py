"""A capture's images are held once in the process (issue 68): the host arrays that the CPU devices
alias, nerfstudio's cache as views of them, and no copy of the capture at any moment while the
engine is built (measured as resident memory, in a process of its own)."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from jax_backend import make_dataset
from jax_backend.devices import CPU_ALIGNMENT, aliasable_zeros, padded_rows


def test_cpu_devices_alias_the_host_images():
    """`aliasable_zeros` is what a CPU device takes without a copy, alone or replicated; numpy's own
    allocation (16-byte aligned) is copied."""
    x = aliasable_zeros((3, 100, 1000), np.uint8, spare_rows=2)
    assert x.ctypes.data % CPU_ALIGNMENT == 0 and not x.any()
    cpus = jax.devices("cpu")
    assert jax.device_put(x, cpus[0]).unsafe_buffer_pointer() == x.ctypes.data
    mesh = jax.sharding.Mesh(np.array(cpus), ("d",))
    replicated = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    assert {s.data.unsafe_buffer_pointer() for s in replicated.addressable_shards} == {x.ctypes.data}
    padded = padded_rows(x, 5)  # the spare rows: the same buffer
    assert padded.shape == (5, 100, 1000) and padded.ctypes.data == x.ctypes.data and not padded.any()
    other = np.ones((3, 4), np.float32)  # no room after it: a copy, zero padded
    assert np.array_equal(padded_rows(other, 4), np.concatenate([other, np.zeros((1, 4), np.float32)]))


def test_a_dataset_keeps_one_mask_row_when_every_pixel_trains():
    rng = np.random.default_rng(0)
    same = [rng.integers(0, 256, (6, 8, 3), np.uint8) for _ in range(3)]
    cams = np.tile(np.eye(4, dtype=np.float32), (3, 1, 1)), np.tile(np.eye(3, dtype=np.float32), (3, 1, 1))
    data = make_dataset(list(same), *cams, on_device=False)
    assert data.masks.shape == (3, 1, 8) and data.masks.all()
    assert np.array_equal(data.images, np.stack(same))
    sizes = [same[0], same[1][:5], same[2]]  # padding: each pixel's own mask
    data = make_dataset(sizes, *cams, on_device=False)
    assert data.masks.shape == (3, 6, 8) and data.masks[0].all() and not data.masks[1, 5].any()
    listed, masks = list(same), [np.ones((6, 8), bool)] * 3
    data = make_dataset(listed, *cams, masks=masks, on_device=False, release=True)
    assert listed == [None] * 3 and masks == [None] * 3 and data.masks.shape == (3, 6, 8)


PROBE = """
import json, sys
from pathlib import Path
import numpy as np
from nerfstudio.data.datamanagers.full_images_datamanager import FullImageDatamanagerConfig
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig
from nerfstudio_jaxgs.model import JaxGSModelConfig
from nerfstudio_jaxgs.pipeline import JaxGSPipelineConfig

def status(key):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key))

dm = FullImageDatamanagerConfig(dataparser=NerfstudioDataParserConfig(data=Path(sys.argv[1])), cache_images_type="uint8")
pipeline = JaxGSPipelineConfig(datamanager=dm, model=JaxGSModelConfig(num_random=500)).setup(device="cpu",
                                                                                              test_mode="val")
import gc; gc.collect()
before = status("VmRSS:")
open("/proc/self/clear_refs", "w").write("5")  # the peak counted from here
engine = pipeline.start_engine(10)
images = np.asarray(engine.data.images)
cached = pipeline.datamanager.cached_train[0]["image"].numpy()
print(json.dumps(dict(before=before, peak=status("VmHWM:"), after=status("VmRSS:"), images=int(images.nbytes),
                      shares=bool(np.shares_memory(cached, images)))))
"""


def test_building_the_engine_holds_the_capture_once(tmp_path):
    """Through jax-gs's pipeline on a capture of 201 photos of 540x960 (0.29 GiB as uint8 RGB):
    nerfstudio caches them, jax-gs copies them into its dataset view by view and places that on
    both CPU devices. The process's peak resident memory over all of it grows by at most 1.1x the
    images' bytes and 128 MiB (JAX's start, the small arrays); holding them twice, as before, took
    2x and more."""
    from captures import write_large_capture

    write_large_capture(tmp_path / "scene")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE), str(tmp_path / "scene")], capture_output=True,
                         text=True, timeout=600, cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["shares"], "nerfstudio's cache is not a view of the engine's images"
    grown = r["peak"] - r["before"]
    assert grown <= 1.1 * r["images"] + 2**27, (f"peak RSS grew {grown / 2**30:.2f} GiB for images of "
                                                 f"{r['images'] / 2**30:.2f} GiB: {r}")


def test_a_capture_larger_than_the_host_memory_stops_before_caching(monkeypatch, capsys):
    """The fox's 67 images of 135x240 take 6.2 MiB as uint8 RGB (the evaluation views too): with
    less memory available the run stops in one line, naming the capture and what helps; with
    little to spare it says so and trains."""
    from nerfstudio.data.datamanagers.full_images_datamanager import FullImageDatamanagerConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from commands import FOX
    from nerfstudio_jaxgs import checks
    from nerfstudio_jaxgs.errors import InputError
    from nerfstudio_jaxgs.model import JaxGSModelConfig
    from nerfstudio_jaxgs.pipeline import JaxGSPipelineConfig

    def pipeline():
        dm = FullImageDatamanagerConfig(dataparser=NerfstudioDataParserConfig(data=FOX), cache_images_type="uint8")
        return JaxGSPipelineConfig(datamanager=dm, model=JaxGSModelConfig(num_random=500)).setup(device="cpu",
                                                                                                 test_mode="val")

    monkeypatch.setattr(checks, "available_memory", lambda: 5 * 2**20)
    with pytest.raises(InputError) as e:
        pipeline()
    assert ("the capture's 67 images (up to 135x240 pixels) take 0.01 GiB of host memory as uint8 and the host "
            "has 0.00 GiB available: the dataparser's --downscale-factor 2") in str(e.value)
    monkeypatch.setattr(checks, "available_memory", lambda: 2**30)
    p = pipeline()
    assert "less than 2 GiB is left for training" in capsys.readouterr().out
    assert p.start_engine(10).data.num_views > 0


def test_a_block_on_two_cpu_devices_keeps_no_copy_of_the_image_table():
    """Two CPU devices share a view's tiles and split its loss by rows: the compiled block's
    temporaries hold the step's view, not the table split by rows (a copy of every image, as XLA
    made it when the split propagated back through the step's gather)."""
    import jax.numpy as jnp

    from tools.programs import scene_views
    from jax_backend import Trainer, make_layout
    from jax_backend.training import aot
    from jax_backend.training.initialization import init_from_points
    from nerfstudio_jaxgs import config as methods
    from nerfstudio_jaxgs.settings import train_config

    views, width, height = 240, 352, 320  # 112,640 pixels a view: the loss split by rows
    spec = methods.jax_gs_method
    cfg = train_config(spec.config.pipeline.model, max_steps=1000, num_train_data=views,
                       optimizers=spec.config.optimizers)
    means, _, _, _, colors, viewmats, Ks = scene_views(4096, width, height)
    reps = -(-views // len(viewmats))
    data = make_dataset(np.zeros((views, height, width, 3), np.uint8), np.tile(viewmats, (reps, 1, 1))[:views],
                        np.tile(Ks, (reps, 1, 1))[:views], on_device=False)
    g = init_from_points(means, colors, sh_degree=cfg.sh_degree, capacity=4096)
    tr = Trainer(cfg, data, g, 1.0, isect_capacity=1 << 16, log=lambda *_: None,
                 layout=make_layout(replicas=1, tile_devices=2))
    tr.state = tr.state._replace(step=jnp.int32(900))  # full resolution
    temp = aot.lower_block(tr, 2, None).compile().memory_analysis().temp_size_in_bytes
    table = data.images.nbytes  # 81 MB
    assert temp < table / 2, f"{temp / 2**20:.0f} MiB of temporaries for a {table / 2**20:.0f} MiB table"
