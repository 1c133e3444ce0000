"""How a run is laid out on devices, as one value: `Layout`, made once from the settings
(`make_layout`) and passed to everything that builds or places a program. Nothing else decides
which devices hold what, and no module global does: a program built for other devices (a TPU
topology's compile-only ones) is built from a `Layout` of those devices (`Layout.on`).

Two ways of using several devices, one count each:
- `replicas`: data parallel (`jax.shard_map` over REPLICA_AXIS of `replica_mesh`, under one
  `jit`). Every replica holds a full copy of the training state, stacked on a leading axis, trains
  its own views and averages gradients; with several processes every process's devices are
  replicas, on one mesh over every process's devices.
- `tile_devices`: one view's tiles dealt over several devices of one host, which render them
  side by side (`rendering.tile_parallel`, over the one-axis TILE_AXIS mesh). The per-Gaussian
  arrays are split by rows over them, everything else is whole on each.
They exclude each other (a replica renders on one device). The Gaussian shards of a scene
larger than one chip will be a third axis of this value.

What a program computes the same way everywhere but builds differently per platform comes in two
kinds. Choices of program structure (the "auto" rasterizer, the flat rasterizer's tile groups,
the binning's buffer tiers, the Pallas lowering) read `Layout.platform` from the render config
that carries the layout. Choices of how to compute the same values (which sort, SSIM's blur)
are `jax.lax.platform_dependent` where they are made: JAX picks the branch when it lowers for a
platform, and the compiler sees only that branch (the same instructions as the branch alone).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

REPLICA_AXIS = "replicas"  # the data-parallel axis
TILE_AXIS = "tiles"  # the tile-dealing mesh's one axis
TILE_DEVICES_ENV = "JAXGS_TILE_DEVICES"


@dataclasses.dataclass(frozen=True)
class Layout:
    """Which devices a run's programs are built for and how they share the work (hashable: part of
    every compiled program's cache key). Make one with `make_layout`."""

    devices: tuple  # this process's devices the programs use (or a topology's compile-only ones)
    replicas: int = 1  # data-parallel copies on this process (on devices[:replicas])
    tile_devices: int = 1  # devices one view's tiles are dealt over (devices[:tile_devices])
    processes: int = 1  # processes training together (jax.distributed), each with `replicas`

    def __post_init__(self):
        object.__setattr__(self, "devices", tuple(self.devices))
        if not self.devices:
            raise ValueError("a layout needs at least one device")
        for name in ("replicas", "tile_devices"):
            n = getattr(self, name)
            if not 1 <= n <= len(self.devices):
                raise ValueError(f"{name} must be between 1 and {len(self.devices)} (this host's devices), got {n}")
        if self.tile_devices > 1 and self.data_parallel:
            raise ValueError(f"tile_devices {self.tile_devices} deals one view's tiles over several devices: it needs "
                             f"1 replica and one process (data parallelism takes the devices)")

    # -- what the layout is
    @property
    def platform(self) -> str:
        """The devices' platform: "cpu", "gpu" or "tpu"."""
        return self.devices[0].platform

    @property
    def lowering_platform(self) -> str:
        """The platform name `lower(lowering_platforms=...)` takes ("cuda" for a GPU)."""
        return lowering_platform(self.devices[0])

    @property
    def data_parallel(self) -> bool:
        """Whether training runs as replicas (several here, or several processes)."""
        return self.replicas > 1 or self.processes > 1

    @property
    def replica_devices(self) -> tuple:
        """The devices this process's replicas run on."""
        return self.devices[:self.replicas]

    @property
    def total_replicas(self) -> int:
        """Replicas over every process."""
        return self.replicas * self.processes

    @property
    def rows_multiple(self) -> int:
        """Per-Gaussian row counts are kept a multiple of this (so that they split evenly)."""
        return self.tile_devices

    def on(self, devices: Sequence) -> "Layout":
        """The same layout on other devices (as many as it uses), e.g. a TPU topology's, to compile
        its programs there."""
        devices = tuple(devices)
        used = max(self.replicas, self.tile_devices)
        if len(devices) < used:
            raise ValueError(f"this layout uses {used} devices; the target has {len(devices)}")
        return dataclasses.replace(self, devices=devices[:used])

    def for_one_device(self) -> "Layout":
        """One device of this layout, nothing shared (a one-device program: density control run
        again with room)."""
        return Layout(self.devices[:1])

    def for_rendering(self) -> "Layout":
        """The layout one eager render runs in: its tiles dealt as in training, one replica."""
        return dataclasses.replace(self, replicas=1, processes=1)

    # -- meshes and shardings
    def tile_mesh(self) -> Mesh:
        return Mesh(np.array(self.devices[:self.tile_devices]), (TILE_AXIS,))

    def rows_sharding(self) -> NamedSharding:
        """Arrays split by their leading axis (rows) over the tile devices."""
        return NamedSharding(self.tile_mesh(), P(TILE_AXIS))

    def whole_sharding(self) -> NamedSharding:
        """Arrays whole on each tile device."""
        return NamedSharding(self.tile_mesh(), P())

    def replica_mesh(self) -> Mesh:
        """The data-parallel mesh: this process's replica devices, or with several processes every
        process's devices in process order (process p's replicas are the p-th run of the axis)."""
        if self.processes == 1:
            return Mesh(np.array(self.replica_devices), (REPLICA_AXIS,))
        devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
        if len(devices) != self.total_replicas:
            raise ValueError(f"{self.processes} processes with {self.replicas} replicas each need "
                             f"{self.total_replicas} devices; the runtime has {len(devices)}")
        return Mesh(np.array(devices), (REPLICA_AXIS,))

    def replica_sharding(self) -> NamedSharding:
        """A leading replica axis split over the replica mesh, one slice each."""
        return NamedSharding(self.replica_mesh(), P(REPLICA_AXIS))

    def state_shardings(self, per_gaussian):
        """Where a tile-dealing program keeps a tree (`per_gaussian`: the same tree of bools, True
        for per-Gaussian leaves): those split by rows when they divide evenly, the rest whole."""
        rows, whole = self.rows_sharding(), self.whole_sharding()
        return jax.tree_util.tree_map(lambda on: rows if on else whole, per_gaussian)

    def shardings(self, tree, per_gaussian=None):
        """The sharding of each leaf of `tree` where this layout's programs take it: the replica
        axis split over the replicas when data parallel (the leaves stacked by `place`); with tile
        dealing the leaves marked in `per_gaussian` (a tree of bools like `tree`) split by rows and
        the rest whole on each tile device (all whole when `per_gaussian` is None); else its first
        device."""
        if self.tile_devices > 1 and per_gaussian is not None:
            return self.state_shardings(per_gaussian)
        one = (self.replica_sharding() if self.data_parallel else self.whole_sharding() if self.tile_devices > 1
               else jax.sharding.SingleDeviceSharding(self.devices[0]))
        return jax.tree_util.tree_map(lambda _: one, tree)

    # -- placing arrays
    def place(self, tree, per_gaussian=None):
        """`tree` where this layout's programs take it (`shardings`): stacked copies on the replicas
        when data parallel; with tile dealing on the tile devices; else as it is."""
        if self.data_parallel:
            return stacked_copies(tree, self.replica_sharding())
        if self.tile_devices > 1:
            return jax.device_put(tree, self.shardings(tree, per_gaussian))
        return tree

    def one_copy(self, tree):
        """From where this layout keeps `tree` (`place`): plain arrays on one device (one replica's
        copy: they are identical; the rows gathered from the tile devices)."""
        if self.data_parallel:
            return jax.tree_util.tree_map(lambda x: x.addressable_shards[0].data[0], tree)
        if self.tile_devices > 1:
            return jax.device_put(tree, self.devices[0])
        return tree

    def local_replicas(self, tree):
        """From arrays with a leading replica axis (a data-parallel program's outputs): this
        process's replicas' rows as numpy, in replica order [replicas, ...]."""
        def rows(x):
            shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
            return np.concatenate([np.asarray(s.data) for s in shards])

        return jax.tree_util.tree_map(rows, tree)

    def constrain(self, tree, per_gaussian):
        """Inside a tile-dealing program: `tree` laid out as `place` lays it (no-op otherwise)."""
        if self.tile_devices <= 1:
            return tree
        return jax.lax.with_sharding_constraint(tree, self.state_shardings(per_gaussian))


def lowering_platform(device) -> str:
    """The platform name `lower(lowering_platforms=...)` takes for a device (a GPU's is "cuda")."""
    return {"gpu": "cuda"}.get(device.platform, device.platform)


def stacked_copies(tree, sharding: NamedSharding):
    """One copy of every leaf on each device of `sharding`'s mesh (a one-axis mesh, its axis split:
    `Layout.replica_sharding`), stacked on a leading axis; this process makes its own devices'
    copies (with several processes each passes its own values: its host's views)."""
    mesh_devices = list(sharding.mesh.devices.flat)
    mine = [d for d in mesh_devices if d.process_index == jax.process_index()]

    def one(x):
        x = jax.numpy.asarray(x)
        shards = [jax.device_put(x[None], d) for d in mine]
        return jax.make_array_from_single_device_arrays((len(mesh_devices),) + x.shape, sharding, shards)

    return jax.tree_util.tree_map(one, tree)


# -- automatic counts
def cpu_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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


def make_layout(replicas: int = 0, tile_devices: int = 0, devices: Optional[Sequence] = None,
                *, clamp_tile_devices: bool = False) -> Layout:
    """The layout of a run from its settings (0: automatic).

    Args:
      replicas: data-parallel copies. 0: every accelerator of this host, one on a CPU (whose
        cores deal each view's tiles instead). With several processes every local device.
      tile_devices: devices one view's tiles are dealt over. 0: on a CPU every device, up to one
        per core (`cores_for_tiles`); 1 on accelerators (one device is many cores), with data
        parallelism, and with several processes.
      devices: the devices (default: this process's local devices).
      clamp_tile_devices: fit a `tile_devices` larger than the devices to them instead of
        refusing it (a viewer opening a config written on a larger machine).

    ValueError naming the setting when a count does not fit.
    """
    devices = tuple(jax.local_devices() if devices is None else devices)
    processes = jax.process_count()
    platform = devices[0].platform
    have = len(devices)
    for name, n in (("replicas", replicas), ("tile_devices", tile_devices)):
        if n < 0 or n > have and not (name == "tile_devices" and clamp_tile_devices):
            raise ValueError(f"{name} must be between 0 (automatic) and {have} (this host's devices), got {n}")
    if not replicas:
        replicas = have if processes > 1 or platform != "cpu" else 1
    if processes > 1 and replicas != have:
        raise ValueError(f"with several processes every local device takes part: replicas must be {have}, "
                         f"got {replicas}")
    if not tile_devices:
        tile_devices = 1 if replicas > 1 or processes > 1 or platform != "cpu" else min(have, cores_for_tiles())
    return Layout(devices, replicas, max(1, min(tile_devices, have)) if clamp_tile_devices else tile_devices,
                  processes)


def local_layout() -> Layout:
    """One device of this process, nothing dealt: what a render without a layout runs in."""
    return Layout(tuple(jax.local_devices()))
