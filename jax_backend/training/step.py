"""One training step and one block of steps, pure functions compiled by the `Trainer`: a block is
a `lax.scan` over steps followed by density control, in one XLA program."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Tuple, Union

import jax
import jax.numpy as jnp
import optax

from .. import array_ops
from ..rendering import rasterization
from .data import Dataset, ViewPlan, downscale_views
from .gaussians import Gaussians, activated
from .bilateral import (BilateralGridConfig, GridState, apply_grids, centre_grids, grid_optimizer, init_grids,
                        total_variation)
from .cameras import CameraOptConfig, CameraState, camera_optimizer, camera_penalty, corrected_viewmats, init_cameras
from .loss import photometric_loss, psnr, scale_regularization
from .optim import OptimConfig
from .schedule import sh_degree_at
from .state import TrainState, on_tile_devices
from .strategy import DefaultStrategy, RefineInfo, Strategy


@dataclass(frozen=True)
class TrainConfig:
    """Static settings of a run (hashable: they are compiled into the block program)."""

    max_steps: int = 30_000  # the run's last step: no density control after it
    steps_per_block: int = 100
    rasterizer: str = "auto"  # `rendering.composite.resolve_rasterizer`: pallas on a GPU, else flat
    rasterize_mode: str = "classic"  # or "antialiased" (`rendering.projection`)
    sh_degree: int = 3
    sh_degree_interval: int = 1000  # one more SH band every this many steps
    background: Union[str, Tuple[float, float, float]] = "black"  # "black" | "white" | "random" | (r, g, b)
    ssim_lambda: float = 0.2
    max_gauss_ratio: float = 0.0  # > 0: scale regularisation (`loss.scale_regularization`) every 10 steps
    num_downscales: int = 0  # coarse to fine: train at 1 / 2^num_downscales of the resolution first, ...
    resolution_schedule: int = 3000  # ... doubling it every this many steps
    strategy: Strategy = field(default_factory=DefaultStrategy)
    optim: OptimConfig = field(default_factory=OptimConfig)
    camera_opt: CameraOptConfig = field(default_factory=CameraOptConfig)  # pose corrections (`cameras.py`)
    bilateral: BilateralGridConfig = field(default_factory=BilateralGridConfig)  # appearance (`bilateral.py`)
    seed: int = 0
    tile_devices: int = 0  # each view's tiles are dealt over this many local devices (`rendering.tile_parallel`);
    # 0: automatic (every core on a CPU, 1 elsewhere: `auto_tile_devices`)

    @property
    def steps_per_level(self) -> int:
        """Steps at each coarse resolution: `resolution_schedule`, shortened when the run is too
        short to reach full resolution by its middle (a 2,000-step run would otherwise never train
        at full resolution with splatfacto's 2 levels of 3,000 steps, and its renders at full
        resolution come out blurred and full of holes); unchanged for runs of
        2 x num_downscales x resolution_schedule steps or more (splatfacto's 30,000)."""
        if self.num_downscales <= 0:
            return max(self.resolution_schedule, 1)
        return max(min(self.resolution_schedule, self.max_steps // (2 * self.num_downscales)), 1)

    def downscale_at(self, step: int) -> int:
        """Training images are downscaled by this factor from `step` on (coarse to fine)."""
        return 2 ** max(self.num_downscales - step // self.steps_per_level, 0)


BACKGROUNDS = ("black", "white", "random")


def background_color(kind, key):
    """[3] colour behind the Gaussians for one view of one step ("random": drawn from `key`; an
    (r, g, b) tuple in [0, 1]: that colour)."""
    if isinstance(kind, (tuple, list)) and len(kind) == 3:
        return jnp.asarray(kind, jnp.float32)
    if kind == "black":
        return jnp.zeros(3)
    if kind == "white":
        return jnp.ones(3)
    if kind == "random":
        return jax.random.uniform(key, (3,))
    raise ValueError(f"background must be one of {BACKGROUNDS} or an (r, g, b) tuple, got {kind!r}")


def train_step(cfg: TrainConfig, tx, means_lr, isect_capacity: int, downscale: int, plan: ViewPlan, data: Dataset,
               state: TrainState, _):
    """One optimisation step on this replica's views.

    With `plan.axis_name`, the gradient is the mean over every replica's views (`lax.pmean`) and
    density statistics are summed (`lax.psum`), so every replica applies the same update and
    takes the same density decisions.

    Args:
      cfg: the run's settings; tx: the optimizer; means_lr: the means' learning-rate schedule
        (for the MCMC noise); isect_capacity: static intersection buffer size; downscale: the
        training images' static downscale factor (coarse to fine).
      plan: which views each step draws; data: the dataset on the device.
      state: the state before the step.

    Returns:
      (state after the step, metrics: loss, psnr, view, num_intersections, overflow, each
      [views_per_replica]).
    """
    axis = plan.axis_name
    key, k_bg, k_noise = jax.random.split(state.key, 3)
    views = plan.views(state.step)
    B = plan.views_per_replica
    images, masks, Ks, width, height = downscale_views(data, views, downscale)
    bgs = jax.vmap(lambda lane: background_color(cfg.background, jax.random.fold_in(k_bg, lane)))(plan.replica_lanes())
    targets = images[..., :3]
    if images.shape[-1] == 4:  # composite RGBA targets on this step's background
        targets = targets * images[..., 3:] + bgs[:, None, None, :] * (1.0 - images[..., 3:])
    sh_active = sh_degree_at(state.step, cfg.sh_degree_interval, cfg.sh_degree)
    g = state.gaussians
    strategy = cfg.strategy

    cam, bil = cfg.camera_opt, cfg.bilateral

    def loss_fn(params, probe, deltas, grids):
        means, quats, scales, opacities, sh = activated(params, g.alive)
        viewmats = data.viewmats[views]
        if cam.enabled:
            viewmats = corrected_viewmats(viewmats, deltas[views], cam.mode)
        renders, _, meta = rasterization(
            means, quats, scales, opacities, sh, viewmats, Ks, width, height,
            sh_degree=sh_active, backgrounds=bgs, rasterizer=cfg.rasterizer, rasterize_mode=cfg.rasterize_mode,
            capacity=isect_capacity, means2d_probe=probe, absgrad=strategy.absgrad, tile_devices=cfg.tile_devices)
        if bil.enabled:  # training renders only: each view through its own image's grid
            renders = renders.at[..., :3].set(apply_grids(grids[views], renders[..., :3]))
        per_view = jax.vmap(photometric_loss, in_axes=(0, 0, 0, None))(renders, targets, masks, cfg.ssim_lambda)
        loss = jnp.mean(per_view) + strategy.regularizer(params, g.alive)
        if cfg.max_gauss_ratio > 0:  # splatfacto applies it every 10th step
            reg = scale_regularization(params["scales"], g.alive, cfg.max_gauss_ratio)
            loss = loss + jnp.where(state.step % 10 == 0, reg, 0.0)
        if cam.enabled:
            loss = loss + camera_penalty(cam, deltas)
        if bil.enabled:
            loss = loss + bil.tv_weight * total_variation(grids)
        return loss, (renders, per_view, meta)

    probe = jnp.zeros((B, g.capacity, 2), jnp.float32)
    deltas = state.cameras.deltas if cam.enabled else None
    grids = state.bilateral.grids if bil.enabled else None
    (_, (renders, per_view, meta)), (grads, probe_grad, cam_grads, grid_grads) = jax.value_and_grad(
        loss_fn, argnums=(0, 1, 2, 3), has_aux=True)(g.params, probe, deltas, grids)
    if axis is not None:
        grads, cam_grads, grid_grads = jax.lax.pmean((grads, cam_grads, grid_grads), axis)
    bilateral = state.bilateral
    if bil.enabled:
        grid_updates, grid_opt = grid_optimizer(bil, cfg.max_steps).update(grid_grads, bilateral.opt_state, grids)
        new_grids = optax.apply_updates(grids, grid_updates)
        bilateral = GridState(centre_grids(new_grids) if bil.centred else new_grids, grid_opt)
    cameras = state.cameras
    if cam.enabled:
        cam_updates, cam_opt = camera_optimizer(cam, cfg.max_steps).update(cam_grads, cameras.opt_state, deltas)
        cameras = CameraState(optax.apply_updates(deltas, cam_updates), cam_opt)
    updates, opt_state = tx.update(grads, state.opt_state, g.params)
    updates = jax.tree_util.tree_map(lambda u: jnp.where(g.alive.reshape((-1,) + (1,) * (u.ndim - 1)), u, 0.0), updates)
    params = optax.apply_updates(g.params, updates)
    # screen-space statistics per view, as if each view were its own step (the mean over B views
    # scaled each view's means2d gradient by 1/B)
    delta = strategy.init_stats(g.capacity)
    for c in range(B):
        delta = strategy.accumulate(delta, state.step, probe_grad[c] * B, meta["radii"][c], width, height)
    stats = strategy.merge_stats(state.stats, delta, axis)
    gaussians = strategy.post_step(k_noise, Gaussians(params, g.alive), state.step, means_lr(state.step))
    metrics = {
        "loss": per_view,
        "psnr": jax.vmap(psnr)(renders, targets, masks),
        "view": views,
        "num_intersections": meta["num_intersections"],
        "overflow": meta["overflow"],
    }
    new = TrainState(gaussians, opt_state, stats, state.step + 1, key, cameras, bilateral)
    return on_tile_devices(tx, new, cfg.tile_devices), metrics


def refine_state(cfg: TrainConfig, tx, scene_scale: float, state: TrainState, step_before):
    """The strategy's density control for the steps (step_before, state.step]."""
    key, k = jax.random.split(state.key)
    state, info = cfg.strategy.refine(k, state, tx, step_before, scene_scale)
    return state._replace(key=key), info


def train_block(cfg: TrainConfig, tx, means_lr, scene_scale: float, isect_capacity: int, downscale: int,
                num_steps: int, plan: ViewPlan, data: Dataset, state: TrainState):
    """`num_steps` steps in one `lax.scan`, then density control. Per-step metrics come back as
    arrays [num_steps, views_per_replica]. Under pmap every replica holds the same state and
    statistics, so the density control below runs on each and agrees, with no host round trip."""
    step_before = state.step
    state = on_tile_devices(tx, state, cfg.tile_devices)  # per-Gaussian rows split over the tile devices
    state, metrics = jax.lax.scan(partial(train_step, cfg, tx, means_lr, isect_capacity, downscale, plan, data),
                                  state, None, length=num_steps)
    # no run ends on a refinement: nothing is densified, pruned or reset after the last step
    # a select, not a cond (`array_ops.where_tree`: TPU layouts)
    state, info = array_ops.where_tree(state.step < cfg.max_steps, refine_state(cfg, tx, scene_scale, state, step_before),
                                       (state, RefineInfo.none()))
    return on_tile_devices(tx, state, cfg.tile_devices), metrics, info


def init_state(cfg: TrainConfig, tx, gaussians: Gaussians, num_views: int = 0) -> TrainState:
    """The state before the first step: fresh optimizer state and statistics, step 0 (and zero
    pose corrections for `num_views` training views when the camera optimiser is on)."""
    return TrainState(
        gaussians=gaussians,
        opt_state=tx.init(gaussians.params),
        stats=cfg.strategy.init_stats(gaussians.capacity),
        step=jnp.int32(0),
        key=jax.random.PRNGKey(cfg.seed),
        cameras=init_cameras(cfg.camera_opt, num_views, cfg.max_steps),
        bilateral=init_grids(cfg.bilateral, num_views, cfg.max_steps),
    )
