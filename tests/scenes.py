"""Small random scenes and cameras shared by the tests (numpy, float64)."""
import numpy as np


def look_at(campos, target, up=(0.0, -1.0, 0.0)):
    """World-to-camera 4x4, OpenCV axes (x right, y down, z forward)."""
    campos, target, up = (np.asarray(v, np.float64) for v in (campos, target, up))
    z = target - campos
    z /= np.linalg.norm(z)
    x = np.cross(up, z)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    R = np.stack([x, y, z])
    vm = np.eye(4)
    vm[:3, :3] = R
    vm[:3, 3] = -R @ campos
    return vm


def intrinsics(width, height, focal):
    return np.array([[focal, 0, width / 2 + 0.3], [0, focal * 1.05, height / 2 - 0.2], [0, 0, 1.0]])


def cameras(width, height, n=3, radius=4.0, seed=0):
    rng = np.random.default_rng(seed)
    vms, Ks = [], []
    for i in range(n):
        a = 2 * np.pi * i / n + rng.uniform(-0.2, 0.2)
        pos = np.array([radius * np.sin(a), rng.uniform(-0.5, 0.5), -radius * np.cos(a)])
        vms.append(look_at(pos, rng.normal(size=3) * 0.1))
        Ks.append(intrinsics(width, height, focal=0.9 * width))
    return np.stack(vms), np.stack(Ks)


def hard_scene(n=120, sh_bases=16, seed=0):
    """Random Gaussians with the awkward cases mixed in: huge splats, anisotropic and
    near-degenerate ones, some behind the cameras or far off screen, low and high opacity."""
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(n, 3)) * 1.0
    scales = np.exp(rng.normal(size=(n, 3)) * 0.6 - 2.3)
    quats = rng.normal(size=(n, 4))
    opac = rng.uniform(0.05, 0.99, n)
    k = n // 10
    scales[:k] = np.exp(rng.uniform(-0.3, 0.6, (k, 3)))  # huge
    scales[k : 2 * k, 0] *= 1e-4  # flat / near-degenerate
    scales[2 * k : 3 * k, 1] *= 30.0  # strongly anisotropic
    means[3 * k : 4 * k] *= 6.0  # far away, many off screen or behind some camera
    opac[4 * k : 4 * k + k // 2] = rng.uniform(0.001, 0.004, k // 2)  # below 1/255: never visible
    sh = rng.normal(size=(n, sh_bases, 3)) * 0.3
    sh[:, 0] += 0.8
    colors = rng.uniform(0, 1, (n, 3))
    return dict(means=means, quats=quats, scales=scales, opacities=opac, sh=sh, colors=colors)
