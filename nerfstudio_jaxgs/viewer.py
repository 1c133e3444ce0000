"""The viewer's first view: when a browser connects and its camera sees nothing of the scene, it
is moved to a training camera.

viser starts every client at (-3, 3, -3) viser units, (-0.3, 0.3, -0.3) in nerfstudio's scene,
looking at the origin. A 360-degree capture's object sits at the origin and fills that view; a
forward-facing capture's content lies in front of its cameras, away from the origin, and that
default camera can see nothing of it: an empty canvas until the user clicks a camera frustum.
So on connect, the client's view is rendered small; when (almost) nothing covers it, the client
is put where clicking the first training camera's frustum would put it."""
from __future__ import annotations

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
            print(f"[jax-gs] viewer: first-view check skipped ({type(e).__name__}: {e})")
            return
        with client.atomic():  # as nerfstudio's own click on a camera frustum does
            client.camera.position = first.position
            client.camera.wxyz = first.wxyz

    viewer.viser_server.on_client_connect(on_connect)
