"""How a run is laid out on devices, as one value: `Layout`, made once from the settings
(`make_layout`) and passed to everything that builds or places a program. Nothing else decides
which devices hold what, and no module global does: a program built for other devices (a TPU
topology's compile-only ones) is built from a `Layout` of those devices (`Layout.on`).

Two ways of using several devices, one count each, the two axes of one mesh (`Layout.mesh`:
REPLICA_AXIS x TILE_AXIS, replica r on devices[r * tile_devices:(r + 1) * tile_devices]):
- `replicas`: data parallel (`jax.shard_map` manual over REPLICA_AXIS, under one `jit`). Every
  replica holds a full copy of the training state, stacked on a leading axis, trains its own
  views and averages gradients; with several processes every process's devices make replicas,
  on one mesh over every process's devices.
- `tile_devices`: the Gaussian shards. One view's tiles dealt over several devices of one host,
  which render them side by side (`rendering.tile_parallel`, over TILE_AXIS); the per-Gaussian
  arrays (parameters, Adam's moments, statistics) are split by rows over them, everything else
  is whole on each.
Both together: each replica's Gaussians split over its tile devices (views x Gaussians).

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
    replicas: int = 1  # data-parallel copies on this process
    tile_devices: int = 1  # devices each replica deals a view's tiles and splits its Gaussians over
    processes: int = 1  # processes training together (jax.distributed), each with `replicas`

    def __post_init__(self):
        object.__setattr__(self, "devices", tuple(self.devices))
        if not self.devices:
            raise ValueError("a layout needs at least one device")
        for name in ("replicas", "tile_devices"):
            n = getattr(self, name)
            if not 1 <= n <= len(self.devices):
                raise ValueError(f"{name} must be between 1 and {len(self.devices)} (this host's devices), got {n}")
        if self.replicas * self.tile_devices > len(self.devices):
            raise ValueError(f"replicas {self.replicas} x tile_devices {self.tile_devices} need "
                             f"{self.replicas * self.tile_devices} devices; this host has {len(self.devices)}")

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
    def used_devices(self) -> tuple:
        """This process's devices in the mesh (replicas x tile devices)."""
        return self.devices[:self.replicas * self.tile_devices]

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
        used = self.replicas * self.tile_devices
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

    # -- the mesh and shardings
    def mesh(self) -> Mesh:
        """REPLICA_AXIS x TILE_AXIS: this process's used devices, or with several processes every
        process's in process order (process p's replicas are the p-th run of the replica axis)."""
        if self.processes == 1:
            devices = self.used_devices
        else:
            devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
            if len(devices) != self.total_replicas * self.tile_devices:
                raise ValueError(f"{self.processes} processes with {self.replicas} replicas x {self.tile_devices} "
                                 f"tile devices each need {self.total_replicas * self.tile_devices} devices; the "
                                 f"runtime has {len(devices)}")
        return Mesh(np.array(devices).reshape(self.total_replicas, self.tile_devices), (REPLICA_AXIS, TILE_AXIS))

    def tile_mesh(self):
        """The mesh the tile devices' shardings and `shard_map`s take: inside a data-parallel
        program (manual over REPLICA_AXIS) the context's abstract one, else `mesh`."""
        context = jax.sharding.get_abstract_mesh()
        if not context.empty and REPLICA_AXIS in context.manual_axes:
            return context
        return self.mesh()

    def rows_sharding(self) -> NamedSharding:
        """Arrays split by their leading axis (rows) over the tile devices (whole on each replica)."""
        return NamedSharding(self.tile_mesh(), P(TILE_AXIS))

    def image_rows_sharding(self) -> NamedSharding:
        """Per-view images [views, H, W, ...] split by their rows (H) over the tile devices."""
        return NamedSharding(self.tile_mesh(), P(None, TILE_AXIS))

    def whole_sharding(self) -> NamedSharding:
        """Arrays whole on each device."""
        return NamedSharding(self.tile_mesh(), P())

    def replica_sharding(self, rows: bool = False) -> NamedSharding:
        """A leading replica axis split over the replicas, one slice each; `rows`: the next axis
        split over each replica's tile devices."""
        return NamedSharding(self.mesh(), P(REPLICA_AXIS, TILE_AXIS) if rows else P(REPLICA_AXIS))

    def state_shardings(self, per_gaussian):
        """Where a tile-dealing program keeps a tree (`per_gaussian`: the same tree of bools, True
        for per-Gaussian leaves): those split by rows when they divide evenly, the rest whole."""
        rows, whole = self.rows_sharding(), self.whole_sharding()
        return jax.tree_util.tree_map(lambda on: rows if on else whole, per_gaussian)

    def shardings(self, tree, per_gaussian=None):
        """The sharding of each leaf of `tree` where this layout's programs take it: data
        parallel, the replica axis split over the replicas (the leaves stacked by `place`); with
        tile dealing the leaves marked in `per_gaussian` (a tree of bools like `tree`) split by
        rows (after the replica axis) and the rest whole on each tile device (all whole when
        `per_gaussian` is None); else its first device."""
        per_gaussian = per_gaussian if per_gaussian is not None and self.tile_devices > 1 else \
            jax.tree_util.tree_map(lambda _: False, tree)
        if self.data_parallel:
            return jax.tree_util.tree_map(self.replica_sharding, per_gaussian)
        if self.tile_devices > 1:
            return self.state_shardings(per_gaussian)
        one = jax.sharding.SingleDeviceSharding(self.devices[0])
        return jax.tree_util.tree_map(lambda _: one, tree)

    # -- placing arrays
    def place(self, tree, per_gaussian=None):
        """`tree` where this layout's programs take it (`shardings`): stacked copies on the replicas
        when data parallel; with tile dealing on the tile devices; else as it is."""
        if self.data_parallel:
            return jax.tree_util.tree_map(stacked_copies, tree, self.shardings(tree, per_gaussian))
        if self.tile_devices > 1:
            return jax.device_put(tree, self.shardings(tree, per_gaussian))
        return tree

    def place_replicas(self, tree):
        """Arrays with a leading axis of this process's replicas, each replica its own slice (not
        copies, as `place` stacks): replica r's slice on its devices only, whole on each of its
        tile devices (`replica_sharding`)."""
        sharding, first = self.replica_sharding(), jax.process_index() * self.replicas

        def put(x):
            x = np.asarray(x)
            return jax.make_array_from_callback(
                (self.total_replicas,) + x.shape[1:], sharding,
                lambda index: x[[r - first for r in range(self.total_replicas)[index[0]]]])

        return jax.tree_util.tree_map(put, tree)

    def one_copy(self, tree):
        """From where this layout keeps `tree` (`place`): plain arrays on one device (one replica's
        copy: they are identical; the rows gathered from the tile devices)."""
        if self.data_parallel:
            return jax.tree_util.tree_map(self._first_local_replica, tree)
        if self.tile_devices > 1:
            return jax.device_put(tree, self.devices[0])
        return tree

    def _first_local_replica(self, x):
        """This process's first replica's slice of a stacked array, on one device (its rows
        joined from the tile devices that hold them)."""
        first = min(s.index[0].start or 0 for s in x.addressable_shards)
        mine = {}  # one shard per row range (the tile devices' shares, or one whole slice)
        for s in x.addressable_shards:
            if (s.index[0].start or 0) == first:
                mine.setdefault(s.index[1].start or 0 if x.ndim > 1 else 0, s.data)
        if len(mine) == 1:
            return next(iter(mine.values()))[0]
        return jax.device_put(np.concatenate([np.asarray(mine[k])[0] for k in sorted(mine)]), self.devices[0])

    def local_replicas(self, tree):
        """From arrays with a leading replica axis, whole on each replica's devices (a
        data-parallel program's metrics): this process's replicas' rows as numpy, in replica order
        [replicas, ...]."""
        def rows(x):
            by_replica = {}
            for s in x.addressable_shards:
                by_replica.setdefault(s.index[0].start or 0, s.data)
            return np.concatenate([np.asarray(by_replica[k]) for k in sorted(by_replica)])

        return jax.tree_util.tree_map(rows, tree)

    def constrain(self, tree, per_gaussian):
        """Inside a tile-dealing program: `tree` laid out as `place` lays it (no-op otherwise)."""
        if self.tile_devices <= 1:
            return tree
        return jax.lax.with_sharding_constraint(tree, self.state_shardings(per_gaussian))


def lowering_platform(device) -> str:
    """The platform name `lower(lowering_platforms=...)` takes for a device (a GPU's is "cuda")."""
    return {"gpu": "cuda"}.get(device.platform, device.platform)


def stacked_copies(x, sharding: NamedSharding):
    """One copy of `x` per replica, stacked on a leading axis laid out by `sharding`
    (`Layout.replica_sharding`: one slice per replica, perhaps split by rows over its tile
    devices); this process makes its own devices' shards (with several processes each passes its
    own value: its host's views)."""
    x = np.asarray(x)
    replicas = sharding.mesh.shape[REPLICA_AXIS]
    return jax.make_array_from_callback((replicas,) + x.shape, sharding, lambda index: x[None][(slice(0, 1),)
                                                                                                + tuple(index[1:])])


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
      replicas: data-parallel copies on this host. 0: on accelerators every device (each split
        over `tile_devices` when that is set: devices / tile_devices), one on a CPU (whose cores
        deal each view's tiles instead). With several processes every local device takes part.
      tile_devices: devices each replica deals a view's tiles and splits its Gaussians over (the
        Gaussian shards). 0: on a CPU every device, up to one per core (`cores_for_tiles`); 1 on
        accelerators (one device is many cores), with data parallelism, and with several processes.
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
    if clamp_tile_devices:
        tile_devices = min(tile_devices, have)
    if not replicas:
        replicas = have // max(tile_devices, 1) if processes > 1 or platform != "cpu" else 1
    if not tile_devices:
        tile_devices = 1 if replicas > 1 or processes > 1 or platform != "cpu" else min(have, cores_for_tiles())
    if processes > 1 and replicas * tile_devices != have:
        raise ValueError(f"with several processes every local device takes part: replicas x tile_devices must be "
                         f"{have}, got {replicas} x {tile_devices}")
    if replicas * tile_devices > have:
        raise ValueError(f"replicas {replicas} x tile_devices {tile_devices} need {replicas * tile_devices} devices; "
                         f"this host has {have}")
    return Layout(devices, replicas, max(1, tile_devices), processes)


def local_layout() -> Layout:
    """One device of this process, nothing dealt: what a render without a layout runs in."""
    return Layout(tuple(jax.local_devices()))
