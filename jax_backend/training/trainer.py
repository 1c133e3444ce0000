"""The training engine: the `Trainer` dispatches compiled blocks, grows the buffers the device
says are too small and keeps the state where its `Layout` says. Its other jobs are modules of
their own: compiling its programs for other devices (`aot`), checkpoints (`state_arrays`),
looking at the state (`evaluation`)."""
from __future__ import annotations

import dataclasses
from functools import partial
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from ..array_ops import next_pow2
from ..devices import HostCopy
from ..errors import UserFacingError
from ..layout import REPLICA_AXIS, Layout, make_layout
from ..rendering import isect_buffer
from ..rendering.composite import auto_tile_size, resolve_rasterizer
from .corrections import corrected_viewmats, values_of
from .data import Dataset, ViewPlan, block_cameras, downscaled_cameras
from .image_tables import device_memory, make_images, where_images_go
from .gaussians import Gaussians, activated
from .schedule import sh_degree_at
from .state import TrainState
from .step import init_state, optimizers, refine_state, train_block
from .train_config import TrainConfig
from .strategy import RefineInfo
from .strategy.ops import grow_capacity, rows_to_split


@jax.jit
def alive_count(alive):
    return jnp.sum(alive)


@jax.jit
def first_replica_nonfinite(params: dict, alive) -> dict:
    """`nonfinite_rows` of the first replica of stacked arrays (a data-parallel state)."""
    return nonfinite_rows(jax.tree_util.tree_map(lambda x: x[0], params), alive[0])


class NonFiniteError(UserFacingError, FloatingPointError):
    """Training diverged: a loss or a Gaussian parameter became NaN or infinite. The message
    names the step and the arrays; the trainer keeps the state from before the block."""


@jax.jit
def nonfinite_rows(params: dict, alive) -> dict:
    """{parameter name: number of live Gaussians with a non-finite value in it}."""
    def count(x):
        bad = ~jnp.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)
        return jnp.sum(bad & alive)
    return {name: count(x) for name, x in params.items()}


def per_replica(fn, layout: Layout):
    """`fn(*args)` run by every replica of `layout` on its own slice of the leading replica axis
    of each argument (`Layout.place` stacks one copy per replica, `Layout.place_replicas` each
    replica's own), under `shard_map` over the layout's mesh: one program for every process's
    devices, whose collectives over REPLICA_AXIS span the hosts. Its outputs keep the replica axis."""
    def one(*args):
        first = partial(jax.tree_util.tree_map, lambda x: x[0])
        return jax.tree_util.tree_map(lambda x: x[None], fn(*map(first, args)))

    # manual over the replicas only: inside, each replica's rows split over its tile devices are
    # XLA's to partition (and `rendering.tile_parallel`'s own shard_map over TILE_AXIS)
    return jax.shard_map(one, mesh=layout.mesh(), in_specs=P(REPLICA_AXIS), out_specs=P(REPLICA_AXIS),
                         axis_names={REPLICA_AXIS}, check_vma=False)


class Trainer:
    """Host side: dispatches blocks, grows buffers when the device says they are too small.

    - Intersection buffer (`rendering.isect_buffer`'s policy): a block whose steps overflowed is
      run again from the state before it with a larger buffer (never a silently wrong image); it
      is also grown ahead of time when a block came near it. The block donates its input state
      (the state exists once in device memory); the state before it waits in host memory.
    - Gaussian capacity: when density control needs more slots than there are, it changes nothing
      and reports the number; the host pads every per-Gaussian array (parameters, Adam moments,
      statistics) to the next power of two and runs density control again.
    """

    def __init__(self, cfg: TrainConfig, data: Dataset, gaussians: Gaussians, scene_extent: float,
                 isect_capacity: Optional[int] = None, log=print, *, layout: Optional[Layout] = None,
                 views_per_device: int = 1, images: str = "auto", device_bytes: Optional[int] = None):
        """
        Args:
          cfg: the run's settings.
          data: the training views (`make_dataset`).
          gaussians: the initial Gaussians.
          scene_extent: the scene's size (`data.scene_extent` of the training cameras, 3DGS's
            cameras_extent): scales the means' learning rate and
            the density-control size thresholds.
          isect_capacity: initial intersection buffer (default: `isect_buffer.ahead` of view 0's).
          log: where messages about buffers and budgets go.
          layout: the devices and how they share the work (`layout.make_layout`; default: the
            automatic layout of this process's devices). With several replicas (or processes
            after `jax.distributed.initialize`) data parallel (`per_replica`).
          views_per_device: views each replica renders per step; the effective batch is the total
            views per step (`views_per_step`).
          images: where the training images stay while training (`image_tables.where_images_go`):
            "device", "host" (each block's views copied to the device ahead of it) or "auto" (on
            the device unless they would take more than half of `device_bytes`).
          device_bytes: the memory of one device that "auto" weighs the images against (default:
            what the runtime reports; a CPU reports none).
        """
        self.layout = layout = layout if layout is not None else make_layout()
        cfg.splats.check(cfg.camera_model, cfg.rasterize_mode)
        if cfg.tile_size == 0:
            cfg = dataclasses.replace(cfg, tile_size=auto_tile_size(resolve_rasterizer(cfg.rasterizer, layout.platform),
                                                                    layout.platform))
        if cfg.corrections and layout.processes > 1:
            raise ValueError("camera pose optimisation and bilateral grids are not available with several processes "
                             "(each holds its own views): run them on one host")
        self.plan = ViewPlan(data.num_views, int(views_per_device), layout.replicas,
                             REPLICA_AXIS if layout.data_parallel else None,
                             lane_offset=jax.process_index() * layout.replicas * int(views_per_device), seed=cfg.seed)
        self.plan.table()  # enough views for the lanes
        self.cfg, self.data, self.scene_extent, self.log = cfg, data, float(scene_extent), log
        # the cameras and the extent as a block reads them: on every replica, or whole on each tile device
        self.device_data = layout.place(block_cameras(data, self.scene_extent))
        device_bytes = device_bytes if device_bytes is not None else device_memory(layout)
        held = self.plan.lanes * self.plan.rows_per_lane  # the views the replicas' tables hold, padded
        self.images_where, self.images_why = where_images_go(
            images, data.image_bytes * held // data.num_views // layout.replicas, device_bytes)
        self.images = make_images(self.images_where, layout, self.plan, data)
        # every optimizer group (the Gaussians' and each enabled per-view correction's), on the host
        self.opt = optimizers(cfg, self.scene_extent)
        # the trainer's own copy: its blocks donate the state, never the arrays it was given
        self.state = init_state(cfg, self.opt, jax.tree_util.tree_map(jnp.array, gaussians), data.num_views)
        self.isect_capacity = int(isect_capacity) if isect_capacity is not None else self._buffer_ahead()
        self._sized_for = cfg.downscale_at(self.step)  # the resolution the buffer was sized for
        self._compiled: dict = {}
        self._budget_bound = False

    # -- the state, where the layout keeps it
    @property
    def state(self) -> TrainState:
        """The whole training state on one device (`Layout.one_copy`)."""
        return self.layout.one_copy(self.device_state)

    @state.setter
    def state(self, value: TrainState):
        rows = self.layout.rows_multiple  # per-Gaussian rows split evenly over the tile devices
        value = grow_capacity(self.opt.gaussians, value, -(-value.gaussians.capacity // rows) * rows)
        self.device_state = self.layout.place(value, rows_to_split(self.opt.gaussians, value, self.layout.tile_devices))

    @property
    def gaussians(self) -> Gaussians:
        """The Gaussians on one device, without the optimizer state and statistics (the state's own
        arrays on one device: the next block deletes them, `kept_gaussians` keeps a copy)."""
        return self.layout.one_copy(self.device_state.gaussians)

    def kept_gaussians(self) -> Gaussians:
        """The Gaussians as host arrays of their own, for readers that keep them while later blocks
        train (the viewer, eval): a block donates the state it is given, so the arrays of
        `gaussians` may be deleted by the next one."""
        return jax.tree_util.tree_map(lambda x: np.array(x, copy=True), jax.device_get(self.gaussians))

    @property
    def cameras(self):
        """The pose corrections on one device (None when not optimised)."""
        return self.layout.one_copy(self.device_state.cameras)

    @property
    def capacity(self) -> int:
        """Gaussian slots (a shape: nothing is read from the devices)."""
        return self.device_state.gaussians.alive.shape[-1]

    @property
    def step(self) -> int:
        """Steps trained (read from the step alone, not the whole replicated state)."""
        step = self.device_state.step
        return int(step.addressable_shards[0].data[0] if self.layout.data_parallel else step)

    @property
    def views_per_step(self) -> int:
        """Views one step trains on, over every device and host (the effective batch)."""
        return self.plan.lanes * self.layout.processes

    @property
    def sh_degree(self) -> int:
        """SH bands in use at the current step."""
        return sh_degree_at(self.step, self.cfg.sh_degree_interval, self.cfg.sh_degree)

    def grow_capacity(self, new_capacity: int):
        """Pad every per-Gaussian array to `new_capacity` slots (no-op when not larger)."""
        old = self.capacity
        if new_capacity <= old:
            return
        self.state = grow_capacity(self.opt.gaussians, self.state, new_capacity)
        self.log(f"[jax-gs] step {self.step}: Gaussian capacity grown {old} -> {new_capacity}")

    def training_viewmats(self):
        """The training views' world-to-camera matrices [V, 4, 4] as training renders them: with
        the learned pose corrections when the camera optimiser is on."""
        fixes = self.cfg.corrections
        return corrected_viewmats(fixes, self.layout.one_copy(values_of(fixes, self.device_state)), slice(None),
                                  self.data.viewmats)

    # -- the intersection buffer
    def _buffer_ahead(self) -> int:
        """`isect_buffer.ahead` of what the training views need now, at the resolution the block
        trains at."""
        g = self.gaussians
        Ks, width, height = downscaled_cameras(self.data.Ks, self.data.width, self.data.height,
                                               self.cfg.downscale_at(self.step))
        counts = self.cfg.splats.count_intersections(self.cfg, activated(g.params, g.alive), self.training_viewmats(),
                                                     Ks, width, height, self.data.distortions)
        return isect_buffer.ahead(counts)

    def size_buffer_ahead(self):
        """Grow the intersection buffer to `isect_buffer.ahead` of the current Gaussians (after a
        new resolution or a restored state)."""
        self._sized_for = self.cfg.downscale_at(self.step)
        self.isect_capacity = max(self.isect_capacity, self._buffer_ahead())

    # -- compiled programs
    def make_block(self, num_steps: int, layout: Layout):
        """The block program (`train_block`) built for `layout`, not compiled yet: (cameras and
        extent, images' table, state) -> (state, metrics, RefineInfo). Its input state is donated:
        the block's output state takes its place in device memory (`_dispatch` keeps a host copy)."""
        downscale = self.cfg.downscale_at(self.step)  # a block keeps the factor it starts with
        fn = partial(train_block, self.cfg, layout, self.isect_capacity, downscale, num_steps, self.plan)
        if layout.data_parallel:
            fn = per_replica(fn, layout)
        return jax.jit(fn, donate_argnums=(2,))

    def block_fn(self, num_steps: int):
        """The next block's program of `num_steps` steps for this trainer's devices (compiled once
        per buffer size, resolution and length)."""
        key = ("block", self.isect_capacity, self.cfg.downscale_at(self.step), num_steps)
        if key not in self._compiled:
            self._compiled[key] = self.make_block(num_steps, self.layout)
        return self._compiled[key]

    def make_refine(self):
        """Density control's one-device program (`refine_state`: (extent, state, step before)), not
        compiled yet."""
        return jax.jit(partial(refine_state, self.cfg, self.opt.gaussians))

    def refine_fn(self):
        if "refine" not in self._compiled:
            self._compiled["refine"] = self.make_refine()
        return self._compiled["refine"]

    # -- one block, in named pieces
    def _dispatch(self, num_steps: int):
        """Run the block from the current state until its intersection buffer was large enough.
        The block donates the state it is given (one copy in device memory); the state before it
        waits in host memory (`devices.HostCopy`) for a block run again with a larger buffer, or
        kept when the block diverged (`_check_finite`). Returns (metrics as numpy [steps, views per
        step], RefineInfo, the host copy of the state before the block)."""
        first = self.step
        before = HostCopy(self.device_state)
        table = self.images.block_table(first, num_steps)
        while True:
            self.device_state, metrics, info = self.block_fn(num_steps)(self.device_data, table, self.device_state)
            self._prefetch_next(first + num_steps)  # host images: copied while this block runs
            if self.layout.data_parallel:  # this process's [replicas, steps, views] -> [steps, replicas * views]
                metrics = {k: np.moveaxis(v, 0, 1).reshape(v.shape[1], -1)
                           for k, v in self.layout.local_replicas(metrics).items()}
                info = self.layout.one_copy(info)  # the replicas' are identical
            else:
                metrics = jax.device_get(metrics)
            if not metrics["overflow"].any():
                return metrics, info.as_python(), before
            needed = int(metrics["num_intersections"].max())
            self.isect_capacity = isect_buffer.after_overflow(needed)
            self.log(f"[jax-gs] step {first}: intersection buffer too small ({needed} needed); "
                     f"grown to {self.isect_capacity}, block run again")
            self.device_state = before.restore()

    def _prefetch_next(self, first: int):
        """Start copying the images of the block that will start at step `first` (as `run_block`
        sizes it by default)."""
        if first < self.cfg.max_steps:
            self.images.prefetch(first, min(self.cfg.steps_per_block, self.cfg.max_steps - first))

    def _check_finite(self, state, metrics, first: int):
        """NonFiniteError naming the first step whose loss is not finite and the parameters with
        non-finite values, if any."""
        loss_ok = np.isfinite(metrics["loss"]).reshape(len(metrics["loss"]), -1).all(axis=1)
        g = state.gaussians
        check = first_replica_nonfinite if self.layout.data_parallel else nonfinite_rows
        counts = {k: int(v) for k, v in jax.device_get(check(g.params, g.alive)).items()}
        bad = {k: v for k, v in counts.items() if v}
        if loss_ok.all() and not bad:
            return
        alive = self._alive_count(state)
        arrays = ", ".join(f"{k} ({v} of {alive} Gaussians)" for k, v in bad.items())
        last = first + len(loss_ok) - 1
        if not loss_ok.all():
            step = first + int(np.argmin(loss_ok))
            when = f"at step {step}: the loss is {float(np.asarray(metrics['loss'])[step - first].ravel()[0])}"
            when += f"; non-finite parameters after step {last}: {arrays}" if arrays else ""
        else:
            when = f"in steps {first}-{last}: non-finite parameters: {arrays}"
        raise NonFiniteError(f"training diverged {when} (a learning rate too high?); the run stops, keeping "
                             f"nothing of steps {first}-{last}")

    def _alive_count(self, state) -> int:
        """Live Gaussians of `state` as this trainer keeps it (counted where it lies)."""
        alive = state.gaussians.alive
        return int(alive_count(alive[0] if self.layout.data_parallel else alive))

    def _refine_again_with_room(self, info: RefineInfo, num_steps: int) -> RefineInfo:
        """Density control wanted more slots than there are: grow them, refine the same steps again."""
        if info.slots_needed <= self.capacity:
            return info
        self.grow_capacity(next_pow2(info.slots_needed))
        self.state, info = self.refine_fn()(np.float32(self.scene_extent), self.state, self.step - num_steps)
        return info.as_python()

    def _log_budget(self, info: RefineInfo):
        """Say when the Gaussian budget starts or stops limiting growth."""
        budget = self.cfg.strategy.budget
        if info.refined and budget and info.budget_bound != self._budget_bound:
            self._budget_bound = info.budget_bound
            self.log(f"[jax-gs] step {self.step}: Gaussian budget {budget} "
                     + ("reached; growth limited to it" if info.budget_bound else "no longer limits growth"))

    def run_block(self, num_steps: Optional[int] = None):
        """Train `num_steps` (default: steps_per_block, capped at max_steps) in one dispatch.

        Returns:
          (metrics: numpy arrays [steps, views per step] of loss, psnr, view, num_intersections,
          overflow, plus num_alive; the block's RefineInfo as Python values).
        """
        num_steps = num_steps or min(self.cfg.steps_per_block, max(self.cfg.max_steps - self.step, 1))
        first = self.step
        if self.cfg.downscale_at(first) != self._sized_for:  # a new training resolution: size the buffer for it
            self.size_buffer_ahead()
        metrics, info, before = self._dispatch(num_steps)
        try:
            self._check_finite(self.device_state, metrics, first)
        except NonFiniteError:
            self.device_state = before.restore()  # the state from before the block
            raise
        info = self._refine_again_with_room(info, num_steps)
        metrics["num_alive"] = self._alive_count(self.device_state)
        self._log_budget(info)
        self.isect_capacity = isect_buffer.after_block(self.isect_capacity, int(metrics["num_intersections"].max()))
        return metrics, info

    def train(self, num_steps: Optional[int] = None, callback=None):
        """Run blocks until `num_steps` more steps (default: until max_steps) are done.
        `callback(trainer, metrics, info)` is called after every block."""
        end = self.cfg.max_steps if num_steps is None else self.step + num_steps
        while self.step < end:
            metrics, info = self.run_block(min(self.cfg.steps_per_block, end - self.step))
            if callback is not None:
                callback(self, metrics, info)
