"""Compiling a trainer's programs ahead of time, for its own devices or for others (a TPU or GPU
topology's compile-only devices, `devices.topology_devices`): its compile time, memory and
instructions checked without running it (`benchmarks/accelerator_compile.py`)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..devices import abstract
from .strategy.ops import rows_to_split
from .trainer import Trainer


def _abstract_like(trainer: Trainer, layout, args, per_gaussian=None):
    """`args` as abstract arrays placed on `layout`'s devices as the trainer places them: stacked
    copies when data parallel; with tile dealing the leaves of `per_gaussian` (a tree like
    `args`, True for per-Gaussian leaves) split by rows and the rest whole; else on one device."""
    if layout.data_parallel:
        return abstract(args, layout.replica_sharding())
    if layout.tile_devices > 1:
        if per_gaussian is None:
            return abstract(args, layout.whole_sharding())
        shardings = layout.state_shardings(per_gaussian)
        return jax.tree_util.tree_map(lambda x, s: jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=s), args,
                                      shardings)
    return abstract(args, jax.sharding.SingleDeviceSharding(layout.devices[0]))


def _lowered(fn, layout, placed):
    if layout.data_parallel:  # pmap
        return fn.lower(*placed)
    return fn.trace(*placed).lower(lowering_platforms=(layout.lowering_platform,))


def lower_block(trainer: Trainer, num_steps: int, target=None):
    """The trainer's next block of `num_steps` steps, lowered (`.compile()` it): for its own
    devices, or built for `target` devices."""
    if target is None:
        return trainer.block_fn(num_steps).lower(trainer.device_data, trainer.device_state)
    layout = trainer.layout.on(target)
    state = trainer.device_state
    placed = (_abstract_like(trainer, layout, trainer.device_data),
              _abstract_like(trainer, layout, state, rows_to_split(trainer.opt.gaussians, state, layout.tile_devices)))
    return _lowered(trainer.make_block(num_steps, layout), layout, placed)


def lower_refine(trainer: Trainer, target=None):
    """Density control's one-device program (what the trainer runs when the slots run out),
    lowered as `lower_block`'s."""
    step = jnp.int32(trainer.step)
    if target is None:
        return trainer.refine_fn().lower(trainer.state, step)
    if trainer.layout.data_parallel:
        raise ValueError("lower_refine compiles the one-device program: use a trainer with one replica")
    one = trainer.layout.on(target).for_one_device()
    return _lowered(trainer.make_refine(), one, _abstract_like(trainer, one, (trainer.state, step)))
