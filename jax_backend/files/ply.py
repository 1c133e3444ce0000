"""PLY in the standard layout of the 3DGS reference code, which every splat viewer reads:
binary_little_endian float32 `x y z nx ny nz f_dc_0..2 f_rest_0.. opacity scale_0..2 rot_0..3`,
f_rest channel-major (R of bands 1.., then G, then B), opacity as logit, scale as log, rot wxyz.
Rows with non-finite values or opacity below 1/255 are left out, as `ns-export` does."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from plyfile import PlyData, PlyElementParseError, PlyHeaderParseError, PlyListProperty, PlyParseError

from ..errors import UserFacingError
from .fileio import atomic_write

LOW_OPACITY_LOGIT = math.log((1 / 255) / (1 - 1 / 255))  # -5.5373


class PlyError(UserFacingError, ValueError):
    """A file that is not a readable 3DGS PLY; the message names the file and what is wrong."""


def property_names(num_rest_coeffs: int) -> list:
    """num_rest_coeffs: SH coefficients per channel beyond the DC (0, 3, 8 or 15)."""
    return (["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
            + [f"f_rest_{i}" for i in range(3 * num_rest_coeffs)]
            + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"])


def to_rows(params: dict, alive=None) -> np.ndarray:
    """params (means, scales, quats, opacities, sh0 [N,1,3], shN [N,K-1,3]) -> [M, P] float32 rows
    of the kept Gaussians, in the PLY property order."""
    p = {k: np.asarray(v, np.float32) for k, v in params.items()}
    n = p["means"].shape[0]
    rest = p["shN"].reshape(n, -1, 3).transpose(0, 2, 1).reshape(n, -1)  # channel-major
    rows = np.concatenate([p["means"], np.zeros((n, 3), np.float32), p["sh0"].reshape(n, 3), rest,
                           p["opacities"].reshape(n, 1), p["scales"], p["quats"]], axis=1)
    keep = np.all(np.isfinite(rows), axis=1) & (rows[:, 9 + rest.shape[1]] >= LOW_OPACITY_LOGIT)
    if alive is not None:
        keep &= np.asarray(alive, bool)
    return rows[keep]


def ply_bytes(rows: np.ndarray, num_rest_coeffs: int, comment: str = "jax-gs") -> bytes:
    """The PLY file contents for [M, P] rows of `to_rows` (P = len(property_names(num_rest_coeffs)))."""
    names = property_names(num_rest_coeffs)
    if rows.ndim != 2 or rows.shape[1] != len(names):
        raise ValueError(f"expected [M, {len(names)}] rows, got {rows.shape}")
    header = ["ply", "format binary_little_endian 1.0", f"comment {comment}", f"element vertex {rows.shape[0]}"]
    header += [f"property float {name}" for name in names] + ["end_header"]
    return ("\n".join(header) + "\n").encode() + np.ascontiguousarray(rows, "<f4").tobytes()


def write_ply(path, params: dict, alive=None) -> int:
    """Write the alive Gaussians atomically. Returns the number written."""
    rows = to_rows(params, alive)
    num_rest = int(np.prod(np.shape(params["shN"])[1:])) // 3
    atomic_write(path, ply_bytes(rows, num_rest))
    return rows.shape[0]


REQUIRED = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
            "rot_0", "rot_1", "rot_2", "rot_3"]


def _vertices(path: Path):
    """The vertex element of a PLY file, read by `plyfile` (binary either endianness, or ASCII)."""
    try:
        ply = PlyData.read(str(path), mmap=False)
    except OSError as e:
        raise PlyError(f"{path}: cannot read ({e.strerror or e})") from None
    except PlyHeaderParseError as e:
        raise PlyError(f"{path}: not a PLY file ({e})") from None
    except PlyElementParseError as e:
        what = "truncated" if "end-of-file" in str(e) else "unreadable"
        raise PlyError(f"{path}: {what}: {e}") from None
    except (PlyParseError, ValueError, UnicodeDecodeError) as e:
        raise PlyError(f"{path}: not a readable PLY file ({e})") from None
    if "vertex" not in ply:
        raise PlyError(f"{path}: no vertex element")
    return ply["vertex"]


def read_ply(path) -> dict:
    """Read a 3DGS PLY (ours, nerfstudio's, the reference code's or any tool's: binary or ASCII,
    float or double properties, other elements ignored) into float32 parameter arrays."""
    path = Path(path)
    vertex = _vertices(path)
    names = [prop.name for prop in vertex.properties]
    missing = [r for r in REQUIRED if r not in names]
    if missing:
        raise PlyError(f"{path}: not a Gaussian splat PLY, missing properties {missing}")
    lists = [prop.name for prop in vertex.properties if isinstance(prop, PlyListProperty)]
    if lists:
        raise PlyError(f"{path}: vertex properties {lists} are lists, expected numbers (a Gaussian splat PLY?)")
    count = vertex.count
    col = {n: np.asarray(vertex[n], np.float32) for n in names}
    rest = sorted((n for n in names if n.startswith("f_rest_")), key=lambda n: int(n[7:]))
    if len(rest) % 3 or (len(rest) // 3 + 1) not in (1, 4, 9, 16):
        raise PlyError(f"{path}: {len(rest)} f_rest properties is not a valid SH layout")
    k = len(rest) // 3
    shN = np.stack([col[n] for n in rest], 1).reshape(count, 3, k).transpose(0, 2, 1) if k else np.zeros((count, 0, 3), np.float32)
    return {
        "means": np.stack([col["x"], col["y"], col["z"]], 1),
        "scales": np.stack([col[f"scale_{i}"] for i in range(3)], 1),
        "quats": np.stack([col[f"rot_{i}"] for i in range(4)], 1),
        "opacities": col["opacity"].copy(),
        "sh0": np.stack([col[f"f_dc_{i}"] for i in range(3)], 1)[:, None, :],
        "shN": np.ascontiguousarray(shN),
    }
