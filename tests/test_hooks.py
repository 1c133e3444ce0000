"""`nerfstudio_jaxgs.hooks`: every change jax-gs makes to nerfstudio and the process, installed
once. Installing them again changes nothing, each patched function is marked as jax-gs's, and
no other plugin module assigns to nerfstudio's classes or to `sys`."""
import ast
import sys
from pathlib import Path

import pytest


from nerfstudio_jaxgs import hooks  # noqa: E402

PLUGIN = Path(hooks.__file__).parent


def _patched():
    from nerfstudio.scripts import exporter, train
    from nerfstudio.viewer.viewer import Viewer

    from nerfstudio.viewer.render_state_machine import RenderStateMachine

    return (sys.excepthook, exporter.ExportGaussianSplat.__dict__["write_ply"].__func__, Viewer.init_scene,
            RenderStateMachine.run, train.launch)


def test_hooks_install_once_and_mark_what_they_replace():
    import nerfstudio.scripts.exporter  # noqa: F401  (ns-export's module: the export hook applies)
    import nerfstudio.scripts.train  # noqa: F401  (ns-train's module: the launch hook applies)

    hooks.install_pipeline_hooks()
    hooks.install_one_process_launch()
    first = _patched()
    assert all(getattr(fn, "_jaxgs", False) for fn in first), first
    hooks.install_pipeline_hooks()
    hooks.install_excepthook()
    hooks.install_one_process_launch()
    assert _patched() == first  # the same functions: nothing wrapped twice


def test_the_installed_export_writes_nerfstudios_bytes_atomically(tmp_path):
    import numpy as np
    from nerfstudio.scripts.exporter import ExportGaussianSplat

    hooks.install_pipeline_hooks()
    tensors = {"x": np.arange(3, dtype=np.float32), "red": np.array([1, 2, 3], np.uint8)}
    (tmp_path / ".splat.ply.999999999.dead.tmp").write_bytes(b"left by a killed export")
    ExportGaussianSplat.write_ply(str(tmp_path / "splat.ply"), 3, tensors)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["splat.ply"]
    assert (tmp_path / "splat.ply").read_bytes().endswith(np.rec.fromarrays([tensors["x"], tensors["red"]]).tobytes())


def _assignments_to_foreign_attributes(path: Path):
    """Lines of `path` that change something the module did not make: an assignment to an attribute
    of something it imported (a class or module of nerfstudio, rich, sys ...), and any write to an
    object's `__dict__` or through `setattr` (`obj.__dict__[k] = v`, `obj.__dict__.pop(k)`)."""
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not (isinstance(node, ast.ImportFrom) and node.level):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)

    def through_dict(t):
        while isinstance(t, (ast.Attribute, ast.Subscript)):
            if isinstance(t, ast.Attribute) and t.attr == "__dict__":
                return True
            t = t.value
        return False

    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        targets += node.targets if isinstance(node, ast.Delete) else []
        for t in targets:
            if through_dict(t):
                found.append(node.lineno)
            while isinstance(t, ast.Attribute):
                t = t.value
                if isinstance(t, ast.Name) and t.id in imported:
                    found.append(node.lineno)
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in ("setattr", "delattr"):
                found.append(node.lineno)
            if isinstance(f, ast.Attribute) and f.attr in ("pop", "update", "setdefault", "clear") and through_dict(f.value):
                found.append(node.lineno)
    return found


def test_no_other_plugin_module_patches_anything():
    offenders = {p.name: lines for p in PLUGIN.glob("*.py") if p.name != "hooks.py"
                 for lines in [_assignments_to_foreign_attributes(p)] if lines}
    assert not offenders, f"assignments to imported modules' attributes outside hooks.py: {offenders}"
    assert _assignments_to_foreign_attributes(PLUGIN / "hooks.py")  # the check finds hooks.py's own patches


def test_the_patch_guard_sees_writes_through_dict_and_setattr(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f(dm, v):\n    dm.__dict__['cached_train'] = v\n    dm.__dict__.pop('x', None)\n"
                     "    setattr(dm, 'y', v)\n    dm.z = v\n    own = {}\n    own['k'] = v\n")
    assert _assignments_to_foreign_attributes(probe) == [2, 3, 4]


_ALLOCATOR_CHILD = """
import json, os
import nerfstudio.scripts.train  # what ns-train imports before it builds the pipeline (the method configs too)
from jax._src import xla_bridge
started = xla_bridge.backends_are_initialized()
from nerfstudio_jaxgs import hooks
hooks.install_pipeline_hooks()
import jax
jax.devices()  # the backends start here, after the hooks
print(json.dumps({"started_before": started,
                  "env": {k: v for k, v in os.environ.items() if k.startswith("XLA_PYTHON_CLIENT_")}}))
"""


@pytest.mark.parametrize("user", [{}, {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"}, {"XLA_PYTHON_CLIENT_PREALLOCATE": "true"}])
def test_gpu_allocator_shares_the_gpu_with_torch_unless_the_user_chose(user):
    """JAX would take 75% of a GPU at start, beside torch's images: the pipeline's hooks make it
    allocate on demand before any JAX backend starts, unless the user set XLA_PYTHON_CLIENT_*."""
    import json
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_PYTHON_CLIENT_")}
    env.update(user, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _ALLOCATOR_CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["started_before"] is False  # nothing ns-train imports starts JAX first
    assert out["env"] == (user or {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})


def test_the_excepthook_words_jaxgs_runs_only(monkeypatch, tmp_path):
    """In a jax-gs run (its method on the command line, a --load-config of its runs, or a jax-gs
    pipeline built) an error meant for the user is one line; another method's run (splatfacto's)
    keeps nerfstudio's own error, the previous hook's."""
    from nerfstudio_jaxgs.errors import InputError

    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda *a: seen.append(a[0]))
    monkeypatch.setitem(hooks._run, "jaxgs", False)
    hooks.install_excepthook()
    error = InputError("the scene is bad")

    def raised(argv):
        seen.clear()
        monkeypatch.setattr(sys, "argv", argv)
        sys.excepthook(InputError, error, None)
        return list(seen)

    assert raised(["ns-train", "splatfacto", "--data", "x"]) == [InputError]  # nerfstudio's, untouched
    assert raised(["ns-eval", "--load-config", "outputs/x/splatfacto/2026/config.yml"]) == [InputError]
    assert raised(["ns-train", "jax-gs", "--data", "x"]) == []  # one line instead
    assert raised(["ns-eval", "--load-config=outputs/x/jax-2dgs/2026/config.yml"]) == []
    config = tmp_path / "elsewhere.yml"  # an existing config is judged by the method it names, not its path
    config.write_text("method_name: splatfacto\n")
    assert raised(["ns-viewer", "--load-config", str(config)]) == [InputError]
    config.write_text("!!python/object:x\nmethod_name: jax-gs-mcmc\n")
    assert raised(["ns-viewer", "--load-config", str(config)]) == []
    monkeypatch.setitem(hooks._run, "jaxgs", True)  # a jax-gs pipeline was built in this process
    assert raised(["python", "script.py"]) == []


def test_another_methods_missing_config_keeps_nerfstudios_error(tmp_path):
    """ns-eval of a splatfacto run's missing config.yml: nerfstudio's own traceback; of a jax-gs
    run's: one line."""
    from commands import BIN, run_command

    theirs = run_command([BIN / "ns-eval", "--load-config", tmp_path / "outputs/s/splatfacto/t/config.yml"],
                         expect_rc=1, timeout=600)
    assert "Traceback" in theirs.stderr and "jax-gs: error" not in theirs.stderr
    ours = run_command([BIN / "ns-eval", "--load-config", tmp_path / "outputs/s/jax-gs/t/config.yml"],
                       expect_rc=1, timeout=600)
    assert "jax-gs: error: config file" in ours.stderr and "Traceback" not in ours.stderr


_PLUGINS_CHILD = """
import json
import nerfstudio.scripts.train
from nerfstudio_jaxgs import hooks
hooks.install_pipeline_hooks()
import jax
print(json.dumps(sorted({d.platform for d in jax.devices()})))
"""


def test_a_host_without_accelerators_starts_no_accelerator_plugin():
    """With the [gpu]/[tpu] extras installed (CI installs both) and no GPU or TPU on the host, a
    jax-gs run starts JAX's CPU backend alone: no CUDA-plugin traceback, no libtpu warnings."""
    import glob
    import json
    import os
    import subprocess

    from jax_backend.devices import ACCELERATOR_NODES

    if any(glob.glob(p) for p in ACCELERATOR_NODES):
        pytest.skip("this host has an accelerator device: JAX finds it as usual")
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    proc = subprocess.run([sys.executable, "-c", _PLUGINS_CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["cpu"]
    for noise in ("Traceback", "plugin configuration error", "TPU", "libtpu", "cuInit"):
        assert noise not in proc.stderr, proc.stderr[-3000:]


def test_no_plugin_module_swaps_nerfstudios_datasets():
    """The datamanager's datasets are swapped in hooks.py alone (`training_views`)."""
    for p in PLUGIN.glob("*.py"):
        tree = ast.parse(p.read_text())
        swaps = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Attribute) and t.attr in ("train_dataset", "eval_dataset")]
        assert not swaps or p.name == "hooks.py", (p.name, swaps)


def test_progress_lines_print_info_and_up_once(capsys):
    """jax-gs's logging records print as `[jax-gs] ...` lines on stdout, INFO and up, once however
    often the hook is installed."""
    import logging

    hooks.install_progress_lines()
    hooks.install_progress_lines()
    logging.getLogger("nerfstudio_jaxgs.pipeline").info("read %d images", 3)
    logging.getLogger("jax_backend.files.compile_cache").warning("cache off")
    logging.getLogger("jax_backend.training").debug("not shown")
    assert capsys.readouterr().out == "[jax-gs] read 3 images\n[jax-gs] cache off\n"
    assert sum(isinstance(h, hooks._ProgressLines) for h in logging.getLogger("jax_backend").handlers) == 1
