"""Every program kind jax-gs runs keeps compiling for TPU and GPU: a small train block (with density
control), density control alone and an eval render, compiled on this CPU for TPU v5e and v6e topologies
(deviceless, through libtpu: `pip install -e ".[tpu]"`) and for an H200 (XLA's GPU compiler:
`pip install -e ".[gpu]"`), in a child process (the plugin is loaded there only). The full-size
table is `benchmarks/accelerator_compile.py`'s."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys
import numpy as np
try:
    from benchmarks.accelerator_compile import target_devices
    target = target_devices(sys.argv[1])
except Exception as e:  # libtpu or the CUDA plugin missing or unable to load
    print("SKIP " + (str(e).strip().splitlines() or [type(e).__name__])[0][:200]); sys.exit(0)
import jax, jax.numpy as jnp
from benchmarks import launches
from jax_backend import (Trainer, TrainConfig, compile_for, init_from_points, make_dataset, make_strategy,
                         rasterization)
from jax_backend.devices import abstract, lowering_platform, platform
gpu = target[0].platform == "gpu"

def census(compiled):
    text = compiled.as_text()
    count = launches.launches(text)
    return {"temp": compiled.memory_analysis().temp_size_in_bytes, "sorts": text.count(" sort("),
            "whiles": count.while_loops, "data_dependent": count.data_dependent,
            "triton": text.count("__gpu$xla.gpu.triton")}

rng = np.random.default_rng(0)
V, W, H, N = 3, 64, 48, 2000
points = rng.normal(size=(N, 3)) * 0.5
viewmats = np.repeat(np.eye(4, dtype=np.float32)[None], V, 0)
viewmats[:, 2, 3] = 3.0
viewmats[:, 0, 3] = np.linspace(-0.1, 0.1, V)
Ks = np.repeat(np.array([[[60.0, 0, 32], [0, 60.0, 24], [0, 0, 1]]], np.float32), V, 0)
data = make_dataset(np.zeros((V, H, W, 3), np.uint8), viewmats, Ks)
out = {}
for name in ("default", "mcmc"):
    cfg = TrainConfig(max_steps=1000, steps_per_block=5, tile_devices=1, strategy=make_strategy(name),
                      background="random")
    tr = Trainer(cfg, data, init_from_points(points, sh_degree=3, capacity=2048), 1.0, isect_capacity=1 << 15,
                 log=lambda *_: None)
    tr.state = tr.state._replace(step=jnp.int32(600))  # density control live
    out[name] = census(tr.lower_block(5, target).compile())
    if name == "default":
        refine = tr.lower_refine(target).compile()
        out["refine_temp"] = refine.memory_analysis().temp_size_in_bytes
cfg = TrainConfig(max_steps=1000, steps_per_block=5, tile_devices=1, strategy=make_strategy("default", budget=3000))
tr = Trainer(cfg, data, init_from_points(points, sh_degree=3, capacity=4096), 1.0, isect_capacity=1 << 15,
             log=lambda *_: None)
out["budget_refine_sorts"] = tr.lower_refine(target).compile().as_text().count(" sort(")

def render(m, q, s, o, c, vm, K):
    return rasterization(m, q, s, o, c, vm, K, W, H, sh_degree=3, render_mode="RGB+ED", isect_capacity=1 << 15)[:2]

def loss(m, q, s, o, c, vm, K):
    img, alpha, _ = rasterization(m, q, s, o, c, vm, K, W, H, sh_degree=3, isect_capacity=1 << 15)
    return jnp.sum(img) + jnp.sum(alpha)

args = (points, np.tile([1.0, 0, 0, 0], (N, 1)), np.full((N, 3), 0.02), np.full(N, 0.5), np.zeros((N, 16, 3)),
        viewmats[:1], Ks[:1])
lowered = {}
with compile_for(target[:1]):
    out["platform_inside"] = platform()
    spec = abstract([np.asarray(a, np.float32) for a in args], jax.sharding.SingleDeviceSharding(target[0]))
    for name, fn in (("render", render), ("raster", jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4)))):
        lowered[name] = jax.jit(fn).trace(*spec).lower(lowering_platforms=(lowering_platform(target[0]),))
out["platform_after"] = platform()
for name, low in lowered.items():
    out[name] = census(low.compile())
print(json.dumps(out))
"""


def _compiled(target: str, required_by: str, what: str) -> dict:
    # compile-only: no TPU to guard, so test workers may load libtpu side by side (its lockfile would
    # refuse the second)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    proc = subprocess.run([sys.executable, "-c", CHILD, target], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    last = proc.stdout.strip().splitlines()[-1]
    if last.startswith("SKIP"):
        # CI installs both and sets JAXGS_REQUIRE_*_COMPILE: there one that cannot load fails
        assert not os.environ.get(required_by), f"{what} cannot load: {last[5:]}"
        pytest.skip(f"{what} cannot load here: {last[5:]}")
    out = json.loads(last)
    # the programs were built for the target's platform, and only inside compile_for
    assert out["platform_after"] == "cpu"
    return out


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["v5e:2x2", "v6e:2x2"])
def test_train_block_density_control_and_render_compile_for_tpu(topology):
    out = _compiled(topology, "JAXGS_REQUIRE_TPU_COMPILE", "libtpu")
    assert out["platform_inside"] == "tpu"
    # TPU programs bin by radix sorts (array_ops.radix_sort), not XLA's sort (25-41 s each for a v6e);
    # the train block keeps one small one (the view draw's, over the views); density control none
    # (for TPU a scatter of booleans, or of 24,576 rows with repeated ids, is compiled around a sort)
    assert out["render"]["sorts"] == 0 and out["raster"]["sorts"] == 0, out
    assert out["render"]["triton"] == 0, out  # the flat rasterizer: Pallas is for GPUs
    assert out["budget_refine_sorts"] == 0, out  # the budget's order by gradient: a radix sort too
    assert out["default"]["sorts"] <= 1 and out["mcmc"]["sorts"] <= 1, out
    # sized to fit: 2,048 slots of state need megabytes, not the layout-padded gigabytes of [N, 3] rows
    for name in ("default", "mcmc"):
        assert out[name]["temp"] < 256 * 2**20, out


@pytest.mark.slow
def test_train_block_and_render_compile_for_h200_with_one_kernel_per_compositing_pass():
    """For a GPU the default rasterizer is the Pallas one: its forward and backward are one Triton
    kernel each, and a render's forward + backward holds no XLA while loop (the XLA rasterizers'
    walks are loops of kernel launches there: `benchmarks/launches.py`)."""
    out = _compiled("h200", "JAXGS_REQUIRE_GPU_COMPILE", "the CUDA plugin (jax[cuda13])")
    assert out["platform_inside"] == "gpu"
    assert out["render"]["triton"] == 1 and out["render"]["whiles"] == 0, out
    assert out["raster"]["triton"] == 2 and out["raster"]["whiles"] <= 2 and out["raster"]["data_dependent"] == 0, out
    for name in ("default", "mcmc"):  # one step's forward and backward kernels inside the block's scan
        assert out[name]["triton"] == 2 and out[name]["data_dependent"] == 0, out
