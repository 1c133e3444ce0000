"""The intersection buffer's policy, in one place: how big the buffer of (Gaussian, tile) pairs is,
when it grows and by how much.

A binning has a static buffer (a shape of the compiled program) and says when it was too small
(`Bins.overflow`, never a silently wrong image). Sizes are powers of two from MIN_SIZE up, so a
run compiles few distinct programs.
- An eager render (`rasterization`) sizes it for what its cameras need (`count_intersections`)
  and, when given one too small, renders again with `after_overflow`.
- Training (`training.Trainer`) keeps one buffer for its blocks: `ahead` of the most demanding
  training view when a run starts, resumes or changes resolution (room for the Gaussians to grow,
  so a block rarely runs twice); a block that overflowed runs again from the state before it with
  `after_overflow`; a block that came near it grows it for the next (`after_block`).
"""
from __future__ import annotations

from ..array_ops import next_pow2
from .binning import MIN_ISECT_CAPACITY as MIN_SIZE

AHEAD = 2.0  # ahead of time: this many times what the most demanding view needs now
AFTER_OVERFLOW = 1.25  # after an overflow: this many times what was needed
NEAR_FULL = 0.8  # a block whose peak passed this fraction of the buffer ...
AFTER_BLOCK = 1.5  # ... grows it to this many times its peak


def size_for(needed) -> int:
    """The buffer holding `needed` intersections: a power of two, at least MIN_SIZE."""
    return max(MIN_SIZE, next_pow2(int(needed)))


def ahead(counts) -> int:
    """A buffer for the coming steps from the intersections each view needs now (`counts`)."""
    return size_for(AHEAD * max(int(max(counts)), 1))


def after_overflow(needed: int) -> int:
    """The buffer to render again with after one that `needed` intersections overflowed."""
    return size_for(AFTER_OVERFLOW * int(needed))


def after_block(size: int, peak: int) -> int:
    """The buffer for the next block after one whose views needed at most `peak` in `size`."""
    return max(size, size_for(AFTER_BLOCK * int(peak))) if peak > NEAR_FULL * size else size
