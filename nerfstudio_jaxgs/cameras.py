"""nerfstudio's cameras as jax-gs draws them: the conversion to OpenCV world-to-camera matrices and
intrinsics, and which camera kinds the rasterizers can draw (with the one line saying why not)."""
from __future__ import annotations

import numpy as np
import torch


def camera_model_problem(cameras, index: int, where: str, rendering: bool = False) -> str | None:
    """Why camera `index` of nerfstudio `cameras` cannot be drawn by jax-gs's pinhole rasterizers
    (None: it can). `where` names the camera in the message; `rendering`: a camera to render (an
    ns-render camera path), not one of the capture's.

    PERSPECTIVE cameras draw as they are. FISHEYE and FISHEYE624 cameras with distortion
    coefficients are drawable after nerfstudio's FullImageDatamanager has undistorted their images
    to a pinhole camera (it rewrites the intrinsics and keeps the camera type, as splatfacto relies
    on); one with all-zero coefficients is not undistorted and is still a fisheye. Equirectangular,
    omnidirectional, VR180 and orthophoto cameras have no pinhole form."""
    from nerfstudio.cameras.cameras import CameraType

    kind = CameraType(int(cameras.camera_type.reshape(-1)[index]))
    if kind == CameraType.PERSPECTIVE:
        return None
    dist = cameras.distortion_params
    has_coeffs = dist is not None and bool(torch.any(dist.reshape(-1, dist.shape[-1])[index] != 0))
    fisheye = kind in (CameraType.FISHEYE, CameraType.FISHEYE624)
    if fisheye and has_coeffs:
        return None  # undistorted by nerfstudio's datamanager
    if rendering:
        hint = 'render perspective cameras (in an ns-render camera path: "camera_type": "perspective")'
    elif fisheye:
        hint = ("give the capture's fisheye coefficients (k1-k4; nerfstudio then undistorts its images), or "
                "undistort the images to a PINHOLE model first (e.g. COLMAP's image_undistorter)")
    else:
        hint = ("convert the images to perspective ones first (e.g. ns-process-data images --camera-type "
                "equirectangular cuts each panorama into perspective views)")
    article = "an" if kind.name[0] in "AEIOU" else "a"
    what = (f"a {kind.name} camera with all-zero distortion coefficients, which nerfstudio does not undistort"
            if fisheye else f"{article} {kind.name} camera")
    return f"{where} is {what}: jax-gs draws pinhole (perspective) cameras only; {hint}"


def cameras_to_opencv(cameras):
    """nerfstudio Cameras (OpenGL camera-to-world 3x4) -> numpy viewmats [C,4,4] (world-to-camera,
    OpenCV axes), Ks [C,3,3], widths, heights."""
    c2w = cameras.camera_to_worlds.detach().cpu().numpy().reshape(-1, 3, 4).astype(np.float64)
    n = c2w.shape[0]
    full = np.tile(np.eye(4), (n, 1, 1))
    full[:, :3, :4] = c2w
    full[:, :3, 1:3] *= -1  # flip y and z: OpenGL -> OpenCV
    viewmats = np.linalg.inv(full)
    Ks = np.zeros((n, 3, 3))
    Ks[:, 0, 0] = cameras.fx.detach().cpu().numpy().reshape(-1)
    Ks[:, 1, 1] = cameras.fy.detach().cpu().numpy().reshape(-1)
    Ks[:, 0, 2] = cameras.cx.detach().cpu().numpy().reshape(-1)
    Ks[:, 1, 2] = cameras.cy.detach().cpu().numpy().reshape(-1)
    Ks[:, 2, 2] = 1.0
    widths = cameras.width.detach().cpu().numpy().reshape(-1).astype(int)
    heights = cameras.height.detach().cpu().numpy().reshape(-1).astype(int)
    return viewmats.astype(np.float32), Ks.astype(np.float32), widths, heights
