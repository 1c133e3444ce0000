"""The seams between modules, read from the source: no module reaches into another object's private
members, and the choices a program makes by platform are the layout's or the lowering's, never a
module's state."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# NamedTuple's public API and the standard library's, spelt with an underscore
PUBLIC_UNDERSCORED = {"_replace", "_fields", "_asdict", "_make", "_field_defaults", "_exit", "_getframe"}
# nerfstudio's InputDataset keeps the mask files only there (nerfstudio's own code reads it so)
# and FullImageDatamanager undistorts only inside its `_load_images` (hooks.cache_images)
NERFSTUDIO_PRIVATE = {("nerfstudio_jaxgs/checks.py", "_dataparser_outputs"),
                      ("nerfstudio_jaxgs/hooks.py", "_load_images")}


def _private_reaches(package: str, root: Path = ROOT) -> list:
    found = []
    for path in sorted((root / package).rglob("*.py")):
        rel = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                continue
            if node.attr in PUBLIC_UNDERSCORED or (rel, node.attr) in NERFSTUDIO_PRIVATE:
                continue
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_touches_another_objects_private_members():
    """The plugin talks to the engine and the model through public members (the pipeline owns the
    engine and publishes its Gaussians: `JaxGSModel.publish`), and so does the backend."""
    assert _private_reaches("nerfstudio_jaxgs") == []
    assert _private_reaches("jax_backend") == []


def test_the_checker_finds_a_private_reach(tmp_path):
    bad = tmp_path / "pkg"
    bad.mkdir()
    (bad / "m.py").write_text("def f(pipeline):\n    pipeline.model._view_cache = None\n    return self._ok\n")
    assert _private_reaches("pkg", tmp_path) == ["pkg/m.py:2: pipeline.model._view_cache"]


def test_no_module_global_decides_how_a_program_is_built():
    """No `global` statement in the backend (the device target was one: `devices._target`), and
    nothing reads a platform but the layout (`Layout.platform`) and JAX's lowering
    (`array_ops.per_platform`)."""
    for path in sorted((ROOT / "jax_backend").rglob("*.py")):
        tree = ast.parse(path.read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Global)], path
        text = path.read_text()
        assert "devices.platform()" not in text and "default_backend()" not in text, path


def test_nerfstudios_per_batch_loss_path_says_it_is_not_used():
    """jax-gs's loss lives in the compiled block: nerfstudio's per-batch torch loss and metrics
    (splatfacto's, inherited) stop with one line saying so instead of running gsplat's code."""
    import pytest

    from nerfstudio_jaxgs.model import JaxGSModel
    from nerfstudio_jaxgs.pipeline import JaxGSPipeline

    calls = [lambda: JaxGSModel.get_loss_dict(None, {}, {}), lambda: JaxGSModel.get_metrics_dict(None, {}, {}),
             lambda: JaxGSPipeline.get_train_loss_dict(None, 0), lambda: JaxGSPipeline.get_eval_loss_dict(None, 0)]
    for call in calls:
        with pytest.raises(NotImplementedError, match="inside the compiled training block"):
            call()


def test_library_modules_stay_readable_and_hold_no_measured_figures():
    """No library module over 400 lines; measured figures (times, sizes, speed-ups, "this machine")
    live in benchmarks/results/ (library_figures.md), the code keeps the reasons and cites them."""
    import re

    figure = re.compile(r"\b\d+(\.\d+)? ?(ms|GB|MB|GiB|MiB)\b|\b\d+(\.\d+)?x (faster|slower|as long)|this machine|"
                        r"this CPU|\(measured\)|, measured\)")
    long, figures = [], []
    for package in ("jax_backend", "nerfstudio_jaxgs"):
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text()
            if len(text.splitlines()) > 400:
                long.append((path.name, len(text.splitlines())))
            figures += [f"{path.relative_to(ROOT)}:{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1)
                        if figure.search(line)]
    assert not long, long
    assert not figures, figures
    assert figure.search("took 5.3 ms (measured)") and figure.search("3.4x as long")  # the check finds them
