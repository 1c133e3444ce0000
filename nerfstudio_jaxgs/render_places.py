"""Where the model's renders run (eval's, ns-render's, the viewer's), and the Gaussians placed
there once per change of them (a block, a load), not per viewer frame (a copy per device each
frame: figure viewer-placement, benchmarks/results/library_figures.md)."""
from __future__ import annotations

import contextlib
import functools
import threading

_render_thread = threading.local()


@contextlib.contextmanager
def live_render():
    """While active, on this thread, renders are the viewer's own (`in_live_render`; entered by
    the viewer's render threads: `hooks.install_live_renders`)."""
    _render_thread.live = True
    try:
        yield
    finally:
        _render_thread.live = False


def in_live_render() -> bool:
    """Whether this thread is inside one of the viewer's renders."""
    return getattr(_render_thread, "live", False)


class RenderPlaces:
    def __init__(self, config):
        self.config = config
        self._placed = None  # (the Gaussians, {layout: their copy where that layout renders})

    @functools.cached_property
    def shared(self):
        """One replica, its tiles dealt over the tile-devices setting (automatic: every core on a
        CPU), within this host's devices (`settings.layout`); decided once, not per frame."""
        from .settings import layout

        return layout(self.config, for_rendering=True)  # its one-line InputError naming the settings

    @functools.cached_property
    def live(self):
        """A viewer's render while this process trains: one device. Dealt over the devices a block
        runs on, a render waits for the block's end (#56; figure: live-render,
        benchmarks/results/library_figures.md)."""
        from jax_backend import make_layout

        return make_layout(replicas=1, tile_devices=1)

    def gaussians(self, gaussians, layout):
        """`gaussians` where `layout`'s renders run."""
        if self._placed is None or self._placed[0] is not gaussians:
            self._placed = (gaussians, {})
        copies = self._placed[1]
        if layout not in copies:
            copies[layout] = layout.place(gaussians)
        return copies[layout]
