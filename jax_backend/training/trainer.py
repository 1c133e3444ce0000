"""The host side of training: the `Trainer` compiles and dispatches blocks, grows the buffers the
device says are too small, and saves, restores and renders its state."""
from __future__ import annotations

import dataclasses
from functools import partial
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import UserFacingError
from ..rendering import count_intersections, next_isect_capacity, next_pow2
from .. import devices as dev
from .corrections import corrected_viewmats, values_of
from .data import Dataset, ViewPlan, downscaled_cameras
from .gaussians import Gaussians, activated, render_gaussians
from .loss import psnr
from .optim import make_optimizers
from .schedule import sh_degree_at
from ..files.checkpoint import read_checkpoint, save_checkpoint
from .serialize import capacity_of, from_named_arrays, named_arrays
from .state import TrainState
from .step import TrainConfig, init_state, refine_state, train_block
from .strategy import RefineInfo
from .strategy.ops import grow_capacity, tile_shardings


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


class Trainer:
    """Host side: dispatches blocks, grows buffers when the device says they are too small.

    - Intersection buffer: a block whose steps overflowed is run again from the state before it
      with a larger buffer (never a silently wrong image); it is also grown ahead of time when a
      block came within 20% of it.
    - Gaussian capacity: when density control needs more slots than there are, it changes nothing
      and reports the number; the host pads every per-Gaussian array (parameters, Adam moments,
      statistics) to the next power of two and runs density control again.
    """

    def __init__(self, cfg: TrainConfig, data: Dataset, gaussians: Gaussians, scene_extent: float,
                 isect_capacity: Optional[int] = None, log=print, *, num_devices: int = 1,
                 views_per_device: int = 1):
        """
        Args:
          cfg: the run's settings.
          data: the training views (`make_dataset`).
          gaussians: the initial Gaussians.
          scene_extent: the scene's size (`data.scene_extent` of the training cameras, 3DGS's
            cameras_extent): scales the means' learning rate and
            the density-control size thresholds.
          isect_capacity: initial intersection buffer (default: twice what view 0 needs).
          log: where messages about buffers and budgets go.
          num_devices: > 1 (or several processes after `jax.distributed.initialize`): data
            parallel with pmap over this host's first `num_devices` devices.
          views_per_device: views each device renders per step; the effective batch is the total
            views per step (`views_per_step`).
        """
        self.devices = dev.data_devices(num_devices)
        local = dev.target_devices()
        if jax.process_count() > 1 and num_devices != len(local):
            raise ValueError(f"with several processes every local device takes part: num_devices must be "
                             f"{len(local)}, got {num_devices}")
        self.parallel = num_devices > 1 or jax.process_count() > 1
        tile_devices = dev.check_count("tile_devices", cfg.tile_devices or dev.auto_tile_devices(num_devices), low=0)
        if tile_devices > 1 and self.parallel:
            raise ValueError(f"tile_devices {tile_devices} deals one view's tiles over several devices: it needs "
                             f"num_devices 1 and one process (data parallelism takes the devices)")
        cfg = dataclasses.replace(cfg, tile_devices=tile_devices)
        self._tile_devices = tile_devices
        self.plan = ViewPlan(data.num_views, int(views_per_device), num_devices, "devices" if self.parallel else None,
                             lane_offset=jax.process_index() * num_devices * int(views_per_device), seed=cfg.seed)
        self.plan.table()  # enough views for the lanes
        self.cfg, self.data, self.scene_extent, self.log = cfg, data, float(scene_extent), log
        # tile parallel: the dataset whole on each of the devices the tiles are dealt to
        self._device_data = (dev.stacked_copies(data, self.devices) if self.parallel
                             else dev.tile_copies(data, tile_devices))
        # every optimizer group: the Gaussians' and each enabled per-view correction's
        self.opt = make_optimizers(cfg.optim, {name: c.optimizer for name, c in cfg.corrections.items()},
                                   self.scene_extent, cfg.max_steps)
        if cfg.corrections and jax.process_count() > 1:
            raise ValueError("camera pose optimisation and bilateral grids are not available with several processes "
                             "(each holds its own views): run them on one host")
        self.state = init_state(cfg, self.opt, gaussians, data.num_views)
        self.isect_capacity = int(isect_capacity) if isect_capacity is not None else self._capacity_ahead()
        self._sized_for = cfg.downscale_at(self.step)  # the resolution the buffer was sized for
        self._compiled: dict = {}
        self._budget_bound = False

    # -- the state
    def _one_device(self, part):
        """A part of the device state (`self._state.gaussians`, ...) as arrays on one device: one
        replica's copy when data parallel (they are identical), the rows gathered when tile
        parallel. Reading a part gathers only that part."""
        if self.parallel:
            return dev.first_copy(part)
        if self._tile_devices > 1:
            return dev.one_device(part)
        return part

    @property
    def state(self) -> TrainState:
        """The whole training state on one device (`_one_device`)."""
        return self._one_device(self._state)

    @property
    def gaussians(self) -> Gaussians:
        """The Gaussians on one device, without the optimizer state and statistics."""
        return self._one_device(self._state.gaussians)

    @property
    def cameras(self):
        """The pose corrections on one device (None when not optimised)."""
        return self._one_device(self._state.cameras)

    @property
    def capacity(self) -> int:
        """Gaussian slots (a shape: nothing is read from the devices)."""
        return self._state.gaussians.alive.shape[-1]

    @state.setter
    def state(self, value: TrainState):
        if self.parallel:
            self._state = dev.stacked_copies(value, self.devices)
        elif self._tile_devices > 1:  # per-Gaussian rows split evenly over the tile devices
            n = self._tile_devices
            value = grow_capacity(self.opt.gaussians, value, -(-value.gaussians.capacity // n) * n)
            self._state = jax.device_put(value, tile_shardings(self.opt.gaussians, value, n))
        else:
            self._state = value

    @property
    def step(self) -> int:
        """Steps trained (read from the step alone, not the whole replicated state)."""
        step = self._state.step
        return int(step.addressable_shards[0].data[0] if self.parallel else step)

    @property
    def views_per_step(self) -> int:
        """Views one step trains on, over every device and host (the effective batch)."""
        return self.plan.lanes * jax.process_count()

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

    # -- compiled programs
    def _capacity_ahead(self) -> int:
        """An intersection buffer for the next block: twice what the most demanding training view
        needs now, at the resolution the block trains at (room for the Gaussians to grow, so the
        block rarely has to run again with a larger one)."""
        g = self.gaussians
        means, quats, scales, opacities, _ = activated(g.params, g.alive)
        Ks, width, height = downscaled_cameras(self.data.Ks, self.data.width, self.data.height,
                                               self.cfg.downscale_at(self.step))
        counts = count_intersections(means, quats, scales, opacities, self.training_viewmats(), Ks, width, height,
                                     rasterize_mode=self.cfg.rasterize_mode)
        return next_isect_capacity(2 * max(int(counts.max()), 1))

    def _make_block(self, num_steps: int, devices):
        """The block program (`train_block`) for `devices`, not compiled yet."""
        downscale = self.cfg.downscale_at(self.step)  # a block keeps the factor it starts with
        fn = partial(train_block, self.cfg, self.opt, self.scene_extent, self.isect_capacity, downscale, num_steps,
                     self.plan)
        # several processes: pmap over every process's devices (collectives span the hosts);
        # each process passes and gets back its own devices' slices
        return (jax.pmap(fn, axis_name=self.plan.axis_name, devices=devices if jax.process_count() == 1 else None)
                if self.parallel else jax.jit(fn))

    def _block_fn(self, num_steps: int):
        key = ("block", self.isect_capacity, self.cfg.downscale_at(self.step), num_steps)
        if key not in self._compiled:
            self._compiled[key] = self._make_block(num_steps, self.devices)
        return self._compiled[key]

    def _make_refine(self, _devices=None):
        """Density control's program (`refine_state`), not compiled yet."""
        return jax.jit(partial(refine_state, self.cfg, self.opt.gaussians, self.scene_extent))

    def _refine_fn(self):
        if "refine" not in self._compiled:
            self._compiled["refine"] = self._make_refine()
        return self._compiled["refine"]

    # -- compiling for other devices (no run)
    def _lower_for(self, target, make, args):
        """`make(devices)`'s program lowered for `target` (as many devices as this trainer uses,
        e.g. a TPU topology's compile-only ones) with `args` placed there as this trainer places
        them (stacked copies when data parallel, else one device)."""
        target = list(target)
        if len(target) < len(self.devices):
            raise ValueError(f"this trainer uses {len(self.devices)} devices; the target has {len(target)}")
        if self._tile_devices > 1:
            raise ValueError(f"compiling for other devices needs tile_devices 1, this trainer deals over "
                             f"{self._tile_devices}")
        target = target[:len(self.devices)]
        with dev.compile_for(target):
            fn = make(target)
            sharding = dev.stacked_sharding(target) if self.parallel else jax.sharding.SingleDeviceSharding(target[0])
            abstract = dev.abstract(args, sharding)
            return fn.lower(*abstract) if self.parallel else fn.trace(*abstract).lower(
                lowering_platforms=(dev.lowering_platform(target[0]),))

    def lower_block(self, num_steps: int, target=None):
        """The next block's program of `num_steps` steps, lowered (`.compile()` it): for this
        trainer's devices, or for `target` devices (`devices.topology_devices`: a TPU's, compiled on
        this host without one), so its compile time and memory can be checked without running it."""
        if target is None:
            return self._block_fn(num_steps).lower(self._device_data, self._state)
        return self._lower_for(target, partial(self._make_block, num_steps), (self._device_data, self._state))

    def lower_refine(self, target=None):
        """Density control's program, lowered as `lower_block`'s (one device: the program
        `_refine_again_with_room` runs when the slots run out)."""
        step = jnp.int32(self.step)
        if target is None:
            return self._refine_fn().lower(self.state, step)
        if self.parallel:
            raise ValueError("lower_refine compiles the one-device program: use a trainer with num_devices 1")
        return self._lower_for(target, self._make_refine, (self.state, step))

    # -- one block, in named pieces
    def _dispatch(self, num_steps: int):
        """Run the block from the current state until its intersection buffer was large enough.
        Returns (new device state, metrics as numpy [steps, views per step], RefineInfo)."""
        before = self._state
        while True:
            state, metrics, info = self._block_fn(num_steps)(self._device_data, before)
            metrics = jax.device_get(metrics)
            if self.parallel:  # [devices, steps, views] -> [steps, devices * views]; one replica's info
                metrics = {k: np.moveaxis(v, 0, 1).reshape(v.shape[1], -1) for k, v in metrics.items()}
                info = jax.tree_util.tree_map(lambda x: x[0], info)
            if not metrics["overflow"].any():
                return state, metrics, info.as_python()
            needed = int(metrics["num_intersections"].max())
            self.isect_capacity = next_isect_capacity(int(needed * 1.25))
            self.log(f"[jax-gs] step {self.step}: intersection buffer too small ({needed} needed); "
                     f"grown to {self.isect_capacity}, block run again")

    def _check_finite(self, state, metrics, first: int):
        """NonFiniteError naming the first step whose loss is not finite and the parameters with
        non-finite values, if any."""
        loss_ok = np.isfinite(metrics["loss"]).reshape(len(metrics["loss"]), -1).all(axis=1)
        one = dev.first_copy(state) if self.parallel else state
        counts = {k: int(v) for k, v in jax.device_get(nonfinite_rows(one.gaussians.params, one.gaussians.alive)).items()}
        bad = {k: v for k, v in counts.items() if v}
        if loss_ok.all() and not bad:
            return
        alive = int(jnp.sum(one.gaussians.alive))
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

    def _refine_again_with_room(self, info: RefineInfo, num_steps: int) -> RefineInfo:
        """Density control wanted more slots than there are: grow them, refine the same steps again."""
        if info.slots_needed <= self.capacity:
            return info
        self.grow_capacity(next_pow2(info.slots_needed))
        self.state, info = self._refine_fn()(self.state, self.step - num_steps)
        return info.as_python()

    def _log_budget(self, info: RefineInfo):
        """Say when the Gaussian budget starts or stops limiting growth."""
        budget = self.cfg.strategy.budget
        if info.refined and budget and info.budget_bound != self._budget_bound:
            self._budget_bound = info.budget_bound
            self.log(f"[jax-gs] step {self.step}: Gaussian budget {budget} "
                     + ("reached; growth limited to it" if info.budget_bound else "no longer limits growth"))

    def _grow_buffer_ahead(self, metrics):
        peak = int(metrics["num_intersections"].max())
        if peak > 0.8 * self.isect_capacity:
            self.isect_capacity = next_isect_capacity(int(peak * 1.5))

    def run_block(self, num_steps: Optional[int] = None):
        """Train `num_steps` (default: steps_per_block, capped at max_steps) in one dispatch.

        Returns:
          (metrics: numpy arrays [steps, views per step] of loss, psnr, view, num_intersections,
          overflow, plus num_alive; the block's RefineInfo as Python values).
        """
        num_steps = num_steps or min(self.cfg.steps_per_block, max(self.cfg.max_steps - self.step, 1))
        first = self.step
        if self.cfg.downscale_at(first) != self._sized_for:  # a new training resolution: size the buffer for it
            self._sized_for = self.cfg.downscale_at(first)
            self.isect_capacity = max(self.isect_capacity, self._capacity_ahead())
        state, metrics, info = self._dispatch(num_steps)
        self._check_finite(state, metrics, first)  # raises, keeping the state from before the block
        self._state = state
        info = self._refine_again_with_room(info, num_steps)
        metrics["num_alive"] = int(jnp.sum(self._one_device(self._state.gaussians.alive)))
        self._log_budget(info)
        self._grow_buffer_ahead(metrics)
        return metrics, info

    def train(self, num_steps: Optional[int] = None, callback=None):
        """Run blocks until `num_steps` more steps (default: until max_steps) are done.
        `callback(trainer, metrics, info)` is called after every block."""
        end = self.cfg.max_steps if num_steps is None else self.step + num_steps
        while self.step < end:
            metrics, info = self.run_block(min(self.cfg.steps_per_block, end - self.step))
            if callback is not None:
                callback(self, metrics, info)

    # -- state as named arrays, checkpoints
    def state_arrays(self) -> dict:
        """The whole training state as {name: numpy array} (`serialize.named_arrays`)."""
        return named_arrays(self.state)

    def load_state_arrays(self, arrays: dict, source="checkpoint"):
        """Restore a state saved by `state_arrays` (same configuration and dataset): the capacity
        grows to the saved one first. StateError naming `source` when it does not fit."""
        self.grow_capacity(capacity_of(arrays, source))
        self.state = from_named_arrays(self.state, arrays, source)
        self._sized_for = self.cfg.downscale_at(self.step)
        self.isect_capacity = max(self.isect_capacity, self._capacity_ahead())  # for the restored Gaussians

    def save(self, path, meta: Optional[dict] = None):
        """One .npz with the whole state (atomic). Returns its path."""
        info = {"capacity": self.capacity, "isect_capacity": self.isect_capacity, "step": self.step}
        return save_checkpoint(path, self.state_arrays(), dict(meta or {}, trainer=info))

    def restore(self, path) -> dict:
        """Load a checkpoint saved by `save` (same configuration and dataset). Returns its meta."""
        arrays, meta = read_checkpoint(path)
        self.load_state_arrays(arrays, path)
        self.isect_capacity = int(meta.get("trainer", {}).get("isect_capacity", self.isect_capacity))
        return meta

    def training_viewmats(self):
        """The training views' world-to-camera matrices [V, 4, 4] as training renders them: with
        the learned pose corrections when the camera optimiser is on."""
        fixes = self.cfg.corrections
        return corrected_viewmats(fixes, self._one_device(values_of(fixes, self._state)), slice(None),
                                  self.data.viewmats)

    # -- looking at the state
    def render(self, viewmat, K, width: int, height: int, background=None, render_mode: str = "RGB+ED"):
        """Render the current Gaussians from one camera at the current SH degree (`render_gaussians`)."""
        return render_gaussians(self.gaussians, viewmat, K, width, height, sh_degree=self.sh_degree,
                                background=background, render_mode=render_mode, rasterizer=self.cfg.rasterizer,
                                rasterize_mode=self.cfg.rasterize_mode)

    def heldout_psnr(self, images, viewmats, Ks) -> float:
        """Mean PSNR of the current Gaussians against uint8 images [H,W,3] seen from the given cameras."""
        vals = []
        for im, vm, K in zip(images, viewmats, Ks):
            render, _ = self.render(vm, K, im.shape[1], im.shape[0], render_mode="RGB")
            vals.append(float(psnr(jnp.clip(render, 0.0, 1.0), jnp.asarray(im[..., :3], jnp.float32) / 255.0)))
        return float(np.mean(vals))
