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


def wide_scene(seed, n=80, pile=60):
    """A scene of the wider family the exactness tests cover (issue 28): a quarter of the
    Gaussians anisotropic (one axis 20x longer, one 20x thinner), a quarter huge, `pile` small ones
    heaped on a few pixels of one tile, seen by a camera with an off-centre principal point.
    Returns (scene dict, viewmat [4,4], K [3,3])."""
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(n, 3)) * 0.8
    scales = np.exp(rng.normal(size=(n, 3)) * 0.4 - 2.0)
    k = n // 4
    scales[:k, 0] *= 20.0
    scales[:k, 1] /= 20.0
    scales[k : 2 * k] = np.exp(rng.uniform(0.0, 0.8, (k, 3)))
    quats = rng.normal(size=(n, 4))
    opac = rng.uniform(0.05, 0.99, n)
    colors = rng.uniform(0, 1, (n, 3))
    pos = rng.normal(size=3)
    pos = 4.0 * pos / np.linalg.norm(pos)
    vm = look_at(pos, rng.normal(size=3) * 0.1)
    # the pile: along the ray through one point in front of the camera, at several depths
    R, t = vm[:3, :3], vm[:3, 3]
    ray = R.T @ np.array([0.05, -0.03, 1.0])
    depth = rng.uniform(1.5, 3.0, pile)
    centre = -R.T @ t
    pmeans = centre + depth[:, None] * ray + rng.normal(size=(pile, 3)) * 0.005
    means = np.concatenate([means, pmeans])
    scales = np.concatenate([scales, np.full((pile, 3), 0.01)])
    quats = np.concatenate([quats, rng.normal(size=(pile, 4))])
    opac = np.concatenate([opac, rng.uniform(0.02, 0.2, pile)])
    colors = np.concatenate([colors, rng.uniform(0, 1, (pile, 3))])
    return dict(means=means, quats=quats, scales=scales, opacities=opac, colors=colors), vm


def off_centre_intrinsics(width, height, seed):
    rng = np.random.default_rng(1000 + seed)
    f = rng.uniform(0.6, 1.6) * width
    return np.array([[f, 0, width * rng.uniform(0.2, 0.8)], [0, f * rng.uniform(0.9, 1.1), height * rng.uniform(0.2, 0.8)],
                     [0, 0, 1.0]])


# The rasterizers the exactness tests run: each registered one, and the flat one in the
# accelerator configuration ("flat-lanes": its "lanes" walk, with 3 lanes so that lanes finish and
# take new tiles on these small images; the automatic count would walk every tile at once).
RASTERIZER_CONFIGS = ["flat", "flat-lanes", "standard", "pallas"]


def walked(name, **options):
    """`rasterization`'s keyword arguments for a name of RASTERIZER_CONFIGS, with rasterizer `options`."""
    from jax_backend import RasterizerOptions

    if name == "flat-lanes":
        return dict(rasterizer="flat", options=RasterizerOptions(walk="lanes", lanes=3, **options))
    return dict(rasterizer=name, options=RasterizerOptions(**options))
