"""A trainer's state saved and restored: as named arrays (`serialize.named_arrays`, what the
nerfstudio plugin's checkpoints hold) or as one atomic .npz (`files.checkpoint`)."""
from __future__ import annotations

from typing import Optional

from ..files.checkpoint import read_checkpoint, save_checkpoint
from .serialize import capacity_of, from_named_arrays, named_arrays
from .trainer import Trainer


def state_arrays(trainer: Trainer) -> dict:
    """The whole training state as {name: numpy array}."""
    return named_arrays(trainer.state)


def load_state_arrays(trainer: Trainer, arrays: dict, source="checkpoint"):
    """Restore a state saved by `state_arrays` (same configuration and dataset): the capacity grows
    to the saved one first, the intersection buffer to what the restored Gaussians need. StateError
    naming `source` when it does not fit."""
    trainer.grow_capacity(capacity_of(arrays, source))
    trainer.state = from_named_arrays(trainer.state, arrays, source)
    trainer.size_buffer_ahead()


def save(trainer: Trainer, path, meta: Optional[dict] = None):
    """One .npz with the whole state (atomic). Returns its path."""
    info = {"capacity": trainer.capacity, "isect_capacity": trainer.isect_capacity, "step": trainer.step}
    return save_checkpoint(path, state_arrays(trainer), dict(meta or {}, trainer=info))


def restore(trainer: Trainer, path) -> dict:
    """Load a checkpoint written by `save` (same configuration and dataset). Returns its meta."""
    arrays, meta = read_checkpoint(path)
    load_state_arrays(trainer, arrays, path)
    trainer.isect_capacity = int(meta.get("trainer", {}).get("isect_capacity", trainer.isect_capacity))
    return meta
