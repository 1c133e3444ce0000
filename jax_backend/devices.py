"""The machine's devices, apart from how a run lays its work over them (`layout`): the
compile-only devices of an accelerator topology and abstract arrays placed on them, one JAX device
per CPU core, and JAX's GPU allocator beside torch."""
from __future__ import annotations

import os

import jax
import numpy as np

from .layout import cpu_cores


def topology_devices(name: str, platform: str = "tpu", **kwargs) -> list:
    """The compile-only devices of an accelerator topology, e.g. "v5e:2x2" or "v6e:2x2" for TPU
    (libtpu must be installed: `pip install -e ".[tpu]"`). kwargs go to
    `jax.experimental.topologies.get_topology_desc`: a GPU target (`platform="cuda"`, name "")
    takes `target_config` (a GpuTargetConfigProto in text form) and `topology`
    ("<partitions>x<hosts per partition>x<devices per host>"; `pip install -e ".[gpu]"`)."""
    from jax.experimental import topologies

    return list(topologies.get_topology_desc(topology_name=name, platform=platform, **kwargs).devices)


def abstract(tree, sharding):
    """`tree`'s arrays as `jax.ShapeDtypeStruct`s placed by `sharding`: what `jit(f).trace(...)`
    takes to compile for devices it cannot reach."""
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding), tree)


# -- CPU cores
SPARE_CPU_DEVICES = 1  # CPU devices beyond one per core (`use_cpu_cores`)


def use_cpu_cores() -> int:
    """Ask JAX for one CPU device per core (`jax_num_cpu_devices`), so that training can deal each
    view's tiles over the cores, and SPARE_CPU_DEVICES more that no training program runs on.
    JAX's CPU runtime runs programs on a pool of one thread per device: with every device inside a
    training block (one long XLA loop each), a viewer render asked for meanwhile waited for the
    block to end (#56); the spare device's thread starts it at once, the cores shared by the
    system's scheduler. Must run before JAX starts its backends; leaves a count that XLA_FLAGS
    (--xla_force_host_platform_device_count) or the config already set alone.

    Returns:
      the number of CPU devices asked for, 0 when nothing was changed.
    """
    from jax._src import xla_bridge

    if ("xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
            or jax.config.jax_num_cpu_devices >= 0 or xla_bridge.backends_are_initialized()):
        return 0
    n = cpu_cores() + SPARE_CPU_DEVICES
    jax.config.update("jax_num_cpu_devices", n)
    return n


# -- host memory a CPU device takes as it is
CPU_ALIGNMENT = 64  # bytes: XLA's CPU client aliases a numpy array whose data is this aligned, and copies any other


def aliasable_zeros(shape, dtype, spare_rows: int = 0) -> np.ndarray:
    """A zeroed numpy array whose buffer JAX's CPU devices take without a copy: `jax.device_put` to
    a CPU device, or replicated over several, aliases an array whose data is CPU_ALIGNMENT-byte
    aligned (numpy aligns large arrays to 16 bytes, and those are copied, once per device). The
    training images are held in one, so on a CPU the host's copy and every device's are one.
    `spare_rows` more rows follow the array in its buffer (`padded_rows` reaches them); never
    written, they take no memory."""
    dtype = np.dtype(dtype)
    row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    raw = np.zeros((shape[0] + spare_rows) * row + CPU_ALIGNMENT, np.uint8)  # calloc: pages mapped when written
    start = -raw.ctypes.data % CPU_ALIGNMENT
    return raw[start:start + shape[0] * row].view(dtype).reshape(shape)


def padded_rows(x: np.ndarray, rows: int) -> np.ndarray:
    """`x` [N, ...] (numpy) as `rows` >= N rows, for a table whose rows past N are never read: in
    x's own buffer when it holds them (`aliasable_zeros` with spare rows: no copy, still aligned),
    else a copy padded with zeros."""
    x = np.asarray(x)
    base = x.base if x.base is not None else x
    if isinstance(base, np.ndarray) and base.flags.c_contiguous and x.flags.c_contiguous and len(x):
        offset = x.ctypes.data - base.ctypes.data
        if 0 <= offset and offset + rows * (x.nbytes // len(x)) <= base.nbytes:
            return np.ndarray((rows,) + x.shape[1:], x.dtype, buffer=base, offset=offset)
    out = aliasable_zeros((rows,) + x.shape[1:], x.dtype)
    out[:len(x)] = x
    return out


def return_free_memory() -> bool:
    """Hand the C heap's free pages back to the system (glibc's `malloc_trim`): memory freed in
    pieces (a capture's images as they are copied out of nerfstudio's cache) otherwise stays in the
    process's resident set, because glibc serves allocations of a few MB from its heaps once the
    first of that size is freed. Returns whether anything could be asked (False off glibc)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


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


# -- accelerators this host does not have
# device nodes an accelerator's driver makes: NVIDIA GPUs (and WSL's GPU bridge); TPUs (v2-v4 and v5p
# as /dev/accel*, v5e and v6e through VFIO)
ACCELERATOR_NODES = ("/dev/nvidia[0-9]*", "/dev/dxg", "/dev/accel*", "/dev/vfio/[0-9]*")


def skip_absent_accelerators() -> bool:
    """On a host with no GPU or TPU device, have JAX start its CPU backend only (`jax_platforms`
    "cpu"), so that the CUDA and TPU plugins the `[gpu]` and `[tpu]` extras install are not
    initialised: with no device to find they print a traceback (CUDA) and hostname warnings (libtpu)
    at every start. Must run before JAX starts its backends; changes nothing when the user set
    JAX_PLATFORMS (or `jax_platforms`), when the backends have started, or when any
    `ACCELERATOR_NODES` device exists (JAX then finds its devices as usual).

    Returns:
      whether JAX was restricted to the CPU.
    """
    import glob

    from jax._src import xla_bridge

    if os.environ.get("JAX_PLATFORMS") or jax.config.jax_platforms or xla_bridge.backends_are_initialized():
        return False
    if any(glob.glob(pattern) for pattern in ACCELERATOR_NODES):
        return False
    jax.config.update("jax_platforms", "cpu")
    return True


def _index_key(index) -> tuple:
    return tuple((s.start, s.stop, s.step) for s in index)


class HostCopy:
    """A pytree of arrays copied to host memory shard by shard, each distinct shard once (no
    array is gathered on a device, and replicas are not copied twice), with what `restore` needs
    to put every shard back on the devices it came from: the trainer's copy of the state before a
    block that donates it (`Trainer._dispatch`). With several processes each holds its own shards."""

    def __init__(self, tree):
        def one(x):
            shards = {}
            for s in x.addressable_shards:
                shards.setdefault(_index_key(s.index), np.array(s.data, copy=True))
            return (x.shape, x.sharding, shards)

        leaves, self._treedef = jax.tree_util.tree_flatten(tree)
        self._leaves = [one(x) for x in leaves]

    def restore(self):
        """The arrays again, placed as they were."""
        def one(leaf):
            shape, sharding, shards = leaf
            placed = [jax.device_put(shards[_index_key(idx)], d)
                      for d, idx in sharding.addressable_devices_indices_map(shape).items()]
            return jax.make_array_from_single_device_arrays(shape, sharding, placed)

        return jax.tree_util.tree_unflatten(self._treedef, [one(leaf) for leaf in self._leaves])
