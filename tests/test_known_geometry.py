"""The known-geometry capture (`tools/known_geometry.py`): its truth, taken from Mitsuba's AOVs,
agrees with the geometry computed independently (the floor plane z = 0 met by each pixel's ray
under the capture's own pinhole camera), so the cameras written to transforms.json are the ones
Mitsuba rendered with; the meshes face outward and the mesh distances measure what they say."""
import numpy as np

from tools import known_geometry as kg


def test_truth_matches_the_floor_plane_under_the_written_camera():
    mi = kg._mitsuba()
    meshes = kg.scene_meshes()
    aov = mi.load_dict({"type": "scene", "integrator": {"type": "aov", "aovs": "dd:depth,nn:sh_normal"},
                        **kg._scene(mi, meshes)})
    width, height, fov = 48, 36, 50.0
    fx = width / 2 / np.tan(np.radians(fov) / 2)
    c2w = kg.camera_poses(8)[3]
    depth, normals, valid = kg._truth(mi, aov, c2w, width, height, fov, fx)
    # each pixel centre's ray (OpenGL camera: x right, y up, looking down -z) met with z = 0
    ys, xs = np.mgrid[0:height, 0:width] + 0.5
    ray_cam = np.stack([(xs - width / 2) / fx, -(ys - height / 2) / fx, -np.ones_like(xs)], -1)
    ray = ray_cam @ c2w[:3, :3].T
    s = -c2w[2, 3] / ray[..., 2]  # along the ray to z = 0; camera depth is s (the ray's camera z is 1)
    hit = c2w[:3, 3] + s[..., None] * ray
    floor = valid & (np.abs(normals[..., 2]) > 0.999) & (np.abs(hit[..., :2]) < 1.15).all(-1)
    floor &= np.abs(depth - s) < 0.05 * s  # the floor, not an object standing on it
    assert floor.sum() > 0.2 * valid.sum()
    # each pixel the mean of 64 random samples over a footprint whose depth changes ~0.05 a row here
    np.testing.assert_allclose(depth[floor], s[floor], atol=0.006)
    assert abs(np.mean(depth[floor] / s[floor]) - 1) < 2e-4  # no bias (Mitsuba's rays start on the near plane)


def test_meshes_face_outward_and_distances_measure_them():
    meshes = kg.scene_meshes()
    for name in ("box", "sphere", "cylinder", "plate"):  # every face's normal away from the object's axis
        m = meshes[name]
        tri = m.vertices[m.faces]
        normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        area = np.linalg.norm(normal, axis=1)
        out = tri.mean(1) - m.vertices.mean(0)
        if name == "cylinder":
            out[:, 2] = np.where(np.abs(normal[:, 2]) > 0.5 * area, out[:, 2], 0.0)  # side faces: radially
        keep = area > 1e-12  # the sphere's poles hold degenerate triangles
        assert np.all(np.sum(normal * out, 1)[keep] > 0), name
    sphere = {"sphere": meshes["sphere"]}
    v, f = meshes["sphere"].vertices, meshes["sphere"].faces
    same = kg.mesh_distances(v, f, sphere, samples=5000)
    assert same["chamfer"] < 1e-3 and same["fscore"] == 1.0
    centre = v.mean(0)
    grown = kg.mesh_distances(centre + (v - centre) * 1.1, f, sphere, samples=5000, threshold=0.02)
    np.testing.assert_allclose(grown["chamfer"], 0.032, atol=0.003)  # the radius 0.32 grown by 10%
    assert grown["fscore"] == 0.0
