"""One image's tiles dealt across this host's devices, so that several devices (on a CPU: several
cores) render one camera together.

Tiles are independent: a rasterizer's walks give the same result on any subset of them. Each
device gets every D-th tile in order of workload (list length forward, deepest last contributor
backward), so heavy and light tiles are shared evenly; the Gaussians are replicated, the per-tile
results come back in the image's tile order, and the backward's per-Gaussian sums are added over
the devices. Padding tiles (when D does not divide the tile count) have empty lists.

In a training step the per-Gaussian arrays (parameters, optimizer moments, statistics) are split
by rows over the same devices (`rows_sharding`): each device projects, shades and updates its own
share, and the projected Gaussians are gathered (`gathered`) before binning, which needs them all;
the backward's per-Gaussian sums leave as a reduce-scatter, each device getting its rows' sums.
Without the split every device did the whole per-Gaussian work of the step again.

Which devices, their mesh and shardings, and placing arrays on them: the run's `layout.Layout`.

Why on a CPU: XLA runs one device's program on about one core (its own intra-op threading gains
nothing on these small fused loops: figure intra-op, benchmarks/results/library_figures.md), while forced host
devices (`jax_num_cpu_devices`) run side by side.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from ..layout import TILE_AXIS as AXIS, Layout
from .tiles import Tiles


def gathered(tree, layout: Layout):
    """Inside a program: `tree` whole on every tile device of `layout` (arrays split by rows are gathered; no-op
    on one device). Its gradient leaves split by rows again (`split_by_rows`): what a training step
    needs for its split parameters, and no all-reduce of the whole cotangent. A custom gradient
    passes zeros where a leaf gets none: leaves never differentiated go in under `stop_gradient`."""
    if layout.tile_devices <= 1:
        return tree
    return _gathered(tree, layout)


def splits_evenly(rows: int, num_devices: int) -> bool:
    """Whether `rows` per-Gaussian rows split evenly over the tile devices (the `Trainer` pads its
    capacity so that they do; otherwise arrays stay whole)."""
    return rows % num_devices == 0


def split_by_rows(x, layout: Layout):
    """Inside a program: x split by its leading axis over the tile devices, where that axis
    divides evenly (else as it is)."""
    if x.ndim == 0 or not splits_evenly(x.shape[0], layout.tile_devices) or not jnp.issubdtype(x.dtype, jnp.inexact):
        return x
    return jax.lax.with_sharding_constraint(x, layout.rows_sharding())


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def _gathered(tree, layout):
    return jax.lax.with_sharding_constraint(tree, layout.whole_sharding())


def _gathered_fwd(tree, layout):
    return _gathered(tree, layout), None


def _gathered_bwd(layout, _, cot):
    return (jax.tree_util.tree_map(lambda c: split_by_rows(c, layout), cot),)


_gathered.defvjp(_gathered_fwd, _gathered_bwd)


def deal(workload, num_devices: int):
    """Tile indices [D * per], device d's share as the d-th block: the tiles by falling workload,
    dealt round robin; indices past the last tile (T) mark padding."""
    t = workload.shape[0]
    per = -(-t // num_devices)
    order = jnp.argsort(-workload)
    order = jnp.concatenate([order, jnp.full((per * num_devices - t,), t, order.dtype)])
    return order.reshape(per, num_devices).T.reshape(-1)


def _take(x, idx, axis):
    """x's tiles `idx` along `axis`; zeros (empty tiles, pixels outside) for padding indices."""
    return jnp.moveaxis(jnp.moveaxis(x, axis, 0).at[idx].get(mode="fill", fill_value=0), 0, axis)


def _tile_axis(x):  # tile-layout arrays: [..., T, S*S]
    return x.ndim - 2


def dealt_forward(forward, cfg, geom, feats, ids, tiles: Tiles, layout: Layout):
    """`forward(cfg, geom, feats, ids, tiles)` with the tiles dealt over `layout`'s tile devices
    (one: called as it is)."""
    num_devices = layout.tile_devices
    if num_devices <= 1:
        return forward(cfg, geom, feats, ids, tiles)
    t = tiles.start.shape[0]
    idx = deal(tiles.end - tiles.start, num_devices)
    mine = jax.tree_util.tree_map(lambda x: _take(x, idx, 0), tiles)

    def walk(g, f, i, tl):  # every device gets every device's tiles back: the result is replicated
        state = forward(cfg, g, f, i, tl)
        return jax.tree_util.tree_map(lambda x: jax.lax.all_gather(x, AXIS, axis=_tile_axis(x), tiled=True), state)

    state = jax.shard_map(walk, mesh=layout.tile_mesh(), in_specs=(P(), P(), P(), P(AXIS)), out_specs=P(),
                          axis_names={AXIS}, check_vma=False)(geom, feats, ids, mine)
    back = jnp.argsort(idx)[:t]  # position of each real tile in the dealt order
    return jax.tree_util.tree_map(lambda x: jnp.take(x, back, axis=_tile_axis(x)), state)


def dealt_backward(backward, cfg, geom, feats, ids, tiles: Tiles, cot, behind0, layout: Layout):
    """`backward(cfg, geom, feats, ids, tiles, cot, behind0)` with the tiles dealt over `layout`'s
    tile devices and the per-Gaussian sums added over them (one: called as it is)."""
    num_devices = layout.tile_devices
    if num_devices <= 1:
        return backward(cfg, geom, feats, ids, tiles, cot, behind0)
    idx = deal(jnp.max(cot.last, axis=1), num_devices)
    mine = jax.tree_util.tree_map(lambda x: _take(x, idx, 0), tiles)
    mine_cot = jax.tree_util.tree_map(lambda x: _take(x, idx, _tile_axis(x)), cot)
    mine_b0 = _take(behind0, idx, 1)

    # the sums leave split by rows (a reduce-scatter) where the Gaussians divide evenly: a training
    # step's parameters are split so (`gathered`), and it moves half the data of an all-reduce
    by_rows = splits_evenly(geom.shape[1], num_devices)
    total = (partial(jax.lax.psum_scatter, axis_name=AXIS, scatter_dimension=0, tiled=True) if by_rows
             else partial(jax.lax.psum, axis_name=AXIS))

    def walk(g, f, i, tl, c, b0):
        return jax.tree_util.tree_map(total, backward(cfg, g, f, i, tl, c, b0))

    cot_spec = jax.tree_util.tree_map(lambda x: P(*([None] * (x.ndim - 2)), AXIS), cot)  # tile axis: second to last
    return jax.shard_map(walk, mesh=layout.tile_mesh(), in_specs=(P(), P(), P(), P(AXIS), cot_spec, P(None, AXIS)),
                         out_specs=P(AXIS) if by_rows else P(), axis_names={AXIS}, check_vma=False)(
        geom, feats, ids, mine, mine_cot, mine_b0)
