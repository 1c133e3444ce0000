"""Device policy, in one place: which devices a run uses and compiles for, the meshes and shardings
over them, placing arrays there and reading one copy back.

Two ways of using several devices, two names:
- data parallel (`jax.pmap`): every device holds a full copy of the state, stacked on a leading
  device axis (`stacked_copies`), trains its own views and averages gradients; `first_copy`
  reads one replica back.
- tile dealing (`rendering.tile_parallel`): several devices of one host render one view's tiles
  together; arrays sit on the first `n` devices of the target, whole (`tile_copies`,
  `whole_sharding`) or split by rows (`rows_sharding`) over the one-axis `tile_mesh`.

Everything that compiles takes its devices and its platform from here (`target_devices`,
`platform`). By default they are this process's local devices; inside `compile_for(devices)`
they are the given ones, e.g. a TPU topology's compile-only devices, so the same code lowers and
compiles for this CPU or for a TPU (`benchmarks/accelerator_compile.py`): the choices a program makes by
platform (the flat rasterizer's tile groups, the binning's buffer tiers and sorts, tile dealing
over CPU cores) then follow the target, not the machine compiling it.
"""
from __future__ import annotations

import contextlib
import os
from typing import Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

TILE_AXIS = "tiles"  # the tile mesh's one axis
DATA_AXIS = "devices"  # the data-parallel (pmap) axis

_target: Optional[list] = None  # set by `compile_for`


# -- the target
def target_devices() -> list:
    """The devices programs are built for: this process's local devices, or inside `compile_for`
    the devices given there."""
    return list(_target) if _target is not None else jax.local_devices()


def platform() -> str:
    """The target devices' platform: "cpu", "gpu" or "tpu"."""
    return target_devices()[0].platform


@contextlib.contextmanager
def compile_for(devices: Sequence):
    """Build and compile programs for `devices` (e.g. `topology_devices("v5e:2x2")`) instead of
    this process's devices. Nothing can run on them: lower with `jax.ShapeDtypeStruct`s placed on
    them (`abstract`) and compile. JAX's trace caches are cleared on entry and exit, so no program
    traced for one platform is reused for the other."""
    global _target
    devices = list(devices)
    if not devices:
        raise ValueError("compile_for needs at least one device")
    before, _target = _target, devices
    jax.clear_caches()
    try:
        yield devices
    finally:
        _target = before
        jax.clear_caches()


def topology_devices(name: str, platform: str = "tpu", **kwargs) -> list:
    """The compile-only devices of an accelerator topology, e.g. "v5e:2x2" or "v6e:2x2" for TPU
    (libtpu must be installed: `pip install -e ".[tpu]"`). kwargs go to
    `jax.experimental.topologies.get_topology_desc`: a GPU target (`platform="cuda"`, name "")
    takes `target_config` (a GpuTargetConfigProto in text form) and `topology`
    ("<partitions>x<hosts per partition>x<devices per host>"; `pip install -e ".[gpu]"`)."""
    from jax.experimental import topologies

    return list(topologies.get_topology_desc(topology_name=name, platform=platform, **kwargs).devices)


def lowering_platform(device) -> str:
    """The platform name `lower(lowering_platforms=...)` takes for a device (a GPU's is "cuda")."""
    return {"gpu": "cuda"}.get(device.platform, device.platform)


def abstract(tree, sharding):
    """`tree`'s arrays as `jax.ShapeDtypeStruct`s placed by `sharding`: what `jit(f).trace(...)`
    takes to compile for devices it cannot reach."""
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding), tree)


# -- CPU cores
TILE_DEVICES_ENV = "JAXGS_TILE_DEVICES"


def cpu_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def use_cpu_cores() -> int:
    """Ask JAX for one CPU device per core (`jax_num_cpu_devices`), so that training can deal each
    view's tiles over the cores. Must run before JAX starts its backends; leaves a count that
    XLA_FLAGS (--xla_force_host_platform_device_count) or the config already set alone.

    Returns:
      the number of CPU devices asked for, 0 when nothing was changed.
    """
    from jax._src import xla_bridge

    if ("xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
            or jax.config.jax_num_cpu_devices >= 0 or xla_bridge.backends_are_initialized()):
        return 0
    n = cpu_cores()
    jax.config.update("jax_num_cpu_devices", n)
    return n


# -- GPU memory beside another framework
GPU_ALLOCATOR_PREFIX = "XLA_PYTHON_CLIENT_"  # JAX's GPU allocator settings (PREALLOCATE, MEM_FRACTION, ALLOCATOR)
GPU_ALLOCATOR_SHARED = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def share_gpu_memory() -> dict:
    """Let JAX take GPU memory as it needs it instead of 75% of the GPU at start (JAX's default),
    so that another framework on the same GPU (torch, holding nerfstudio's images and cameras) keeps
    what it holds and can grow. Must run before JAX starts its backends (they read the settings
    then); changes nothing when any `XLA_PYTHON_CLIENT_*` variable is already set (the user's
    choice) or the backends have started. No effect on a CPU or a TPU.

    Returns:
      the variables set, {} when nothing was changed.
    """
    from jax._src import xla_bridge

    if any(k.startswith(GPU_ALLOCATOR_PREFIX) for k in os.environ) or xla_bridge.backends_are_initialized():
        return {}
    os.environ.update(GPU_ALLOCATOR_SHARED)
    return dict(GPU_ALLOCATOR_SHARED)


def cores_for_tiles() -> int:
    """Cores one process deals a view's tiles over by default: `$JAXGS_TILE_DEVICES` when set (a
    positive whole number: e.g. 1 where several jobs already share the cores, as the test suite's
    workers do), else every core this process may run on."""
    value = os.environ.get(TILE_DEVICES_ENV, "").strip()
    if not value:
        return cpu_cores()
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{TILE_DEVICES_ENV}={value!r}: must be a whole number of devices, 1 or more")
    return int(value)


# -- how many devices, by default
def auto_tile_devices(num_devices: int = 1) -> int:
    """How many devices one view's tiles are dealt over by default: on a CPU every local device, up
    to one per core (`cores_for_tiles`); 1 on accelerators (one device is many cores), with data
    parallelism over `num_devices` > 1 devices, and with several processes."""
    if num_devices > 1 or jax.process_count() > 1 or platform() != "cpu":
        return 1
    return max(1, min(len(target_devices()), cores_for_tiles()))


def auto_data_devices() -> int:
    """Data-parallel devices by default: every accelerator of this host; one on a CPU (whose cores
    deal each view's tiles instead)."""
    return 1 if platform() == "cpu" else len(target_devices())


def check_count(name: str, n: int, low: int = 1) -> int:
    """`n` devices of the target, or ValueError naming `name` and the range."""
    have = len(target_devices())
    if not low <= n <= have:
        lo = "0 (automatic)" if low == 0 else str(low)
        raise ValueError(f"{name} must be between {lo} and {have} (this host's devices), got {n}")
    return n


# -- tile dealing: one host's first n devices
def tile_mesh(num_devices: int) -> Mesh:
    """A one-axis mesh (TILE_AXIS) of the target's first `num_devices` devices."""
    check_count("tile devices", num_devices)
    return Mesh(np.array(target_devices()[:num_devices]), (TILE_AXIS,))


def rows_sharding(num_devices: int) -> NamedSharding:
    """Arrays split by their leading axis (rows) over the first `num_devices` devices."""
    return NamedSharding(tile_mesh(num_devices), P(TILE_AXIS))


def whole_sharding(num_devices: int) -> NamedSharding:
    """Arrays with a full copy on each of the first `num_devices` devices."""
    return NamedSharding(tile_mesh(num_devices), P())


def tile_copies(tree, num_devices: int):
    """`tree`'s arrays placed on the first `num_devices` devices, a full copy on each (where a
    dealt render runs; jit does not move arrays committed to one device). Arrays already placed
    so are returned as they are, without a copy; one device: unchanged."""
    if num_devices <= 1:
        return tree
    return jax.device_put(tree, whole_sharding(num_devices))


def one_device(tree):
    """`tree` on the first target device (rows split over tile devices gathered there)."""
    return jax.device_put(tree, target_devices()[0])


# -- data parallel: pmap's stacked copies
def data_devices(num_devices: int) -> list:
    """The first `num_devices` target devices, for pmap."""
    return target_devices()[:check_count("num_devices", num_devices)]


def stacked_sharding(devices) -> NamedSharding:
    """A leading device axis split over `devices`, one slice each: pmap's layout."""
    return NamedSharding(Mesh(np.array(devices), (DATA_AXIS,)), P(DATA_AXIS))


def stacked_copies(tree, devices):
    """One copy of every leaf on each of `devices`, stacked on a leading device axis (what pmap
    takes)."""
    sharding = stacked_sharding(devices)

    def one(x):
        x = jax.numpy.asarray(x)
        shards = [jax.device_put(x[None], d) for d in devices]
        return jax.make_array_from_single_device_arrays((len(devices),) + x.shape, sharding, shards)

    return jax.tree_util.tree_map(one, tree)


def first_copy(tree):
    """From pmap's stacked copies: the first local device's copy, as plain single-device arrays
    (the replicas are identical)."""
    return jax.tree_util.tree_map(lambda x: x.addressable_shards[0].data[0], tree)
