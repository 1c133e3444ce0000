"""Zero-copy tensors between JAX and torch through DLPack (CPU, or the same GPU).

Never write in place into a torch tensor that aliases a JAX buffer: JAX assumes its arrays are
immutable."""
from __future__ import annotations

import numpy as np
import torch


def to_torch(x) -> torch.Tensor:
    """A torch view of a JAX array (no copy). Booleans and unsigned keys go through numpy."""
    import jax

    if x.dtype == np.bool_ or x.dtype == np.uint32:
        return torch.from_numpy(np.asarray(jax.device_get(x)).astype(np.int64 if x.dtype == np.uint32 else bool))
    return torch.from_dlpack(x)
