"""Compiling a trainer's programs ahead of time, for its own devices or for others (a TPU or GPU
topology's compile-only devices, `devices.topology_devices`): its compile time, memory and
instructions checked without running it (`benchmarks/accelerator_compile.py`)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .strategy.ops import rows_to_split
from .trainer import Trainer


def _abstract_like(layout, args, per_gaussian=None):
    """`args` as abstract arrays placed on `layout`'s devices as the trainer places them
    (`Layout.shardings`)."""
    return jax.tree_util.tree_map(lambda x, s: jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=s), args,
                                  layout.shardings(args, per_gaussian))


def _lowered(fn, layout, placed):
    return fn.trace(*placed).lower(lowering_platforms=(layout.lowering_platform,))


def lower_block(trainer: Trainer, num_steps: int, target=None):
    """The trainer's next block of `num_steps` steps, lowered (`.compile()` it): for its own
    devices, or built for `target` devices."""
    table = trainer.images.block_table(trainer.step, num_steps)
    if target is None:
        return trainer.block_fn(num_steps).lower(trainer.device_data, table, trainer.device_state)
    layout = trainer.layout.on(target)
    state = trainer.device_state
    placed = (_abstract_like(layout, trainer.device_data), _abstract_like(layout, table),
              _abstract_like(layout, state, rows_to_split(trainer.opt.gaussians, trainer.state, layout.tile_devices)))
    return _lowered(trainer.make_block(num_steps, layout), layout, placed)


def lower_refine(trainer: Trainer, target=None):
    """Density control's one-device program (what the trainer runs when the slots run out),
    lowered as `lower_block`'s."""
    step, extent = jnp.int32(trainer.step), np.float32(trainer.scene_extent)
    if target is None:
        return trainer.refine_fn().lower(extent, trainer.state, step)
    if trainer.layout.data_parallel:
        raise ValueError("lower_refine compiles the one-device program: use a trainer with one replica")
    one = trainer.layout.on(target).for_one_device()
    return _lowered(trainer.make_refine(), one, _abstract_like(one, (extent, trainer.state, step)))
