"""Several hosts: `jax.distributed` started from given settings (`initialize`: what the plugin
makes of nerfstudio's --machine.* flags) or from standard environment variables
(`initialize_from_env`), and each host's share of the training views.

    JAX_COORDINATOR_ADDRESS=host0:1234 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0  (on host 0)
    JAX_COORDINATOR_ADDRESS=host0:1234 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=1  (on host 1)

On a TPU pod slice (and under SLURM or Open MPI) JAX finds all three by itself: set
JAX_COORDINATOR_ADDRESS=auto, or nothing and JAXGS_DISTRIBUTED=1.
"""
from __future__ import annotations

import os

import numpy as np


def coordinator_address(dist_url: str):
    """A nerfstudio `--machine.dist-url` as `jax.distributed.initialize` takes it: "tcp://HOST:PORT"
    or "HOST:PORT" -> "HOST:PORT"; "auto" -> None (JAX finds the coordinator: a TPU pod slice,
    SLURM, Open MPI). ValueError naming the value otherwise."""
    url = str(dist_url).strip()
    if url == "auto":
        return None
    address = url[len("tcp://"):] if url.startswith("tcp://") else url
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        raise ValueError(f"--machine.dist-url {dist_url!r}: give tcp://HOST:PORT (the coordinator, process 0's host) "
                         f"or auto (a TPU pod slice finds it itself)")
    return address


def initialize(coordinator=None, num_processes=None, process_id=None) -> None:
    """`jax.distributed.initialize` for this process (`coordinator` None: JAX finds it and the
    counts), with CPU collectives over gloo when JAX runs on CPUs. Must run before anything
    touches a JAX device."""
    import jax

    if jax.config.jax_platforms in (None, "", "cpu") or str(jax.config.jax_platforms).startswith("cpu"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # collectives between CPU processes
    kwargs = {k: v for k, v in (("coordinator_address", coordinator), ("num_processes", num_processes),
                                ("process_id", process_id)) if v is not None}
    jax.distributed.initialize(**kwargs)
    _started["process_index"] = jax.process_index()


_started = {}  # this process's index, once `initialize` started JAX's multi-host runtime


def started_process_index():
    """This process's index among the JAX processes once `initialize` has run, else None (asking
    JAX before then would start its backends, after which the multi-host runtime cannot start)."""
    return _started.get("process_index")


def initialize_from_env(environ=None) -> bool:
    """Call `jax.distributed.initialize` when the environment asks for several processes.
    Returns whether it did. Must run before anything touches a JAX device."""
    env = os.environ if environ is None else environ
    address = env.get("JAX_COORDINATOR_ADDRESS")
    auto = env.get("JAXGS_DISTRIBUTED", "") not in ("", "0") or address == "auto"
    if not address and not auto:
        return False
    counts = {}
    for var, name in (("JAX_NUM_PROCESSES", "num_processes"), ("JAX_PROCESS_ID", "process_id")):
        if env.get(var):
            try:
                counts[name] = int(env[var])
            except ValueError:
                raise ValueError(f"{var} must be an integer, got {env[var]!r}") from None
    initialize(address if address and address != "auto" else None, **counts)
    return True


def host_views(num_views: int, process_index: int | None = None, process_count: int | None = None) -> np.ndarray:
    """The views this host trains on: every process_count-th one, starting at its index."""
    if process_index is None or process_count is None:
        import jax

        process_index, process_count = jax.process_index(), jax.process_count()
    if num_views < process_count:
        raise ValueError(f"{process_count} hosts need at least {process_count} training views, got {num_views}")
    return np.arange(process_index, num_views, process_count)
