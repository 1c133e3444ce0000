"""Camera pose optimisation (`jax_backend.training.cameras`): the corrections are nerfstudio's
(its own exp maps and apply_to_camera rule as the reference), and on a scene rendered from known
poses but trained from perturbed ones, the optimiser moves the poses toward the truth and the
held-out views (their true poses) come out sharper than without it."""

import jax.numpy as jnp
import numpy as np
import pytest

from jax_backend import DefaultStrategy, TrainConfig, Trainer, init_from_points, make_dataset

from jax_backend.training import evaluation
from jax_backend.training.cameras import CameraOptConfig, corrected_viewmats
from jax_backend.training.optim import GroupConfig, lr_schedule
from scenes import cameras
from synthetic import known_views


def _c2w(viewmat):
    return np.linalg.inv(np.asarray(viewmat, np.float64))


@pytest.mark.parametrize("mode", ["SO3xR3", "SE3"])
def test_corrections_are_nerfstudios(mode):
    import torch
    from nerfstudio.cameras.lie_groups import exp_map_SE3, exp_map_SO3xR3

    rng = np.random.default_rng(0)
    vms, _ = cameras(32, 24, n=5, radius=3.0, seed=1)
    deltas = rng.normal(size=(5, 6)) * 0.2
    ours = np.asarray(corrected_viewmats(jnp.asarray(vms), jnp.asarray(deltas, jnp.float32), mode))
    adj = (exp_map_SO3xR3 if mode == "SO3xR3" else exp_map_SE3)(torch.tensor(deltas, dtype=torch.float64)).numpy()
    for v in range(5):
        c2w = _c2w(vms[v])
        expected = np.eye(4)  # apply_to_camera: rotate the axes in world coordinates, shift the centre
        expected[:3, :3] = adj[v, :3, :3] @ c2w[:3, :3]
        expected[:3, 3] = c2w[:3, 3] + adj[v, :3, 3]
        np.testing.assert_allclose(_c2w(ours[v]), expected, atol=2e-5)
    same = np.asarray(corrected_viewmats(jnp.asarray(vms), jnp.zeros((5, 6)), mode))
    np.testing.assert_allclose(same, vms, atol=1e-6)


def test_learning_rate_follows_nerfstudios_schedule():
    """splatfacto's camera_opt group (1e-4, warm-up 1000 steps from 0, cosine ramp, to 5e-7 at 30k),
    against nerfstudio's own scheduler (the one schedule of every optimizer group)."""
    import torch
    from nerfstudio.engine.schedulers import ExponentialDecaySchedulerConfig

    steps = [0, 250, 500, 999, 1000, 15500, 29999, 30000]
    for ramp in ("cosine", "linear"):
        opt = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=1e-4)
        sched = ExponentialDecaySchedulerConfig(lr_final=5e-7, max_steps=30000, warmup_steps=1000, lr_pre_warmup=0,
                                                ramp=ramp).setup().get_scheduler(opt, 1e-4)
        theirs = [sched.lr_lambdas[0](s) * 1e-4 for s in steps]
        lr = lr_schedule(GroupConfig(1e-4, 5e-7, warmup_steps=1000, ramp=ramp), 1.0, 30000)
        np.testing.assert_allclose([float(lr(s)) for s in steps], theirs, rtol=1e-5, atol=1e-12)


def _rotation(axis, angle):
    axis = axis / np.linalg.norm(axis)
    K = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def _pose_error(vms_a, vms_b):
    """Mean rotation angle (degrees) and centre distance between two sets of poses."""
    angles, dists = [], []
    for a, b in zip(vms_a, vms_b):
        ca, cb = _c2w(a), _c2w(b)
        cos = (np.trace(ca[:3, :3].T @ cb[:3, :3]) - 1) / 2
        angles.append(np.degrees(np.arccos(np.clip(cos, -1, 1))))
        dists.append(np.linalg.norm(ca[:3, 3] - cb[:3, 3]))
    return float(np.mean(angles)), float(np.mean(dists))


def test_perturbed_poses_move_toward_the_truth():
    rng = np.random.default_rng(0)
    n, views = 300, 24
    gt, imgs, vms, Ks = known_views(n, 80, 60, views, spread=0.6, log_scale=-2.6, opacity=(0.7, 0.95), camera_seed=2,
                                    rng=rng)
    imgs = (imgs * 255 + 0.5).astype(np.uint8)
    test = np.arange(views) % 6 == 0
    # training poses off by ~1.5 degrees and ~4 cm (the scene is ~1.2 units across, 3 away)
    noisy = []
    for vm in vms[~test]:
        c2w = _c2w(vm)
        c2w[:3, :3] = _rotation(rng.normal(size=3), np.radians(1.5)) @ c2w[:3, :3]
        c2w[:3, 3] += rng.normal(size=3) * 0.04 / np.sqrt(3)
        noisy.append(np.linalg.inv(c2w).astype(np.float32))
    noisy = np.stack(noisy)
    data = make_dataset(list(imgs[~test]), noisy, Ks[~test])
    start = init_from_points(gt["means"] + rng.normal(size=(n, 3)) * 0.01, gt["colors"], sh_degree=0)
    results = {}
    for mode in ("off", "SO3xR3"):
        cam = CameraOptConfig(mode=mode, optimizer=GroupConfig(1e-3, 1e-4))
        cfg = TrainConfig(max_steps=600, steps_per_block=100, sh_degree=0, camera_opt=cam,
                          strategy=DefaultStrategy(refine_start=10**6))
        tr = Trainer(cfg, data, start, scene_extent=1.5, log=lambda *_: None)
        tr.train()
        results[mode] = (evaluation.heldout_psnr(tr, imgs[test], vms[test], Ks[test]),
                         _pose_error(np.asarray(tr.training_viewmats()), vms[~test]))
    before = _pose_error(noisy, vms[~test])
    psnr_off, _ = results["off"]
    psnr_on, (angle, dist) = results["SO3xR3"]
    # measured: 1.50 -> 0.57 degrees, 3.9 -> 2.9 cm (position is the weaker constraint: a small
    # turn about the scene looks like a shift), held-out 18.7 -> 19.9 dB
    assert angle < 0.5 * before[0] and dist < 0.85 * before[1], (before, results)
    assert psnr_on > psnr_off + 0.5, results
