"""Time from `ns-train` start to the end of its first training block, side by side in one run:
without the persistent compilation cache, with an empty cache (the first run on a machine), and
with the cache the previous run filled (every later run of the same configuration).

The command is the main job's (`scripts/main_job.sh`: jax-gs-mcmc on the bundled fox); it is
stopped once the first block is done. Each run gets its own output folder.

    python -m benchmarks.startup [--data ../shared/data/fox] [--repeat 1]
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import cli

FOX = Path(__file__).resolve().parents[2] / "shared" / "data" / "fox"
MARK = "[jax-gs] first block"


def command(data: Path, out: Path, steps: int = 1500, extra=()) -> list:
    """The main job's `ns-train` (scripts/main_job.sh) for `steps` steps, `extra` trainer flags
    before the dataparser."""
    ns_train = str(Path(sys.executable).with_name("ns-train"))
    return [ns_train, "jax-gs-mcmc", "--data", str(data), "--output-dir", str(out), "--max-num-iterations", str(steps),
            "--vis", "tensorboard", "--machine.device-type", "cpu", "--viewer.quit-on-train-completion", "True",
            "--pipeline.model.num-random", "20000", "--pipeline.model.random-scale", "1.0",
            "--pipeline.model.num-downscales", "0", "--pipeline.model.background-color", "black",
            "--optimizers.means.scheduler.max-steps", str(steps), *map(str, extra),
            "nerfstudio-data", "--eval-mode", "interval", "--eval-interval", "8"]


def time_to_first_block(data: Path, out: Path, cache: str) -> float:
    """Seconds from starting ns-train to its first-block line (the process is stopped there)."""
    env = dict(os.environ, JAXGS_COMPILATION_CACHE=cache, JAX_PLATFORMS="cpu")
    t0 = time.perf_counter()
    proc = subprocess.Popen(command(data, out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if MARK in line:
                return time.perf_counter() - t0
        raise RuntimeError("ns-train ended before its first block:\n" + "".join(lines[-30:]))
    finally:
        proc.kill()
        proc.wait()


def main(data: Path = FOX, repeat: int = 1) -> None:
    """`repeat`: rounds of the three runs (the best of each is kept)."""
    best = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeat):
            cache = Path(tmp) / f"cache{r}"
            for name, folder in (("no cache", "off"), ("empty cache", str(cache)), ("filled cache", str(cache))):
                t = time_to_first_block(data, Path(tmp) / f"out{r}-{name.replace(' ', '-')}", folder)
                best[name] = min(best.get(name, t), t)
                print(f"round {r + 1}: {name:12s} {t:6.1f} s to the end of the first block", flush=True)
    print("\n| ns-train start to the end of its first block | seconds | vs no cache |\n|---|---|---|")
    for name, t in best.items():
        print(f"| {name} | {t:.1f} | {t / best['no cache']:.2f}x |")


if __name__ == "__main__":
    cli(main, "startup")
