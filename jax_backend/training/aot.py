"""Compiling a trainer's programs ahead of time, for its own devices or for others (a TPU or GPU
topology's compile-only devices, `devices.topology_devices`): its compile time, memory and
instructions checked without running it (`benchmarks/accelerator_compile.py`)."""
from __future__ import annotations

from functools import partial

import jax.numpy as jnp

from ..devices import abstract
from .trainer import Trainer


def _lowered_for(trainer: Trainer, target, make, args):
    """`make(layout)`'s program lowered for the trainer's layout moved to `target`, with `args`
    placed there as the trainer places them (stacked copies when data parallel, else one device)."""
    if trainer.layout.tile_devices > 1:
        raise ValueError(f"compiling for other devices needs tile_devices 1, this trainer deals over "
                         f"{trainer.layout.tile_devices}")
    layout = trainer.layout.on(target)
    fn = make(layout)
    placed = abstract(args, layout.abstract_sharding())
    if layout.data_parallel:
        return fn.lower(*placed)
    return fn.trace(*placed).lower(lowering_platforms=(layout.lowering_platform,))


def lower_block(trainer: Trainer, num_steps: int, target=None):
    """The trainer's next block of `num_steps` steps, lowered (`.compile()` it): for its own
    devices, or built for `target` devices."""
    if target is None:
        return trainer.block_fn(num_steps).lower(trainer.device_data, trainer.device_state)
    return _lowered_for(trainer, target, partial(trainer.make_block, num_steps),
                        (trainer.device_data, trainer.device_state))


def lower_refine(trainer: Trainer, target=None):
    """Density control's one-device program (what the trainer runs when the slots run out),
    lowered as `lower_block`'s."""
    step = jnp.int32(trainer.step)
    if target is None:
        return trainer.refine_fn().lower(trainer.state, step)
    if trainer.layout.data_parallel:
        raise ValueError("lower_refine compiles the one-device program: use a trainer with one replica")
    return _lowered_for(trainer, target, lambda layout: trainer.make_refine(), (trainer.state, step))
