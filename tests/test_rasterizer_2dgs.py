"""2D Gaussian Splatting's `rasterization_2dgs` on every rasterizer against the float64 reference
(`reference_2dgs`: each pixel's ray intersected with each disk, no tiles), its gradients against
central finite differences of that reference, and `depth_to_normals` against a plane's closed form."""
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reference
import reference_2dgs
from jax_backend import count_intersections_2dgs, depth_to_normals, rasterization_2dgs
from jax_backend import traced_rasterization_2dgs
from scenes import RASTERIZER_CONFIGS, cameras, walked

W, H = 45, 37


def surfel_scene(n=60, seed=3, sh=False):
    """Random disks with the awkward cases mixed in: large disks reaching past the cameras' planes
    (unbounded screen images), disks seen nearly edge-on, disks behind the cameras or far off
    screen, tiny and faint ones."""
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(n, 3)) * 0.8
    quats = rng.normal(size=(n, 4))
    scales = np.exp(rng.normal(size=(n, 2)) * 0.6 - 1.6)
    opacities = rng.uniform(0.05, 0.97, n)
    scales[:3] = [[2.5, 1.8], [3.0, 0.2], [4.0, 4.0]]  # as wide as the scene: some reach behind a camera
    means[3:5] = [[0.0, 0.0, -6.0], [9.0, 9.0, 0.0]]  # behind camera 0; off screen
    scales[5:8] = 0.01  # tiny: the low pass draws them
    opacities[8] = 0.003  # below 1/255: never drawn
    dc = np.array([0.5, 0, 0, 0])[None, :, None]
    colors = rng.normal(size=(n, 4, 3)) * 0.3 + dc if sh else rng.uniform(0, 1, (n, 3))
    return dict(means=means, quats=quats, scales=scales, opacities=opacities, colors=colors)


def _reference(scene, vm, K, **kw):
    return reference_2dgs.render(scene["means"], scene["quats"], scene["scales"], scene["opacities"], scene["colors"],
                                 vm, K, W, H, **kw)


def _close(actual, expected, what, tol=1e-4):
    """Within tol absolutely, or relatively for large values (depths far off reach 50)."""
    err = np.abs(np.asarray(actual, np.float64) - expected) / np.maximum(1.0, np.abs(expected))
    assert err.max() < tol, f"{what}: worst {err.max():.2e} at {np.unravel_index(err.argmax(), err.shape)}"


def _check_against_reference(out, scene, vms, Ks, backgrounds, render_mode, sh_degree=None):
    colors, alphas, normals, surf, distort, median, meta = out
    assert not np.any(np.asarray(meta["overflow"]))
    for c in range(len(vms)):
        ref = _reference(scene, vms[c], Ks[c], background=backgrounds[c] if "RGB" in render_mode else None,
                         render_mode=render_mode, sh_degree=sh_degree)
        assert (ref["alpha"] > 0.05).mean() > 0.3, "the scene covers the image"
        _close(colors[c], ref["image"], f"camera {c} colours/depth")
        _close(alphas[c, ..., 0], ref["alpha"], f"camera {c} alpha")
        _close(normals[c], ref["normals"] @ vms[c][:3, :3], f"camera {c} normals (world space)")
        _close(distort[c, ..., 0], ref["distortion"], f"camera {c} distortion")
        _close(median[c, ..., 0], ref["median"], f"camera {c} median depth")


@pytest.mark.parametrize("rasterizer", RASTERIZER_CONFIGS)
def test_surfels_match_the_float64_reference(rasterizer):
    scene = surfel_scene()
    vms, Ks = cameras(W, H, n=2, radius=3.5, seed=1)
    bg = np.array([[0.1, 0.2, 0.3], [0.9, 0.5, 0.0]])
    out = rasterization_2dgs(**scene, viewmats=vms, Ks=Ks, width=W, height=H, backgrounds=bg, render_mode="RGB+D",
                             **walked(rasterizer))
    _check_against_reference(out, scene, vms, Ks, bg, "RGB+D")


@pytest.mark.parametrize("mode", ["RGB+ED", "D", "ED"])
def test_depth_modes_and_sh_colours_match_the_reference(mode):
    scene = surfel_scene(seed=5, sh=True)
    vms, Ks = cameras(W, H, n=2, radius=3.0, seed=2)
    bg = np.zeros((2, 3))
    out = rasterization_2dgs(**scene, viewmats=vms, Ks=Ks, width=W, height=H, sh_degree=1, render_mode=mode,
                             rasterizer="flat", tile_size=8)
    _check_against_reference(out, scene, vms, Ks, bg, mode, sh_degree=1)


def test_boxes_hold_every_drawn_pixel_and_disks_across_the_camera_plane_cover_the_image():
    """The projection's box holds every pixel the reference draws (a render that lost one would
    differ above), and a disk reaching behind the camera's plane (an unbounded image) is binned to
    every tile; the counted intersections are the ones the render used."""
    scene = surfel_scene()
    vms, Ks = cameras(W, H, n=2, radius=3.5, seed=1)
    big = {k: v[2:3] for k, v in scene.items()}  # 4 x 4 scene units around a point 0.8 from the centre
    _, _, _, _, _, _, meta = rasterization_2dgs(**big, viewmats=vms, Ks=Ks, width=W, height=H, tile_size=8)
    tiles = -(-W // 8) * -(-H // 8)
    assert list(np.asarray(meta["tiles_per_gauss"])[:, 0]) == [tiles, tiles]
    counts = count_intersections_2dgs(scene["means"], scene["quats"], scene["scales"], scene["opacities"], vms, Ks, W, H)
    out = rasterization_2dgs(**scene, viewmats=vms, Ks=Ks, width=W, height=H)
    assert list(counts) == [int(x) for x in np.asarray(out[-1]["num_intersections"])]


def test_depth_to_normals_of_a_tilted_plane_is_its_normal():
    """A plane n . X = d seen by a pinhole: depth z = d / (n . (x', y', 1)); its surface normal,
    turned towards the camera, is n everywhere but the border."""
    K = np.array([[40.0, 0, 20.3], [0, 42.0, 15.8], [0, 0, 1]])
    n = np.array([0.3, -0.4, -1.0])
    n /= np.linalg.norm(n)
    ys, xs = np.mgrid[0:32, 0:40] + 0.5
    depth = -2.0 / (n[0] * (xs - K[0, 2]) / K[0, 0] + n[1] * (ys - K[1, 2]) / K[1, 1] + n[2])
    out = np.asarray(depth_to_normals(jnp.asarray(depth, jnp.float32), jnp.asarray(K, jnp.float32)))
    np.testing.assert_allclose(out[1:-1, 1:-1], np.broadcast_to(n, (30, 38, 3)), atol=2e-4)
    assert np.all(out[0] == 0) and np.all(out[:, -1] == 0)


# -- gradients against central finite differences of the float64 reference
GW, GH = 24, 19


def _grad_scene(seed=7, n=6):
    rng = np.random.default_rng(seed)
    return dict(
        means=rng.normal(size=(n, 3)) * 0.4,
        quats=rng.normal(size=(n, 4)),
        scales=np.exp(rng.normal(size=(n, 2)) * 0.3 - 0.9),
        opacities=rng.uniform(0.3, 0.9, n),
        colors=rng.uniform(0, 1, (n, 3)),
        background=np.array([0.2, 0.5, 0.7]),
        probe=np.zeros((n, 2)),
    )


def _weights(seed=2):
    rng = np.random.default_rng(seed)
    return {k: rng.normal(size=(2, GH, GW) + shape) for k, shape in
            (("image", (4,)), ("alpha", ()), ("normals", (3,)), ("distortion", ()), ("median", ()))}


def _ref_loss(p, vms, Ks, wts):
    total = 0.0
    for c in range(len(vms)):
        out = reference_2dgs.render(p["means"], p["quats"], p["scales"], p["opacities"], p["colors"], vms[c], Ks[c],
                                    GW, GH, background=p["background"], render_mode="RGB+D",
                                    means2d_offset=p["probe"] if c == 0 else None)
        out["normals"] = out["normals"] @ vms[c][:3, :3]  # world space, as rasterization_2dgs's
        total += sum(np.sum(out[k] * wts[k][c]) for k in wts)
    return total


@pytest.fixture(scope="module")
def fd_case():
    p = _grad_scene()
    vms, Ks = cameras(GW, GH, n=2, radius=2.5, seed=4)
    wts = _weights()
    grads = reference.central_differences(lambda q: _ref_loss(q, vms, Ks, wts), p)
    return p, vms, Ks, wts, grads


@pytest.mark.parametrize("rasterizer", RASTERIZER_CONFIGS)
def test_gradients_match_finite_differences(fd_case, rasterizer):
    p, vms, Ks, wts, fd = fd_case

    def loss(q):
        probe = jnp.stack([q["probe"], jnp.zeros_like(q["probe"])])  # the first camera's
        colors, alphas, normals, _, distort, median, _ = traced_rasterization_2dgs(
            q["means"], q["quats"], q["scales"], q["opacities"], q["colors"], vms, Ks, GW, GH,
            backgrounds=jnp.stack([q["background"]] * 2), render_mode="RGB+D", **walked(rasterizer), tile_size=8,
            isect_capacity=1 << 14, means2d_probe=probe)
        out = dict(image=colors, alpha=alphas[..., 0], normals=normals, distortion=distort[..., 0],
                   median=median[..., 0])
        return sum(jnp.sum(out[k] * wts[k]) for k in wts)

    params = {k: jnp.asarray(v, jnp.float32) for k, v in p.items()}
    np.testing.assert_allclose(float(jax.jit(loss)(params)), _ref_loss(p, vms, Ks, wts), rtol=1e-5)
    grads = jax.jit(jax.grad(loss))(params)
    for k in fd:
        g, want = np.asarray(grads[k], np.float64), fd[k]
        scale = np.abs(want).max()
        assert scale > 1e-3, k  # every parameter reaches the loss
        np.testing.assert_allclose(g, want, atol=2e-3 * scale, rtol=2e-3, err_msg=k)


def test_absgrad_is_the_sum_over_pixels_of_each_pixels_probe_gradient():
    """With `absgrad` the probe's cotangent is sum over pixels |dL_pixel / d means2d| (gsplat's
    absgrad, the densification statistic): computed pixel by pixel from the plain gradient (checked
    against finite differences above) it is the same."""
    p = _grad_scene(n=4)
    w, h = 12, 10
    vms, Ks = cameras(w, h, n=1, radius=2.5, seed=4)

    def loss(probe, weights, absgrad):
        colors, alphas, *_ = traced_rasterization_2dgs(
            p["means"], p["quats"], p["scales"], p["opacities"], p["colors"], vms, Ks, w, h, render_mode="RGB+D",
            rasterizer="flat", isect_capacity=1 << 14, means2d_probe=probe, absgrad=absgrad)
        return jnp.sum(colors[0] * weights[..., None]) + jnp.sum(alphas[0, ..., 0] * weights)

    probe = jnp.zeros((1, 4, 2), jnp.float32)
    plain = jax.jit(jax.grad(partial(loss, absgrad=False)))
    per_pixel = sum(np.abs(np.asarray(plain(probe, jnp.zeros((h, w)).at[j, i].set(1.0))))
                    for j in range(h) for i in range(w))
    absolute = np.asarray(jax.grad(partial(loss, absgrad=True))(probe, jnp.ones((h, w))))
    assert per_pixel.min() > 0  # every surfel is on the image
    np.testing.assert_allclose(absolute, per_pixel, rtol=1e-4, atol=1e-6 * per_pixel.max())
