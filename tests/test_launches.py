"""The GPU launch counter (`tools/launches.py`) on programs whose launches are known."""
import jax
import jax.numpy as jnp
import numpy as np

from tools import launches as L


def _hlo(fn, *args):
    return jax.jit(fn).lower(*args).compile().as_text()


def test_a_loop_launches_its_body_once_per_trip():
    x = np.ones((64,), np.float32)

    def looped(x):
        return jax.lax.fori_loop(0, 7, lambda i, v: jnp.sin(v) * 2.0 + v[::-1], x)

    hlo = _hlo(looped, x)
    body = L.loop_body(hlo, 7)
    assert body is not None
    per_trip = L.launches(hlo, computation=body).launches
    assert per_trip >= 1
    count = L.launches(hlo)
    assert count.while_loops == 1 and count.data_dependent == 0
    # 7 trips of the body and 8 tests of the condition, beside what runs outside the loop
    assert count.launches >= 7 * per_trip


def test_data_dependent_loops_take_the_measured_trips():
    x = np.ones((64,), np.float32)

    def until(x):
        return jax.lax.while_loop(lambda v: v[0] < 100.0, lambda v: v * 2.0 + 1.0, x)

    hlo = _hlo(until, x)
    once = L.launches(hlo)
    assert once.data_dependent == 1 and once.unmeasured == 1
    ten = L.launches(hlo, {"forward": 10})
    assert ten.unmeasured == 0 and ten.launches > once.launches
    # the trips multiply the body and condition: 10 trips add 9 more of them than 1 trip
    per_trip = (ten.launches - once.launches) / 9
    assert per_trip >= 1 and float(per_trip).is_integer()
