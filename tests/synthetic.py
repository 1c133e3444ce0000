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
