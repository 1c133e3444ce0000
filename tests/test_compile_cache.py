"""The persistent compilation cache: its folder follows the environment, a second run of the
same training compiles nothing that the first wrote, and a second capture with images of the same
size (another view count in the same bucket, another extent) compiles no training block again
(checked in fresh processes)."""
import json
import os
import subprocess
import sys
from pathlib import Path

from jax_backend.files import compilation_cache_folder

HERE = Path(__file__).parent

# one process: train one block of a small scene (argv[2] views, cameras from seed argv[3]) with the
# cache in argv[1]; report JAX's cache events
RUN = """
import json, sys
import jax
from jax_backend.files import enable_compilation_cache
events = {}
jax.monitoring.register_event_listener(lambda name, **kw: events.__setitem__(name, events.get(name, 0) + 1))
enable_compilation_cache(sys.argv[1])
from jax_backend import DefaultStrategy, TrainConfig, Trainer, init_random, scene_extent
from synthetic import known_scene
_, train, _ = known_scene(views=int(sys.argv[2]), seed=int(sys.argv[3]))
cfg = TrainConfig(max_steps=20, steps_per_block=10, sh_degree=0, strategy=DefaultStrategy())
tr = Trainer(cfg, train, init_random(128, -1, 1, sh_degree=0), scene_extent(train.viewmats), log=lambda *_: None)
tr.run_block()
print(json.dumps({k.rsplit('/', 1)[-1]: v for k, v in events.items() if 'compilation_cache' in k}))
"""


def _run(folder: Path, views: int = 16, seed: int = 0) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent)]), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", RUN, str(folder), str(views), str(seed)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _entries(folder: Path) -> set:
    return {p.name for p in folder.iterdir() if p.name.endswith("-cache")}


def test_a_second_run_compiles_nothing_the_first_wrote(tmp_path):
    folder = tmp_path / "xla"
    first = _run(folder)
    written = _entries(folder)
    assert any(name.startswith("jit_train_block") for name in written), written  # the training program
    assert first.get("cache_hits", 0) == 0
    second = _run(folder)
    # everything the first run wrote was loaded, not compiled again (a small program whose compile
    # time lies near the cache's threshold may be written by the second run only: a loaded host)
    assert written <= _entries(folder)
    assert second.get("cache_hits", 0) >= len(written), second


def test_a_second_capture_of_one_image_size_compiles_no_training_block(tmp_path):
    folder = tmp_path / "xla"
    _run(folder, views=16, seed=0)  # 14 training views
    blocks = {name for name in _entries(folder) if name.startswith("jit_train_block")}
    assert blocks
    # 13 training views (the same bucket of 14), other cameras and so another extent, other images
    second = _run(folder, views=15, seed=1)
    assert {name for name in _entries(folder) if name.startswith("jit_train_block")} == blocks
    assert second.get("cache_hits", 0) >= len(blocks), second
    # a view count in another bucket is another program (the check above can fail)
    _run(folder, views=20, seed=1)  # 17 training views: the bucket of 20
    assert len({name for name in _entries(folder) if name.startswith("jit_train_block")}) > len(blocks)


def test_the_folder_follows_the_environment(monkeypatch, tmp_path):
    for var in ("JAXGS_COMPILATION_CACHE", "JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert compilation_cache_folder() == tmp_path / ".cache" / "jax-gs" / "xla"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilation_cache_folder() == tmp_path / "xdg" / "jax-gs" / "xla"
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax"))
    assert compilation_cache_folder() == tmp_path / "jax"
    monkeypatch.setenv("JAXGS_COMPILATION_CACHE", str(tmp_path / "mine"))
    assert compilation_cache_folder() == tmp_path / "mine"
    for off in ("off", "0", ""):
        monkeypatch.setenv("JAXGS_COMPILATION_CACHE", off)
        assert compilation_cache_folder() is None
