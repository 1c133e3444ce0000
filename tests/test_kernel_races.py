"""No store in any Pallas kernel jax-gs builds races between the grid's programs (`kernel_races`).

Interpret mode (this CPU) runs a grid's programs one after the other, a GPU at once: the exactness
tests cannot see a race, the jaxpr can. Checked for every kernel `rasterization(...,
rasterizer="pallas")` builds, forward and backward, in every render mode, with and without tile
dealing; and the checker itself is checked on kernels that race and kernels that do not.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

import kernel_races
from jax_backend import make_layout, traced_rasterization, traced_rasterization_2dgs
from jax_backend.rendering.rasterization import RENDER_MODES
from scenes import cameras, hard_scene

W, H = 41, 35  # 3 x 3 tiles: grids of 9 programs


def _traced(render_mode: str, tile_devices: int = 1):
    scene = hard_scene(n=40, seed=1)
    vms, Ks = cameras(W, H, n=1, seed=1)
    sh = render_mode != "D" and render_mode != "ED"

    def loss(m, q, s, o, c):
        img, alpha, _ = traced_rasterization(m, q, s, o, c, vms, Ks, W, H, sh_degree=3 if sh else None, render_mode=render_mode,
                                      rasterizer="pallas", layout=make_layout(tile_devices=tile_devices), isect_capacity=1 << 12)
        return jnp.sum(img) + jnp.sum(alpha)

    colors = scene["sh"] if sh else scene["colors"]
    args = [jnp.asarray(scene[k], jnp.float32) for k in ("means", "quats", "scales", "opacities")]
    return jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))(*args, jnp.asarray(colors, jnp.float32))


@pytest.mark.parametrize("render_mode,tile_devices", [(m, 1) for m in RENDER_MODES] + [("RGB", 2)])
def test_pallas_kernels_have_no_racing_store(render_mode, tile_devices):
    jaxpr = _traced(render_mode, tile_devices)
    kernels = {kernel_races.kernel_name(e): e for e in kernel_races.pallas_calls(jaxpr)}
    assert set(kernels) == {"jaxgs_composite_forward", "jaxgs_composite_backward"}, kernels
    assert all(kernel_races.grid_size(e) > 1 for e in kernels.values())  # the check has programs to race
    assert kernel_races.races(jaxpr) == []
    # the backward's per-Gaussian sums are atomic adds: one per row of the rule's gradient_rows
    rows = kernels["jaxgs_composite_backward"].params["out_avals"][0].shape[1]
    assert kernel_races.atomics(jaxpr) == rows


def test_surfel_kernels_have_no_racing_store():
    """2DGS's surfels through the same kernels (`blend_surfel`'s rule): every output (colour, normals,
    depth, distortion, median) differentiated."""
    scene = hard_scene(n=40, seed=1)
    vms, Ks = cameras(W, H, n=1, seed=1)

    def loss(m, q, s, o, c):
        out = traced_rasterization_2dgs(m, q, s, o, c, vms, Ks, W, H, render_mode="RGB+ED", rasterizer="pallas",
                                        isect_capacity=1 << 12)
        return sum(jnp.sum(x) for x in out[:6])

    args = [jnp.asarray(scene[k], jnp.float32) for k in ("means", "quats", "scales", "opacities", "colors")]
    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))(*args)
    kernels = {kernel_races.kernel_name(e): e for e in kernel_races.pallas_calls(jaxpr)}
    assert set(kernels) == {"jaxgs_composite_forward", "jaxgs_composite_backward"}, kernels
    assert kernel_races.races(jaxpr) == []
    rows = kernels["jaxgs_composite_backward"].params["out_avals"][0].shape[1]
    assert rows == 10 + 6 + 2  # the surfel's rows, colour and normal channels, |d means2d|
    assert kernel_races.atomics(jaxpr) == rows


def _kernel_jaxpr(kernel, out_shape, out_spec, grid=(4,), aliased_zeros=False):
    x = jnp.arange(8, dtype=jnp.int32)
    args = (x, jnp.zeros(out_shape, jnp.float32)) if aliased_zeros else (x,)
    call = pl.pallas_call(kernel, grid=grid, in_specs=[pl.BlockSpec()] * len(args), out_specs=out_spec,
                          out_shape=jax.ShapeDtypeStruct(out_shape, jnp.float32), interpret=True,
                          input_output_aliases={1: 0} if aliased_zeros else {})
    return jax.make_jaxpr(call)(*args)


def _add_at_index(x_ref, o_ref):  # o[x[t]] += 1 into the whole output: two programs may meet
    t = pl.program_id(0)
    o_ref[x_ref[t] % 4] += 1.0


def _store_whole_static(x_ref, o_ref):  # every program writes o[0]
    o_ref[0] = 1.0


def _store_own_row(x_ref, o_ref):  # each program its own row block
    o_ref[...] = jnp.ones(o_ref.shape, jnp.float32)


def _store_own_row_at_index(x_ref, o_ref):  # its own block, but a place inside it chosen at run time
    o_ref[0, x_ref[pl.program_id(0)] % 8] = 1.0


def _atomic_add_at_index(x_ref, z_ref, o_ref):  # z: the aliased zeros added into
    pltriton.atomic_add(o_ref, x_ref[pl.program_id(0)] % 4, jnp.ones((), jnp.float32))


def _add_in_loop(x_ref, o_ref):  # the racing store inside a while loop's body
    def body(i, c):
        o_ref[x_ref[i]] += 1.0
        return c

    jax.lax.fori_loop(0, 3, body, 0)


@pytest.mark.parametrize("kernel,shape,spec,grid,zeros,expected", [
    (_add_at_index, (4,), pl.BlockSpec(), (4,), False, "shares at a place chosen at run time"),
    (_add_in_loop, (8,), pl.BlockSpec(), (4,), False, "shares at a place chosen at run time"),
    (_store_whole_static, (4,), pl.BlockSpec(), (4,), False, "every program shares"),
    (_store_own_row_at_index, (4, 8), pl.BlockSpec((1, 8), lambda t: (t, 0)), (4,), False, "chosen at run time"),
    (_store_own_row, (4, 8), pl.BlockSpec((1, 8), lambda t: (t, 0)), (4,), False, None),
    (_atomic_add_at_index, (4,), pl.BlockSpec(), (4,), True, None),
    (_add_at_index, (4,), pl.BlockSpec(), (1,), False, None),  # one program: nothing to race with
])
def test_checker_reports_racing_stores_only(kernel, shape, spec, grid, zeros, expected):
    found = kernel_races.races(_kernel_jaxpr(kernel, shape, spec, grid, zeros))
    if expected is None:
        assert found == []
    else:
        assert found and all(expected in r.why for r in found), found


def test_atomic_adds_sum_every_program_in_interpret_mode():
    """The atomic form the backward uses adds every program's value (in interpret mode into aliased
    zeros): 8 programs adding 1 at x % 4 give 2 in each of 4 places."""
    x = jnp.arange(8, dtype=jnp.int32)
    call = pl.pallas_call(_atomic_add_at_index, grid=(8,), in_specs=[pl.BlockSpec()] * 2, out_specs=pl.BlockSpec(),
                          out_shape=jax.ShapeDtypeStruct((4,), jnp.float32), interpret=True, input_output_aliases={1: 0})
    np.testing.assert_array_equal(np.asarray(call(x, jnp.zeros(4, jnp.float32))), np.full(4, 2.0))
