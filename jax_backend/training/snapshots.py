"""Snapshots while training: the alive Gaussians as a PLY and a preview PNG of one view, written by
a background thread (atomically) while the next block trains."""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp

from ..files.fileio import AsyncWriter, atomic_write, png_bytes
from ..files.ply import write_ply
from . import evaluation
from .schedule import crossed


class Snapshots:
    """Every `every` steps: `step_NNNNNN.ply` and `preview_NNNNNN.png` under `out_dir`.

    The training loop only enqueues device arrays (the render is dispatched, not waited for);
    fetching and writing happen on the writer thread. Call it after every block (it is a
    `Trainer.train` callback); `close()` waits for the pending writes and raises if one failed.

    Args:
      out_dir: folder for the files.
      every: steps between snapshots (<= 0: never).
      camera: (viewmat [4,4], K [3,3], width, height[, distortion [4]]) of the preview, e.g. a
        held-out view (drawn with the trainer's camera model; distortion: a fisheye's k1-k4); None:
        the trainer's training view 0.
      background: [3] colour behind the preview's Gaussians (black when None).
    """

    def __init__(self, out_dir, every: int, camera=None, background=None):
        self.out_dir, self.every, self.camera, self.background = Path(out_dir), int(every), camera, background
        self.writer = AsyncWriter()
        self._last = 0

    def __call__(self, trainer, metrics=None, info=None):
        if not crossed(self._last, trainer.step, self.every):
            return
        self._last = trainer.step
        if self.camera is None:
            d = trainer.data
            camera = (d.viewmats[0], d.Ks[0], d.width, d.height, d.distortions[0])
        else:
            camera = self.camera
        viewmat, K, width, height, *distortion = camera
        preview = evaluation.render(trainer, viewmat, K, width, height, background=self.background, depth=False,
                                    distortion=distortion[0] if distortion else None).rgb
        g = trainer.gaussians
        # copies on the device (dispatched, not waited for): the next block deletes the state's own arrays
        params, alive = jax.tree_util.tree_map(jnp.copy, (trainer.cfg.splats.exported(g.params), g.alive))
        self.writer.submit(_write_snapshot, self.out_dir, trainer.step, params, alive, preview)

    def check(self):
        """Raise the `DiskFullError` of a write that ran out of space, if one did."""
        self.writer.check()

    def close(self):
        """Wait for the pending writes; `DiskFullError` if one ran out of space, RuntimeError if one
        failed otherwise."""
        self.writer.close()


def _write_snapshot(out_dir: Path, step, params, alive, preview):
    params, alive, preview = jax.device_get((params, alive, preview))
    write_ply(out_dir / f"step_{step:06d}.ply", params, alive)
    atomic_write(out_dir / f"preview_{step:06d}.png", png_bytes(preview))
