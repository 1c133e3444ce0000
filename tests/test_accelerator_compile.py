"""Every program kind jax-gs runs keeps compiling for TPU and GPU: a small train block (with density
control, pose corrections and bilateral grids), a 2DGS train block (disks, with its two losses),
density control alone and an eval render, compiled on this CPU for TPU v5e and v6e topologies
(deviceless, through libtpu: `pip install -e ".[tpu]"`) and for an H200 (XLA's GPU compiler:
`pip install -e ".[gpu]"`), in a child process (the plugin is loaded there only). On every
target the compiled blocks and renders hold no default-precision float32 contraction and no host
traffic. The full-size table is `benchmarks/accelerator_compile.py`'s."""
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
    from tools.programs import target_devices
    target = target_devices(sys.argv[1])
except Exception as e:  # libtpu or the CUDA plugin missing or unable to load
    print("SKIP " + (str(e).strip().splitlines() or [type(e).__name__])[0][:200]); sys.exit(0)
import jax, jax.numpy as jnp
from tools import hlo_checks, launches
from jax_backend.training import aot
from tools.programs import lower_program, small_render_programs, small_trainer
gpu = target[0].platform == "gpu"

def census(compiled):
    text = compiled.as_text()
    count = launches.launches(text)
    out = {"temp": compiled.memory_analysis().temp_size_in_bytes, "sorts": text.count(" sort("),
           "whiles": count.while_loops, "data_dependent": count.data_dependent,
           "triton": text.count("__gpu$xla.gpu.triton"),
           "default_precision": hlo_checks.default_precision_contractions(text),
           "host_traffic": hlo_checks.host_traffic(text)}
    if gpu:
        out["triton_writes"] = [hlo_checks.memory_ops(m) for m in hlo_checks.triton_modules(text)]
        out["order_dependent_scatters"] = hlo_checks.order_dependent_scatters(text)
    return out

out = {}
def state_bytes(tr):
    return sum(x.nbytes for x in jax.tree_util.tree_leaves(tr.device_state))

def block_census(tr):  # and the bytes of the state the block is given, and those its outputs alias (donated)
    compiled = aot.lower_block(tr, 5, target).compile()
    return dict(census(compiled), state=state_bytes(tr), alias=compiled.memory_analysis().alias_size_in_bytes)

for name in ("default", "mcmc"):  # the default block with pose corrections and bilateral grids (their contractions)
    tr = small_trainer(name, corrections=name == "default")
    out[name] = block_census(tr)
    if name == "default":
        refine = aot.lower_refine(tr, target).compile()
        out["refine_temp"] = refine.memory_analysis().temp_size_in_bytes
out["surfels"] = block_census(small_trainer("default", surfels=True))
out["budget_refine_sorts"] = aot.lower_refine(small_trainer("default", budget=3000), target).compile().as_text().count(" sort(")

lower = lambda fn_for, args: lower_program(fn_for, args, target)  # for target[0]

lowered = {}
out["platform"] = target[0].platform
for name, (fn_for, args) in small_render_programs().items():
    lowered[name] = lower(fn_for, args)
# the checkers can fail on this target's text: a float32 dot at default precision, a host callback
a = np.ones((128, 128), np.float32)
lowered["probe_dot"] = lower(lambda _: lambda x, y: jnp.dot(x, y) + jnp.dot(x, y, precision="highest"), [a, a])
# a host callback, else (a compile-only GPU cannot lower one: it asks for a GPU backend) a move to host memory
out["probe_host"] = None
for probe in (lambda x: jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x) * 2,
              lambda x: jax.device_put(x * 2, jax.sharding.SingleDeviceSharding(target[0], memory_kind="pinned_host"))):
    try:
        out["probe_host"] = hlo_checks.host_traffic(lower(lambda _, probe=probe: probe, [a]).compile().as_text())
    except Exception as e:
        out.setdefault("probe_host_errors", []).append(str(e).splitlines()[0][:200])
    if out["probe_host"]:
        break
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
    _no_default_precision_and_no_host_traffic(out)
    return out


def _no_default_precision_and_no_host_traffic(out: dict):
    """The train blocks, the render and a render's backward hold no float32 dot or convolution at
    the platform's default precision (bfloat16 products on a TPU, TF32 on a GPU) and nothing that
    waits on the host (`tools.hlo_checks`); the checkers find both in the probes built to
    have them."""
    assert len(out["probe_dot"]["default_precision"]) == 1, out["probe_dot"]
    if out["platform"] == "tpu":
        assert out["probe_host"], out  # its move to pinned host memory
    else:  # compile-only GPU: neither a callback nor host memory can be built (a block with one would not compile)
        assert out["probe_host"] in (None, []), out
    for name in ("default", "mcmc", "surfels", "render", "raster", "raster-fisheye", "raster-2dgs"):
        assert out[name]["default_precision"] == [], (name, out[name]["default_precision"])
        assert out[name]["host_traffic"] == [], (name, out[name]["host_traffic"])


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["v5e:2x2", "v6e:2x2"])
def test_train_block_density_control_and_render_compile_for_tpu(topology):
    out = _compiled(topology, "JAXGS_REQUIRE_TPU_COMPILE", "libtpu")
    assert out["platform"] == "tpu"
    # TPU programs bin by radix sorts (array_ops.radix_sort), not XLA's sort (25-41 s each for a v6e);
    # the train block keeps one small one (the view draw's, over the views); density control none
    # (for TPU a scatter of booleans, or of 24,576 rows with repeated ids, is compiled around a sort)
    assert all(out[name]["sorts"] == 0 for name in ("render", "raster", "raster-fisheye", "raster-2dgs")), out
    assert out["render"]["triton"] == 0, out  # the flat rasterizer: Pallas is for GPUs
    assert out["budget_refine_sorts"] == 0, out  # the budget's order by gradient: a radix sort too
    assert out["default"]["sorts"] <= 1 and out["mcmc"]["sorts"] <= 1 and out["surfels"]["sorts"] <= 1, out
    # sized to fit: 2,048 slots of state need megabytes, not the layout-padded gigabytes of [N, 3] rows
    for name in ("default", "mcmc", "surfels"):
        assert out[name]["temp"] < 256 * 2**20, out
    _state_held_once(out)


def _state_held_once(out: dict):
    """Every train block donates its state: the compiled program's outputs alias its input state
    (XLA writes the new state over the old one), so a block holds one copy of it."""
    for name in ("default", "mcmc", "surfels"):
        assert out[name]["alias"] >= 0.95 * out[name]["state"], (name, out[name]["alias"], out[name]["state"])


@pytest.mark.slow
def test_train_block_and_render_compile_for_h200_with_one_kernel_per_compositing_pass():
    """For a GPU the default rasterizer is the Pallas one: its forward and backward are one Triton
    kernel each, and a render's forward + backward holds no XLA while loop (the XLA rasterizers'
    walks are loops of kernel launches there: `tools/launches.py`); the backward adds its
    sums atomically (`tests/kernel_races.py` checks the jaxpr, this the Triton module)."""
    out = _compiled("h200", "JAXGS_REQUIRE_GPU_COMPILE", "the CUDA plugin (jax[cuda13])")
    assert out["platform"] == "gpu"
    assert out["render"]["triton"] == 1 and out["render"]["whiles"] == 0, out
    for name in ("raster", "raster-fisheye", "raster-2dgs"):  # a fisheye or surfels: other projections, the same kernels
        assert out[name]["triton"] == 2 and out[name]["whiles"] <= 2 and out[name]["data_dependent"] == 0, out
    for name in ("default", "mcmc", "surfels"):  # one step's forward and backward kernels inside the block's scan
        assert out[name]["triton"] == 2 and out[name]["data_dependent"] == 0, out
    _state_held_once(out)
    # in the Triton modules: the forward stores each program's own rows, the backward's per-Gaussian
    # sums are atomic adds (tt.atomic_rmw fadd: 6 packed parameters + 3 colours + 2 |d means2d|), no store
    forward, backward = out["raster"]["triton_writes"]
    assert forward["store"] > 0 and forward["atomic_fadd"] == 0, out["raster"]
    assert backward == {"store": 0, "atomic_fadd": 11, "atomic_other": 0}, out["raster"]
    # the surfels' backward: 10 packed parameters + 3 colours + 3 normal channels + 2 |d means2d|
    forward, backward = out["raster-2dgs"]["triton_writes"]
    assert forward["store"] > 0 and forward["atomic_fadd"] == 0, out["raster-2dgs"]
    assert backward == {"store": 0, "atomic_fadd": 18, "atomic_other": 0}, out["raster-2dgs"]
    # and they are the blocks' only updates in no fixed order (docs/gpu.md, "What is and is not
    # bit-identical on a GPU"): no scatter whose result depends on the order of its updates, but for
    # the bilateral grids' gradients (the default block has them on: the slicing's gather, transposed
    # into float sums onto the [1, 12, 4, 4, 4] grid cells)
    for name in ("mcmc", "surfels", "raster", "raster-fisheye", "raster-2dgs"):
        assert out[name]["order_dependent_scatters"] == [], (name, out[name]["order_dependent_scatters"])
    grids = out["default"]["order_dependent_scatters"]
    assert grids and all(" = f32[1,12,4,4,4]" in line for line in grids), grids
