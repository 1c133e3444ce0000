"""The viewer during training (`viewer.LiveView`): the panel's step follows every block, the
clients' views re-render with the new Gaussians as often as the viewer's Train Util allows, and
a render's compilation does not hold the next one back."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest


from nerfstudio_jaxgs.viewer import MAX_WAIT, LiveView  # noqa: E402


class _Machine:
    """A client's render thread as the trainer sees it: a pending action, a trigger."""

    def __init__(self):
        self.next_action = None
        self.render_trigger = threading.Event()
        self.actions = []

    def action(self, action):
        self.actions.append((action.action, action.camera_state))


def _viewer(clients=(7,), util=0.85):
    machines = {c: _Machine() for c in clients}
    steps = []
    viewer = SimpleNamespace(step=0, last_step=0, update_step=steps.append, render_statemachines=machines,
                             control_panel=SimpleNamespace(train_util=util),
                             viser_server=SimpleNamespace(get_clients=lambda: {c: f"client{c}" for c in clients}),
                             get_camera_state=lambda client: f"camera of {client}", update_camera_poses=lambda: None)
    return viewer, machines, steps


def test_the_step_follows_every_block_and_views_rerender_within_the_train_util_share():
    viewer, machines, steps = _viewer()
    live = LiveView()
    assert live.after_block(viewer, 99, now=100.0)  # nothing timed yet: render at once
    assert machines[7].actions == [("step", "camera of client7")] and viewer.step == 99
    live.rendered(20.0)  # the first render compiled its program ...
    live.rendered(0.5)  # ... the next reused it: 0.5 s is what a render costs
    wait = 0.5 * 0.85 / 0.15  # training keeps 85% of the time
    assert live.wait(0.85) == pytest.approx(wait)
    assert not live.after_block(viewer, 199, now=100.0 + wait - 0.1)
    assert live.after_block(viewer, 299, now=100.0 + wait + 0.1)
    assert steps == [99, 199, 299] and viewer.step == 299  # the readout follows every block
    assert [a for a, _ in machines[7].actions] == ["step", "step"]


def test_no_render_piles_up_and_slow_renders_still_show_every_few_seconds():
    viewer, machines, steps = _viewer(clients=(1, 2), util=0.9)
    live = LiveView()
    live.rendered(30.0)  # a slow render: the wait is capped
    assert live.wait(0.9) == MAX_WAIT and live.wait(1.0) == MAX_WAIT
    machines[2].next_action = "static"  # a client's render still waiting: nothing more is queued
    assert not live.after_block(viewer, 99, now=0.0)
    machines[2].next_action = None
    assert live.after_block(viewer, 199, now=1.0)
    assert all(len(m.actions) == 1 for m in machines.values())
    assert not live.after_block(viewer, 299, now=1.0 + MAX_WAIT - 0.5)
    assert live.after_block(viewer, 399, now=1.0 + MAX_WAIT + 0.5)
    assert steps == [99, 199, 299, 399]


def test_without_clients_only_the_step_moves():
    viewer, _, steps = _viewer(clients=())
    assert not LiveView().after_block(viewer, 49, now=0.0) and steps == [49]
