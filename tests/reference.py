"""An independent dense float64 numpy renderer: every Gaussian against every pixel, no tiles.

Written from the rule in the 3DGS paper / gsplat, not from jax_backend's code.
"""
import numpy as np

SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = [1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396]
SH_C3 = [-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
         -0.4570457994644658, 1.445305721320277, -0.5900435899266435]


def rotmat(q):
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def sh_color(coeffs, d, degree):
    d = d / np.linalg.norm(d)
    x, y, z = d
    c = SH_C0 * coeffs[0]
    if degree > 0:
        c = c - SH_C1 * y * coeffs[1] + SH_C1 * z * coeffs[2] - SH_C1 * x * coeffs[3]
    if degree > 1:
        xx, yy, zz = x * x, y * y, z * z
        c = c + (SH_C2[0] * x * y * coeffs[4] + SH_C2[1] * y * z * coeffs[5] + SH_C2[2] * (2 * zz - xx - yy) * coeffs[6]
                 + SH_C2[3] * x * z * coeffs[7] + SH_C2[4] * (xx - yy) * coeffs[8])
    if degree > 2:
        xx, yy, zz = x * x, y * y, z * z
        c = c + (SH_C3[0] * y * (3 * xx - yy) * coeffs[9] + SH_C3[1] * x * y * z * coeffs[10]
                 + SH_C3[2] * y * (4 * zz - xx - yy) * coeffs[11] + SH_C3[3] * z * (2 * zz - 3 * xx - 3 * yy) * coeffs[12]
                 + SH_C3[4] * x * (4 * zz - xx - yy) * coeffs[13] + SH_C3[5] * z * (xx - yy) * coeffs[14]
                 + SH_C3[6] * x * (xx - 3 * yy) * coeffs[15])
    return np.maximum(c + 0.5, 0.0)


def central_differences(loss, params: dict, eps: float = 1e-6) -> dict:
    """d loss / d params by central differences, entry by entry: `params` a dict of float64 arrays,
    `loss(params)` a float (every reference gradient test's road to its truth)."""
    grads = {}
    for k, v in params.items():
        g = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            hi = {kk: vv.copy() for kk, vv in params.items()}
            lo = {kk: vv.copy() for kk, vv in params.items()}
            hi[k][idx] += eps
            lo[k][idx] -= eps
            g[idx] = (loss(hi) - loss(lo)) / (2 * eps)
        grads[k] = g
    return grads


def camera_point(camera_model, p, K, distortion=None):
    """Where a camera draws the camera-space point p = (x, y, z): its pixel (u, v), from the
    models' definitions (pinhole; orthographic: u = fx x + cx; fisheye: OpenCV's / Kannala-Brandt's
    equidistant model, theta = atan2(r, z), theta_d = theta (1 + k1 theta^2 + ... + k4 theta^8),
    u = fx theta_d x / r + cx)."""
    x, y, z = p
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    if camera_model == "pinhole":
        return np.array([fx * x / z + cx, fy * y / z + cy])
    if camera_model == "ortho":
        return np.array([fx * x + cx, fy * y + cy])
    k1, k2, k3, k4 = (0.0,) * 4 if distortion is None else distortion
    r = np.hypot(x, y)
    theta = np.arctan2(r, z)
    theta_d = theta * (1 + k1 * theta**2 + k2 * theta**4 + k3 * theta**6 + k4 * theta**8)
    scale = theta_d / r if r > 0 else 1.0 / z
    return np.array([fx * scale * x + cx, fy * scale * y + cy])


def camera_jacobian(camera_model, p, K, distortion=None, h=1e-6):
    """d(u, v)/d(x, y, z) of `camera_point` by central differences (a road of its own, not the
    renderer's closed form): [2, 3]."""
    step = h * max(1.0, float(np.linalg.norm(p)))
    cols = []
    for k in range(3):
        e = np.zeros(3)
        e[k] = step
        cols.append((camera_point(camera_model, p + e, K, distortion) - camera_point(camera_model, p - e, K, distortion))
                    / (2 * step))
    return np.stack(cols, -1)


def project(means, quats, scales, viewmat, K, width, height, *, near_plane=0.01, eps2d=0.3, camera_model="pinhole",
            distortion=None):
    """EWA projection of every Gaussian, one at a time: means2d [N,2] (pixel centres at +0.5),
    cov2d [N,2,2] with the eps2d low-pass, view-space depths [N], in_front [N] (past the near plane;
    the other entries of a Gaussian behind it are NaN). The pinhole's Jacobian is 3DGS's, at x/z and
    y/z clamped to 1.3x the field of view; the other cameras' by differences (`camera_jacobian`)."""
    means, quats, scales = (np.asarray(a, np.float64) for a in (means, quats, scales))
    viewmat, K = np.asarray(viewmat, np.float64), np.asarray(K, np.float64)
    distortion = None if distortion is None else [float(d) for d in distortion]
    R, t = viewmat[:3, :3], viewmat[:3, 3]
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    n = len(means)
    out = dict(means2d=np.full((n, 2), np.nan), cov2d=np.full((n, 2, 2), np.nan), depths=np.full(n, np.nan),
               in_front=np.zeros(n, bool))
    for i in range(n):
        pc = R @ means[i] + t
        x, y, z = pc
        if z <= near_plane:
            continue
        M = rotmat(quats[i]) @ np.diag(scales[i])
        cov = R @ (M @ M.T) @ R.T
        if camera_model == "pinhole":
            limx_p = (width - cx) / fx + 0.3 * 0.5 * width / fx
            limx_n = cx / fx + 0.3 * 0.5 * width / fx
            limy_p = (height - cy) / fy + 0.3 * 0.5 * height / fy
            limy_n = cy / fy + 0.3 * 0.5 * height / fy
            tx = z * min(limx_p, max(-limx_n, x / z))
            ty = z * min(limy_p, max(-limy_n, y / z))
            J = np.array([[fx / z, 0, -fx * tx / z**2], [0, fy / z, -fy * ty / z**2]])
        else:
            J = camera_jacobian(camera_model, pc, K, distortion)
        out["cov2d"][i] = J @ cov @ J.T + eps2d * np.eye(2)
        out["means2d"][i] = camera_point(camera_model, pc, K, distortion)
        out["depths"][i], out["in_front"][i] = z, True
    return out


def render(means, quats, scales, opacities, colors, viewmat, K, width, height, *, sh_degree=None,
           background=None, near_plane=0.01, eps2d=0.3, render_mode="RGB", means2d_offset=None,
           rasterize_mode="classic", return_margin=False, camera_model="pinhole", distortion=None):
    """One camera. Returns image [H,W,ch], alpha [H,W]. "antialiased": each opacity times
    sqrt(det(S) / det(S + eps2d I)) for the projected covariance S (Mip-Splatting).

    `return_margin`: also [H,W], each pixel's relative distance to the nearest of its threshold
    decisions (a Gaussian's alpha against 1/255, the transmittance after it against 1e-4). Where
    that margin is within float32 rounding (about 1e-6 after tens of products), a float32 renderer
    may decide the other way, and the pixel differs by that one Gaussian's alpha T."""
    means, quats, scales, opacities, colors = (np.asarray(a, np.float64) for a in (means, quats, scales, opacities, colors))
    viewmat, K = np.asarray(viewmat, np.float64), np.asarray(K, np.float64)
    R, t = viewmat[:3, :3], viewmat[:3, 3]
    campos = -R.T @ t
    ys, xs = np.mgrid[0:height, 0:width]
    px, py = xs + 0.5, ys + 0.5
    proj = project(means, quats, scales, viewmat, K, width, height, near_plane=near_plane, eps2d=eps2d,
                   camera_model=camera_model, distortion=distortion)
    items = []
    for i in range(len(means)):
        if not proj["in_front"][i]:
            continue
        z, c2 = proj["depths"][i], proj["cov2d"][i]
        conic = np.linalg.inv(c2)
        mx, my = proj["means2d"][i]
        o = opacities[i]
        if rasterize_mode == "antialiased":
            o = o * np.sqrt(max(np.linalg.det(c2 - eps2d * np.eye(2)), 0.0) / np.linalg.det(c2))
        if means2d_offset is not None:
            mx, my = mx + means2d_offset[i][0], my + means2d_offset[i][1]
        if sh_degree is not None:
            col = sh_color(colors[i][: (sh_degree + 1) ** 2], means[i] - campos, sh_degree)
        else:
            col = colors[i]
        feat = {"RGB": col, "D": np.array([z]), "ED": np.array([z]),
                "RGB+D": np.append(col, z), "RGB+ED": np.append(col, z)}[render_mode]
        items.append((z, i, mx, my, conic, o, feat))
    items.sort(key=lambda it: (it[0], it[1]))
    base = 3 if sh_degree is not None else colors.shape[-1]
    ch = {"RGB": base, "D": 1, "ED": 1, "RGB+D": base + 1, "RGB+ED": base + 1}[render_mode]
    img = np.zeros((height, width, ch))
    T = np.ones((height, width))
    done = np.zeros((height, width), bool)
    margin = np.full((height, width), np.inf)
    for z, i, mx, my, conic, o, feat in items:
        dx, dy = px - mx, py - my
        q = conic[0, 0] * dx * dx + 2 * conic[0, 1] * dx * dy + conic[1, 1] * dy * dy
        alpha = np.minimum(0.99, o * np.exp(-0.5 * q))
        blend = (~done) & (alpha >= 1 / 255)
        nT = T * (1 - alpha)
        margin = np.where(~done, np.minimum(margin, np.abs(alpha * 255 - 1)), margin)
        margin = np.where(blend, np.minimum(margin, np.abs(nT * 1e4 - 1)), margin)
        stop = blend & (nT < 1e-4)
        blend &= ~stop
        img += np.where(blend, alpha * T, 0)[..., None] * feat
        T = np.where(blend, nT, T)
        done |= stop
    img, alpha_img = finish(img, T, background, render_mode)
    return (img, alpha_img, margin) if return_margin else (img, alpha_img)


def finish(img, T, background, render_mode):
    """After the blend: the background behind what is left of the transmittance T, alpha = 1 - T,
    and "ED"'s depth divided by alpha. -> (image, alpha)."""
    if background is not None:
        bg = np.zeros(img.shape[-1])
        bg[: len(background)] = background
        img = img + T[..., None] * bg
    alpha_img = 1 - T
    if render_mode.endswith("ED"):
        img[..., -1] /= np.maximum(alpha_img, 1e-10)
    return img, alpha_img
