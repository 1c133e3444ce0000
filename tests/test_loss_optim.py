import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.signal import convolve2d

from jax_backend.training.loss import gaussian_window, photometric_loss, psnr, ssim, ssim_map
from jax_backend.training.optim import OptimConfig, make_optimizer
from jax_backend import init_from_points


def _numpy_ssim_same(a, b):
    """float64 SSIM with zero padding, one channel at a time (the 3DGS reference's conv2d)."""
    w = gaussian_window().astype(np.float64)
    win = np.outer(w, w)
    out = []
    for c in range(a.shape[-1]):
        x, y = a[..., c], b[..., c]
        blur = lambda z: convolve2d(z, win, mode="same")
        mx, my = blur(x), blur(y)
        sxx, syy, sxy = blur(x * x) - mx**2, blur(y * y) - my**2, blur(x * y) - mx * my
        out.append(((2 * mx * my + 1e-4) * (2 * sxy + 9e-4)) / ((mx**2 + my**2 + 1e-4) * (sxx + syy + 9e-4)))
    return np.stack(out, -1)


def test_ssim_matches_numpy_reference_and_pytorch_msssim():
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, (37, 45, 3))
    b = np.clip(a + rng.normal(0, 0.1, a.shape), 0, 1)
    np.testing.assert_allclose(np.asarray(ssim_map(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))),
                               _numpy_ssim_same(a, b), atol=2e-5)
    import torch
    from pytorch_msssim import ssim as torch_ssim

    ta, tb = (torch.tensor(x, dtype=torch.float64).permute(2, 0, 1)[None] for x in (a, b))
    ref = float(torch_ssim(ta, tb, data_range=1.0, win_size=11, win_sigma=1.5))
    ours = float(ssim(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32), padding="valid"))
    assert abs(ours - ref) < 1e-5


def test_loss_and_psnr_respect_masks():
    rng = np.random.default_rng(1)
    target = jnp.asarray(rng.uniform(0, 1, (20, 24, 3)), jnp.float32)
    render = target.at[:, 12:].set(0.0)  # wrong only on the right half
    mask = jnp.zeros((20, 24), bool).at[:, :12].set(True)
    assert float(psnr(render, target, mask)) > 90
    assert float(psnr(render, target)) < 20
    loss_masked = float(photometric_loss(render, target, mask))
    assert loss_masked < float(photometric_loss(render, target))
    # identical images: zero loss
    assert abs(float(photometric_loss(target, target))) < 1e-6


def test_optimizer_groups_use_3dgs_learning_rates():
    g = init_from_points(np.random.default_rng(0).normal(size=(10, 3)), sh_degree=3, capacity=16)
    extent, steps = 3.0, 1000
    cfg = OptimConfig()
    tx = make_optimizer(cfg, extent, steps)
    state = tx.init(g.params)
    ones = jax.tree_util.tree_map(jnp.ones_like, g.params)
    updates, state = tx.update(ones, state, g.params)
    # Adam's first step moves every coordinate by exactly its learning rate
    expect = {"means": cfg.means.lr * extent, "scales": 5e-3, "quats": 1e-3, "opacities": 5e-2, "sh0": 2.5e-3,
              "shN": 2.5e-3 / 20}
    for name, lr in expect.items():
        np.testing.assert_allclose(np.asarray(updates[name]), -lr, rtol=1e-5, err_msg=name)
    # the means' rate decays exponentially to the final value over the run
    for _ in range(steps - 1):
        updates, state = tx.update(ones, state, g.params)
    np.testing.assert_allclose(np.asarray(updates["means"]), -cfg.means.lr_final * extent, rtol=2e-2)


def test_zero_moments_only_touches_chosen_slots_and_groups():
    from jax_backend.training.strategy.ops import zero_moments

    g = init_from_points(np.random.default_rng(0).normal(size=(6, 3)), sh_degree=1, capacity=8)
    tx = make_optimizer(OptimConfig(), 1.0, 100)
    state = tx.init(g.params)
    _, state = tx.update(jax.tree_util.tree_map(jnp.ones_like, g.params), state, g.params)
    mask = jnp.zeros(8, bool).at[2].set(True)
    out = zero_moments(tx, state, mask, names=("opacities",))
    # with a zero gradient Adam moves exactly the slots whose first moment is not zero
    updates, _ = tx.update(jax.tree_util.tree_map(jnp.zeros_like, g.params), out, g.params)
    assert float(updates["opacities"][2]) == 0.0 and float(updates["opacities"][3]) != 0.0
    assert float(jnp.abs(updates["means"][2]).sum()) != 0.0  # other groups untouched


def test_scale_regularization_is_splatfactos_term_and_bounds_the_ratio():
    """The value is splatfacto's (0.1 * mean(max(ratio, r) - r)); descending it alone brings every
    Gaussian's largest-to-smallest scale ratio down to the bound; training with it keeps far fewer
    needles than without (the same scene, steps and start)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jax_backend import scale_regularization

    rng = np.random.default_rng(0)
    log_s = rng.normal(size=(50, 3)) * 2.0
    alive = np.ones(50, bool)
    alive[-5:] = False
    ratio = np.exp(log_s.max(1) - log_s.min(1))
    expected = 0.1 * np.mean(np.maximum(ratio[:-5], 10.0) - 10.0)
    np.testing.assert_allclose(float(scale_regularization(jnp.asarray(log_s), alive, 10.0)), expected, rtol=1e-5)
    x = jnp.asarray(log_s, jnp.float32)
    grad = jax.jit(jax.grad(lambda x: scale_regularization(x, alive, 10.0)))
    for _ in range(3000):
        x = x - 0.05 * grad(x) / (jnp.abs(grad(x)).max() + 1e-12)
    final = np.exp(np.asarray(x).max(1) - np.asarray(x).min(1))
    assert final[:-5].max() < 10.5 and np.allclose(final[-5:], ratio[-5:], rtol=1e-5)  # dead slots untouched


def test_training_with_scale_regularization_keeps_fewer_needles():
    from dataclasses import replace

    import numpy as np

    from jax_backend import DefaultStrategy, OptimConfig, TrainConfig, Trainer, init_random
    from jax_backend.training.optim import GroupConfig
    from synthetic import known_scene

    _, train, _ = known_scene()
    g = init_random(128, -1, 1, sh_degree=0, capacity=512)
    # needles from the start: one axis 30 times the others
    g = g._replace(params=dict(g.params, scales=g.params["scales"].at[:, 0].add(np.log(30.0))))
    counts = {}
    # the penalty acts every 10th step: a faster scale rate lets 400 steps show what a long run does
    optim = replace(OptimConfig(), scales=GroupConfig(0.02))
    for ratio in (0.0, 10.0):
        cfg = TrainConfig(max_steps=400, steps_per_block=100, sh_degree=0, max_gauss_ratio=ratio, optim=optim,
                          strategy=DefaultStrategy(refine_start=10**6))
        tr = Trainer(cfg, train, g, scene_extent=1.5, log=lambda *_: None)
        tr.train()
        s = np.asarray(tr.state.gaussians.params["scales"])[np.asarray(tr.state.gaussians.alive)]
        counts[ratio] = int(np.sum(np.exp(s.max(1) - s.min(1)) > 10.0))
    assert counts[0.0] > 50 and counts[10.0] < counts[0.0] / 3, counts


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_ssim_as_built_for_tpu_matches_the_convolutions(request, padding):
    """On TPU SSIM blurs by sums of shifted slices with a hand-written adjoint (fewer kernels to
    compile); built that way on this CPU, its value and gradient are the convolutions'."""
    rng = np.random.default_rng(0)
    a, b = (jnp.asarray(rng.uniform(size=(40, 50, 3)), jnp.float32) for _ in range(2))
    f = lambda x: jnp.sum(ssim_map(x, b, padding=padding) ** 2)
    v_cpu, g_cpu = jax.value_and_grad(f)(a)
    request.getfixturevalue("built_for_tpu")
    v_tpu, g_tpu = jax.value_and_grad(f)(a)
    np.testing.assert_allclose(float(v_tpu), float(v_cpu), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g_tpu), np.asarray(g_cpu), rtol=1e-4, atol=1e-5)


def test_a_zero_ssim_weight_leaves_the_blurs_out():
    """--pipeline.model.ssim-lambda 0: the loss is the L1 term, and the program holds no blur."""
    rng = np.random.default_rng(1)
    a, b = (jnp.asarray(rng.uniform(size=(24, 30, 3)), jnp.float32) for _ in range(2))
    np.testing.assert_allclose(float(photometric_loss(a, b, None, 0.0)), float(jnp.mean(jnp.abs(a - b))), rtol=1e-6)
    grad = jax.jit(jax.grad(lambda x, lam: photometric_loss(x, b, None, lam)), static_argnums=1)
    assert "convolution" not in grad.lower(a, 0.0).as_text()
    assert "convolution" in grad.lower(a, 0.2).as_text()
