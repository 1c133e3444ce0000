"""Gradients of every rasterizer against central finite differences of the float64 dense renderer."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reference
from jax_backend import traced_rasterization
from scenes import RASTERIZER_CONFIGS, cameras, walked

W, H = 26, 19


def _scene(seed=11, n=7):
    rng = np.random.default_rng(seed)
    return dict(
        means=rng.normal(size=(n, 3)) * 0.5,
        quats=rng.normal(size=(n, 4)),
        scales=np.exp(rng.normal(size=(n, 3)) * 0.4 - 1.6),
        opacities=rng.uniform(0.3, 0.95, n),
        sh=rng.normal(size=(n, 9, 3)) * 0.3 + np.array([0.6, 0, 0, 0, 0, 0, 0, 0, 0])[None, :, None],
        background=np.array([0.2, 0.5, 0.7]),
        probe=np.zeros((n, 2)),
    )


def _loss_weights(seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(2, H, W, 4)), rng.normal(size=(2, H, W))


CAMERAS = {"pinhole": None, "ortho": None, "fisheye": np.array([0.04, -0.012, 0.003, -0.0004])}  # model: distortion


def _camera_intrinsics(Ks, model):
    """The pinhole's intrinsics, or a fisheye's seeing 80 degrees at the sides, or an orthographic
    camera's (pixels per scene unit) framing the scene."""
    Ks = np.array(Ks)
    if model != "pinhole":
        Ks[:, 0, 0] = Ks[:, 1, 1] = 0.5 * W / 1.4 if model == "fisheye" else W / 3.0
    return Ks


def _ref_loss(p, vms, Ks, wimg, walpha, mode="classic", model="pinhole"):
    total = 0.0
    for c in range(len(vms)):
        img, alpha = reference.render(p["means"], p["quats"], p["scales"], p["opacities"], p["sh"], vms[c], Ks[c], W, H,
                                      sh_degree=2, background=p["background"], render_mode="RGB+D",
                                      means2d_offset=p["probe"] if c == 0 else None, rasterize_mode=mode,
                                      camera_model=model, distortion=CAMERAS[model])
        total += np.sum(img * wimg[c]) + np.sum(alpha * walpha[c])
    return total


def _fd(p, vms, Ks, wimg, walpha, mode, model):
    return reference.central_differences(lambda q: _ref_loss(q, vms, Ks, wimg, walpha, mode, model), p)


@pytest.fixture(scope="module", params=[("classic", "pinhole"), ("antialiased", "pinhole"), ("classic", "fisheye"),
                                        ("classic", "ortho")], ids=lambda c: "-".join(c))
def fd_case(request):
    mode, model = request.param
    p = _scene()
    vms, Ks = cameras(W, H, n=2, radius=3.0, seed=4)
    Ks = _camera_intrinsics(Ks, model)
    wimg, walpha = _loss_weights()
    return p, vms, Ks, wimg, walpha, mode, model, _fd(p, vms, Ks, wimg, walpha, mode, model)


@pytest.mark.parametrize("rasterizer", RASTERIZER_CONFIGS)
def test_gradients_match_finite_differences(fd_case, rasterizer):
    p, vms, Ks, wimg, walpha, mode, model, fd = fd_case

    def loss(q):
        probe = jnp.stack([q["probe"], jnp.zeros_like(q["probe"])])  # probe only on camera 0
        img, alpha, meta = traced_rasterization(q["means"], q["quats"], q["scales"], q["opacities"], q["sh"], vms, Ks, W, H,
                                         sh_degree=2, backgrounds=jnp.stack([q["background"]] * 2), render_mode="RGB+D",
                                         means2d_probe=probe, isect_capacity=4096, **walked(rasterizer, chunk=4),
                                         rasterize_mode=mode, camera_model=model, distortion=CAMERAS[model])
        return jnp.sum(img * wimg) + jnp.sum(alpha[..., 0] * walpha), meta

    q = {k: jnp.asarray(v, jnp.float32) for k, v in p.items()}
    grads, meta = jax.grad(loss, has_aux=True)(q)
    assert not bool(np.any(meta["overflow"]))
    for k in p:
        g, f = np.asarray(grads[k], np.float64), fd[k]
        err = np.linalg.norm(g - f) / np.linalg.norm(f)
        assert np.linalg.norm(f) > 0, k
        assert err < 1e-3, f"{k}: relative error {err:.2e}"
        np.testing.assert_allclose(g, f, atol=1e-3 * np.abs(f).max(), err_msg=k)


def test_absgrad_bounds_the_gradient():
    p = _scene(seed=3)
    vms, Ks = cameras(W, H, n=1, radius=3.0, seed=4)
    wimg = np.random.default_rng(0).normal(size=(1, H, W, 3))

    def loss(probe, absgrad):
        img, _, _ = traced_rasterization(p["means"], p["quats"], p["scales"], p["opacities"], p["sh"], vms, Ks, W, H, sh_degree=2,
                                  means2d_probe=probe, absgrad=absgrad, isect_capacity=4096)
        return jnp.sum(img * wimg)

    zero = jnp.zeros((1, len(p["means"]), 2))
    g = np.asarray(jax.grad(loss)(zero, False))
    a = np.asarray(jax.grad(loss)(zero, True))
    assert np.all(a >= np.abs(g) - 1e-5)
    assert np.any(a > np.abs(g) + 1e-3)  # signs cancel across pixels in the plain gradient
