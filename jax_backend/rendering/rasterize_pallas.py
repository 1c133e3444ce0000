"""The Pallas rasterizer: compositing forward and backward as one kernel each.

One kernel program per tile walks that tile's depth-sorted list one Gaussian at a time, on a
vector of the tile's S*S pixels, with the blend rule of `blend.py` (the same functions as the
XLA rasterizers, fed one Gaussian's scalars): forward front to back until every pixel of the tile
is saturated or the list ends; backward back to front from the tile's deepest last contributor,
recovering the transmittance, and adding each Gaussian's per-tile gradient sums into the
per-Gaussian rows with atomic adds (`add_atomic`: the tiles' programs run at once on a GPU and
share Gaussians), as gsplat's backward does; the order of the additions, and so the last bits of
a gradient, is not fixed on a GPU (`docs/gpu.md`). On a GPU each pass is one kernel launch with no
XLA loop around it: the two XLA rasterizers are loops of small kernels there.

Lowering follows the platform the program is built for (the render config's `layout.platform`): Triton on a GPU
(also for a compile-only GPU topology); on a CPU the kernels run in Pallas's interpret mode
(exact, slow: for tests, not the CPU default). Mosaic (TPU) has no scalar loads at a dynamic
lane position from a vector memory, which the walk needs: the TPU keeps the flat rasterizer.

Triton wants power-of-two blocks: the pixel axis is padded to one (pixels outside the image are
done from the start), and the features travel as one block per channel.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from ..array_ops import next_pow2
from .blend import GAUSSIAN_RULE, Splat
from .tiles import Pixels, Tiles


def _pallas():
    from jax.experimental import pallas as pl  # imported on first use: the XLA rasterizers do not need it

    return pl


def _lowering(platform: str) -> dict:
    """How the kernels lower for `platform`: Triton on a GPU (not Mosaic GPU, JAX's
    default there, which stages whole blocks in shared memory), interpret mode on a CPU; a TPU is
    refused."""
    if platform == "tpu":
        raise ValueError("rasterizer='pallas' lowers through Triton (GPU) or runs interpreted on a CPU; "
                         "on a TPU use rasterizer='flat'")
    if platform == "gpu":
        from jax.experimental.pallas import triton as pltriton

        return dict(compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=1))
    return dict(interpret=True)


def _padded(x):
    """[T, P] per-pixel rows padded with zeros to a power of two of pixels, [T, next_pow2(P)] (a
    padded pixel is outside the image: done from the start, no list position reaches it)."""
    p = x.shape[1]
    return jnp.pad(x, [(0, 0), (0, next_pow2(p) - p)])


def _table(geom, feats):
    """[N, GEOM + ch]: a Gaussian's screen parameters and features next to each other in memory
    (its GEOM + ch scalar loads hit one cache line)."""
    return jnp.concatenate([geom, feats], 0).T


def _load(table_ref, gid, geom: int, ch: int):
    """Gaussian `gid`'s `geom` packed parameters and `ch` features, as tuples of scalars."""
    row = tuple(table_ref[gid, k] for k in range(geom + ch))
    return row[:geom], row[geom:]


def _planes(tree):
    """A per-pixel pytree (leaves [..., T, P], a channel axis first where there is one) as a list of
    [T, P] planes, and how to put them back (`_unplanes`). Pallas blocks carry one plane each
    (an axis of 3 channels is not a legal Triton block)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    planes = [x[c] if x.ndim == 3 else x for x in leaves for c in range(x.shape[0] if x.ndim == 3 else 1)]
    return planes, (treedef, [x.shape[0] if x.ndim == 3 else 0 for x in leaves])


def _unplanes(planes, how, stacked: bool):
    """Inverse of `_planes`: channel entries stacked ([ch, ...]) or, `stacked` False, as tuples of
    planes (a kernel's per-channel layout, `blend.scaled`)."""
    treedef, chans = how
    leaves, i = [], 0
    for c in chans:
        if c:
            part = tuple(planes[i:i + c])
            leaves.append(jnp.stack(part) if stacked else part)
            i += c
        else:
            leaves.append(planes[i])
            i += 1
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _row_spec(p2: int):
    """One tile's row of a [T, p2] array per program."""
    return _pallas().BlockSpec((1, p2), lambda t: (t, 0))


def _whole():
    """The whole array in every program (lists, ids, the Gaussian table: read at dynamic places)."""
    return _pallas().BlockSpec()


def _forward_kernel(rule, ch, how, start_ref, end_ref, ids_ref, table_ref, x_ref, y_ref, inside_ref, *out_refs):
    t = _pallas().program_id(0)
    start, length = start_ref[t], end_ref[t] - start_ref[t]
    px = Pixels(x_ref[...], y_ref[...])
    st = rule.initial_state(inside_ref[...] != 0, ch, per_channel=True)

    def cond(carry):
        p, st = carry
        return (p < length) & (jnp.min(st.done.astype(jnp.int32)) == 0)

    def body(carry):
        p, st = carry
        g, f = _load(table_ref, ids_ref[start + p], rule.geom, ch)
        return p + 1, rule.forward(st, px, Splat(g, f, p, True))

    _, st = jax.lax.while_loop(cond, body, (jnp.int32(0), st))
    for ref, x in zip(out_refs, jax.tree_util.tree_leaves(st)):  # per-channel entries are tuples: one plane each
        ref[...] = x.astype(ref.dtype)


def pallas_forward(cfg, geom, feats, ids, tiles: Tiles):
    """Front-to-back blend, one kernel program per tile. Arguments and result as
    `rasterize_flat.flat_forward` (cfg's flat and standard options are not used)."""
    pl = _pallas()
    rule = cfg.rule
    ch = feats.shape[0]
    num_tiles, p = tiles.px.x.shape
    x, y, inside = _padded(tiles.px.x), _padded(tiles.px.y), _padded(tiles.inside.astype(jnp.int32))
    p2 = x.shape[1]
    # the state's planes and their types (booleans travel as int32)
    planes, how = _planes(rule.initial_state(jnp.zeros((num_tiles, p2), jnp.bool_), ch))  # only shapes are read
    kinds = [jnp.int32 if a.dtype == jnp.bool_ else a.dtype for a in planes]
    out = pl.pallas_call(
        partial(_forward_kernel, rule, ch, how),
        grid=(num_tiles,),
        in_specs=[_whole()] * 4 + [_row_spec(p2)] * 3,
        out_specs=[_row_spec(p2)] * len(planes),
        out_shape=[jax.ShapeDtypeStruct((num_tiles, p2), k) for k in kinds],
        **_lowering(cfg.layout.platform),
        name="jaxgs_composite_forward",
    )(tiles.start, tiles.end, ids, _table(geom, feats), x, y, inside)
    out = [(o[:, :p] != 0) if a.dtype == jnp.bool_ else o[:, :p] for o, a in zip(out, planes)]
    return _unplanes(out, how, stacked=True)


def add_atomic(acc_ref, gid, slot, k, value):
    """How the backward's sums land (the `add` of `_backward_kernel`): Gaussian `gid`'s row k gains
    `value` as one atomic read-modify-write (`pallas.triton.atomic_add`: `atomic_rmw` in the
    jaxpr, `tt.atomic_rmw fadd` on a GPU; in interpret mode a read and a write, into an output that
    starts as aliased zeros). A plain `acc_ref[gid, k] += value` is a load and a store: two tiles'
    programs adding into one Gaussian at once on a GPU would lose one of the two
    (`tests/kernel_races.py` finds such stores). `slot`, the intersection's place in the sorted
    list, is not needed here."""
    from jax.experimental.pallas import triton as pltriton

    del slot
    pltriton.atomic_add(acc_ref, (gid, jnp.int32(k)), value)


def _backward_kernel(rule, ch, add, how, n_pixel, start_ref, ids_ref, table_ref, x_ref, y_ref, *refs):
    pixel_refs, (acc_in_ref, acc_ref) = refs[:n_pixel], refs[n_pixel:]
    del acc_in_ref  # aliased to acc_ref: the zeros the sums are added to
    t = _pallas().program_id(0)
    start = start_ref[t]
    px = Pixels(x_ref[...], y_ref[...])
    cot, behind0 = _unplanes([r[...] for r in pixel_refs], how, stacked=False)

    def body(carry):
        p, st = carry
        p = p - 1
        gid = ids_ref[start + p]
        g, f = _load(table_ref, gid, rule.geom, ch)
        st, grads = rule.backward(st, px, Splat(g, f, p, True), cot)
        sums = [jnp.sum(v) for v in grads.geom + grads.feats + grads.abs_means]  # the rule's gradient_rows order
        for k, v in enumerate(sums):  # other tiles' programs add into the same row at the same time
            add(acc_ref, gid, start + p, k, v)
        return p, st

    init = (jnp.max(cot.last), rule.initial_back(cot, behind0))
    jax.lax.while_loop(lambda c: c[0] > 0, body, init)


def pallas_backward(cfg, geom, feats, ids, tiles: Tiles, cot, behind0):
    """Back-to-front walk, one kernel program per tile; the per-Gaussian sums added atomically into
    one [N, GEOM + ch + 2] output. Arguments and result as `rasterize_flat.flat_backward`."""
    ch, n = feats.shape
    rule = cfg.rule
    return rule.split_rows(backward_call(geom, feats, ids, tiles, cot, behind0, add_atomic, rule.gradient_rows(n, ch),
                                         cfg.layout.platform, rule), ch)


def backward_call(geom, feats, ids, tiles: Tiles, cot, behind0, add, zeros, platform: str, rule=GAUSSIAN_RULE):
    """The backward kernel over every tile, its sums landing in `zeros` (aliased to the output) by
    `add(acc_ref, gid, slot, k, value)`: `add_atomic` into rows per Gaussian (jax-gs), or a store
    into rows per intersection slot (compared in docs/gpu.md); lowered for
    `platform` (`_lowering`)."""
    pl = _pallas()
    ch = feats.shape[0]
    num_tiles = tiles.px.x.shape[0]
    planes, how = _planes((cot, behind0))
    rows = [_padded(a) for a in [tiles.px.x, tiles.px.y] + planes]
    whole = [tiles.start, ids, _table(geom, feats)]
    return pl.pallas_call(
        partial(_backward_kernel, rule, ch, add, how, len(planes)),
        grid=(num_tiles,),
        in_specs=[_whole()] * len(whole) + [_row_spec(rows[0].shape[1])] * len(rows) + [_whole()],
        out_specs=_whole(),
        out_shape=jax.ShapeDtypeStruct(zeros.shape, zeros.dtype),
        input_output_aliases={len(whole) + len(rows): 0},
        **_lowering(platform),
        name="jaxgs_composite_backward",
    )(*whole, *rows, zeros)
