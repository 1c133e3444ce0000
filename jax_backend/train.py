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
    perm: jnp.ndarray  # [V] this epoch's view order
    cursor: jnp.ndarray  # position in perm


def background_color(kind: str, key):
    if kind == "black":
        return jnp.zeros(3)
    if kind == "white":
        return jnp.ones(3)
    if kind == "random":
        return jax.random.uniform(key, (3,))
    raise ValueError(f"background must be 'black', 'white' or 'random', got {kind!r}")


def next_view(state: TrainState, key):
    """Each view once per epoch, in a fresh random order every epoch (drawn on the device)."""
    view = state.perm[state.cursor]
    cursor = state.cursor + 1
    wrap = cursor >= state.perm.shape[0]
    perm = jnp.where(wrap, jax.random.permutation(key, state.perm.shape[0]), state.perm)
    return view, jnp.where(wrap, 0, cursor), perm


def train_step(cfg: TrainConfig, tx, means_lr, isect_capacity: int, data: Dataset, state: TrainState, _):
    key, k_view, k_bg, k_noise = jax.random.split(state.key, 4)
    view, cursor, perm = next_view(state, k_view)
    image = data.images[view].astype(jnp.float32) / 255.0
    mask = data.masks[view]
    bg = background_color(cfg.background, k_bg)
    target = image[..., :3]
    if image.shape[-1] == 4:  # composite RGBA targets on this step's background
        target = target * image[..., 3:] + bg * (1.0 - image[..., 3:])
    sh_active = jnp.minimum(state.step // cfg.sh_degree_interval, cfg.sh_degree)
    g = state.gaussians
    strategy = cfg.strategy

    def loss_fn(params, probe):
        means, quats, scales, opacities, sh = activated(params, g.alive)
        render, _, meta = rasterization(
            means, quats, scales, opacities, sh, data.viewmats[view][None], data.Ks[view][None], data.width, data.height,
            sh_degree=sh_active, backgrounds=bg[None], rasterizer=cfg.rasterizer, capacity=isect_capacity,
            means2d_probe=probe, absgrad=strategy.absgrad)
        loss = photometric_loss(render[0], target, mask, cfg.ssim_lambda) + strategy.loss_regularizer(params, g.alive)
        return loss, (render[0], meta)

    probe = jnp.zeros((1, g.capacity, 2), jnp.float32)
    (loss, (render, meta)), (grads, probe_grad) = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(g.params, probe)
    updates, opt_state = tx.update(grads, state.opt_state, g.params)
    updates = jax.tree_util.tree_map(lambda u: jnp.where(g.alive.reshape((-1,) + (1,) * (u.ndim - 1)), u, 0.0), updates)
    params = optax.apply_updates(g.params, updates)
    stats = strategy.accumulate(state.stats, state.step, probe_grad[0], meta["radii"][0], data.width, data.height)
    gaussians = strategy.post_step(k_noise, Gaussians(params, g.alive), state.step, means_lr(state.step))
    metrics = {
        "loss": loss,
        "psnr": psnr(render, target, mask),
        "view": view,
        "num_intersections": meta["num_intersections"][0],
        "overflow": meta["overflow"][0],
    }
    new = TrainState(gaussians, opt_state, stats, state.step + 1, key, perm, cursor)
    return new, metrics


def refine_state(cfg: TrainConfig, scene_scale: float, state: TrainState, step_before):
    key, k = jax.random.split(state.key)
    g, opt_state, stats, info = cfg.strategy.refine(k, state.gaussians, state.opt_state, state.stats, step_before,
                                                     state.step, scene_scale)
    return state._replace(gaussians=g, opt_state=opt_state, stats=stats, key=key), info


def train_block(cfg: TrainConfig, tx, means_lr, scene_scale: float, isect_capacity: int, num_steps: int,
                data: Dataset, state: TrainState):
    """`num_steps` steps in one `lax.scan`, then density control. Per-step metrics come back as arrays."""
    step_before = state.step
    state, metrics = jax.lax.scan(partial(train_step, cfg, tx, means_lr, isect_capacity, data), state, None,
                                  length=num_steps)
    state, info = refine_state(cfg, scene_scale, state, step_before)
    return state, metrics, info


def initial_state(cfg: TrainConfig, tx, gaussians: Gaussians, num_views: int) -> TrainState:
    key = jax.random.PRNGKey(cfg.seed)
    key, k = jax.random.split(key)
    return TrainState(
        gaussians=gaussians,
        opt_state=tx.init(gaussians.params),
        stats=cfg.strategy.init_stats(gaussians.capacity),
        step=jnp.int32(0),
        key=key,
        perm=jax.random.permutation(k, num_views),
        cursor=jnp.int32(0),
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
                 isect_capacity: Optional[int] = None, log=print):
        from .rendering import next_capacity

        self.cfg, self.data, self.scene_scale, self.log = cfg, data, float(scene_scale), log
        self.tx = make_optimizer(cfg.optim, self.scene_scale, cfg.max_steps)
        self.means_lr = means_schedule(cfg.optim, self.scene_scale, cfg.max_steps)
        self.state = initial_state(cfg, self.tx, gaussians, data.num_views)
        if isect_capacity is None:
            isect_capacity = next_capacity(2 * self._count_intersections(0))
        self.isect_capacity = int(isect_capacity)
        self._compiled: dict = {}
        self._budget_bound = False

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
            self._compiled[key] = jax.jit(partial(train_block, self.cfg, self.tx, self.means_lr, self.scene_scale,
                                                  self.isect_capacity, num_steps))
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
        before = self.state
        while True:
            state, metrics, info = self._block_fn(num_steps)(self.data, before)
            metrics = jax.device_get(metrics)
            if not metrics["overflow"].any():
                break
            needed = int(metrics["num_intersections"].max())
            self.isect_capacity = next_capacity(int(needed * 1.25))
            self.log(f"[jax-gs] step {self.step}: intersection buffer too small ({needed} needed); "
                     f"grown to {self.isect_capacity}, block run again")
        info = RefineInfo(*[np.asarray(x).item() for x in jax.device_get(info)])
        self.state = state
        if info.slots_needed > self.state.gaussians.capacity:
            self.grow_capacity(next_pow2(info.slots_needed))
            self.state, info = self._refine_fn()(self.state, before.step)
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
