"""nerfstudio's cameras as jax-gs draws them: the conversion to OpenCV world-to-camera matrices and
intrinsics, which camera model each draws with (a fisheye natively, or as nerfstudio's undistorted
pinhole: `--pipeline.model.fisheye`), and which camera kinds the rasterizers cannot draw (with the
one line saying why)."""
from __future__ import annotations

import numpy as np


def _kind(cameras, index: int):
    from nerfstudio.cameras.cameras import CameraType

    return CameraType(int(cameras.camera_type.reshape(-1)[index]))


def _coefficients(cameras, index: int) -> np.ndarray:
    """Camera `index`'s nerfstudio distortion parameters (zeros when it has none)."""
    dist = cameras.distortion_params
    if dist is None:
        return np.zeros(6, np.float32)
    return dist.reshape(-1, dist.shape[-1])[index].detach().cpu().numpy().astype(np.float32)


def drawn_natively(cameras, index: int, fisheye: str) -> bool:
    """Whether camera `index` is a fisheye that jax-gs draws as one (the rasterizers'
    `camera_model="fisheye"`, its k1-k4), rather than as nerfstudio's undistorted pinhole.

    `fisheye`: the `--pipeline.model.fisheye` setting. A FISHEYE camera (OpenCV's / COLMAP's
    OPENCV_FISHEYE, Kannala-Brandt k1-k4) draws natively under "native"; under "undistorted" only
    when its coefficients are all zero (nerfstudio does not undistort those: an equidistant
    fisheye). A FISHEYE624 (Aria's) camera draws natively only with all-zero coefficients (the
    equidistant fisheye again): its other coefficients have no form in the rasterizers, so its
    images are undistorted either way."""
    from nerfstudio.cameras.cameras import CameraType

    kind = _kind(cameras, index)
    if kind not in (CameraType.FISHEYE, CameraType.FISHEYE624):
        return False
    zero = not np.any(_coefficients(cameras, index))
    return zero or (kind == CameraType.FISHEYE and fisheye == "native")


def keeps_its_image(cameras, index: int, fisheye: str) -> bool:
    """Whether nerfstudio's datamanager must cache camera `index`'s image as it is instead of
    undistorting it: a natively drawn fisheye that has coefficients."""
    return bool(np.any(_coefficients(cameras, index))) and drawn_natively(cameras, index, fisheye)


def camera_model(cameras, index: int, fisheye: str):
    """(camera_model, distortion) camera `index` draws with in jax-gs's rasterizers: ("fisheye",
    its k1-k4 [4]) for a natively drawn fisheye (`drawn_natively`), else ("pinhole", zeros [4])
    (a perspective camera, or a fisheye whose image nerfstudio undistorted, with its intrinsics
    after undistortion)."""
    if drawn_natively(cameras, index, fisheye):
        return "fisheye", _coefficients(cameras, index)[:4]
    return "pinhole", np.zeros(4, np.float32)


def camera_model_problem(cameras, index: int, where: str, rendering: bool = False) -> str | None:
    """Why camera `index` of nerfstudio `cameras` cannot be drawn by jax-gs's rasterizers (None:
    it can). `where` names the camera in the message; `rendering`: a camera to render (an
    ns-render camera path), not one of the capture's.

    PERSPECTIVE cameras draw as they are, FISHEYE and FISHEYE624 ones natively or after
    nerfstudio's FullImageDatamanager has undistorted their images (`drawn_natively`).
    Equirectangular, omnidirectional, VR180 and orthophoto cameras have no form in the
    rasterizers."""
    from nerfstudio.cameras.cameras import CameraType

    kind = _kind(cameras, index)
    if kind in (CameraType.PERSPECTIVE, CameraType.FISHEYE, CameraType.FISHEYE624):
        return None
    if rendering:
        hint = 'render perspective or fisheye cameras (in an ns-render camera path: "camera_type": "perspective")'
    else:
        hint = ("convert the images to perspective ones first (e.g. ns-process-data images --camera-type "
                "equirectangular cuts each panorama into perspective views)")
    article = "an" if kind.name[0] in "AEIOU" else "a"
    return f"{where} is {article} {kind.name} camera: jax-gs draws perspective and fisheye cameras only; {hint}"


def training_camera_model(cameras, fisheye: str, where) -> str:
    """The one camera model ("pinhole" or "fisheye") the training views draw with, or InputError
    naming the first view that differs from the first (a run trains one camera model); `where(i)`
    names view i in the message."""
    from .errors import InputError

    first = camera_model(cameras, 0, fisheye)[0]
    for i in range(1, len(cameras)):
        model = camera_model(cameras, i, fisheye)[0]
        if model != first:
            hint = ("--pipeline.model.fisheye native draws every FISHEYE camera as one" if fisheye == "undistorted"
                    else "--pipeline.model.fisheye undistorted trains the fisheyes nerfstudio undistorts as pinholes")
            raise InputError(f"{where(i)} draws as a {model} camera and {where(0)} as a {first} one: jax-gs trains "
                             f"one camera model per run ({hint})")
    return first


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
