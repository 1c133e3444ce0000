"""What the programs ask of a device, read from their text on this CPU (`tools.hlo_checks`):
- every float32 contraction states its precision (`jax_backend.array_ops.F32`): at the default a
  TPU multiplies in bfloat16 and a GPU may use TF32, while this CPU computes float32 whatever is
  asked, so no CPU test would see the difference (the StableHLO that every platform starts from);
- the train block never looks back at the host (no callback, infeed, outfeed or transfer in the
  optimised program).
The TPU and H200 programs are checked the same way in `test_accelerator_compile.py` (slow suite).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tools import hlo_checks
from jax_backend import local_layout
from jax_backend.training import aot
from tools.programs import small_render_programs, small_trainer


def test_checkers_find_a_default_precision_dot_a_host_callback_and_a_scatter_add():
    a = np.ones((64, 64), np.float32)
    both = jax.jit(lambda x: jnp.dot(x, x) + jnp.dot(x, x, precision="highest")).lower(a)
    assert len(hlo_checks.default_precision_contractions(both.as_text())) == 1
    assert len(hlo_checks.default_precision_contractions(both.compile().as_text())) == 1
    conv = jax.jit(lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME")).lower(
        np.ones((1, 1, 16, 16), np.float32), np.ones((1, 1, 3, 3), np.float32))
    assert len(hlo_checks.default_precision_contractions(conv.as_text())) == 1
    call = jax.jit(lambda x: jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x) * 2).lower(a)
    assert hlo_checks.host_traffic(call.compile().as_text())
    printing = jax.jit(lambda x: (jax.debug.print("{}", x.sum()), x * 2)[1]).lower(a)
    assert hlo_checks.host_traffic(printing.compile().as_text())
    assert hlo_checks.host_traffic(both.compile().as_text()) == []
    i, x = np.array([0, 1, 1, 3]), np.ones(4, np.float32)
    summed = jax.jit(lambda x, i: jnp.zeros(8).at[i].add(x)).lower(x, i).compile().as_text()
    placed = jax.jit(lambda x, i: jnp.zeros(8).at[i].set(x, unique_indices=True)).lower(x, i).compile().as_text()
    assert len(hlo_checks.order_dependent_scatters(summed)) == 1 and hlo_checks.order_dependent_scatters(placed) == []
    counted = jax.jit(lambda i: jnp.zeros(8, jnp.int32).at[i].add(1)).lower(i).compile().as_text()
    assert hlo_checks.order_dependent_scatters(counted) == []  # an integer sum is exact in any order


@pytest.fixture(scope="module")
def trainers():
    return {"default with corrections": small_trainer("default", corrections=True), "mcmc": small_trainer("mcmc")}


def test_train_blocks_and_renders_state_every_contraction_precision(trainers):
    for name, tr in trainers.items():
        found = hlo_checks.default_precision_contractions(aot.lower_block(tr, 5).as_text())
        assert found == [], (name, found)
    for name, (fn_for, args) in small_render_programs().items():
        found = hlo_checks.default_precision_contractions(jax.jit(fn_for(local_layout())).lower(*args).as_text())
        assert found == [], (name, found)


def test_train_block_never_looks_back_at_the_host(trainers):
    text = aot.lower_block(trainers["default with corrections"], 5).compile().as_text()
    assert " while(" in text  # the block's steps are one loop in one program
    assert hlo_checks.host_traffic(text) == []
