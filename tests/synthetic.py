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
