"""Checks on the user's scene, each failing with one `InputError` naming the file, frame or value.

- `check_scene` looks at the scene before nerfstudio's dataparser does: the folder, the JSON files
  the nerfstudio-data and blender-data parsers read (each frame's pose and intrinsics: finite,
  a non-singular rotation, positive focal lengths and sizes, which nerfstudio does not check and
  then trains into NaN), the images they list, COLMAP's model folder. It never rejects what
  nerfstudio loads; what nerfstudio itself rejects, with an assertion or a bare exception, is
  translated where it surfaces (`errors.user_errors`).
- `check_views` looks at the dataparser's output before any compute: every camera finite with a
  positive size and focal length, and every image (and mask) the run will read, training and
  evaluation alike, opening as an image of its camera's size. Cheaply: the image header, and the
  end-of-image marker of JPEG and PNG files (a truncated file lacks it); only a file without
  the marker is decoded in full, so a valid file with trailing bytes is still accepted.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from .cameras import camera_model_problem, training_camera_model
from .errors import InputError

_IMAGE_DIRS = ("images_2", "images_4", "images_8")


def _read_json(path: Path, role: str):
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read {role} {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise InputError(f"{role} {path} is not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{role} {path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None


def _check_listed_images(paths, listing: Path):
    """`paths`: for each frame, the candidate files (any one existing is enough)."""
    if not paths:
        raise InputError(f"{listing} lists no frames")
    missing = [cands[0] for cands in paths if not any(c.exists() for c in cands)]
    if len(missing) == len(paths):
        raise InputError(f"the scene has no images: none of the {len(paths)} images listed in {listing} exist "
                         f"(first: {missing[0]})")
    if missing:
        raise InputError(f"missing image {missing[0]} (listed in {listing}; {len(missing)} of {len(paths)} missing)")


def _frames(meta, path: Path):
    frames = meta.get("frames") if isinstance(meta, dict) else None
    if not isinstance(frames, list) or not all(isinstance(f, dict) and "file_path" in f for f in frames):
        raise InputError(f"{path} has no list of frames with file_path entries")
    return frames


_POSITIVE = ("fl_x", "fl_y", "w", "h")  # focal lengths and image size
_FINITE = ("cx", "cy")


def _number_problem(value, positive: bool):
    try:
        v = float(value)
    except (TypeError, ValueError):
        return f"is {value!r}, not a number"
    if not math.isfinite(v):
        return f"is {value!r}, not a finite number"
    if positive and v <= 0:
        return f"is {value!r}, it must be positive"
    return None


def _pose_problem(matrix):
    """What is wrong with a frame's camera-to-world transform_matrix (None: nothing)."""
    import numpy as np

    try:
        m = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        return "is not a matrix of numbers"
    if m.shape not in ((4, 4), (3, 4)):
        return f"has shape {list(m.shape)}, not 4x4"
    if not np.all(np.isfinite(m)):
        return "has non-finite entries (NaN or inf)"
    s = np.linalg.svd(m[:3, :3], compute_uv=False)
    if s[-1] <= 1e-6 * max(s[0], 1e-30):
        return "has a singular rotation (its 3x3 block has rank < 3)"
    return None


def _check_cameras_in_json(meta: dict, frames: list, path: Path) -> None:
    """Poses and intrinsics, at the top level and per frame, where present (a missing one is
    nerfstudio's to report)."""
    for key in _POSITIVE + _FINITE:
        if key in meta:
            problem = _number_problem(meta[key], key in _POSITIVE)
            if problem:
                raise InputError(f"{path}: {key} {problem}")
    for f in frames:
        where = f"{path}: frame {f['file_path']}"
        for key in _POSITIVE + _FINITE:
            if key in f:
                problem = _number_problem(f[key], key in _POSITIVE)
                if problem:
                    raise InputError(f"{where}: {key} {problem}")
        if "transform_matrix" in f:
            problem = _pose_problem(f["transform_matrix"])
            if problem:
                raise InputError(f"{where}: transform_matrix {problem}")


def _check_poses_spread(dataparser, frames, path) -> None:
    """With auto-scale-poses, nerfstudio divides by the largest camera distance from their centre:
    where every camera sits at one point (a scene of one image) that is zero, or the rounding left
    by centring (seen here: ~3e-8, a scale of 3e7 and a silently broken scene), depending on the
    machine. One line instead, whichever it would be."""
    import numpy as np

    if not getattr(dataparser, "auto_scale_poses", False):
        return
    t = np.array([np.asarray(f["transform_matrix"], np.float64)[:3, 3] for f in frames if "transform_matrix" in f])
    if len(t) and np.max(np.abs(t - t.mean(0))) <= 1e-6 * max(1.0, float(np.max(np.abs(t)))):
        raise InputError(f"{path}: all {len(t)} camera position(s) coincide (a scene of one image?), so nerfstudio "
                         f"cannot scale the poses; add images, or pass --auto-scale-poses False after the "
                         f"dataparser's name")


def check_scene(dataparser, data=None) -> None:
    """Raise InputError if the scene a dataparser config points at is clearly unusable."""
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
    from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    data = Path(data or getattr(dataparser, "data", None) or "")
    if not str(data) or not data.exists():
        raise InputError(f"scene {data} does not exist")
    if isinstance(dataparser, NerfstudioDataParserConfig):
        path = data if data.suffix == ".json" else data / "transforms.json"
        root = path.parent
        if not path.is_file():
            raise InputError(f"no transforms.json in scene folder {data} (for a COLMAP scene, add `colmap` "
                             f"after the ns-train options)")
        meta = _read_json(path, "transforms file")
        frames = _frames(meta, path)
        cands = []
        for f in frames:
            p = Path(f["file_path"])
            cands.append([root / p] + [root / d / p.name for d in _IMAGE_DIRS])  # nerfstudio's downscaled copies
        _check_listed_images(cands, path)
        _check_cameras_in_json(meta, frames, path)
        _check_poses_spread(dataparser, frames, path)
    elif isinstance(dataparser, BlenderDataParserConfig):
        path = data / "transforms_train.json"
        if not path.is_file():
            raise InputError(f"no transforms_train.json in blender scene folder {data}")
        for split in ("train", "val", "test"):
            p = data / f"transforms_{split}.json"
            if p.is_file():
                meta = _read_json(p, "transforms file")
                frames = _frames(meta, p)
                _check_listed_images([[data / (f["file_path"].replace("./", "") + ".png")] for f in frames], p)
                _check_cameras_in_json(meta, frames, p)
    elif isinstance(dataparser, ColmapDataParserConfig):
        model = data / dataparser.colmap_path
        if not model.is_dir():
            raise InputError(f"no COLMAP model folder {model} (expected cameras, images and points3D .bin/.txt)")
        for part in ("cameras", "images"):
            if not any((model / f"{part}{ext}").is_file() for ext in (".bin", ".txt")):
                raise InputError(f"COLMAP model {model} has no {part}.bin or {part}.txt")


# ---------------------------------------------------------------- after the dataparser
def _complete(path: Path, fmt: str) -> bool:
    """Whether the file ends as a whole JPEG or PNG does (other formats: assume so)."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - 64))
        tail = f.read()
    if fmt == "JPEG":
        return tail.rstrip(b"\x00").endswith(b"\xff\xd9")
    if fmt == "PNG":
        return b"IEND" in tail[-12:]
    return True


def read_image_header(path, role="image"):
    """(problem, size): what is wrong with the image file at `path` (None: it opens as an image
    nerfstudio reads) and its (width, height) from the one open (None when it does not open)."""
    from PIL import Image

    path = Path(path)
    if not path.exists():
        return f"{role} {path} does not exist", None
    if path.is_dir():
        return f"{role} {path} is a folder, not an image file", None
    if path.stat().st_size == 0:
        return f"{role} {path} is empty (0 bytes)", None
    try:
        with Image.open(path) as im:
            fmt, mode, size = im.format, im.mode, im.size
            if not _complete(path, fmt):
                im.load()  # decode in full: raises when truncated
    except (OSError, SyntaxError, ValueError) as e:  # PIL: UnidentifiedImageError (an OSError), truncation
        reason = str(e).replace(str(path), "").strip(" :'\"") or type(e).__name__
        return f"{role} {path} cannot be read as an image ({reason})", None
    if mode in ("LA", "La", "PA"):
        return f"{role} {path} has two channels ({mode}); nerfstudio reads grey, RGB or RGBA images", size
    return None, size


def _loaded_size(dataset, w: int, h: int):
    """The size nerfstudio's InputDataset resizes an image of size (w, h) to (its scale_factor)."""
    s = getattr(dataset, "scale_factor", 1.0)
    return (w, h) if s == 1.0 else (int(w * s), int(h * s))


def check_views(dataset, split: str, fisheye: str = "native") -> None:
    """Raise InputError naming the first image of `dataset` (a nerfstudio InputDataset) whose
    camera or file is unusable; `split`: "training" or "evaluation", for the message (the training
    views must draw with one camera model: `fisheye` is --pipeline.model.fisheye)."""
    import numpy as np

    cams = dataset.cameras
    names = list(dataset.image_filenames)
    c2w = cams.camera_to_worlds.numpy().reshape(len(names), -1)
    intr = np.stack([cams.fx.numpy().ravel(), cams.fy.numpy().ravel(), cams.cx.numpy().ravel(),
                     cams.cy.numpy().ravel()], axis=1)
    # the files are checked against the sizes the dataparser gave (as the dataset scales them): the
    # datamanager's undistortion later changes the dataset's cameras to the undistorted size
    parsed = getattr(getattr(dataset, "_dataparser_outputs", None), "cameras", None)
    parsed = cams if parsed is None else parsed
    wh = np.stack([parsed.width.numpy().ravel(), parsed.height.numpy().ravel()], axis=1)
    masks = getattr(dataset._dataparser_outputs, "mask_filenames", None)
    for i, name in enumerate(names):
        where = f"{split} image {name}"
        problem = camera_model_problem(cams, i, f"the camera of {where}")
        if problem:
            raise InputError(problem)
        if not np.all(np.isfinite(c2w[i])):
            raise InputError(f"{where}: its camera pose is not finite after nerfstudio's dataparser (NaN or inf)")
        if not np.all(np.isfinite(intr[i])) or intr[i, 0] <= 0 or intr[i, 1] <= 0:
            raise InputError(f"{where}: its camera has focal lengths {intr[i, 0]:g}, {intr[i, 1]:g} and principal "
                             f"point {intr[i, 2]:g}, {intr[i, 3]:g}: focal lengths must be positive and finite")
        if min(cams.width[i].item(), cams.height[i].item()) <= 0:
            raise InputError(f"{where}: its camera is {cams.width[i].item()}x{cams.height[i].item()} pixels")
    if split == "training":
        training_camera_model(cams, fisheye, lambda j: f"the camera of {split} image {names[j]}")
    for i, name in enumerate(names):
        problem, raw = read_image_header(name, role=f"{split} image")
        if problem is None:
            got, want = _loaded_size(dataset, *raw), _loaded_size(dataset, int(wh[i, 0]), int(wh[i, 1]))
            if got != want:
                read = "" if got == raw else f" (read at {got[0]}x{got[1]})"
                problem = (f"{split} image {name} is {raw[0]}x{raw[1]} pixels{read} but its camera is "
                           f"{want[0]}x{want[1]} (a resized image, or a stale w/h in the camera file?)")
        if problem is None and masks:
            problem, size = read_image_header(masks[i], role=f"mask of {split} image {Path(name).name},")
            if problem is None and size != raw:
                problem = (f"mask {masks[i]} is {size[0]}x{size[1]} pixels but its image {name} is "
                           f"{raw[0]}x{raw[1]}")
        if problem:
            raise InputError(problem)


# -- the images in host memory
HOST_HEADROOM = 2 * 2**30  # bytes beside the images a run needs at least (its programs' working memory grows with the photo)


def images_bytes(dataset) -> int:
    """Bytes of a dataset's images (and masks) as uint8 RGB in host memory, where nerfstudio's cache
    and then jax-gs's training table hold them, once (from the cameras' sizes: no file is read)."""
    import numpy as np

    cams = dataset.cameras
    pixels = int(np.sum(cams.width.numpy().astype(np.int64) * cams.height.numpy().astype(np.int64)))
    masks = getattr(dataset._dataparser_outputs, "mask_filenames", None)
    return pixels * (3 + (1 if masks else 0))


def available_memory():
    """Bytes of memory this process can still take: the system's available memory (Linux
    /proc/meminfo), or less where a cgroup (a container) limits the process; None when unknown."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            found += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except OSError:
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def check_host_memory(train, evaluation=None, share: float = 1.0, available=None, log=print) -> None:
    """Stop before any image is read when the capture's images (`share` of the training views: this
    host's) would not fit in the host's memory (`available`: default `available_memory()`), naming
    the capture's size, the memory and the settings that help; say so when they leave less than
    HOST_HEADROOM beside them."""
    available = available_memory() if available is None else available
    if available is None:
        return
    views = len(train) + (len(evaluation) if evaluation is not None else 0)
    need = int(images_bytes(train) * share) + (images_bytes(evaluation) if evaluation is not None and len(evaluation) else 0)
    cams = train.cameras
    size = f"{int(cams.width.max())}x{int(cams.height.max())}"
    gib = 2**30
    what = (f"the capture's {views} images (up to {size} pixels) take {need / gib:.2f} GiB of host memory as uint8 "
            f"and the host has {available / gib:.2f} GiB available")
    helps = f"the dataparser's --downscale-factor 2 takes about {need / 4 / gib:.2f} GiB, or use fewer images"
    if need > available:
        raise InputError(f"{what}: {helps}")
    if need + HOST_HEADROOM > available:
        log(f"[jax-gs] {what}: less than {HOST_HEADROOM / gib:.0f} GiB is left for training, which may run out of "
            f"memory ({helps})")
