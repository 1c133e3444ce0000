"""The persistent compilation cache: its folder follows the environment, and a second run of the
same training compiles nothing that the first wrote (checked in fresh processes)."""
import json
import os
import subprocess
import sys
from pathlib import Path

from jax_backend.files import compilation_cache_folder

HERE = Path(__file__).parent

# one process: train one block of a small scene with the cache in argv[1]; report JAX's cache events
RUN = """
import json, sys
import jax
from jax_backend.files import enable_compilation_cache
events = {}
jax.monitoring.register_event_listener(lambda name, **kw: events.__setitem__(name, events.get(name, 0) + 1))
enable_compilation_cache(sys.argv[1])
from jax_backend import DefaultStrategy, TrainConfig, Trainer, init_random
from synthetic import known_scene
_, train, _ = known_scene()
cfg = TrainConfig(max_steps=20, steps_per_block=10, sh_degree=0, strategy=DefaultStrategy())
tr = Trainer(cfg, train, init_random(128, -1, 1, sh_degree=0), scene_extent=1.5, log=lambda *_: None)
tr.run_block()
print(json.dumps({k.rsplit('/', 1)[-1]: v for k, v in events.items() if 'compilation_cache' in k}))
"""


def _run(folder: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent)]), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", RUN, str(folder)], capture_output=True, text=True, env=env,
                         timeout=600)
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
