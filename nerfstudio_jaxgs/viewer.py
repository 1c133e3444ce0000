"""The viewer's first view: a browser that connects starts at a training camera.

viser starts every client at (-3, 3, -3) viser units, (-0.3, 0.3, -0.3) in nerfstudio's scene,
looking at the origin. A 360-degree capture's object sits at the origin and fills that view; a
forward-facing capture's content lies in front of its cameras, away from the origin, and that
default camera can see nothing of it (an empty canvas until the user clicks a camera frustum). So
for a jax-gs model each new client is put where clicking the first training camera's frustum
would put it."""
from __future__ import annotations


def install_first_view() -> None:
    """Wrap nerfstudio's `Viewer.init_scene` (once) to move each new client to a training camera."""
    from nerfstudio.viewer.viewer import Viewer

    if getattr(Viewer.init_scene, "_jaxgs", False):
        return
    original = Viewer.init_scene

    def init_scene(self, *args, **kwargs):
        original(self, *args, **kwargs)
        from .model import JaxGSModel

        handles = getattr(self, "camera_handles", {})
        if not isinstance(getattr(self.pipeline, "model", None), JaxGSModel) or not handles:
            return
        first = handles[min(handles)]

        def at_training_camera(client):
            with client.atomic():  # as nerfstudio's own click on a camera frustum does
                client.camera.position = first.position
                client.camera.wxyz = first.wxyz

        self.viser_server.on_client_connect(at_training_camera)

    init_scene._jaxgs = True
    Viewer.init_scene = init_scene
