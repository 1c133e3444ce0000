"""The viewer's first view: when a browser connects and its camera sees nothing of the scene, it
is moved to a training camera.

viser starts every client at (-3, 3, -3) viser units, (-0.3, 0.3, -0.3) in nerfstudio's scene,
looking at the origin. A 360-degree capture's object sits at the origin and fills that view; a
forward-facing capture's content lies in front of its cameras, away from the origin, and that
default camera can see nothing of it: an empty canvas until the user clicks a camera frustum.
So on connect, the client's view is rendered small; when (almost) nothing covers it, the client
is put where clicking the first training camera's frustum would put it."""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)
EMPTY_COVERAGE = 0.02  # mean accumulated alpha below which a view "sees nothing"


def sees_the_scene(model, camera, height: int = 48) -> bool:
    """Whether a render of `camera` (nerfstudio Cameras[1]) at `height` pixels is covered by the
    Gaussians at all (mean accumulation above EMPTY_COVERAGE)."""
    cam = camera.reshape((1,))
    cam.rescale_output_resolution(height / float(cam.height[0]))
    out = model.get_outputs_for_camera(cam)
    return float(out["accumulation"].mean()) > EMPTY_COVERAGE


def watch_first_views(viewer) -> None:
    """After nerfstudio's `Viewer.init_scene` (`hooks.install_first_view`): each client that
    connects to a jax-gs scene's viewer and sees nothing of it is moved to the first training
    camera, as clicking its frustum would."""
    from nerfstudio.viewer.utils import get_camera

    from .model import JaxGSModel

    handles = getattr(viewer, "camera_handles", {})
    if not isinstance(getattr(viewer.pipeline, "model", None), JaxGSModel) or not handles:
        return
    first = handles[min(handles)]

    def on_connect(client):
        try:
            camera = get_camera(viewer.get_camera_state(client), 48)
            if sees_the_scene(viewer.pipeline.model, camera):
                return
        except Exception as e:  # the view could not be checked: leave the camera where it is
            log.warning(f"viewer: first-view check skipped ({type(e).__name__}: {e})")
            return
        with client.atomic():  # as nerfstudio's own click on a camera frustum does
            client.camera.position = first.position
            client.camera.wxyz = first.wxyz

    viewer.viser_server.on_client_connect(on_connect)


MAX_WAIT = 10.0  # seconds: the longest a live view waits between re-renders while training
RECENT = 5  # render times remembered


class LiveView:
    """When the viewer shows training's progress: after a block, each connected client's view is
    re-rendered with the new Gaussians when the time since the last such render is at least
    `train_util / (1 - train_util)` renders' worth (the viewer's "Train Util": training keeps that
    share of the time), at most MAX_WAIT seconds, and no render is still waiting; the panel's
    step follows every block.

    nerfstudio's own rule (`ViewerState.update_scene`) re-renders every `render_freq` steps from
    its averaged rays per second, which count a render's compilation: on a CPU the first
    render's compile put the next one thousands of steps away, so a run's view stayed at step 0.
    Here a render's cost is the least of its recent durations (a compile falls out as soon as
    one render reuses the program)."""

    def __init__(self):
        self.last_sent = None  # time.monotonic() of the last re-render asked for
        self.durations = []  # seconds of the recent viewer renders

    def rendered(self, seconds: float) -> None:
        """A viewer render took `seconds`."""
        self.durations = (self.durations + [float(seconds)])[-RECENT:]

    def wait(self, train_util: float) -> float:
        """Seconds to leave between re-renders (0 before any render was timed)."""
        if not self.durations:
            return 0.0
        if train_util >= 1.0:
            return MAX_WAIT
        share = max(train_util, 0.0) / (1.0 - max(train_util, 0.0))
        return min(min(self.durations) * share, MAX_WAIT)

    def due(self, now: float, train_util: float, pending: bool) -> bool:
        """Whether to re-render after the block that ended at `now` (`pending`: a client's
        render is still waiting or under way)."""
        if pending:
            return False
        return self.last_sent is None or now - self.last_sent >= self.wait(train_util)

    def after_block(self, viewer, step: int, now: float) -> bool:
        """After a block that ended at step `step`: the panel's step, and the clients' views
        re-rendered when due (nerfstudio's "step" render action). Returns whether they were."""
        from nerfstudio.viewer.render_state_machine import RenderAction

        viewer.step = step
        viewer.update_step(step)
        machines = getattr(viewer, "render_statemachines", {})
        if not machines:
            return False
        pending = any(m.next_action is not None or m.render_trigger.is_set() for m in machines.values())
        panel = getattr(viewer, "control_panel", None)
        util = float(getattr(panel, "train_util", getattr(viewer, "train_util", 0.9)))
        if not self.due(now, util, pending):
            return False
        clients = viewer.viser_server.get_clients()
        for cid, machine in machines.items():
            if cid in clients:
                state = viewer.get_camera_state(clients[cid])
                if state is not None:
                    machine.action(RenderAction("step", state))
        viewer.update_camera_poses()
        viewer.last_step = step
        self.last_sent = now
        return True
