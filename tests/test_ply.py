
import numpy as np
import pytest

from jax_backend.files.ply import PlyError, property_names, read_ply, write_ply


def _params(n=20, k=16, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "means": rng.normal(size=(n, 3)).astype(np.float32),
        "scales": rng.normal(-3, 0.5, (n, 3)).astype(np.float32),
        "quats": rng.normal(size=(n, 4)).astype(np.float32),
        "opacities": rng.normal(0, 2, n).astype(np.float32),
        "sh0": rng.normal(size=(n, 1, 3)).astype(np.float32),
        "shN": rng.normal(size=(n, k - 1, 3)).astype(np.float32),
    }


def test_roundtrip_keeps_only_alive_gaussians(tmp_path):
    p = _params()
    alive = np.arange(20) % 3 != 0
    p["opacities"][alive] = np.abs(p["opacities"][alive])  # all kept ones above 1/255
    assert write_ply(tmp_path / "a.ply", p, alive) == alive.sum()
    q = read_ply(tmp_path / "a.ply")
    for k in p:
        np.testing.assert_array_equal(q[k], p[k][alive], err_msg=k)


def test_standard_viewers_read_it_with_plyfile(tmp_path):
    from plyfile import PlyData

    p = _params(k=16)
    p["opacities"][:] = 1.0
    write_ply(tmp_path / "a.ply", p)
    el = PlyData.read(str(tmp_path / "a.ply"))["vertex"]
    assert [prop.name for prop in el.properties] == property_names(15)
    assert all(prop.val_dtype in ("f4", "<f4", "float32") or np.dtype(prop.val_dtype) == np.float32 for prop in el.properties)
    # f_rest is channel-major: f_rest_0..14 are red for bands 1..15, then green, then blue
    np.testing.assert_array_equal(el["f_rest_0"], p["shN"][:, 0, 0])
    np.testing.assert_array_equal(el["f_rest_1"], p["shN"][:, 1, 0])
    np.testing.assert_array_equal(el["f_rest_15"], p["shN"][:, 0, 1])
    np.testing.assert_array_equal(el["f_rest_44"], p["shN"][:, 14, 2])
    np.testing.assert_array_equal(el["rot_0"], p["quats"][:, 0])


@pytest.mark.parametrize("sh_degree", [3, 0])
def test_same_bytes_as_nerfstudio_exporter(tmp_path, monkeypatch, sh_degree):
    """Feed nerfstudio's own `ns-export gaussian-splat` code the same parameters."""
    import torch
    import nerfstudio.scripts.exporter as exporter
    from nerfstudio.models.splatfacto import SplatfactoModel, SplatfactoModelConfig

    k = (sh_degree + 1) ** 2
    p = _params(n=30, k=k)
    p["opacities"][:3] = -9.0  # below 1/255: both leave them out
    p["scales"][3, 1] = np.nan  # non-finite: both leave it out
    # (not in means: nerfstudio 1.1.5 reduces the 1-D x/y/z columns to one flag and would drop every row)
    model = SplatfactoModel.__new__(SplatfactoModel)
    torch.nn.Module.__init__(model)
    model.config = SplatfactoModelConfig(sh_degree=sh_degree)
    model.gauss_params = torch.nn.ParameterDict({
        "means": torch.tensor(p["means"]), "scales": torch.tensor(p["scales"]), "quats": torch.tensor(p["quats"]),
        "opacities": torch.tensor(p["opacities"][:, None]), "features_dc": torch.tensor(p["sh0"][:, 0]),
        "features_rest": torch.tensor(p["shN"]),
    })
    pipeline = type("P", (), {"model": model})()
    monkeypatch.setattr(exporter, "eval_setup", lambda *a, **kw: (None, pipeline, None, None))
    exporter.ExportGaussianSplat(load_config=tmp_path / "unused.yml", output_dir=tmp_path).main()
    theirs = (tmp_path / "splat.ply").read_bytes()
    write_ply(tmp_path / "ours.ply", p)
    ours = (tmp_path / "ours.ply").read_bytes()
    h_t, b_t = theirs.split(b"end_header\n", 1)
    h_o, b_o = ours.split(b"end_header\n", 1)
    props = lambda h: [l for l in h.decode().splitlines() if l.startswith(("property", "element", "format"))]
    assert props(h_o) == props(h_t)
    if sh_degree > 0:
        assert b_o == b_t  # same values, same order, byte for byte
    else:  # at degree 0 splatfacto stores DC as a colour logit (shs_0 = RGB2SH(sigmoid(dc))): same rows
        assert len(b_o) == len(b_t)


@pytest.mark.parametrize("form", ["ascii", "big-endian doubles", "with faces"])
def test_other_tools_ply_forms_read_the_same(tmp_path, form):
    """A splat PLY written by other tools (ASCII, big-endian, float64 properties, a face element after
    the vertices) reads as the same Gaussians as ours."""
    from plyfile import PlyData, PlyElement

    p = _params(k=4)
    p["opacities"][:] = 1.0
    write_ply(tmp_path / "a.ply", p)
    v = PlyData.read(str(tmp_path / "a.ply"))["vertex"].data
    big = form == "big-endian doubles"
    if big:
        v = v.astype([(name, ">f8") for name in v.dtype.names])
    elements = [PlyElement.describe(v, "vertex")]
    if form == "with faces":
        faces = np.array([([0, 1, 2],)], dtype=[("vertex_indices", "i4", (3,))])
        elements.append(PlyElement.describe(faces, "face"))
    PlyData(elements, text=form == "ascii", byte_order=">" if big else "<").write(str(tmp_path / "b.ply"))
    q = read_ply(tmp_path / "b.ply")
    for k in p:
        assert q[k].dtype == np.float32
        np.testing.assert_allclose(q[k], p[k], rtol=1e-6, atol=1e-6, err_msg=k)


def test_truncated_and_foreign_files_give_clear_errors(tmp_path):
    p = _params()
    p["opacities"][:] = 1.0
    write_ply(tmp_path / "a.ply", p)
    data = (tmp_path / "a.ply").read_bytes()
    (tmp_path / "cut.ply").write_bytes(data[:-100])
    with pytest.raises(PlyError, match="cut.ply: truncated"):
        read_ply(tmp_path / "cut.ply")
    (tmp_path / "mesh.ply").write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty float x\n"
                                        b"property float y\nproperty float z\nend_header\n" + b"\x00" * 12)
    with pytest.raises(PlyError, match="mesh.ply: not a Gaussian splat PLY"):
        read_ply(tmp_path / "mesh.ply")
    (tmp_path / "text.txt").write_bytes(b"hello")
    with pytest.raises(PlyError, match="text.txt: not a PLY"):
        read_ply(tmp_path / "text.txt")
    with pytest.raises(PlyError, match="missing.ply: cannot read"):
        read_ply(tmp_path / "missing.ply")


def test_a_similarity_moves_gaussians_without_changing_what_a_moved_camera_sees():
    """transform_params (init-ply in a capture's frame): Gaussians moved by x -> s (R x + t), seen by
    the camera moved with them, render the same colours at SH degree 3 (positions, sizes,
    rotations and the view-dependent colour all follow); dropping the SH rotation would not."""
    import jax.numpy as jnp
    from scipy.spatial.transform import Rotation

    from jax_backend import init_from_params, render_gaussians, transform_params
    from scenes import cameras, hard_scene

    scene = hard_scene(n=60, seed=5)
    params = dict(means=scene["means"], scales=np.log(scene["scales"]), quats=scene["quats"],
                  opacities=np.log(scene["opacities"] / (1 - scene["opacities"])), sh0=scene["sh"][:, :1],
                  shN=scene["sh"][:, 1:] * 3.0)
    R = Rotation.from_rotvec([0.4, -1.1, 0.7]).as_matrix()
    t, s = np.array([0.3, -0.2, 1.5]), 0.37
    moved = transform_params(params, R, t, s)
    (vm,), (K,) = cameras(48, 40, n=1, seed=2)
    vm2 = np.eye(4)
    vm2[:3, :3] = vm[:3, :3] @ R.T
    vm2[:3, 3] = s * vm[:3, 3] - s * vm[:3, :3] @ R.T @ t  # camera coordinates scaled by s

    def render(p, viewmat):
        g = init_from_params(p, sh_degree=3)
        return render_gaussians(g, jnp.asarray(viewmat, jnp.float32), jnp.asarray(K, jnp.float32), 48, 40,
                                sh_degree=3, background=np.zeros(3, np.float32))[0]

    before, after = render(params, vm)[..., :3], render(moved, vm2)[..., :3]
    assert np.abs(before).max() > 0.3
    np.testing.assert_allclose(after, before, atol=2e-4)
    unrotated = dict(moved, sh0=params["sh0"], shN=params["shN"])
    assert np.abs(render(unrotated, vm2)[..., :3] - before).max() > 0.05


def test_init_from_params_names_the_source_of_bad_rows():
    from jax_backend import UserFacingError, init_from_params

    n = 4
    params = dict(means=np.zeros((n, 3)), scales=np.zeros((n, 3)), quats=np.tile([1.0, 0, 0, 0], (n, 1)),
                  opacities=np.zeros(n), sh0=np.zeros((n, 1, 3)), shN=np.zeros((n, 15, 3)))
    g = init_from_params(params, sh_degree=1, source="x.ply")
    assert g.params["shN"].shape == (4, 3, 3) and int(g.alive.sum()) == 4
    bad = dict(params, scales=np.array([[0, 0, 0], [0, np.nan, 0], [0, 0, 0], [0, 0, 0]], float))
    with pytest.raises(UserFacingError, match=r"x.ply: scales of 1 Gaussian\(s\) is not finite \(first: row 1\)"):
        init_from_params(bad, source="x.ply")
