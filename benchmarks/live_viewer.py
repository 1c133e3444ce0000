"""What watching a run costs (#56): the same `ns-train` on the fox with `--vis tensorboard`, then
with `--vis viewer` and a real headless Chromium attached for the whole run (the camera still),
one after the other in one invocation. Prints each run's training speed (steps per second over
the blocks after the first, as the run logs them), their ratio, and how the viewer followed the
run: the step readouts it showed and how often the canvas changed.

    python -m benchmarks.live_viewer [--steps 1500] [--method jax-gs-mcmc]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from browser import Browser, free_port, shows_a_render, wait_for_port, watch_run  # noqa: E402
from commands import BIN, FOX, command_env  # noqa: E402


def command(method: str, steps: int, out: Path, name: str, vis: str, port: int = 0) -> list:
    cmd = [str(BIN / "ns-train"), method, "--data", str(FOX), "--output-dir", str(out), "--timestamp", name,
           "--max-num-iterations", str(steps), "--vis", vis, "--viewer.quit-on-train-completion", "True",
           "--steps-per-save", "100000", "--pipeline.model.num-random", "20000",
           "--pipeline.model.random-scale", "1.0", "--pipeline.model.num-downscales", "0",
           "--pipeline.model.background-color", "black"]
    if port:
        cmd += ["--viewer.websocket-port", str(port)]
    return cmd + ["nerfstudio-data", "--eval-mode", "interval", "--eval-interval", "8"]


def steps_per_sec(run: Path) -> list:
    """[(step, steps/s)] of every logged block but the first (which compiles)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rows = []
    for f in run.glob("events.out.tfevents.*"):
        ea = EventAccumulator(str(f), size_guidance={"scalars": 0})
        ea.Reload()
        if "Train Metrics Dict/steps_per_sec" in ea.Tags()["scalars"]:
            rows += [(e.step, e.value) for e in ea.Scalars("Train Metrics Dict/steps_per_sec")]
    return sorted(rows)[1:]


def run_plain(method, steps, out):
    with open(out / "tensorboard.log", "w") as log:
        subprocess.run(command(method, steps, out, "tensorboard", "tensorboard"), stdin=subprocess.DEVNULL,
                       stdout=log, stderr=subprocess.STDOUT, env=command_env(), check=True)
    return steps_per_sec(next(out.glob("*/*/tensorboard")))


def run_watched(method, steps, out):
    port = free_port()
    log = open(out / "viewer.log", "w")
    train = subprocess.Popen(command(method, steps, out, "viewer", "viewer+tensorboard", port),
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=command_env())
    browser, seen = None, []
    try:
        wait_for_port(port, 600, train)
        browser = Browser()
        browser.open(f"http://127.0.0.1:{port}")
        seen = watch_run(browser, train, timeout=3600)
        if train.wait(300):
            raise RuntimeError(f"the watched run failed: {out / 'viewer.log'}")
    finally:
        if browser is not None:
            browser.close()
        if train.poll() is None:
            train.kill()
        log.close()
    return steps_per_sec(next(out.glob("*/*/viewer"))), seen


def main():
    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--method", default="jax-gs-mcmc")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="live_viewer_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"# python -m benchmarks.live_viewer --steps {a.steps} --method {a.method}; runs in {out}")
    plain = run_plain(a.method, a.steps, out)
    watched, seen = run_watched(a.method, a.steps, out)
    p, w = float(np.mean([v for _, v in plain])), float(np.mean([v for _, v in watched]))
    print("| run | steps/s (blocks after the first) | per block |")
    print("|---|---|---|")
    print(f"| --vis tensorboard | {p:.2f} | {', '.join(f'{v:.1f}' for _, v in plain)} |")
    print(f"| --vis viewer, Chromium attached | {w:.2f} | {', '.join(f'{v:.1f}' for _, v in watched)} |")
    print(f"ratio (watched / plain): {w / p:.2f}")
    steps = [s for _, s, _ in seen]
    distinct = sorted(set(steps))
    frames = [next(c for _, s, c in seen if s == step) for step in distinct]
    changes = [float(np.abs(x - y).mean()) for x, y in zip(frames, frames[1:])]
    print(f"screenshots every 2 s: {len(seen)}; step readouts shown: {distinct}")
    print(f"canvas change between successive readouts (mean |difference|, grey levels): "
          f"{', '.join(f'{c:.1f}' for c in changes)}")
    print(f"last screenshot shows a render: {bool(seen) and shows_a_render(seen[-1][2])}")


if __name__ == "__main__":
    main()
