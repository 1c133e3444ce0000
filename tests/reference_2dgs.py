"""An independent dense float64 numpy renderer of 2D Gaussians (2DGS, Huang et al. 2024): every
pixel's ray intersected with every disk, no tiles, no projection matrices.

Written from the paper's rules, not from jax_backend's code:
- a 2D Gaussian is a disk in 3D: centre p, tangent axes t_u = s_u R[:, 0], t_v = s_v R[:, 1]
  (R from its quaternion; a third scale, if given, is ignored), normal R[:, 2];
- a pixel's ray (centre at +0.5) meets the disk's plane at p + u t_u + v t_v = z (x', y', 1), with
  x' = (px - cx) / fx, y' = (py - cy) / fy: solved as a 3x3 linear system for (u, v, z), z the
  intersection's camera depth;
- its weight is the larger of the disk's Gaussian exp(-(u^2 + v^2) / 2) and the screen-space
  low-pass filter exp(-|x - c|^2 / (2 (sqrt(2)/2)^2)) around the disk centre's pixel c (the paper's
  object-space low pass); the hit's depth is z where the disk's Gaussian is the larger, the
  centre's depth where the low pass is (as the paper's code: a disk the low pass draws, one too
  small or seen edge-on, has no meaningful intersection), and a hit nearer than the near plane
  (behind the camera included) is skipped;
- the disks are blended front to back in the order of their centres' depths with 3DGS's rules
  (alpha = min(0.99, o w), skipped below 1/255, stopped before the transmittance falls under
  1e-4); a disk whose plane holds the ray, or whose centre is behind the near plane, is skipped;
- rendered: colour (or the intersection depth: "D", "ED" divides by alpha), the normals (each
  disk's camera-space normal turned towards the camera, blended with the same weights), the depth
  distortion sum_i sum_{j<i} 2 w_i w_j (z_i - z_j) over each pixel's intersections in blending order
  (gsplat's; the paper's sum_ij w_i w_j |z_i - z_j| when they come front to back), and the median depth (the
  intersection depth where the transmittance first falls to 0.5 or below; the last one's when it
  never does, zero where nothing is hit).
"""
import numpy as np

from reference import finish, rotmat, sh_color


def render(means, quats, scales, opacities, colors, viewmat, K, width, height, *, sh_degree=None, background=None,
           near_plane=0.01, render_mode="RGB", means2d_offset=None):
    """One camera: dict(image [H,W,ch], alpha [H,W], normals [H,W,3] (camera space), distortion
    [H,W], median [H,W]). `means2d_offset` [N,2] moves each disk's footprint on screen: disk i is
    drawn at pixel p as the unmoved disk is at p - offset_i (its ray and its low pass both)."""
    means, quats, scales, opacities, colors = (np.asarray(a, np.float64) for a in (means, quats, scales, opacities, colors))
    viewmat, K = np.asarray(viewmat, np.float64), np.asarray(K, np.float64)
    R, t = viewmat[:3, :3], viewmat[:3, 3]
    campos = -R.T @ t
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    ys, xs = np.mgrid[0:height, 0:width]
    px, py = xs + 0.5, ys + 0.5
    base = 3 if sh_degree is not None else colors.shape[-1]
    ch = {"RGB": base, "D": 1, "ED": 1, "RGB+D": base + 1, "RGB+ED": base + 1}[render_mode]

    items = []
    for i in range(len(means)):
        pc = R @ means[i] + t
        if pc[2] <= near_plane:
            continue
        off = np.zeros(2) if means2d_offset is None else np.asarray(means2d_offset, np.float64)[i]
        sx, sy = px - off[0], py - off[1]
        rays = np.stack([(sx - cx) / fx, (sy - cy) / fy, np.ones_like(sx, dtype=np.float64)], -1)
        Rq = R @ rotmat(quats[i])
        tu, tv, normal = Rq[:, 0] * scales[i][0], Rq[:, 1] * scales[i][1], Rq[:, 2]
        if normal @ pc > 0:  # facing the camera
            normal = -normal
        A = np.stack([tu, tv, np.zeros(3)], -1)  # columns t_u, t_v, -ray (set per pixel)
        mats = np.broadcast_to(A, rays.shape[:2] + (3, 3)).copy()
        mats[..., :, 2] = -rays
        det = np.linalg.det(mats)
        ok = np.abs(det) > 1e-12 * max(1.0, np.linalg.norm(tu) * np.linalg.norm(tv))
        mats[~ok] = np.eye(3)
        uvz = np.linalg.solve(mats, np.broadcast_to(-pc, rays.shape[:2] + (3,))[..., None])[..., 0]
        u, v, z = uvz[..., 0], uvz[..., 1], uvz[..., 2]
        mx, my = fx * pc[0] / pc[2] + cx, fy * pc[1] / pc[2] + cy
        g3, g2 = 0.5 * (u * u + v * v), (sx - mx) ** 2 + (sy - my) ** 2
        z = np.where(ok & (g3 <= g2), z, pc[2])  # where the low pass draws the disk: the centre's depth
        weight = np.where(ok & (z >= near_plane), np.exp(-np.minimum(g3, g2)), 0.0)
        col = sh_color(colors[i][: (sh_degree + 1) ** 2], means[i] - campos, sh_degree) if sh_degree is not None \
            else colors[i]
        items.append((pc[2], i, opacities[i], weight, z, col, normal))
    items.sort(key=lambda it: (it[0], it[1]))

    img = np.zeros((height, width, ch))
    normals = np.zeros((height, width, 3))
    T = np.ones((height, width))
    done = np.zeros((height, width), bool)
    hits = []  # each disk's (blend weight, intersection depth) per pixel
    median = np.zeros((height, width))
    median_set = np.zeros((height, width), bool)
    for _, _, o, weight, z, col, normal in items:
        alpha = np.minimum(0.99, o * weight)
        blend = (~done) & (alpha >= 1 / 255)
        nT = T * (1 - alpha)
        stop = blend & (nT < 1e-4)
        blend &= ~stop
        w = np.where(blend, alpha * T, 0.0)
        feat = {"RGB": np.broadcast_to(col, (height, width, base)), "D": z[..., None], "ED": z[..., None]}
        feat["RGB+D"] = feat["RGB+ED"] = np.concatenate([feat["RGB"], z[..., None]], -1)
        img += w[..., None] * feat[render_mode]
        normals += w[..., None] * normal
        hits.append((w, z))
        first = blend & ~median_set & (nT <= 0.5)
        median = np.where(blend & ~median_set, z, median)
        median_set |= first
        T = np.where(blend, nT, T)
        done |= stop
    distortion = np.zeros((height, width))  # every pair once, the later one's depth minus the earlier one's, twice
    for i, (wi, zi) in enumerate(hits):
        for wj, zj in hits[:i]:
            distortion += 2 * wi * wj * (zi - zj)
    img, alpha_img = finish(img, T, background, render_mode)
    return dict(image=img, alpha=alpha_img, normals=normals, distortion=distortion, median=median)

