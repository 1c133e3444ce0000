"""Training in compiled blocks: one `jax.jit` of a `lax.scan` over `steps_per_block` steps, the
dataset and view sampling on the device, density control at the block boundary, inside the same
program. The host dispatches once per block.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .gaussians import Gaussians, activated
from .loss import photometric_loss, psnr
from .optim import OptimConfig, make_optimizer, means_schedule
from .rendering import rasterization
from .strategy import DefaultStrategy, MCMCStrategy, RefineInfo


class Dataset(NamedTuple):
    """Every training view on the device. Images of different sizes are padded to the largest;
    `masks` marks the real (and, with user masks, the wanted) pixels."""

    images: jnp.ndarray  # [V, H, W, 3|4] uint8
    masks: jnp.ndarray  # [V, H, W] bool
    viewmats: jnp.ndarray  # [V, 4, 4] world-to-camera, OpenCV axes
    Ks: jnp.ndarray  # [V, 3, 3]

    @property
    def num_views(self) -> int:
        return self.images.shape[0]

    @property
    def height(self) -> int:
        return self.images.shape[1]

    @property
    def width(self) -> int:
        return self.images.shape[2]


def make_dataset(images, viewmats, Ks, masks=None) -> Dataset:
    """images: list of [H_i, W_i, 3|4] uint8 arrays (or one [V,H,W,C] array)."""
    images = [np.asarray(im) for im in images]
    if not images:
        raise ValueError("no training images")
    chans = {im.shape[-1] for im in images}
    if len(chans) != 1 or chans.pop() not in (3, 4) or any(im.ndim != 3 for im in images):
        raise ValueError(f"images must all be [H,W,3] or all [H,W,4]; got shapes {sorted({im.shape for im in images})}")
    H = max(im.shape[0] for im in images)
    W = max(im.shape[1] for im in images)
    V, C = len(images), images[0].shape[-1]
    out = np.zeros((V, H, W, C), np.uint8)
    valid = np.zeros((V, H, W), bool)
    for i, im in enumerate(images):
        if im.dtype != np.uint8:
            im = np.clip(np.round(np.asarray(im, np.float32) * 255), 0, 255).astype(np.uint8)
        out[i, : im.shape[0], : im.shape[1]] = im
        valid[i, : im.shape[0], : im.shape[1]] = True if masks is None else np.asarray(masks[i], bool)
    viewmats, Ks = np.asarray(viewmats, np.float32), np.asarray(Ks, np.float32)
    if viewmats.shape != (V, 4, 4) or Ks.shape != (V, 3, 3):
        raise ValueError(f"need viewmats [V,4,4] and Ks [V,3,3] for V={V}, got {viewmats.shape}, {Ks.shape}")
    return Dataset(jnp.asarray(out), jnp.asarray(valid), jnp.asarray(viewmats), jnp.asarray(Ks))


@dataclass(frozen=True)
class TrainConfig:
    max_steps: int = 30_000
    steps_per_block: int = 100
    rasterizer: str = "flat"
    sh_degree: int = 3
    sh_degree_interval: int = 1000  # one more SH band every this many steps
    background: str = "black"  # "black" | "white" | "random"
    ssim_lambda: float = 0.2
    strategy: Union[DefaultStrategy, MCMCStrategy] = field(default_factory=DefaultStrategy)
    optim: OptimConfig = field(default_factory=OptimConfig)
    seed: int = 0


class TrainState(NamedTuple):
    gaussians: Gaussians
    opt_state: Any
    stats: dict  # density-control statistics
    step: jnp.ndarray  # steps done
    key: jnp.ndarray


@dataclass(frozen=True)
class ViewPlan:
    """How the views of one step are drawn, for `replicas` data-parallel devices (this host's)
    each rendering `views_per_replica` views per step. The dataset's views are dealt to
    `lanes = replicas * views_per_replica` lanes (lane l: views l, l + lanes, ...); every lane
    goes through its views once per epoch in its own random order. Lane l's view at step t is a
    pure function of (seed, global lane, t): nothing to carry, resumable, and the same views
    whether the lanes sit on 4 devices or in one batch of 4 on one device.

    `axis_name` names the pmap axis (None: one replica, no collectives); `lane_offset` is this
    host's first global lane (multi-host: each host deals its own shard of the views)."""

    num_views: int
    views_per_replica: int = 1
    replicas: int = 1
    axis_name: Optional[str] = None
    lane_offset: int = 0
    seed: int = 0

    @property
    def lanes(self) -> int:
        return self.replicas * self.views_per_replica

    def table(self):
        """[lanes, S] view indices (-1 padding) and [lanes] counts, as numpy (static)."""
        if self.num_views < self.lanes:
            raise ValueError(f"{self.lanes} views per step need at least as many training views, "
                             f"this dataset has {self.num_views}")
        S = -(-self.num_views // self.lanes)
        table = np.full((self.lanes, S), -1, np.int32)
        for lane in range(self.lanes):
            own = np.arange(lane, self.num_views, self.lanes)
            table[lane, : len(own)] = own
        return table, (table >= 0).sum(1).astype(np.int32)

    def replica_lanes(self):
        """The global lane of each of this replica's [views_per_replica] views (traced)."""
        lanes = jnp.arange(self.views_per_replica)
        if self.axis_name is not None:  # axis_index counts every host's devices
            lanes = lanes + jax.lax.axis_index(self.axis_name) * self.views_per_replica
        return lanes

    def views(self, step):
        """The [views_per_replica] views this replica trains on at `step` (traced)."""
        table, counts = (jnp.asarray(a) for a in self.table())
        base = jax.random.PRNGKey(self.seed)

        def one(lane):
            local = lane - self.lane_offset  # lanes are dealt this host's views
            n = counts[local]
            epoch, pos = step // n, step % n
            k = jax.random.fold_in(jax.random.fold_in(base, lane), epoch)
            order = jnp.argsort(jnp.where(table[local] >= 0, jax.random.uniform(k, table.shape[1:]), 2.0))
            return table[local, order[pos]]

        return jax.vmap(one)(self.replica_lanes())


def replicate(tree, devices):
    """One copy of every leaf on each device, stacked on a leading device axis (what pmap takes)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    sharding = NamedSharding(Mesh(np.array(devices), ("devices",)), PartitionSpec("devices"))

    def one(x):
        x = jnp.asarray(x)
        shards = [jax.device_put(x[None], d) for d in devices]
        return jax.make_array_from_single_device_arrays((len(devices),) + x.shape, sharding, shards)

    return jax.tree_util.tree_map(one, tree)


def background_color(kind: str, key):
    if kind == "black":
        return jnp.zeros(3)
    if kind == "white":
        return jnp.ones(3)
    if kind == "random":
        return jax.random.uniform(key, (3,))
    raise ValueError(f"background must be 'black', 'white' or 'random', got {kind!r}")


def train_step(cfg: TrainConfig, tx, means_lr, isect_capacity: int, plan: ViewPlan, data: Dataset,
               state: TrainState, _):
    """One optimisation step on this replica's views; with `plan.axis_name`, the gradient is the
    mean over every replica's views (`lax.pmean`) and density statistics are summed (`lax.psum`),
    so every replica applies the same update and takes the same density decisions."""
    axis = plan.axis_name
    key, k_bg, k_noise = jax.random.split(state.key, 3)
    views = plan.views(state.step)
    B = plan.views_per_replica
    images = data.images[views].astype(jnp.float32) / 255.0
    masks = data.masks[views]
    bgs = jax.vmap(lambda lane: background_color(cfg.background, jax.random.fold_in(k_bg, lane)))(plan.replica_lanes())
    targets = images[..., :3]
    if images.shape[-1] == 4:  # composite RGBA targets on this step's background
        targets = targets * images[..., 3:] + bgs[:, None, None, :] * (1.0 - images[..., 3:])
    sh_active = jnp.minimum(state.step // cfg.sh_degree_interval, cfg.sh_degree)
    g = state.gaussians
    strategy = cfg.strategy

    def loss_fn(params, probe):
        means, quats, scales, opacities, sh = activated(params, g.alive)
        renders, _, meta = rasterization(
            means, quats, scales, opacities, sh, data.viewmats[views], data.Ks[views], data.width, data.height,
            sh_degree=sh_active, backgrounds=bgs, rasterizer=cfg.rasterizer, capacity=isect_capacity,
            means2d_probe=probe, absgrad=strategy.absgrad)
        per_view = jax.vmap(photometric_loss, in_axes=(0, 0, 0, None))(renders, targets, masks, cfg.ssim_lambda)
        loss = jnp.mean(per_view) + strategy.loss_regularizer(params, g.alive)
        return loss, (renders, per_view, meta)

    probe = jnp.zeros((B, g.capacity, 2), jnp.float32)
    (_, (renders, per_view, meta)), (grads, probe_grad) = jax.value_and_grad(
        loss_fn, argnums=(0, 1), has_aux=True)(g.params, probe)
    if axis is not None:
        grads = jax.lax.pmean(grads, axis)
    updates, opt_state = tx.update(grads, state.opt_state, g.params)
    updates = jax.tree_util.tree_map(lambda u: jnp.where(g.alive.reshape((-1,) + (1,) * (u.ndim - 1)), u, 0.0), updates)
    params = optax.apply_updates(g.params, updates)
    # screen-space statistics per view, as if each view were its own step (the mean over B views
    # scaled each view's means2d gradient by 1/B)
    delta = strategy.init_stats(g.capacity)
    for c in range(B):
        delta = strategy.accumulate(delta, state.step, probe_grad[c] * B, meta["radii"][c], data.width, data.height)
    if axis is not None:
        delta = jax.lax.psum(delta, axis)
    stats = jax.tree_util.tree_map(jnp.add, state.stats, delta)
    gaussians = strategy.post_step(k_noise, Gaussians(params, g.alive), state.step, means_lr(state.step))
    metrics = {
        "loss": per_view,
        "psnr": jax.vmap(psnr)(renders, targets, masks),
        "view": views,
        "num_intersections": meta["num_intersections"],
        "overflow": meta["overflow"],
    }
    return TrainState(gaussians, opt_state, stats, state.step + 1, key), metrics


def refine_state(cfg: TrainConfig, scene_scale: float, state: TrainState, step_before):
    key, k = jax.random.split(state.key)
    g, opt_state, stats, info = cfg.strategy.refine(k, state.gaussians, state.opt_state, state.stats, step_before,
                                                     state.step, scene_scale)
    return state._replace(gaussians=g, opt_state=opt_state, stats=stats, key=key), info


def train_block(cfg: TrainConfig, tx, means_lr, scene_scale: float, isect_capacity: int, num_steps: int,
                plan: ViewPlan, data: Dataset, state: TrainState):
    """`num_steps` steps in one `lax.scan`, then density control. Per-step metrics come back as
    arrays [num_steps, views_per_replica]. Under pmap every replica holds the same state and
    statistics, so the density control below runs on each and agrees, with no host round trip."""
    step_before = state.step
    state, metrics = jax.lax.scan(partial(train_step, cfg, tx, means_lr, isect_capacity, plan, data), state, None,
                                  length=num_steps)
    state, info = refine_state(cfg, scene_scale, state, step_before)
    return state, metrics, info


def initial_state(cfg: TrainConfig, tx, gaussians: Gaussians) -> TrainState:
    return TrainState(
        gaussians=gaussians,
        opt_state=tx.init(gaussians.params),
        stats=cfg.strategy.init_stats(gaussians.capacity),
        step=jnp.int32(0),
        key=jax.random.PRNGKey(cfg.seed),
    )


class Trainer:
    """Host side: dispatches blocks, grows buffers when the device says they are too small.

    - Intersection buffer: a block whose steps overflowed is run again from the state before it
      with a larger buffer (never a silently wrong image); it is also grown ahead of time when a
      block came within 20% of it.
    - Gaussian capacity: when density control needs more slots than there are, it changes nothing
      and reports the number; the host pads every per-Gaussian array (parameters, Adam moments,
      statistics) to the next power of two and runs density control again.
    """

    def __init__(self, cfg: TrainConfig, data: Dataset, gaussians: Gaussians, scene_scale: float,
                 isect_capacity: Optional[int] = None, log=print, *, num_devices: int = 1,
                 views_per_device: int = 1):
        """`num_devices` > 1 (or several processes after `jax.distributed.initialize`): data
        parallel with pmap over this host's first `num_devices` devices, each rendering
        `views_per_device` views per step; the effective batch is the total views per step."""
        from .rendering import next_capacity

        local = jax.local_devices()
        if not 1 <= num_devices <= len(local):
            raise ValueError(f"num_devices must be between 1 and {len(local)} (this host's devices), got {num_devices}")
        if jax.process_count() > 1 and num_devices != len(local):
            raise ValueError(f"with several processes every local device takes part: num_devices must be "
                             f"{len(local)}, got {num_devices}")
        self.devices = local[:num_devices]
        self.parallel = num_devices > 1 or jax.process_count() > 1
        self.plan = ViewPlan(data.num_views, int(views_per_device), num_devices, "devices" if self.parallel else None,
                             lane_offset=jax.process_index() * num_devices * int(views_per_device), seed=cfg.seed)
        self.plan.table()  # enough views for the lanes
        self.cfg, self.data, self.scene_scale, self.log = cfg, data, float(scene_scale), log
        self._device_data = replicate(data, self.devices) if self.parallel else data
        self.tx = make_optimizer(cfg.optim, self.scene_scale, cfg.max_steps)
        self.means_lr = means_schedule(cfg.optim, self.scene_scale, cfg.max_steps)
        self.state = initial_state(cfg, self.tx, gaussians)
        if isect_capacity is None:
            isect_capacity = next_capacity(2 * self._count_intersections(0))
        self.isect_capacity = int(isect_capacity)
        self._compiled: dict = {}
        self._budget_bound = False

    @property
    def state(self) -> TrainState:
        """The training state (one replica's copy when data parallel: they are identical)."""
        if self.parallel:  # the first local device's shard: a plain single-device array
            return jax.tree_util.tree_map(lambda x: x.addressable_shards[0].data[0], self._state)
        return self._state

    @state.setter
    def state(self, value: TrainState):
        self._state = replicate(value, self.devices) if self.parallel else value

    @property
    def views_per_step(self) -> int:
        return self.plan.lanes * jax.process_count()

    # -- helpers
    def _count_intersections(self, view: int) -> int:
        g = self.state.gaussians
        means, quats, scales, opacities, sh = activated(g.params, g.alive)
        _, _, meta = rasterization(means, quats, scales, opacities, sh, self.data.viewmats[view][None],
                                   self.data.Ks[view][None], self.data.width, self.data.height, sh_degree=0)
        return int(meta["num_intersections"][0])

    def _block_fn(self, num_steps: int):
        key = ("block", self.isect_capacity, num_steps)
        if key not in self._compiled:
            fn = partial(train_block, self.cfg, self.tx, self.means_lr, self.scene_scale, self.isect_capacity,
                         num_steps, self.plan)
            # several processes: pmap over every process's devices (collectives span the hosts);
            # each process passes and gets back its own devices' slices
            devices = self.devices if jax.process_count() == 1 else None
            self._compiled[key] = (jax.pmap(fn, axis_name=self.plan.axis_name, devices=devices)
                                   if self.parallel else jax.jit(fn))
        return self._compiled[key]

    def _refine_fn(self):
        if "refine" not in self._compiled:
            self._compiled["refine"] = jax.jit(partial(refine_state, self.cfg, self.scene_scale))
        return self._compiled["refine"]

    def grow_capacity(self, new_capacity: int):
        from .gaussians import pad_leading

        old = self.state.gaussians.capacity
        if new_capacity <= old:
            return
        st = pad_leading(self.state, old, new_capacity)
        quats = st.gaussians.params["quats"].at[old:, 0].set(1.0)
        st = st._replace(gaussians=Gaussians(dict(st.gaussians.params, quats=quats), st.gaussians.alive))
        self.state = st
        self.log(f"[jax-gs] step {int(st.step)}: Gaussian capacity grown {old} -> {new_capacity}")

    @property
    def step(self) -> int:
        return int(self.state.step)

    # -- the loop
    def run_block(self, num_steps: Optional[int] = None):
        """Train `num_steps` (default: steps_per_block, capped at max_steps) in one dispatch.
        Returns (metrics as numpy arrays, RefineInfo as Python values)."""
        from .gaussians import next_pow2
        from .rendering import next_capacity

        num_steps = num_steps or min(self.cfg.steps_per_block, max(self.cfg.max_steps - self.step, 1))
        before = self._state
        while True:
            state, metrics, info = self._block_fn(num_steps)(self._device_data, before)
            metrics = jax.device_get(metrics)
            if self.parallel:  # [devices, steps, views] -> [steps, devices * views]; one replica's info
                metrics = {k: np.moveaxis(v, 0, 1).reshape(v.shape[1], -1) for k, v in metrics.items()}
                info = jax.tree_util.tree_map(lambda x: x[0], info)
            if not metrics["overflow"].any():
                break
            needed = int(metrics["num_intersections"].max())
            self.isect_capacity = next_capacity(int(needed * 1.25))
            self.log(f"[jax-gs] step {self.step}: intersection buffer too small ({needed} needed); "
                     f"grown to {self.isect_capacity}, block run again")
        info = RefineInfo(*[np.asarray(x).item() for x in jax.device_get(info)])
        self._state = state
        if info.slots_needed > self.state.gaussians.capacity:
            self.grow_capacity(next_pow2(info.slots_needed))
            self.state, info = self._refine_fn()(self.state, self.step - num_steps)
            info = RefineInfo(*[np.asarray(x).item() for x in jax.device_get(info)])
        metrics["num_alive"] = int(jnp.sum(self.state.gaussians.alive))
        budget = getattr(self.cfg.strategy, "budget", 0)
        if info.refined and budget and info.budget_bound != self._budget_bound:
            self._budget_bound = info.budget_bound
            self.log(f"[jax-gs] step {self.step}: Gaussian budget {budget} "
                     + ("reached; growth limited to it" if info.budget_bound else "no longer limits growth"))
        peak = int(metrics["num_intersections"].max())
        if peak > 0.8 * self.isect_capacity:
            self.isect_capacity = next_capacity(int(peak * 1.5))
        return metrics, info

    def save(self, path, meta: Optional[dict] = None):
        from .checkpoint import save_checkpoint

        info = {"capacity": self.state.gaussians.capacity, "isect_capacity": self.isect_capacity, "step": self.step}
        return save_checkpoint(path, self.state, dict(meta or {}, trainer=info))

    def restore(self, path) -> dict:
        """Load a checkpoint saved by `save` (same configuration and dataset). Returns its meta."""
        from .checkpoint import read_checkpoint, restore_into

        arrays, meta = read_checkpoint(path)
        info = meta.get("trainer", {})
        self.grow_capacity(int(info.get("capacity", 0)))
        self.state = restore_into(self.state, arrays, path)
        self.isect_capacity = int(info.get("isect_capacity", self.isect_capacity))
        return meta

    def render(self, viewmat, K, width: int, height: int, background=None, render_mode: str = "RGB+ED"):
        """Render the current Gaussians from one camera (eagerly; the buffer grows as needed)."""
        g = self.state.gaussians
        means, quats, scales, opacities, sh = activated(g.params, g.alive)
        degree = jnp.minimum(self.state.step // self.cfg.sh_degree_interval, self.cfg.sh_degree)
        bg = None if background is None else jnp.asarray(background, jnp.float32).reshape(1, 3)
        colors, alpha, _ = rasterization(means, quats, scales, opacities, sh, jnp.asarray(viewmat)[None],
                                         jnp.asarray(K)[None], width, height, sh_degree=degree, backgrounds=bg,
                                         render_mode=render_mode, rasterizer=self.cfg.rasterizer)
        return colors[0], alpha[0]

    def heldout_psnr(self, images, viewmats, Ks) -> float:
        """Mean PSNR of the current Gaussians against uint8 images [H,W,3] seen from the given cameras."""
        vals = []
        for im, vm, K in zip(images, viewmats, Ks):
            render, _ = self.render(vm, K, im.shape[1], im.shape[0], render_mode="RGB")
            vals.append(float(psnr(jnp.clip(render, 0.0, 1.0), jnp.asarray(im[..., :3], jnp.float32) / 255.0)))
        return float(np.mean(vals))

    def train(self, num_steps: Optional[int] = None, callback=None):
        """Run blocks until `num_steps` more steps (default: until max_steps) are done.
        `callback(trainer, metrics, info)` is called after every block."""
        end = self.cfg.max_steps if num_steps is None else self.step + num_steps
        while self.step < end:
            metrics, info = self.run_block(min(self.cfg.steps_per_block, end - self.step))
            if callback is not None:
                callback(self, metrics, info)


class Snapshots:
    """Every `every` steps: the alive Gaussians as a PLY and a preview PNG of one fixed training
    view, written by a background thread (atomically) while the next block runs. The loop hands
    over device arrays; fetching and writing happen on the writer thread."""

    def __init__(self, out_dir, every: int, preview_view: int = 0):
        from .fileio import AsyncWriter

        self.out_dir, self.every, self.preview_view = out_dir, int(every), int(preview_view)
        self.writer = AsyncWriter()
        self._last = 0

    def __call__(self, trainer: "Trainer", metrics=None, info=None):
        if self.every <= 0 or trainer.step // self.every == self._last // self.every:
            return
        self._last = trainer.step
        d, v = trainer.data, self.preview_view
        preview, _ = trainer.render(d.viewmats[v], d.Ks[v], d.width, d.height, render_mode="RGB")
        g = trainer.state.gaussians
        self.writer.submit(_write_snapshot, self.out_dir, trainer.step, g.params, g.alive, preview)

    def close(self):
        self.writer.close()


def _write_snapshot(out_dir, step, params, alive, preview):
    from pathlib import Path

    from .fileio import atomic_write, png_bytes
    from .ply import write_ply

    params, alive, preview = jax.device_get((params, alive, preview))
    out = Path(out_dir)
    write_ply(out / f"step_{step:06d}.ply", params, alive)
    atomic_write(out / f"preview_{step:06d}.png", png_bytes(preview))
