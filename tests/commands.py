"""Running the real ns-* commands from tests: where they are, the bundled scene, their environment."""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOX = ROOT / "data" / "fox"
BIN = Path(sys.executable).parent


def command_env(**extra):
    """The ns-* commands run on one CPU device unless a test asks for more (conftest forces 4)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return dict(env, JAX_PLATFORMS="cpu", **extra)
