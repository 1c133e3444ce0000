"""Density control: the `Strategy` contract (`base`), gsplat's default strategy (`default`) and
3DGS-MCMC (`mcmc`), built by name with `make_strategy`."""
from __future__ import annotations

from .base import RefineInfo, Strategy
from .default import DefaultStrategy
from .mcmc import MCMCStrategy

STRATEGIES = {"default": DefaultStrategy, "mcmc": MCMCStrategy}


def make_strategy(name: str, **settings) -> Strategy:
    """The strategy registered as `name`, with its fields set from `settings`.

    `budget=0` (or None) keeps the strategy's own default (no limit for "default", 1,000,000 for
    "mcmc"). Unknown names and settings raise ValueError naming them.
    """
    import dataclasses

    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}, got {name!r}")
    cls = STRATEGIES[name]
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise ValueError(f"strategy {name!r} has no setting(s) {unknown}; it has {sorted(fields)}")
    if not settings.get("budget"):
        settings.pop("budget", None)
    return cls(**settings)


__all__ = ["STRATEGIES", "make_strategy", "Strategy", "RefineInfo", "DefaultStrategy", "MCMCStrategy"]
