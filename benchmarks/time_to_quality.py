"""Held-out quality against wall-clock time, through the plain commands (#53, part 4): each recipe
is an `ns-train` command run from its start (imports, data loading and compilation included) with
a checkpoint every `--save-every` steps; afterwards `ns-eval` measures every checkpoint on the
held-out views. A checkpoint's time is when its file was written, counted from the command's
start. The recipes run one after the other in one invocation, on the same scene and machine.

Prints each recipe's curve (step, seconds, PSNR, SSIM), and the time each took to reach the
lower of the two final PSNRs (the first checkpoint at or above it, interpolated linearly between
checkpoints), with their ratio.

    python -m benchmarks.time_to_quality --scene snowmiku \\
        --recipe "jax-gs --max-num-iterations 7000" "jax-gs-fast" --save-every 500
    python -m benchmarks.time_to_quality --scene fox --recipe "jax-gs --max-num-iterations 1000" \\
        "jax-gs-mcmc --max-num-iterations 1000" --save-every 250

Scenes: snowmiku (`../shared/data/snowmiku`, colmap --colmap-path sparse/0 --downscale-factor 4) and
fox (`data/fox`, nerfstudio-data); the dataparser's own split holds out the evaluation views.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Literal, Optional

from benchmarks.harness import cli, run_command

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCENES = {
    "snowmiku": (ROOT.parent / "shared" / "data" / "snowmiku", ["colmap", "--colmap-path", "sparse/0",
                                                                "--downscale-factor", "4"]),
    "fox": (ROOT / "data" / "fox", ["nerfstudio-data"]),
}


def train(recipe: str, scene: str, out: Path, save_every: int, name: str, stop_after: float = None) -> tuple:
    """Run one recipe's ns-train; (its run folder, {step: seconds from the command's start}, the
    command's whole time in seconds, whether it was stopped at `stop_after` seconds before its
    last step: then its curve ends at the last checkpoint written by then)."""
    data, parser = SCENES[scene]
    method, *args = shlex.split(recipe)
    cmd = [str(BIN / "ns-train"), method, "--data", str(data), "--output-dir", str(out), "--timestamp", name,
           "--vis", "tensorboard", "--viewer.quit-on-train-completion", "True",
           "--steps-per-save", str(save_every), "--save-only-latest-checkpoint", "False", *args, *parser]
    start = time.time()
    result = run_command(cmd, out / f"{name}.log", timeout=stop_after)
    total, stopped = result["seconds"], result["stopped"]
    run = next(out.glob(f"*/{method}/{name}"))
    times = {int(re.search(r"step-(\d+)\.ckpt", p.name)[1]): p.stat().st_mtime - start
             for p in (run / "nerfstudio_models").glob("step-*.ckpt")}
    return run, dict(sorted(times.items())), total, stopped


def gaussian_counts(run: Path) -> dict:
    """{step: live Gaussians} as the run logged them (tensorboard's gaussian_count)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    counts = {}
    for f in run.glob("events.out.tfevents.*"):
        ea = EventAccumulator(str(f), size_guidance={"scalars": 0})
        ea.Reload()
        if "Train Metrics Dict/gaussian_count" in ea.Tags()["scalars"]:
            counts.update({e.step: int(e.value) for e in ea.Scalars("Train Metrics Dict/gaussian_count")})
    return dict(sorted(counts.items()))


def count_at(counts: dict, step: int):
    """The last logged Gaussian count at or before `step` (None: none logged)."""
    logged = [n for s, n in counts.items() if s <= step]
    return logged[-1] if logged else None


def evaluate(run: Path, step: int) -> dict:
    """ns-eval of one checkpoint (a copy of the run's config naming its step)."""
    config = (run / "config.yml").read_text()
    config = re.sub(r"^load_step: .*$", f"load_step: {step}", config, flags=re.M)
    with tempfile.TemporaryDirectory() as tmp:
        copy = run / f"config_step{step}.yml"
        copy.write_text(config)
        out = Path(tmp) / "eval.json"
        proc = subprocess.run([str(BIN / "ns-eval"), "--load-config", str(copy), "--output-path", str(out)],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              env=dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu")))
        copy.unlink()
        if proc.returncode:
            raise RuntimeError(f"ns-eval of {run} step {step} failed:\n{proc.stderr[-2000:]}")
        return json.loads(out.read_text())["results"]


def time_to(curve: list, target: float):
    """Seconds at which `curve` [(seconds, psnr)] first reaches `target` (linear between points)."""
    prev = None
    for t, p in curve:
        if p >= target:
            if prev is None or prev[1] >= target:
                return t
            (t0, p0) = prev
            return t0 + (t - t0) * (target - p0) / (p - p0)
        prev = (t, p)
    return None


def main(recipe: List[str], scene: Literal["snowmiku", "fox"] = "snowmiku", save_every: int = 500,
         stop_after: Optional[float] = None, out: Optional[Path] = None) -> None:
    """`recipe`: one or two ns-train methods with their settings (two: side by side; one: its curve
    alone); `stop_after`: seconds, stop a recipe's ns-train then and measure the checkpoints it
    wrote (a partial curve); `out`: where the runs go (default: a temporary folder)."""
    if len(recipe) not in (1, 2):
        raise SystemExit("--recipe: give one or two recipes")
    out = out or Path(tempfile.mkdtemp(prefix="time_to_quality_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"# runs in {out}; seconds from each ns-train command's start to its checkpoint's write")
    curves = []
    for i, one in enumerate(recipe):
        run, times, total, stopped = train(one, scene, out, save_every, f"recipe{i}", stop_after)
        rows = [(step, t, evaluate(run, step)) for step, t in times.items()]
        counts = gaussian_counts(run)
        curves.append((one, rows))
        print(f"\n{one} (" + (f"stopped after {total:.0f} s at the limit: the curve ends at its last checkpoint)"
                                  if stopped else f"the whole command: {total:.0f} s)"))
        print("| step | seconds | held-out PSNR | SSIM | Gaussians |")
        print("|---|---|---|---|---|")
        for step, t, r in rows:
            print(f"| {step} | {t:.0f} | {r['psnr']:.2f} | {r['ssim']:.3f} | {count_at(counts, step) or '-'} |", flush=True)
    if len(curves) < 2:
        return
    target = min(rows[-1][2]["psnr"] for _, rows in curves)
    print(f"\nTime to reach {target:.2f} dB (the lower final PSNR):")
    reached = []
    for recipe, rows in curves:
        t = time_to([(t, r["psnr"]) for _, t, r in rows], target)
        reached.append(t)
        print(f"- {recipe}: {'not reached' if t is None else f'{t:.0f} s'}")
    if None not in reached and reached[1] > 0:
        print(f"ratio (first / second): {reached[0] / reached[1]:.2f}")


if __name__ == "__main__":
    cli(main, "time_to_quality")
