"""Several hosts: `jax.distributed` from standard environment variables, and each host's share
of the training views.

    JAX_COORDINATOR_ADDRESS=host0:1234 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0  (on host 0)
    JAX_COORDINATOR_ADDRESS=host0:1234 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=1  (on host 1)

On a TPU pod slice (and under SLURM or Open MPI) JAX finds all three by itself: set
JAX_COORDINATOR_ADDRESS=auto, or nothing and JAXGS_DISTRIBUTED=1.
"""
from __future__ import annotations

import os

import numpy as np


def initialize_from_env(environ=None) -> bool:
    """Call `jax.distributed.initialize` when the environment asks for several processes.
    Returns whether it did. Must run before anything touches a JAX device."""
    import jax

    env = os.environ if environ is None else environ
    address = env.get("JAX_COORDINATOR_ADDRESS")
    auto = env.get("JAXGS_DISTRIBUTED", "") not in ("", "0") or address == "auto"
    if not address and not auto:
        return False
    kwargs = {}
    if address and address != "auto":
        kwargs["coordinator_address"] = address
    for var, name in (("JAX_NUM_PROCESSES", "num_processes"), ("JAX_PROCESS_ID", "process_id")):
        if env.get(var):
            try:
                kwargs[name] = int(env[var])
            except ValueError:
                raise ValueError(f"{var} must be an integer, got {env[var]!r}") from None
    if jax.config.jax_platforms in (None, "", "cpu") or str(jax.config.jax_platforms).startswith("cpu"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # collectives between CPU processes
    jax.distributed.initialize(**kwargs)
    return True


def host_views(num_views: int, process_index: int | None = None, process_count: int | None = None) -> np.ndarray:
    """The views this host trains on: every process_count-th one, starting at its index."""
    if process_index is None or process_count is None:
        import jax

        process_index, process_count = jax.process_index(), jax.process_count()
    if num_views < process_count:
        raise ValueError(f"{process_count} hosts need at least {process_count} training views, got {num_views}")
    return np.arange(process_index, num_views, process_count)
