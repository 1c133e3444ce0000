"""Every file jax-gs writes carries the mode a plain `open(path, "wb")` would give it: the export,
checkpoints, snapshots (PLY and preview). The atomic writer's temporary file is created 0600
(`tempfile.mkstemp`); renamed as it was, a `splat.ply` copied to a web server would not load."""
import os
import stat

import numpy as np
import pytest

from jax_backend.files import atomic_write, save_checkpoint, write_ply
from jax_backend.files.fileio import png_bytes


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(params=[0o022, 0o027, 0o077])
def umask(request):
    before = os.umask(request.param)
    yield request.param
    os.umask(before)


def _params(n=3, rest=15):
    rng = np.random.default_rng(0)
    return {"means": rng.normal(size=(n, 3)), "quats": np.tile([1.0, 0, 0, 0], (n, 1)), "scales": np.zeros((n, 3)),
            "opacities": np.zeros(n), "sh0": np.zeros((n, 1, 3)), "shN": np.zeros((n, rest, 3))}


def _writers(tmp_path):
    yield "atomic_write", lambda p: atomic_write(p, b"bytes")
    yield "checkpoint", lambda p: save_checkpoint(p, {"x": np.arange(3)}, {"step": 1})
    yield "snapshot PLY", lambda p: write_ply(p, _params())
    yield "snapshot preview", lambda p: atomic_write(p, png_bytes(np.zeros((4, 4, 3), np.float32)))


def test_new_files_get_the_umasks_mode(tmp_path, umask):
    plain = tmp_path / "plain"
    with open(plain, "wb") as f:
        f.write(b"x")
    assert _mode(plain) == 0o666 & ~umask
    for name, write in _writers(tmp_path):
        path = tmp_path / f"{name.replace(' ', '_')}.out"
        write(path)
        assert _mode(path) == _mode(plain), f"{name}: {oct(_mode(path))}, a plain write gives {oct(_mode(plain))}"


def test_an_overwritten_file_keeps_its_mode(tmp_path):
    for name, write in _writers(tmp_path):
        path = tmp_path / f"{name.replace(' ', '_')}.out"
        path.write_bytes(b"old")
        os.chmod(path, 0o640)
        write(path)
        assert _mode(path) == 0o640, name


def test_the_export_gets_the_umasks_mode(tmp_path, umask):
    from nerfstudio_jaxgs.export import write_ply_atomic

    tensors = {"x": np.arange(3, dtype=np.float32), "red": np.array([1, 2, 3], np.uint8)}
    write_ply_atomic(str(tmp_path / "splat.ply"), 3, tensors)
    assert _mode(tmp_path / "splat.ply") == 0o666 & ~umask
