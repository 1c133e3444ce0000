"""The float64 2DGS reference (`reference_2dgs`) checked on its own, before any rasterizer is
compared with it: closed forms for disks facing the camera, and the 3DGS reference's render of a
flat 3D Gaussian (a different road: EWA's affine projection) where that approximation holds."""
import numpy as np

import reference
import reference_2dgs

W, H = 48, 40
K = np.array([[60.0, 0, 23.0], [0, 58.0, 21.0], [0, 0, 1]])
EYE = np.eye(4)


def facing(x, y, z, su, sv, o=0.8, rgb=(0.2, 0.5, 0.9)):
    """One disk parallel to the image plane (identity rotation, camera at the origin)."""
    return (np.array([[x, y, z]]), np.array([[1.0, 0, 0, 0]]), np.array([[su, sv]]), np.array([o]), np.array([rgb]))


def test_a_disk_facing_the_camera_is_its_closed_form():
    """Each ray meets the plane z = z0 at (x' z0, y' z0): u = (x' z0 - X) / s_u, v likewise; the
    weight is the larger of the disk's Gaussian and the sqrt(2)/2-pixel filter at its centre."""
    X, Y, z0, su, sv, o = 0.1, -0.05, 3.0, 0.4, 0.25, 0.8
    out = reference_2dgs.render(*facing(X, Y, z0, su, sv, o), EYE, K, W, H, render_mode="RGB+D")
    ys, xs = np.mgrid[0:H, 0:W] + 0.5
    u = ((xs - K[0, 2]) / K[0, 0] * z0 - X) / su
    v = ((ys - K[1, 2]) / K[1, 1] * z0 - Y) / sv
    cx, cy = K[0, 0] * X / z0 + K[0, 2], K[1, 1] * Y / z0 + K[1, 2]
    w = np.exp(-np.minimum(0.5 * (u * u + v * v), (xs - cx) ** 2 + (ys - cy) ** 2))
    alpha = np.minimum(0.99, o * w)
    alpha = np.where(alpha >= 1 / 255, alpha, 0)
    np.testing.assert_allclose(out["alpha"], alpha, atol=1e-12)
    np.testing.assert_allclose(out["image"][..., 3], z0 * alpha, atol=1e-12)  # every hit is at depth z0
    np.testing.assert_allclose(out["image"][..., :3], alpha[..., None] * [0.2, 0.5, 0.9], atol=1e-12)
    np.testing.assert_allclose(out["normals"], alpha[..., None] * [0, 0, -1.0], atol=1e-12)  # towards the camera
    assert alpha.max() > 0.7 and (alpha == 0).mean() > 0.3  # the disk is on the image and ends inside it


def test_a_tilted_disk_converges_to_the_flat_3d_gaussian_far_off():
    """A disk seen about 40 degrees off its normal, the same size in pixels ever farther away (the
    focal length doubled with the distance): the 3DGS reference's flat Gaussian (third scale 1e-7,
    no low pass; EWA's affine projection, first order in the disk's depth range over its distance)
    draws its alpha ever closer, the mean difference halving with each doubling."""
    q = np.array([[np.cos(0.35), np.sin(0.35) * 0.6, np.sin(0.35) * 0.8, 0.0]])
    scales, opac = np.array([[0.4, 0.25]]), np.array([0.9])
    diffs = []
    for f in (300.0, 600.0, 1200.0, 2400.0):
        Kf = np.array([[f, 0, 23.0], [0, f, 21.0], [0, 0, 1]])
        means = np.array([[0.0, 0.0, f / 30]])
        out = reference_2dgs.render(means, q, scales, opac, np.ones((1, 3)), EYE, Kf, W, H)
        _, alpha3d = reference.render(means, q, np.concatenate([scales, [[1e-7]]], 1), opac, np.ones((1, 3)), EYE, Kf,
                                      W, H, eps2d=0.0)
        assert out["alpha"].max() > 0.85 and (out["alpha"] > 0).mean() > 0.2
        diffs.append(np.abs(out["alpha"] - alpha3d).mean())
    ratios = np.array(diffs[1:]) / np.array(diffs[:-1])
    assert np.all((ratios > 0.4) & (ratios < 0.6)), diffs
    assert diffs[-1] < 2e-3, diffs


def test_depth_distortion_and_median_of_two_disks():
    """Two facing disks covering the image centre: distortion = 2 w1 w2 (z2 - z1) (the pair, the
    farther one's depth minus the nearer one's);
    the median depth is the first disk's when it alone takes the transmittance to 0.5, else the
    second's."""
    for o, median_at in ((0.7, 2.0), (0.4, 5.0)):
        disks = [facing(0, 0, 2.0, 5.0, 5.0, o), facing(0, 0, 5.0, 10.0, 10.0, o)]
        args = [np.concatenate([d[k] for d in disks]) for k in range(5)]
        out = reference_2dgs.render(*args, EYE, K, W, H, render_mode="D")
        j, i = 21, 23  # a pixel near the centre: both disks' weights near 1
        w1 = min(0.99, o * np.exp(-0.5 * (((i + 0.5 - K[0, 2]) / K[0, 0] * 2.0) ** 2 + ((j + 0.5 - K[1, 2]) / K[1, 1] * 2.0) ** 2) / 25))
        w2 = (1 - w1) * min(0.99, o * np.exp(-0.5 * (((i + 0.5 - K[0, 2]) / K[0, 0] * 5.0) ** 2 + ((j + 0.5 - K[1, 2]) / K[1, 1] * 5.0) ** 2) / 100))
        np.testing.assert_allclose(out["distortion"][j, i], 2 * w1 * w2 * 3.0, rtol=1e-12)
        np.testing.assert_allclose(out["image"][j, i, 0], 2.0 * w1 + 5.0 * w2, rtol=1e-12)
        assert out["median"][j, i] == median_at


def test_disks_behind_the_camera_or_edge_on_draw_nothing():
    behind = reference_2dgs.render(*facing(0, 0, -2.0, 1.0, 1.0), EYE, K, W, H)
    assert behind["alpha"].max() == 0
    edge_on = np.array([[np.cos(np.pi / 4), np.sin(np.pi / 4), 0, 0]])  # normal along the camera's y axis
    means, _, scales, opac, rgb = facing(0, 0, 3.0, 0.5, 0.5)
    out = reference_2dgs.render(means, edge_on, scales, opac, rgb, EYE, K, W, H)
    # the plane holds the camera: only the screen-space filter around the centre's pixel draws it
    # (the paper's low pass, exp(-d^2): above 1/255 within sqrt(log(0.8 * 255)) pixels)
    ys, xs = np.mgrid[0:H, 0:W] + 0.5
    d2 = (xs - K[0, 2]) ** 2 + (ys - K[1, 2]) ** 2
    np.testing.assert_allclose(out["alpha"], np.where(0.8 * np.exp(-d2) >= 1 / 255, 0.8 * np.exp(-d2), 0), atol=1e-12)
    assert out["alpha"].max() > 0.3
