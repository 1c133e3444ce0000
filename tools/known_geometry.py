"""A capture whose geometry is known, rendered by an independent renderer: Mitsuba 3 (its CPU
`scalar_rgb` variant, `pip install mitsuba`) path-traces textured objects with flat, curved and thin
parts (a floor, a box, a sphere, a cylinder with its caps, a thin standing plate) from views around
them, and the capture is written as nerfstudio-data (`transforms.json`, PNGs, a sparse point cloud
sampled from the surfaces as structure from motion would give one). For the held-out views (every
`EVAL_INTERVAL`-th, nerfstudio-data's `--eval-mode interval`) Mitsuba's AOVs give the true camera
depth and world normals at each pixel; the meshes themselves are written for the Chamfer distance.

Generated on demand (`write_capture`): nothing but this code is committed. Units: the world's
(the objects span about 2.4 units; z up); `load_truth` reads a capture's truth back, and
`dataparser_frame` maps world points into the frame nerfstudio trains in.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

EVAL_INTERVAL = 8
NEAR_CLIP = 1e-3  # Mitsuba starts each camera ray on this plane: its distances count from there
TEXTURE = 256  # texels a side


@dataclass(frozen=True)
class Mesh:
    vertices: np.ndarray  # [n, 3] float64, world
    faces: np.ndarray  # [m, 3] int32
    uv: np.ndarray | None = None  # [n, 2] in [0, 1] (None: a mesh only measured, not textured)


def _rotate_z(v, degrees):
    a = np.radians(degrees)
    R = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1.0]])
    return v @ R.T


def _quad_grid(corner, du, dv, n):
    """A flat grid of (n + 1)^2 vertices spanning corner + [0, 1] du + [0, 1] dv, faces facing du x dv."""
    s, t = np.meshgrid(np.linspace(0, 1, n + 1), np.linspace(0, 1, n + 1), indexing="ij")
    v = corner + s.reshape(-1, 1) * du + t.reshape(-1, 1) * dv
    i = np.arange(n)[:, None] * (n + 1) + np.arange(n)[None, :]
    i = i.reshape(-1)
    faces = np.concatenate([np.stack([i, i + n + 1, i + n + 2], 1), np.stack([i, i + n + 2, i + 1], 1)])
    return v, faces, np.stack([s.reshape(-1), t.reshape(-1)], 1)


def _merge(parts):
    vs, fs, uvs, off = [], [], [], 0
    for v, f, uv in parts:
        vs.append(v)
        fs.append(f + off)
        uvs.append(uv)
        off += len(v)
    return np.concatenate(vs), np.concatenate(fs).astype(np.int32), np.concatenate(uvs)


def _box(size, n=4):
    """An axis-aligned box centred on the origin, six faces of its own vertices (sharp edges), outward."""
    hx, hy, hz = np.asarray(size) / 2
    e = np.eye(3)
    parts = []
    for axis in range(3):
        for sign in (-1.0, 1.0):
            u, w = e[(axis + 1) % 3], e[(axis + 2) % 3]
            h = np.array([hx, hy, hz])
            du, dv = u * 2 * h, w * 2 * h
            normal = e[axis] * sign
            corner = normal * h - du / 2 - dv / 2
            if sign < 0:  # keep the faces outward: swap the spanning vectors
                du, dv = dv, du
                corner = normal * h - du / 2 - dv / 2
            parts.append(_quad_grid(corner, du, dv, n))
    return _merge(parts)


def _sphere(radius, rings=48, segments=96):
    theta = np.linspace(0, np.pi, rings + 1)
    phi = np.linspace(0, 2 * np.pi, segments + 1)
    T, P = np.meshgrid(theta, phi, indexing="ij")
    v = radius * np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)], -1).reshape(-1, 3)
    uv = np.stack([P.reshape(-1) / (2 * np.pi), T.reshape(-1) / np.pi], 1)
    i = (np.arange(rings)[:, None] * (segments + 1) + np.arange(segments)[None, :]).reshape(-1)
    faces = np.concatenate([np.stack([i, i + segments + 1, i + segments + 2], 1),
                            np.stack([i, i + segments + 2, i + 1], 1)])
    return v, faces, uv


def _cylinder(radius, height, segments=96):
    phi = np.linspace(0, 2 * np.pi, segments + 1)
    z = np.array([0.0, height])
    P, Z = np.meshgrid(phi, z, indexing="ij")
    side = np.stack([radius * np.cos(P), radius * np.sin(P), Z], -1).reshape(-1, 3)
    uv = np.stack([P.reshape(-1) / (2 * np.pi), Z.reshape(-1) / height], 1)
    i = np.arange(segments) * 2
    faces = np.concatenate([np.stack([i, i + 2, i + 3], 1), np.stack([i, i + 3, i + 1], 1)])
    parts = [(side, faces, uv)]
    for h, flip in ((0.0, True), (height, False)):  # the caps: fans, outward
        ring = np.stack([radius * np.cos(phi[:-1]), radius * np.sin(phi[:-1]), np.full(segments, h)], 1)
        v = np.concatenate([[[0, 0, h]], ring])
        k = np.arange(segments)
        f = np.stack([np.zeros(segments, int), 1 + k, 1 + (k + 1) % segments], 1)
        parts.append((v, f[:, ::-1] if flip else f, 0.5 + 0.5 * v[:, :2] / radius))
    return _merge(parts)


def scene_meshes() -> dict:
    """{name: Mesh}: the floor (flat), a box (flat faces, sharp edges), a sphere (curved), a cylinder
    (curved side, flat caps) and a plate 2 cm thick (thin), placed on the floor around the origin."""
    out = {}
    v, f, uv = _quad_grid(np.array([-1.2, -1.2, 0.0]), np.array([2.4, 0, 0]), np.array([0, 2.4, 0]), 8)
    out["floor"] = (v, f, uv)
    v, f, uv = _box((0.5, 0.4, 0.32))
    out["box"] = (_rotate_z(v, 25) + [-0.45, 0.35, 0.16], f, uv)
    v, f, uv = _sphere(0.32)
    out["sphere"] = (v + [0.45, 0.35, 0.32], f, uv)
    v, f, uv = _cylinder(0.14, 0.7)
    out["cylinder"] = (v + [-0.35, -0.45, 0.0], f, uv)
    v, f, uv = _box((0.6, 0.02, 0.45))
    out["plate"] = (_rotate_z(v, -35) + [0.42, -0.42, 0.225], f, uv)
    return {k: Mesh(np.asarray(v, np.float64), np.asarray(f, np.int32), np.asarray(uv, np.float64))
            for k, (v, f, uv) in out.items()}


def texture(name: str) -> np.ndarray:
    """[TEXTURE, TEXTURE, 3] float32 linear reflectance: a smooth colour field with detail at
    several scales (what multi-view matching needs), different for every object."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    s, t = np.meshgrid(np.linspace(0, 1, TEXTURE, endpoint=False), np.linspace(0, 1, TEXTURE, endpoint=False),
                       indexing="ij")
    img = np.zeros((TEXTURE, TEXTURE, 3))
    for freq in (2, 5, 11, 23):
        for c in range(3):
            a, b, ph = rng.normal(size=3)
            img[..., c] += np.sin(2 * np.pi * freq * (a * s + b * t) + 6 * ph) / freq**0.7
    checker = ((np.floor(s * 8) + np.floor(t * 8)) % 2)[..., None]
    img = 0.5 + 0.22 * img / np.abs(img).max() + 0.12 * (checker - 0.5)
    base = rng.uniform(0.25, 0.75, 3)
    return np.clip(img * base / 0.5, 0.03, 0.95).astype(np.float32)


def _texel(name, uv):
    tex = texture(name)
    i = np.clip((uv * TEXTURE).astype(int), 0, TEXTURE - 1)
    return tex[i[:, 0], i[:, 1]]


def camera_poses(views: int, radius: float = 3.2, seed: int = 0) -> np.ndarray:
    """[views, 4, 4] camera-to-world, OpenGL axes (nerfstudio's): on a ring of heights around the
    objects (elevation 12-55 degrees, a spiral), each looking at a point just above the origin."""
    rng = np.random.default_rng(seed)
    k = np.arange(views)
    azimuth = k * 2.399963 + rng.uniform(-0.05, 0.05, views)  # golden angle
    elevation = np.radians(12 + 43 * ((k * 0.618034) % 1.0))
    r = radius * rng.uniform(0.9, 1.1, views)
    origin = np.stack([r * np.cos(elevation) * np.cos(azimuth), r * np.cos(elevation) * np.sin(azimuth),
                       r * np.sin(elevation)], 1)
    target = np.array([0.0, 0.0, 0.25])
    back = origin - target
    back /= np.linalg.norm(back, axis=1, keepdims=True)
    right = np.cross([0.0, 0.0, 1.0], back)
    right /= np.linalg.norm(right, axis=1, keepdims=True)
    up = np.cross(back, right)
    c2w = np.tile(np.eye(4), (views, 1, 1))
    c2w[:, :3, 0], c2w[:, :3, 1], c2w[:, :3, 2], c2w[:, :3, 3] = right, up, back, origin
    return c2w


def _mitsuba():
    import mitsuba as mi

    mi.set_variant("scalar_rgb")
    return mi


def _scene(mi, meshes):
    shapes = {}
    for name, m in meshes.items():
        mesh = mi.Mesh(name, len(m.vertices), len(m.faces), has_vertex_normals=False, has_vertex_texcoords=True)
        params = mi.traverse(mesh)
        params["vertex_positions"] = m.vertices.astype(np.float32).reshape(-1)
        params["faces"] = m.faces.astype(np.uint32).reshape(-1)
        params["vertex_texcoords"] = m.uv.astype(np.float32).reshape(-1)
        params.update()
        mesh.set_bsdf(mi.load_dict({"type": "twosided", "bsdf": {
            "type": "diffuse", "reflectance": {"type": "bitmap", "bitmap": mi.Bitmap(texture(name)),
                                               "raw": True, "filter_type": "bilinear"}}}))
        shapes[name] = mesh
    return shapes


def _sensor(mi, c2w, width, height, fov_x, spp, rfilter="gaussian"):
    mitsuba_axes = c2w @ np.diag([-1.0, 1, -1, 1])  # Mitsuba's camera looks down +z with +x to the left
    return mi.load_dict({"type": "perspective", "fov": fov_x, "fov_axis": "x", "near_clip": NEAR_CLIP,
                         "to_world": mi.ScalarTransform4f(mitsuba_axes.tolist()),
                         "film": {"type": "hdrfilm", "width": width, "height": height, "pixel_format": "rgb",
                                  "rfilter": {"type": rfilter}},
                         "sampler": {"type": "independent", "sample_count": spp}})


def write_capture(dst: Path, views: int = 96, width: int = 256, height: int = 192, fov_x: float = 50.0,
                  spp: int = 64, points: int = 6000, seed: int = 0, log=print) -> Path:
    """Render the capture into `dst` (nerfstudio-data), with `truth.npz` (every held-out view's
    camera depth, world normals and the pixels they hold at) and `meshes.npz`. Returns `dst`."""
    mi = _mitsuba()
    dst = Path(dst)
    (dst / "images").mkdir(parents=True, exist_ok=True)
    meshes = scene_meshes()
    shapes = _scene(mi, meshes)
    light = {"type": "directional", "direction": [-0.4, 0.3, -1.0], "irradiance": {"type": "rgb", "value": 2.2}}
    env = {"type": "constant", "radiance": {"type": "rgb", "value": 0.35}}
    scene = mi.load_dict({"type": "scene", "integrator": {"type": "path", "max_depth": 3, "hide_emitters": True},
                          "sun": light, "sky": env, **shapes})
    aov = mi.load_dict({"type": "scene", "integrator": {"type": "aov", "aovs": "dd:depth,nn:sh_normal"}, **shapes})
    c2ws = camera_poses(views, seed=seed)
    fx = width / 2 / np.tan(np.radians(fov_x) / 2)
    from PIL import Image

    frames, depths, normals, valid, held = [], [], [], [], []
    for i, c2w in enumerate(c2ws):
        rgb = np.asarray(mi.render(scene, sensor=_sensor(mi, c2w, width, height, fov_x, spp), seed=seed + i))
        srgb = np.asarray(mi.util.convert_to_bitmap(mi.TensorXf(rgb[..., :3])))
        name = f"images/frame_{i:05d}.png"
        Image.fromarray(srgb).save(dst / name)
        frames.append({"file_path": name, "transform_matrix": c2w.tolist()})
        if i % EVAL_INTERVAL == 0:
            d, n, ok = _truth(mi, aov, c2w, width, height, fov_x, fx)
            for kept, value in zip((depths, normals, valid, held), (d, n, ok, i)):
                kept.append(value)
        log(f"rendered view {i + 1}/{views}")
    cloud = _point_cloud(meshes, points, seed)
    _write_ply(dst / "sparse_pc.ply", *cloud)
    meta = {"camera_model": "OPENCV", "w": width, "h": height, "fl_x": fx, "fl_y": fx, "cx": width / 2,
            "cy": height / 2, "k1": 0.0, "k2": 0.0, "p1": 0.0, "p2": 0.0, "ply_file_path": "sparse_pc.ply",
            "frames": frames}
    (dst / "transforms.json").write_text(json.dumps(meta, indent=1))
    np.savez_compressed(dst / "truth.npz", views=np.array(held), c2w=c2ws[held], fx=fx, depth=np.stack(depths),
                        normals=np.stack(normals), valid=np.stack(valid))
    np.savez_compressed(dst / "meshes.npz", **{f"{k}_vertices": m.vertices for k, m in meshes.items()},
                        **{f"{k}_faces": m.faces for k, m in meshes.items()})
    return dst


def _truth(mi, aov, c2w, width, height, fov_x, fx, spp=64):
    """(camera depth [H, W], world normals [H, W, 3], valid [H, W]) of one view from Mitsuba's AOVs
    (distance along the ray and shading normal, averaged over the pixel with a box filter: on a plane
    the mean of a linear field is its value at the centre, to within the samples' noise). Valid:
    pixels whose 3x3 neighbourhood sees one surface (every sample hit, depth within 2%, normals
    within 10 degrees: the faceted sphere's and cylinder's steps are 3.75): the rendered maps are
    compared there, not across silhouettes and creases."""
    out = np.asarray(mi.render(aov, sensor=_sensor(mi, c2w, width, height, fov_x, spp, "box"), spp=spp))
    dist, n = out[..., 0].astype(np.float64), out[..., 1:4].astype(np.float64)
    ys, xs = np.mgrid[0:height, 0:width] + 0.5
    ray = np.stack([(xs - width / 2) / fx, (ys - height / 2) / fx, np.ones_like(xs)], -1)
    depth = np.where(dist > 0, dist / np.linalg.norm(ray, axis=-1) + NEAR_CLIP, 0.0)  # along the ray -> camera z
    norm = np.linalg.norm(n, axis=-1, keepdims=True)
    unit = n / np.maximum(norm, 1e-12)
    ok = (dist > 0) & (norm[..., 0] > 0.995)
    pad_d, pad_n, pad_ok = np.pad(depth, 1, mode="edge"), np.pad(unit, ((1, 1), (1, 1), (0, 0)), mode="edge"), \
        np.pad(ok, 1, constant_values=False)
    for dy in range(3):
        for dx in range(3):
            d2 = pad_d[dy:dy + height, dx:dx + width]
            ok &= pad_ok[dy:dy + height, dx:dx + width] & (np.abs(d2 - depth) < 0.02 * depth)
            ok &= np.sum(pad_n[dy:dy + height, dx:dx + width] * unit, -1) > np.cos(np.radians(10))
    return depth.astype(np.float32), unit.astype(np.float32), ok


def surface_samples(meshes: dict, n: int, seed: int = 0):
    """(points [n, 3], the object each lies on [n]) spread uniformly by area over every mesh."""
    rng = np.random.default_rng(seed)
    tris = np.concatenate([m.vertices[m.faces] for m in meshes.values()])
    owner = np.concatenate([np.full(len(m.faces), i) for i, m in enumerate(meshes.values())])
    area = np.linalg.norm(np.cross(tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0]), axis=1) / 2
    pick = rng.choice(len(tris), n, p=area / area.sum())
    a, b = rng.random((2, n))
    flip = a + b > 1
    a[flip], b[flip] = 1 - a[flip], 1 - b[flip]
    t = tris[pick]
    return t[:, 0] + a[:, None] * (t[:, 1] - t[:, 0]) + b[:, None] * (t[:, 2] - t[:, 0]), owner[pick]


def _point_cloud(meshes, n, seed):
    """A structure-from-motion-like start: surface points jittered by 5 mm, coloured by their
    texture (the floor's far corners left out, as SfM would see few)."""
    rng = np.random.default_rng(seed + 1)
    pts, owner = surface_samples(meshes, n, seed + 1)
    names = list(meshes)
    colours = np.zeros((n, 3))
    for i, name in enumerate(names):  # the texel under each point, by the nearest vertex's uv
        m, sel = meshes[name], owner == i
        if sel.any():
            colours[sel] = _texel(name, m.uv[_nearest(m.vertices, pts[sel])])
    srgb = np.clip(colours, 0, 1) ** (1 / 2.2)
    return pts + rng.normal(0, 0.005, pts.shape), (srgb * 255).astype(np.uint8)


def _nearest(vertices, points):
    from scipy.spatial import cKDTree

    return cKDTree(vertices).query(points)[1]


def _write_ply(path, points, colours):
    from plyfile import PlyData, PlyElement

    v = np.zeros(len(points), [("x", "f4"), ("y", "f4"), ("z", "f4"), ("red", "u1"), ("green", "u1"), ("blue", "u1")])
    v["x"], v["y"], v["z"] = points.T
    v["red"], v["green"], v["blue"] = colours.T
    PlyData([PlyElement.describe(v, "vertex")]).write(str(path))


def load_meshes(capture: Path) -> dict:
    z = np.load(Path(capture) / "meshes.npz")
    names = sorted({k.rsplit("_", 1)[0] for k in z.files})
    return {k: Mesh(z[f"{k}_vertices"], z[f"{k}_faces"]) for k in names}


def load_truth(capture: Path) -> dict:
    return dict(np.load(Path(capture) / "truth.npz"))


def dataparser_frame(run_dir: Path):
    """(R [3, 3], t [3], scale) of nerfstudio's dataparser_transforms.json: a world point p is
    scale * (R p + t) in the frame the run trains in."""
    d = json.loads((Path(run_dir) / "dataparser_transforms.json").read_text())
    T = np.asarray(d["transform"], np.float64)
    return T[:, :3], T[:, 3], float(d["scale"])


def _distance_to(vertices, faces, points):
    """Each point's exact distance to the triangle mesh (Open3D's raycasting scene, which nerfstudio
    installs)."""
    import open3d as o3d

    scene = o3d.t.geometry.RaycastingScene()
    scene.add_triangles(o3d.core.Tensor(np.asarray(vertices, np.float32)), o3d.core.Tensor(np.asarray(faces, np.uint32)))
    return scene.compute_distance(o3d.core.Tensor(np.asarray(points, np.float32))).numpy().astype(np.float64)


def mesh_distances(vertices: np.ndarray, faces: np.ndarray, meshes: dict, samples: int = 100_000,
                   threshold: float = 0.02, seed: int = 0) -> dict:
    """A reconstructed mesh (world `vertices`, `faces`) against the true meshes: accuracy (the
    mean distance of `samples` points spread over it by area to the true surface), completeness
    (the same from the true surface to it), Chamfer (the mean of the two), and the F-score at
    `threshold` (world units; precision and recall: the shares of either side's points within it)."""
    recon = {"recon": Mesh(np.asarray(vertices, np.float64), np.asarray(faces, np.int32))}
    ours, _ = surface_samples(recon, samples, seed)
    truth, _ = surface_samples(meshes, samples, seed + 1)
    all_v = np.concatenate([m.vertices for m in meshes.values()])
    offsets = np.cumsum([0] + [len(m.vertices) for m in meshes.values()])[:-1]
    all_f = np.concatenate([m.faces + o for m, o in zip(meshes.values(), offsets)])
    acc, comp = _distance_to(all_v, all_f, ours), _distance_to(vertices, faces, truth)
    precision, recall = float(np.mean(acc < threshold)), float(np.mean(comp < threshold))
    return dict(accuracy=float(acc.mean()), completeness=float(comp.mean()),
                chamfer=float((acc.mean() + comp.mean()) / 2), precision=precision, recall=recall,
                fscore=0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall))
