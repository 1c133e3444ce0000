"""One training step and one block of steps, pure functions compiled by the `Trainer`: a block is
a `lax.scan` over steps followed by density control, in one XLA program."""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import optax

from .. import array_ops
from ..layout import Layout
from .data import Dataset, ViewPlan, downscale_views
from .image_tables import ImageTable, step_images
from .gaussians import Gaussians, activated
from .corrections import (corrected_renders, corrected_viewmats, init_corrections, penalties, updated_corrections,
                          values_of)
from .loss import photometric_loss, psnr, scale_regularization
from .optim import Optimizers, make_optimizers
from .schedule import sh_degree_at
from .state import TrainState
from .strategy import RefineInfo, Strategy
from .strategy.ops import rows_to_split
from .train_config import BACKGROUNDS, TrainConfig


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


def step_targets(images, backgrounds):
    """The images a step's renders are compared with [B, H, W, 3]: RGBA images composited on the
    step's backgrounds [B, 3]."""
    if images.shape[-1] == 3:
        return images
    return images[..., :3] * images[..., 3:] + backgrounds[:, None, None, :] * (1.0 - images[..., 3:])


def regularization(cfg: TrainConfig, params, alive, step):
    """The loss terms on the Gaussians themselves: the strategy's, and splatfacto's scale
    regularisation every 10th step when max_gauss_ratio > 0."""
    reg = cfg.strategy.regularizer(params, alive)
    if cfg.max_gauss_ratio > 0:
        drawn = cfg.splats.drawn_scales(params["scales"])
        reg = reg + jnp.where(step % 10 == 0, scale_regularization(drawn, alive, cfg.max_gauss_ratio), 0.0)
    return reg


def replica_mean(tree, axis_name):
    """The mean of `tree` over the replicas on the replica axis (itself with no axis)."""
    return tree if axis_name is None else jax.lax.pmean(tree, axis_name)


def step_stats(strategy: Strategy, step, means2d_grads, radii, width: int, height: int) -> dict:
    """The strategy's statistics of one step's views (means2d_grads [B, capacity, 2], radii
    [B, capacity]), each view counted as if it were its own step (the mean over B views scaled
    each view's means2d gradient by 1/B)."""
    B = means2d_grads.shape[0]
    delta = strategy.init_stats(means2d_grads.shape[1])
    for c in range(B):
        delta = strategy.accumulate(delta, step, means2d_grads[c] * B, radii[c], width, height)
    return delta


def updated_gaussians(tx, grads, opt_state, g: Gaussians):
    """(Gaussians, optimizer state) after one step of the Gaussians' groups; dead slots unchanged."""
    updates, opt_state = tx.update(grads, opt_state, g.params)
    updates = jax.tree_util.tree_map(lambda u: jnp.where(g.alive.reshape((-1,) + (1,) * (u.ndim - 1)), u, 0.0), updates)
    return Gaussians(optax.apply_updates(g.params, updates), g.alive), opt_state


def placed(layout: Layout, tx, state: TrainState) -> TrainState:
    """Inside a block program: `state` where `layout` keeps it (with tile dealing its per-Gaussian
    rows split over the tile devices; else as it is)."""
    return layout.constrain(state, rows_to_split(tx, state, layout.tile_devices))


def rendered_views(cfg: TrainConfig, layout: Layout, isect_capacity: int, params, alive, viewmats, Ks, width: int,
                   height: int, backgrounds, probe, distortion, masks, step):
    """A step's renders of its views [B, H, W, 3], the render's meta, and the loss terms on the
    renders' geometry (`SplatKind.rendered_views`: none for 3D Gaussians, 2DGS's normal consistency
    and depth distortion)."""
    return cfg.splats.rendered_views(cfg, activated(params, alive), viewmats, Ks, width, height, distortion, masks,
                                     step, backgrounds=backgrounds,
                                     sh_degree=sh_degree_at(step, cfg.sh_degree_interval, cfg.sh_degree),
                                     rasterizer=cfg.rasterizer, isect_capacity=isect_capacity, means2d_probe=probe,
                                     absgrad=cfg.strategy.absgrad, layout=layout, tile_size=cfg.tile_size)


LOSS_ROWS_MIN_PIXELS = 100_000  # images this large have their loss split by rows (figure: loss-rows)


def split_for_the_loss(layout: Layout, *images):
    """The renders, targets and masks [views, H, W, ...] the loss compares, split by image rows
    over the tile devices (`Layout.image_rows_sharding`), on a CPU dealing each view's tiles, for
    images of LOSS_ROWS_MIN_PIXELS or more: each device then blurs and compares its own rows (the
    blurs' borders exchanged by XLA) instead of every device computing the whole image's loss.
    Smaller images, other platforms and one device: as they are. None passes through (no masks)."""
    height, width = images[0].shape[1:3]
    if layout.tile_devices <= 1 or layout.platform != "cpu" or height * width < LOSS_ROWS_MIN_PIXELS:
        return images
    rows = layout.image_rows_sharding()
    return tuple(x if x is None else jax.lax.with_sharding_constraint(x, rows) for x in images)


def gathered_whole(layout: Layout, *views):
    """The step's images and masks as gathered from the image table: whole on each tile device,
    where `split_for_the_loss` then splits them by rows. Without it XLA splits the table itself by
    rows before the gather, each device copying its rows of every training image (the capture's
    bytes again, in the block's temporaries: issue 68)."""
    if layout.tile_devices <= 1 or layout.platform != "cpu":
        return views
    return tuple(jax.lax.with_sharding_constraint(x, layout.whole_sharding()) for x in views)


def optimizers(cfg: TrainConfig, scene_extent) -> Optimizers:
    """Every optimizer group of a run (`optim.make_optimizers`), the means' rate times
    `scene_extent`: a float on the host, a value in a block (`data.block_cameras`)."""
    return make_optimizers(cfg.optim, {name: c.optimizer for name, c in cfg.corrections.items()}, scene_extent,
                           cfg.max_steps)


def train_step(cfg: TrainConfig, opt: Optimizers, layout: Layout, isect_capacity: int, downscale: int, plan: ViewPlan,
               data: Dataset, table: ImageTable, state: TrainState, index):
    """One optimisation step on this replica's views: the loss of the renders (through the per-view
    corrections) against the images (`table`'s views and images of the block's `index`-th step;
    `data`: the cameras),
    its gradients, one update of every optimizer group, the strategy's statistics. With `plan.axis_name` the gradients are the mean over every replica's
    views (`lax.pmean`) and the statistics summed, so every replica takes the same update.

    `layout` (the devices the step is built for), `isect_capacity` and `downscale` (the training
    images' coarse-to-fine factor) are static.
    Returns (state after the step, metrics: loss, psnr, view, num_intersections, overflow, each
    [views_per_replica])."""
    key, k_bg, k_noise = jax.random.split(state.key, 3)
    g, strategy, fixes = state.gaussians, cfg.strategy, cfg.corrections
    views, images, masks = step_images(table, index)
    images, masks = gathered_whole(layout, images, masks)
    images, masks, Ks, width, height = downscale_views(images, masks, data.Ks[views], downscale)
    bgs = jax.vmap(lambda lane: background_color(cfg.background, jax.random.fold_in(k_bg, lane)))(plan.replica_lanes())
    targets = step_targets(images, bgs)

    def loss_fn(params, probe, learned):
        params = cfg.splats.in_loss(params)
        viewmats = corrected_viewmats(fixes, learned, views, data.viewmats[views])
        renders, meta, geometry = rendered_views(cfg, layout, isect_capacity, params, g.alive, viewmats, Ks, width,
                                                 height, bgs, probe, data.distortions[views], masks, state.step)
        renders = corrected_renders(fixes, learned, views, renders)
        compared = split_for_the_loss(layout, renders, targets, masks)
        per_view = jax.vmap(photometric_loss, in_axes=(0, 0, 0, None))(*compared, cfg.ssim_lambda)
        loss = (jnp.mean(per_view) + geometry + regularization(cfg, params, g.alive, state.step)
                + penalties(fixes, learned))
        return loss, (renders, per_view, meta)

    probe = jnp.zeros((plan.views_per_replica, g.capacity, 2), jnp.float32)
    (_, (renders, per_view, meta)), (grads, probe_grad, learned_grads) = jax.value_and_grad(
        loss_fn, argnums=(0, 1, 2), has_aux=True)(g.params, probe, values_of(fixes, state))
    grads, learned_grads = replica_mean((grads, learned_grads), plan.axis_name)
    gaussians, opt_state = updated_gaussians(opt.gaussians, grads, state.opt_state, g)
    stats = strategy.merge_stats(state.stats, step_stats(strategy, state.step, probe_grad, meta["radii"], width, height),
                                 plan.axis_name)
    new = state._replace(gaussians=strategy.post_step(k_noise, gaussians, state.step, opt.means_lr(state.step)),
                         opt_state=opt_state, stats=stats, step=state.step + 1, key=key,
                         **updated_corrections(fixes, opt.corrections, learned_grads, state))
    metrics = {"loss": per_view, "psnr": jax.vmap(psnr)(renders, targets, masks), "view": views,
               "num_intersections": meta["num_intersections"], "overflow": meta["overflow"]}
    return placed(layout, opt.gaussians, new), metrics


def refine_state(cfg: TrainConfig, tx, scene_extent: float, state: TrainState, step_before):
    """The strategy's density control for the steps (step_before, state.step]."""
    key, k = jax.random.split(state.key)
    state, info = cfg.strategy.refine(k, state, tx, step_before, scene_extent)
    return state._replace(key=key), info


def train_block(cfg: TrainConfig, layout: Layout, isect_capacity: int, downscale: int, num_steps: int, plan: ViewPlan,
                data: Dataset, table: ImageTable, state: TrainState):
    """`num_steps` steps in one `lax.scan` on the cameras and extent of `data`
    (`data.block_cameras`) and the draws and images of `table`, then density control. Per-step
    metrics come back as arrays [num_steps, views_per_replica]. Data parallel, every replica holds
    the same state and statistics, so the density control below runs on each and agrees, with no
    host round trip."""
    opt, scene_extent = optimizers(cfg, data.extent), data.extent
    step_before, tx = state.step, opt.gaussians
    state = placed(layout, tx, state)  # per-Gaussian rows split over the tile devices
    state, metrics = jax.lax.scan(partial(train_step, cfg, opt, layout, isect_capacity, downscale, plan, data, table),
                                  state, jnp.arange(num_steps))
    # no run ends on a refinement: nothing is densified, pruned or reset after the last step
    # a select, not a cond (`array_ops.where_tree`: TPU layouts)
    state, info = array_ops.where_tree(state.step < cfg.max_steps, refine_state(cfg, tx, scene_extent, state, step_before),
                                       (state, RefineInfo.none()))
    return placed(layout, tx, state), metrics, info


def init_state(cfg: TrainConfig, opt: Optimizers, gaussians: Gaussians, num_views: int = 0) -> TrainState:
    """The state before the first step: fresh optimizer state and statistics, step 0, and the
    enabled per-view corrections at their start for `num_views` training views; the parameters as
    the kind of splat starts from them (`SplatKind.started`: 2DGS disks with their third scale thin)."""
    gaussians = Gaussians(cfg.splats.started(gaussians.params), gaussians.alive)
    return TrainState(
        gaussians=gaussians,
        opt_state=opt.gaussians.init(gaussians.params),
        stats=cfg.strategy.init_stats(gaussians.capacity),
        step=jnp.int32(0),
        key=jax.random.PRNGKey(cfg.seed),
        **init_corrections(cfg.corrections, opt.corrections, num_views),
    )
