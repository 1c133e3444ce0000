"""PLY in the standard layout of the 3DGS reference code, which every splat viewer reads:
binary_little_endian float32 `x y z nx ny nz f_dc_0..2 f_rest_0.. opacity scale_0..2 rot_0..3`,
f_rest channel-major (R of bands 1.., then G, then B), opacity as logit, scale as log, rot wxyz.
Rows with non-finite values or opacity below 1/255 are left out, as `ns-export` does."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

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


def read_ply(path) -> dict:
    """Read a 3DGS PLY (ours, nerfstudio's or the reference code's) into parameter arrays."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PlyError(f"{path}: cannot read ({e.strerror})") from None
    end = data.find(b"end_header\n")
    if not data.startswith(b"ply\n") or end < 0:
        raise PlyError(f"{path}: not a PLY file (no 'ply' magic or no end_header)")
    lines = data[:end].decode("ascii", "replace").splitlines()
    if "format binary_little_endian 1.0" not in lines:
        raise PlyError(f"{path}: only binary_little_endian PLY is supported")
    count, names, in_vertex = None, [], False
    for line in lines:
        parts = line.split()
        if parts[:1] == ["element"]:
            in_vertex = parts[1] == "vertex"
            if in_vertex:
                count = int(parts[2])
            elif count is not None:
                raise PlyError(f"{path}: unexpected element '{parts[1]}' after the vertices")
        elif parts[:1] == ["property"] and in_vertex:
            if parts[1] != "float":
                raise PlyError(f"{path}: property {parts[-1]} is '{parts[1]}', expected float (a Gaussian splat PLY?)")
            names.append(parts[2])
    if count is None:
        raise PlyError(f"{path}: no vertex element")
    required = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
                "rot_0", "rot_1", "rot_2", "rot_3"]
    missing = [r for r in required if r not in names]
    if missing:
        raise PlyError(f"{path}: not a Gaussian splat PLY, missing properties {missing}")
    body = data[end + len(b"end_header\n"):]
    need = count * 4 * len(names)
    if len(body) < need:
        raise PlyError(f"{path}: truncated: {len(body)} bytes of vertex data, {need} expected for {count} vertices")
    rows = np.frombuffer(body[:need], "<f4").reshape(count, len(names))
    col = {n: rows[:, i] for i, n in enumerate(names)}
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
