"""The README's commands and paths are true: every `ns-*`, `python -m ...`, `python scripts/...`
and `pip install` line in its code blocks parses (nerfstudio's own tyro configs, `--help`, the
package's extras), every repository path it names exists, and the settings table is the one
`scripts/settings_table.py` generates from the code."""
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _code_lines():
    lines, inside = [], False
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        if inside:
            lines.append(line.split(" #")[0].strip())
    # inline commands given with their flags (a bare `ns-export gaussian-splat` is a name, not a command)
    spans = [c for c in re.findall(r"`((?:ns-|python |python3 |pip install )[^`]+)`", README.read_text()) if " -" in c]
    return [ln for ln in lines + spans if ln]


def _commands(prefixes):
    out = []
    for line in _code_lines():
        for part in re.split(r"&&|;", line):
            words = shlex.split(part.strip())
            while words and "=" in words[0] and not words[0].startswith("-"):
                words = words[1:]  # environment assignments
            if words and any(" ".join(words).startswith(p) for p in prefixes):
                out.append(words)
    return out


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 260


def test_ns_commands_parse_with_nerfstudio_s_own_configs():
    import tyro
    from nerfstudio.configs.method_configs import AnnotatedBaseConfigUnion
    from nerfstudio.scripts import eval as ns_eval
    from nerfstudio.scripts import exporter, render
    from nerfstudio.scripts.viewer import run_viewer

    parsers = {
        "ns-train": lambda args: tyro.cli(AnnotatedBaseConfigUnion, args=args),
        "ns-export": lambda args: tyro.cli(exporter.Commands, args=args),
        "ns-eval": lambda args: tyro.cli(ns_eval.ComputePSNR, args=args),
        "ns-render": lambda args: tyro.cli(render.Commands, args=args),
        "ns-viewer": lambda args: tyro.cli(tyro.conf.FlagConversionOff[run_viewer.RunViewer], args=args),
    }
    seen = set()
    for words in _commands(tuple(parsers)):
        try:
            parsers[words[0]](words[1:])
        except SystemExit:  # tyro printed why above
            pytest.fail(f"the README's command does not parse: {shlex.join(words)}")
        seen.add(words[0])
    assert seen == set(parsers), seen


def test_python_commands_show_their_help():
    commands = _commands(("python -m benchmarks", "python scripts/", "python3 scripts/"))
    assert commands
    for words in commands:
        target = words[1:3] if words[1] == "-m" else words[1:2]
        out = subprocess.run([sys.executable, *target, "--help"], cwd=ROOT, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, (words, out.stderr[-2000:])


def test_pip_extras_exist():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for words in _commands(("pip install",)):
        for w in words[2:]:
            m = re.fullmatch(r"\.\[(\w+)\]", w.strip("\"'"))
            if m:
                assert m.group(1) in extras, w


def test_paths_it_names_exist():
    text = README.read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text)
    code = re.findall(r"`((?:scripts|benchmarks|docs|data|tests|jax_backend|nerfstudio_jaxgs)/[\w./-]*)`", text)
    words = [w for line in _code_lines() for w in line.split()
             if re.match(r"(scripts|benchmarks|docs|data|tests)/", w)]
    missing = [p for p in links + code + words if not (ROOT / p).exists() and not p.startswith("http")]
    assert not missing, missing


def test_settings_table_is_the_generated_one():
    out = subprocess.run([sys.executable, "scripts/settings_table.py", "--check", "README.md"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]


def test_ci_runs_the_slow_suite_and_fails_when_it_collects_nothing():
    """`.ci/run` runs the slow suite under `set -e`, with no exit status let through (pytest's 5,
    "no tests collected", would turn CI green while running nothing), and the slow marker selects
    the end-to-end tests."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "set -euo pipefail" in ci and "python -m pytest -q -m slow\n" in ci
    assert "|| rc=$?" not in ci and "-ne 5" not in ci
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", "-n", "0",
                           "tests/test_plugin.py", "tests/test_accelerator_compile.py"], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    collected = [line for line in proc.stdout.splitlines() if "::" in line]
    assert len(collected) >= 3, proc.stdout[-2000:]
