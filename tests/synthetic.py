"""A small scene rendered from known Gaussians, for training tests."""
import numpy as np

from jax_backend import rasterization
from jax_backend import make_dataset
from scenes import cameras


def known_scene(n=150, width=64, height=48, views=16, seed=0):
    rng = np.random.default_rng(seed)
    gt = dict(means=rng.normal(size=(n, 3)) * 0.5, quats=rng.normal(size=(n, 4)),
              scales=np.exp(rng.normal(-2.3, 0.3, (n, 3))), opacities=rng.uniform(0.6, 0.95, n),
              colors=rng.uniform(0, 1, (n, 3)))
    vms, Ks = cameras(width, height, n=views, radius=3.0, seed=seed)
    imgs, _, _ = rasterization(gt["means"], gt["quats"], gt["scales"], gt["opacities"], gt["colors"], vms, Ks, width, height)
    imgs = (np.clip(np.asarray(imgs), 0, 1) * 255 + 0.5).astype(np.uint8)
    test = np.arange(views) % 8 == 0  # every 8th view held out
    train = make_dataset(list(imgs[~test]), vms[~test], Ks[~test])
    return gt, train, (imgs[test], vms[test], Ks[test])


def heldout_psnr(trainer, test):
    return trainer.heldout_psnr(*test)
