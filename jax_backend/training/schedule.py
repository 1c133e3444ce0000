"""When things happen in a run: which steps a block crossed, and the SH degree at a step.
Work on Python ints and traced JAX scalars alike."""
from __future__ import annotations


def crossed(step_before, step_after, every):
    """Whether a multiple of `every` lies in (step_before, step_after] (never when every <= 0).

    A block that trains the steps step_before+1 .. step_after runs whatever falls due at any of
    them right after it."""
    if isinstance(every, int) and every <= 0:
        return False
    return (step_after // every) > (step_before // every)


def sh_degree_at(step, interval: int, max_degree: int):
    """SH bands in use after `step` steps: one more every `interval` steps, up to `max_degree`."""
    if isinstance(step, int):
        return min(step // max(interval, 1), max_degree)
    import jax.numpy as jnp

    return jnp.minimum(step // max(interval, 1), max_degree)
