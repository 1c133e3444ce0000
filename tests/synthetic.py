"""A small scene rendered from known Gaussians, for training tests."""
import numpy as np

from jax_backend import make_dataset, rasterization
from jax_backend.training import evaluation
from scenes import cameras


def known_views(n=150, width=64, height=48, views=16, seed=0, spread=0.5, log_scale=-2.3, opacity=(0.6, 0.95),
                colors=(0.0, 1.0), camera_seed=None, rng=None):
    """Random Gaussians (`gt`) and their float renders [views, H, W, 3] in [0, 1] from cameras on a
    sphere of radius 3: (gt, images, viewmats, Ks)."""
    rng = rng if rng is not None else np.random.default_rng(seed)
    gt = dict(means=rng.normal(size=(n, 3)) * spread, quats=rng.normal(size=(n, 4)),
              scales=np.exp(rng.normal(log_scale, 0.3, (n, 3))), opacities=rng.uniform(*opacity, n),
              colors=rng.uniform(*colors, (n, 3)))
    vms, Ks = cameras(width, height, n=views, radius=3.0, seed=seed if camera_seed is None else camera_seed)
    imgs, _, _ = rasterization(gt["means"], gt["quats"], gt["scales"], gt["opacities"], gt["colors"], vms, Ks, width, height)
    return gt, np.clip(np.asarray(imgs), 0, 1), vms, Ks


def known_scene(n=150, width=64, height=48, views=16, seed=0):
    gt, imgs, vms, Ks = known_views(n, width, height, views, seed)
    imgs = (imgs * 255 + 0.5).astype(np.uint8)
    test = np.arange(views) % 8 == 0  # every 8th view held out
    train = make_dataset(list(imgs[~test]), vms[~test], Ks[~test])
    return gt, train, (imgs[test], vms[test], Ks[test])


def heldout_psnr(trainer, test):
    return evaluation.heldout_psnr(trainer, *test)


def sphere_surfels(n=1500, radius=0.8, seed=0):
    """A sphere of `radius` around the origin tiled by `n` opaque disks tangent to it (each about a
    tenth of the radius wide), coloured by a smooth pattern: {means, quats, scales [n, 2],
    opacities, colors}."""
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    axis = np.cross([0.0, 0.0, 1.0], d)  # the rotation taking z (a disk's normal) to d
    s = np.linalg.norm(axis, axis=1)
    half = np.arctan2(s, d[:, 2]) / 2
    quats = np.concatenate([np.cos(half)[:, None], axis / np.maximum(s, 1e-12)[:, None] * np.sin(half)[:, None]], 1)
    colors = 0.5 + 0.45 * np.stack([np.sin(5 * d[:, 0]), np.cos(4 * d[:, 1]), np.sin(3 * d[:, 2] + 1)], 1)
    return dict(means=radius * d, quats=quats, scales=np.full((n, 2), 0.09 * radius), opacities=np.full(n, 0.95),
                colors=colors)


def sphere_geometry(viewmat, K, width, height, radius=0.8):
    """The sphere's true camera depth [H, W], world normals [H, W, 3] and coverage [H, W] bool at
    each pixel centre (a ray-sphere intersection in float64)."""
    ys, xs = np.mgrid[0:height, 0:width] + 0.5
    rays = np.stack([(xs - K[0, 2]) / K[0, 0], (ys - K[1, 2]) / K[1, 1], np.ones_like(xs)], -1)  # z = 1
    R, t = np.asarray(viewmat)[:3, :3], np.asarray(viewmat)[:3, 3]
    origin, dirs = -R.T @ t, rays @ R  # world: R^T ray
    b = dirs @ origin
    a = np.sum(dirs * dirs, -1)
    disc = b * b - a * (origin @ origin - radius**2)
    hit = disc > 0
    depth = np.where(hit, (-b - np.sqrt(np.maximum(disc, 0))) / a, 0.0)  # the ray's z runs 1 per unit of t
    normals = np.where(hit[..., None], (origin + depth[..., None] * dirs) / radius, 0.0)
    return depth, normals, hit


def sphere_scene(width=64, height=48, views=16, seed=0):
    """`sphere_surfels` rendered (2DGS) from cameras on a sphere of radius 3 around it: (train
    dataset, held-out (uint8 images, viewmats, Ks)), every 8th view held out."""
    from jax_backend import rasterization_2dgs

    s = sphere_surfels(seed=seed)
    vms, Ks = cameras(width, height, n=views, radius=3.0, seed=seed)
    imgs = rasterization_2dgs(s["means"], s["quats"], s["scales"], s["opacities"], s["colors"], vms, Ks, width,
                              height)[0]
    imgs = (np.clip(np.asarray(imgs), 0, 1) * 255 + 0.5).astype(np.uint8)
    test = np.arange(views) % 8 == 0
    return make_dataset(list(imgs[~test]), vms[~test], Ks[~test]), (imgs[test], vms[test], Ks[test])


def blender_sphere_cameras(views, radius=3.0, seed=0):
    """World-to-camera matrices (OpenCV axes) of `views` cameras around the origin at `radius`, z up
    as in Blender: heights between -1 and 2, every one looking at the origin."""
    from scenes import look_at

    rng = np.random.default_rng(seed)
    out = []
    for i in range(views):
        a = 2 * np.pi * i / views + rng.uniform(-0.1, 0.1)
        h = rng.uniform(-1.0, 2.0)
        pos = np.array([np.cos(a), np.sin(a), 0.0]) * np.sqrt(radius**2 - h * h) + np.array([0.0, 0.0, h])
        out.append(look_at(pos, np.zeros(3), up=(0.0, 0.0, -1.0)))
    return np.stack(out)


def write_blender_sphere(dst, width=64, height=64, views=(14, 2, 2), angle_x=0.69, seed=0):
    """`sphere_surfels` as a blender-data capture (transforms_{train,val,test}.json, RGBA PNGs with
    straight alpha, OpenGL camera axes), rendered with `rasterization_2dgs`. Returns {split:
    (viewmats [V, 4, 4] OpenCV world-to-camera, K [3, 3])}: the sphere's world frame is the
    capture's (blender-data keeps it: scale 1, no recentring)."""
    import json
    from pathlib import Path

    from PIL import Image

    from jax_backend import rasterization_2dgs

    dst = Path(dst)
    s = sphere_surfels(seed=seed)
    focal = 0.5 * width / np.tan(0.5 * angle_x)
    K = np.array([[focal, 0, width / 2], [0, focal, height / 2], [0, 0, 1.0]])
    vms = blender_sphere_cameras(sum(views), seed=seed)
    out, k = {}, 0
    for split, count in zip(("train", "val", "test"), views):
        (dst / split).mkdir(parents=True, exist_ok=True)
        split_vms = vms[k:k + count]
        k += count
        rgb, alpha = rasterization_2dgs(s["means"], s["quats"], s["scales"], s["opacities"], s["colors"], split_vms,
                                        np.repeat(K[None], count, 0), width, height)[:2]
        rgb, alpha = np.asarray(rgb), np.asarray(alpha)
        frames = []
        for i in range(count):
            rgba = np.concatenate([np.clip(rgb[i] / np.maximum(alpha[i], 1e-6), 0, 1), alpha[i]], -1)  # straight
            Image.fromarray((rgba * 255 + 0.5).astype(np.uint8), "RGBA").save(dst / split / f"r_{i}.png")
            c2w = np.linalg.inv(split_vms[i])
            c2w[:3, 1:3] *= -1  # OpenCV -> OpenGL (Blender) camera axes
            frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": c2w.tolist()})
        (dst / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": angle_x, "frames": frames}))
        out[split] = (split_vms, K)
    return out


def mesh_to_sphere(vertices, radius=0.8, samples=20000, seed=0):
    """(accuracy, completeness) of a mesh against the sphere: the mean distance of its vertices to
    the sphere, and the mean distance of `samples` points spread over the sphere to the nearest
    vertex; their mean is the Chamfer distance."""
    from scipy.spatial import cKDTree

    v = np.asarray(vertices, np.float64)
    accuracy = float(np.mean(np.abs(np.linalg.norm(v, axis=1) - radius)))
    d = np.random.default_rng(seed).normal(size=(samples, 3))
    points = radius * d / np.linalg.norm(d, axis=1, keepdims=True)
    completeness = float(np.mean(cKDTree(v).query(points)[0]))
    return accuracy, completeness


def sphere_errors(depth, normals, viewmat, K, radius=0.8, skip_edge=False):
    """A render's errors against the sphere's closed form (`sphere_geometry`) at the pixels the
    sphere covers: (|depth - true depth| [M], angle in degrees between the normals (normalised
    here) and the true ones [M']); `skip_edge`: the angles leave out the image's outermost pixels
    (where `depth_to_normals` has none). depth [H, W], normals [H, W, 3] world space."""
    h, w = depth.shape
    true_depth, true_normals, hit = sphere_geometry(viewmat, K, w, h, radius)
    n = normals / np.maximum(np.linalg.norm(normals, axis=-1, keepdims=True), 1e-9)
    angles = np.degrees(np.arccos(np.clip(np.sum(n * true_normals, -1), -1, 1)))
    where = hit.copy()
    if skip_edge:
        where[[0, -1], :] = where[:, [0, -1]] = False
    return np.abs(depth - true_depth)[hit], angles[where]
