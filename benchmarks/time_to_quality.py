"""Held-out quality against wall-clock time, through the plain commands (#53, part 4): each recipe
is an `ns-train` command run from its start (imports, data loading and compilation included) with
a checkpoint every `--save-every` steps; afterwards `ns-eval` measures every checkpoint on the
held-out views. A checkpoint's time is when its file was written, counted from the command's
start. The recipes run one after the other in one invocation, on the same scene and machine.

Prints each recipe's curve (step, seconds, PSNR, SSIM), and the time each took to reach the
lower of the two final PSNRs (the first checkpoint at or above it, interpolated linearly between
checkpoints), with their ratio.

    python -m benchmarks.time_to_quality --scene snowmiku \\
        --recipe "jax-gs --max-num-iterations 7000" --recipe "jax-gs-fast" --save-every 500
    python -m benchmarks.time_to_quality --scene fox --recipe "jax-gs --max-num-iterations 1000" \\
        --recipe "jax-gs-mcmc --max-num-iterations 1000" --save-every 250

Scenes: snowmiku (`../shared/data/snowmiku`, colmap --colmap-path sparse/0 --downscale-factor 4) and
fox (`data/fox`, nerfstudio-data); the dataparser's own split holds out the evaluation views.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    log = out / f"{name}.log"
    stopped = False
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu")))
        try:
            proc.wait(timeout=stop_after)
        except subprocess.TimeoutExpired:  # checkpoints are written atomically: those on disk are whole
            stopped = True
            proc.terminate()
            proc.wait()
    total = time.time() - start
    if proc.returncode and not stopped:
        raise RuntimeError(f"{recipe!r} failed ({proc.returncode}); its output: {log}")
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scene", choices=sorted(SCENES), default="snowmiku")
    ap.add_argument("--recipe", action="append", required=True,
                    help="an ns-train method and its settings (twice: side by side; once: its curve alone)")
    ap.add_argument("--save-every", type=int, default=500)
    ap.add_argument("--stop-after", type=float, default=None,
                    help="seconds: stop a recipe's ns-train then and measure the checkpoints it wrote (a partial curve)")
    ap.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    a = ap.parse_args()
    if len(a.recipe) not in (1, 2):
        ap.error("give one or two --recipe")
    out = a.out or Path(tempfile.mkdtemp(prefix="time_to_quality_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"# python -m benchmarks.time_to_quality --scene {a.scene} "
          + " ".join(f"--recipe {shlex.quote(r)}" for r in a.recipe) + f" --save-every {a.save_every}"
          + (f" --stop-after {a.stop_after:g}" if a.stop_after else ""))
    print(f"# runs in {out}; seconds from each ns-train command's start to its checkpoint's write")
    curves = []
    for i, recipe in enumerate(a.recipe):
        run, times, total, stopped = train(recipe, a.scene, out, a.save_every, f"recipe{i}", a.stop_after)
        rows = [(step, t, evaluate(run, step)) for step, t in times.items()]
        counts = gaussian_counts(run)
        curves.append((recipe, rows))
        print(f"\n{recipe} (" + (f"stopped after {total:.0f} s at the limit: the curve ends at its last checkpoint)"
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
    main()
