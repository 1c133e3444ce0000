"""A jax-gs pipeline's state in nerfstudio's checkpoints, written and read in this one place.

nerfstudio saves `pipeline.state_dict()` under "pipeline" and loads it back with
`pipeline.load_pipeline` (ns-train --load-dir, ns-viewer, ns-export, ns-eval, ns-render). The
model's entries sit under the pipeline's "_model." prefix, as nerfstudio writes them:

- "jaxgs.train<name>": a training run's whole state (`jax_backend.training.state_arrays.state_arrays`:
  the Gaussians, Adam's moments, statistics, pose corrections), with "jaxgs.processes", the
  processes of the run that wrote it; or "jaxgs.gaussians<name>": the Gaussians alone (a pipeline
  that has not trained: ns-viewer's, ns-export's);
- "jaxgs.trained_steps": the steps trained to reach them (their SH degree).

Torch tensors only: nerfstudio reads checkpoints with `torch.load(weights_only=True)`.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from .bridge import to_torch
from .errors import InputError

PREFIX = "jaxgs"


class Loaded(NamedTuple):
    """What a checkpoint's model entries hold."""

    gaussians: object  # jax_backend.Gaussians: what the model shows
    trained_steps: int
    training_state: Optional[dict]  # {name: array} of a training run's whole state; None: the Gaussians alone
    processes: int  # the processes of the run that wrote it


def entries(model, engine=None, prefix: str = "") -> dict:
    """The model's checkpoint entries under `prefix`: `engine`'s whole training state when it is
    given (a training pipeline; one host copy of the Gaussians, not two), else the Gaussians the
    model shows."""
    from jax_backend import gaussians_arrays
    from jax_backend.training import state_arrays

    if engine is not None:
        kind, arrays, steps = "train", state_arrays.state_arrays(engine), engine.step
    else:
        kind, arrays, steps = "gaussians", gaussians_arrays(model.gaussians), model.trained_steps
    out = {f"{prefix}{PREFIX}.{kind}{name}": to_torch(a).clone() for name, a in arrays.items()}
    out[f"{prefix}{PREFIX}.trained_steps"] = torch.tensor(int(steps))
    if engine is not None:
        out[f"{prefix}{PREFIX}.processes"] = torch.tensor(engine.layout.processes)
    return out


def read(model_entries: dict) -> Loaded:
    """The model's entries of a checkpoint (keys without the pipeline's "_model." prefix) as
    `Loaded`; InputError when it holds no jax-gs state."""
    from jax_backend import gaussians_from_arrays

    tensors = {k[len(PREFIX) + 1:]: v for k, v in model_entries.items() if k.startswith(PREFIX + ".")}
    if not tensors:
        raise InputError("checkpoint has no jax-gs state (was it written by another method?)")
    trained = tensors.pop("trained_steps", None)
    processes = int(tensors.pop("processes", 1))
    for kind in ("train", "gaussians"):
        arrays = {k[len(kind):]: v.detach().cpu().numpy() for k, v in tensors.items() if k.startswith(kind)}
        if arrays:
            break
    return Loaded(gaussians_from_arrays(arrays, "checkpoint"), int(trained) if trained is not None else 0,
                  arrays if kind == "train" else None, processes)


def check_resumable(loaded: Loaded) -> None:
    """InputError when `loaded` was written by a run of another number of processes than this one
    (each host's share of the views follows the count)."""
    import jax

    if loaded.processes != jax.process_count():
        raise InputError(f"the checkpoint was written by a run of {loaded.processes} process(es) and this run has "
                         f"{jax.process_count()}: resume it with --machine.num-machines {loaded.processes} (each "
                         f"host's share of the views follows the count), or start a new run from its Gaussians "
                         f"(ns-export gaussian-splat, then --pipeline.model.init-ply)")


def resume(engine, loaded: Loaded) -> None:
    """Put a loaded training state into `engine` (same configuration and views; `check_resumable`
    first)."""
    from jax_backend.training import state_arrays

    check_resumable(loaded)
    state_arrays.load_state_arrays(engine, loaded.training_state, "checkpoint")
