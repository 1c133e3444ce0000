"""What each piece of `jax-gs-fast` does (#53, part 3): the recipe, then the recipe with one piece
put back to `jax-gs`'s setting, each trained through `ns-train` and measured by `ns-eval` on the
held-out views, one after the other in one invocation on the same machine.

Prints one row per run: held-out PSNR and SSIM at the last step, the live Gaussians then, and the
whole command's wall time (imports, data loading, compilation and checkpoint writes included).

    python -m benchmarks.fast_ablation --scene snowmiku
    python -m benchmarks.fast_ablation --scene fox --only recipe,schedule
"""
from __future__ import annotations

import argparse
import shlex
import tempfile
from pathlib import Path

from .time_to_quality import SCENES, count_at, evaluate, gaussian_counts, train

# (name, what is put back to jax-gs's setting, the extra ns-train arguments)
PIECES = (
    ("recipe", "nothing: jax-gs-fast as it ships", ""),
    ("schedule", "full resolution from half the run (jax-gs: 0.5), not its last 10%",
     "--pipeline.model.full-resolution-at 0.5"),
    ("budget", "no Gaussian budget (jax-gs: max-gaussians 0), not 100,000", "--pipeline.model.max-gaussians 0"),
    ("window", "densify from step 500 to the end (jax-gs's warmup-length and stop-split-at), not 300 to 1700",
     "--pipeline.model.warmup-length 500 --pipeline.model.stop-split-at 15000"),
    ("sh", "an SH band every 1,000 steps (jax-gs), not every 500", "--pipeline.model.sh-degree-interval 1000"),
)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scene", choices=sorted(SCENES), default="snowmiku")
    ap.add_argument("--only", default="", help="comma-separated piece names (default: all)")
    ap.add_argument("--args", default="", help="more ns-train arguments for every run (e.g. --max-num-iterations 300)")
    ap.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    a = ap.parse_args()
    names = [p[0] for p in PIECES]
    only = [n for n in a.only.split(",") if n] or names
    unknown = set(only) - set(names)
    if unknown:
        ap.error(f"unknown pieces {sorted(unknown)}; known: {names}")
    out = a.out or Path(tempfile.mkdtemp(prefix="fast_ablation_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"# python -m benchmarks.fast_ablation --scene {a.scene}"
          + (f" --only {a.only}" if a.only else "") + (f" --args {shlex.quote(a.args)}" if a.args else ""))
    print(f"# runs in {out}")
    print("| piece put back | what changes | held-out PSNR | SSIM | Gaussians | wall time (s) |")
    print("|---|---|---|---|---|---|")
    for name, what, extra in PIECES:
        if name not in only:
            continue
        recipe = " ".join(x for x in ("jax-gs-fast", a.args, extra) if x)
        run, times, total, _ = train(recipe, a.scene, out, 10**6, name)  # one checkpoint: the last step's
        step = max(times)
        r = evaluate(run, step)
        print(f"| {name} | {what} | {r['psnr']:.2f} | {r['ssim']:.3f} | {count_at(gaussian_counts(run), step) or '-'} "
              f"| {total:.0f} |", flush=True)


if __name__ == "__main__":
    main()
