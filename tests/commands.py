"""Running the real ns-* commands from tests: where they are, the bundled scene, their environment."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOX = ROOT / "data" / "fox"
BIN = Path(sys.executable).parent


def command_env(**extra):
    """The ns-* commands run on one CPU device unless a test asks for more (conftest forces 4)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return dict(env, JAX_PLATFORMS="cpu", **extra)


def run_command(args, expect_rc=0, timeout=1800, **env_extra):
    """Run an ns-* (or other) command with no stdin; assert its exit status; return the result."""
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=command_env(**env_extra),
                         timeout=timeout, stdin=subprocess.DEVNULL)
    assert out.returncode == expect_rc, f"{args[0]} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out
