"""Camera models in the rasterizers (`camera_model="pinhole" | "ortho" | "fisheye"`, the fisheye's
k1-k4 in `distortion`): every rasterizer against the dense float64 reference with the same
projection (its Jacobian by differences of the camera's definition: `reference.camera_point`), and
the fisheye by a second road, nerfstudio's own fisheye rays: small Gaussians drawn by the fisheye
camera look like the pinhole render of the same scene sampled along the rays nerfstudio's
`Cameras` casts through each fisheye pixel."""
import jax.numpy as jnp
import numpy as np
import pytest

import reference
from jax_backend import count_intersections, rasterization
from jax_backend.rendering.projection import project_gaussians
from scenes import cameras, hard_scene

RASTERIZERS = ["flat", "standard", "pallas"]
KB4 = np.array([0.04, -0.012, 0.003, -0.0004])  # a real lens's order of magnitude (OpenCV fisheye calibrations)
W, H = 77, 53


def camera_setup(model, w=W, h=H, n=2, seed=0):
    """Cameras for `model`: the pinhole's field of view, a fisheye seeing about 80 degrees off axis
    at the image's edge, an orthographic camera framing the scene (pixels per scene unit)."""
    vms, Ks = cameras(w, h, n=n, seed=seed)
    Ks = np.array(Ks)
    if model == "fisheye":
        Ks[:, 0, 0] = Ks[:, 1, 1] = 0.5 * w / 1.4  # theta_d = 1.4 rad at the side edges
    elif model == "ortho":
        Ks[:, 0, 0] = Ks[:, 1, 1] = w / 5.0
    return vms, Ks


CASES = [("ortho", None), ("fisheye", None), ("fisheye", KB4)]


@pytest.mark.parametrize("rasterizer", RASTERIZERS)
@pytest.mark.parametrize("model,distortion", CASES, ids=["ortho", "fisheye", "fisheye-kb4"])
def test_camera_models_match_dense_reference(rasterizer, model, distortion):
    scene = hard_scene()
    vms, Ks = camera_setup(model)
    args = (scene["means"], scene["quats"], scene["scales"], scene["opacities"], scene["colors"])
    img, alpha, meta = rasterization(*args, vms, Ks, W, H, rasterizer=rasterizer, camera_model=model,
                                     distortion=distortion, backgrounds=np.full((2, 3), 0.2))
    assert not bool(np.any(meta["overflow"]))
    for c in range(2):
        ref_img, ref_alpha, margin = reference.render(*args, vms[c], Ks[c], W, H, camera_model=model,
                                                      distortion=distortion, background=np.full(3, 0.2),
                                                      return_margin=True)
        near = margin < 1e-5  # a threshold decided within float32 rounding (reference.render)
        assert near.mean() < 0.01
        np.testing.assert_allclose(np.asarray(img[c])[~near], ref_img[~near], atol=1e-4)
        np.testing.assert_allclose(np.asarray(alpha[c, ..., 0])[~near], ref_alpha[~near], atol=1e-4)
    assert np.ptp(np.asarray(alpha)) > 0.5  # the scene is in view


def test_projections_are_float64_close_near_and_far_from_the_axis():
    """Means, conics and boxes of each model against the reference, for Gaussians on the optical
    axis, within 1e-4 rad of it (the fisheye's series), and out to 85 degrees."""
    rng = np.random.default_rng(3)
    theta = np.concatenate([[0.0, 1e-6, 1e-4, 0.01, 0.049, 0.051], rng.uniform(0, 1.48, 40)])
    phi = rng.uniform(0, 2 * np.pi, theta.size)
    dist = rng.uniform(1.0, 4.0, theta.size)
    means = np.stack([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi), np.cos(theta)], -1) * dist[:, None]
    n = len(means)
    quats, scales = rng.normal(size=(n, 4)), np.exp(rng.normal(-2.5, 0.5, (n, 3)))
    vm, K = np.eye(4), np.array([[60.0, 0, 80.5], [0, 61.0, 60.2], [0, 0, 1]])
    for model, distortion in [("pinhole", None), ("ortho", None), ("fisheye", None), ("fisheye", KB4)]:
        got = project_gaussians(*(jnp.asarray(x, jnp.float32) for x in (means, quats, scales, np.full(n, 0.9), vm, K)),
                                160, 120, camera_model=model,
                                distortion=None if distortion is None else jnp.asarray(distortion, jnp.float32))
        ref = reference.project(means, quats, scales, vm, K, 160, 120, camera_model=model, distortion=distortion)
        conic_ref = np.linalg.inv(ref["cov2d"])
        np.testing.assert_allclose(np.asarray(got.means2d), ref["means2d"], rtol=0, atol=2e-4, err_msg=model)
        conic = np.asarray(got.conics)
        for j, (a, b) in enumerate(((0, 0), (0, 1), (1, 1))):
            np.testing.assert_allclose(conic[:, j], conic_ref[:, a, b], rtol=0,
                                       atol=1e-4 * np.abs(conic_ref).max(), err_msg=f"{model} conic {j}")
        assert np.all(np.isfinite(conic))


def test_gradients_on_the_fisheye_axis_are_finite():
    """A Gaussian exactly on the optical axis: the fisheye's r = 0 has no NaN in its gradient."""
    import jax

    def loss(m):
        p = project_gaussians(m, jnp.array([[1.0, 0.2, 0, 0]]), jnp.full((1, 3), 0.1), jnp.array([0.9]), jnp.eye(4),
                              jnp.array([[50.0, 0, 40], [0, 50, 30], [0, 0, 1]]), 80, 60, camera_model="fisheye",
                              distortion=jnp.asarray(KB4, jnp.float32))
        return jnp.sum(p.means2d) + jnp.sum(p.conics)

    g = jax.grad(loss)(jnp.array([[0.0, 0.0, 2.0]]))
    assert np.all(np.isfinite(np.asarray(g)))


@pytest.mark.parametrize("model,distortion", CASES, ids=["ortho", "fisheye", "fisheye-kb4"])
def test_counted_intersections_follow_the_camera_model(model, distortion):
    scene = hard_scene()
    vms, Ks = camera_setup(model)
    args = (scene["means"], scene["quats"], scene["scales"], scene["opacities"])
    counts = count_intersections(*args, vms, Ks, W, H, camera_model=model, distortion=distortion)
    _, _, meta = rasterization(*args, scene["colors"], vms, Ks, W, H, camera_model=model, distortion=distortion)
    np.testing.assert_array_equal(counts, np.asarray(meta["num_intersections"]))
    pinhole = count_intersections(*args, vms, Ks, W, H)
    assert not np.array_equal(counts, pinhole)  # the model's footprint, not the pinhole's


def test_bad_camera_model_or_distortion_names_it():
    scene = hard_scene(n=10)
    vms, Ks = camera_setup("fisheye", n=1)
    args = (scene["means"], scene["quats"], scene["scales"], scene["opacities"], scene["colors"], vms, Ks, W, H)
    with pytest.raises(ValueError, match="camera_model must be one of"):
        rasterization(*args, camera_model="equirectangular")
    with pytest.raises(ValueError, match=r"distortion must be the fisheye's"):
        rasterization(*args, camera_model="fisheye", distortion=[0.1, 0.2])


def _bilinear(img, u, v):
    """img [H, W, C] sampled at pixel coordinates (u, v) (pixel centres at +0.5); NaN outside."""
    h, w = img.shape[:2]
    x, y = u - 0.5, v - 0.5
    inside = (x >= 0) & (y >= 0) & (x <= w - 1) & (y <= h - 1)
    x0, y0 = np.clip(np.floor(x).astype(int), 0, w - 2), np.clip(np.floor(y).astype(int), 0, h - 2)
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]
    out = (img[y0, x0] * (1 - fx) * (1 - fy) + img[y0, x0 + 1] * fx * (1 - fy)
           + img[y0 + 1, x0] * (1 - fx) * fy + img[y0 + 1, x0 + 1] * fx * fy)
    return np.where(inside[..., None], out, np.nan)


def test_fisheye_render_agrees_with_the_pinhole_along_nerfstudios_fisheye_rays():
    """The second road: nerfstudio's `Cameras` (camera_type FISHEYE, the KB4 coefficients as its
    distortion_params, undistorted by `camera_utils.radial_and_tangential_undistort`) casts a ray
    through each fisheye pixel; the pinhole render of the same small Gaussians, sampled where that
    ray meets a sharper, wide pinhole image, matches the fisheye render where both see the scene
    (to what the splats' curvature across a pixel and the sampling leave). The low-pass is
    nearly off (eps2d 1e-3): it is 0.3 pixels^2 in each image's own pixels, not the same blur."""
    import torch
    from nerfstudio.cameras.cameras import Cameras, CameraType

    rng = np.random.default_rng(5)
    n = 600
    means = rng.uniform(-1, 1, (n, 3)) * np.array([4.5, 3.4, 0.5]) + np.array([0, 0, 3.0])
    quats, scales = rng.normal(size=(n, 4)), np.exp(rng.normal(-2.9, 0.2, (n, 3)))
    opac, colors = rng.uniform(0.6, 0.95, n), rng.uniform(0, 1, (n, 3))
    wf, hf, f = 96, 72, 48.0  # the fisheye: theta_d = 1 rad at the side edges
    K_fish = np.array([[f, 0, wf / 2], [0, f, hf / 2], [0, 0, 1.0]])
    wp, hp, fp = 960, 720, 160.0  # the pinhole: sharper, and wide enough for the rays inside 70 degrees
    K_pin = np.array([[fp, 0, wp / 2], [0, fp, hp / 2], [0, 0, 1.0]])
    vm = np.eye(4)[None]
    fish, fish_alpha, _ = rasterization(means, quats, scales, opac, colors, vm, K_fish[None], wf, hf, eps2d=1e-3,
                                        camera_model="fisheye", distortion=KB4)
    pin, pin_alpha, _ = rasterization(means, quats, scales, opac, colors, vm, K_pin[None], wp, hp, eps2d=1e-3)
    pin = np.concatenate([np.asarray(pin[0]), np.asarray(pin_alpha[0])], -1)

    cams = Cameras(camera_to_worlds=torch.eye(4)[None, :3], fx=f, fy=f, cx=wf / 2, cy=hf / 2, width=wf, height=hf,
                   distortion_params=torch.tensor([[*KB4, 0.0, 0.0]], dtype=torch.float32),
                   camera_type=CameraType.FISHEYE)
    d = cams.generate_rays(camera_indices=0).directions.numpy().astype(np.float64)  # [hf, wf, 3], OpenGL axes
    x, y, z = d[..., 0], -d[..., 1], -d[..., 2]  # OpenCV axes (x right, y down, z forward)
    u, v = fp * x / z + wp / 2, fp * y / z + hp / 2
    sampled = _bilinear(pin, u, v)
    both = np.isfinite(sampled[..., 0]) & (z > 0)
    got = np.concatenate([np.asarray(fish[0]), np.asarray(fish_alpha[0])], -1)[both]
    want = sampled[both]
    err = np.abs(got - want)
    assert both.mean() > 0.95 and want[:, 3].mean() > 0.1  # the fisheye sees the scene through the pinhole
    assert np.all(err.mean(0) < 0.01) and err.max() < 0.06, (err.mean(0), err.max())
    # the coefficients count, with their signs: the same fisheye without them, or a pinhole camera
    # in its place, misses these rays
    for model, distortion in (("fisheye", None), ("fisheye", -KB4), ("pinhole", None)):
        _, other, _ = rasterization(means, quats, scales, opac, colors, vm, K_fish[None], wf, hf, eps2d=1e-3,
                                    camera_model=model, distortion=distortion)
        other_err = np.abs(np.asarray(other[0, ..., 0])[both] - want[:, 3]).mean()
        assert other_err > 3 * err[:, 3].mean(), (model, distortion, other_err, err[:, 3].mean())



def test_fisheye_views_train_with_their_coefficients():
    """Training on fisheye views (a wide KB4 lens) with `TrainConfig.camera_model="fisheye"` and the
    views' coefficients in the dataset: the Gaussians that drew the views fit them in the training
    step itself (and the same images taken for pinhole views do not: the camera model and the
    coefficients reach the step), and training from random Gaussians learns the scene."""
    from jax_backend import DefaultStrategy, TrainConfig, Trainer, init_from_params, init_random, make_dataset
    from jax_backend.training import evaluation
    from jax_backend.training.gaussians import rgb_to_sh0

    rng = np.random.default_rng(3)
    n, w, h, views = 150, 64, 48, 24
    gt = dict(means=rng.normal(size=(n, 3)) * 0.6, quats=rng.normal(size=(n, 4)),
              scales=np.exp(rng.normal(-2.3, 0.3, (n, 3))), opacities=rng.uniform(0.6, 0.95, n),
              colors=rng.uniform(0, 1, (n, 3)))
    vms, Ks = cameras(w, h, n=views, radius=3.0, seed=3)
    Ks = np.array(Ks)
    Ks[:, 0, 0] = Ks[:, 1, 1] = 0.5 * w / 1.2  # about 70 degrees off axis at the side edges
    dist = np.tile(KB4, (views, 1))
    imgs, _, _ = rasterization(gt["means"], gt["quats"], gt["scales"], gt["opacities"], gt["colors"], vms, Ks, w, h,
                               camera_model="fisheye", distortion=dist)
    imgs = (np.clip(np.asarray(imgs), 0, 1) * 255 + 0.5).astype(np.uint8)
    test = np.arange(views) % 6 == 0
    data = make_dataset(list(imgs[~test]), vms[~test], Ks[~test], distortions=dist[~test])
    strategy = DefaultStrategy(refine_start=100, refine_stop=600, refine_every=100, reset_every=10**6)

    def trainer(model, gaussians, steps):
        cfg = TrainConfig(max_steps=steps, steps_per_block=50, sh_degree=0, camera_model=model, strategy=strategy)
        return Trainer(cfg, data, gaussians, scene_extent=1.5, log=lambda *a: None)

    true = dict(means=gt["means"], quats=gt["quats"], scales=np.log(gt["scales"]),
                opacities=np.log(gt["opacities"] / (1 - gt["opacities"])),
                sh0=np.asarray(rgb_to_sh0(gt["colors"]))[:, None], shN=np.zeros((n, 0, 3)))
    fit = {}
    for model in ("fisheye", "pinhole"):
        tr = trainer(model, init_from_params(true, sh_degree=0), 50)
        tr.train(callback=lambda t, m, i: fit.setdefault(model, float(np.asarray(m["psnr"])[:5].mean())))
    assert fit["fisheye"] > 38.0 and fit["fisheye"] > fit["pinhole"] + 10.0, fit  # 56.6 vs 26.1 dB

    tr = trainer("fisheye", init_random(128, -1, 1, sh_degree=0, capacity=4096), 800)
    heldout = (imgs[test], vms[test], Ks[test], dist[test])
    before = evaluation.heldout_psnr(tr, *heldout)
    tr.train()
    after = evaluation.heldout_psnr(tr, *heldout)
    assert after > before + 6.0, (before, after)  # 19.1 -> 27.3 dB
