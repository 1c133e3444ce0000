"""#13's CPU speed, side by side in one run against an older checkout (e.g. the commit the work
started from, in a temporary worktree):

    git worktree add /tmp/before <commit>
    python -m benchmarks.cpu_speed --before /tmp/before [--fox-steps 700]

For each tree, one process per figure, alternating which tree goes first, after a throwaway
warm-up process:
- `benchmarks.train`'s scene (504x378, 10k Gaussians, density control off): steps/s of the scan
  block and the process's peak memory;
- `ns-train` on the bundled fox with the main job's command (jax-gs-mcmc, 20,000 random
  Gaussians, full resolution): seconds from start to nerfstudio's first progress line (the end of
  the first 100-step block), training steps/s between the progress lines of steps 199 and the
  last, and the peak memory of the run (`/usr/bin/time`). Both without a compilation cache (the
  older tree has none): the first run's start;
- the same `ns-train` without nerfstudio's eval image (`--steps-per-eval-image 0`): the window of
  the run above holds step 500's eval, whose render is compiled then (2-3 s on the fox); this one
  times training steps alone.

Each tree runs its own code: PYTHONPATH puts the tree first, so `ns-train` loads that tree's
plugin and backend.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
import time
from pathlib import Path

from . import startup, versus

HERE = Path(__file__).resolve().parents[1]
FOX = HERE / "data" / "fox"
PROGRESS = re.compile(r"^\s*(\d+) \(\s*[\d.]+%\)")  # nerfstudio's progress table: "199 (13.27%) ..."


def train_scene(tree: Path, steps: int) -> dict:
    return versus.child(str(tree), ["benchmarks.train", "--child", "scan-flat", "--steps", steps])


def ns_train_fox(tree: Path, steps: int, out_dir: Path, eval_image: bool = True) -> dict:
    extra = ["--steps-per-save", 10 * steps] + ([] if eval_image else ["--steps-per-eval-image", 0])
    cmd = ["/usr/bin/time", "-f", "MAXRSS %M", *startup.command(FOX, out_dir, steps, extra)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tree,
                            env=versus.tree_env(tree, JAX_PLATFORMS="cpu", JAXGS_COMPILATION_CACHE="off"))
    seen, lines, rss = {}, [], None
    for line in proc.stdout:
        lines.append(line)
        m = PROGRESS.match(line)
        if m:
            seen.setdefault(int(m.group(1)), time.perf_counter() - t0)
        if line.startswith("MAXRSS"):
            rss = int(line.split()[1]) / 1024
    if proc.wait() or len(seen) < 2:
        raise RuntimeError(f"{tree}: ns-train failed:\n{''.join(lines[-30:])}")
    first = min(seen)
    a, b = 199 if 199 in seen else sorted(seen)[1], max(seen)
    return {"first_block_s": seen[first], "steps_per_s": (b - a) / (seen[b] - seen[a]), "peak_rss_mib": rss,
            "steps_timed": f"{a}-{b}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="a checkout of the commit to compare against")
    ap.add_argument("--train-steps", type=int, default=40)
    ap.add_argument("--fox-steps", type=int, default=700)
    a = ap.parse_args()
    trees = {"before": a.before.resolve(), "after": HERE}
    print(f"# before: {trees['before']}; after: {HERE}; one process per figure, alternating order", flush=True)
    train_scene(HERE, 5)  # warm-up: the first process of a run measured slower here
    res = {"before": {}, "after": {}}
    order = ["before", "after"]
    with tempfile.TemporaryDirectory() as tmp:
        for what in ("scene", "fox", "fox_no_eval"):
            for name in order:
                if what == "scene":
                    r = train_scene(trees[name], a.train_steps)
                else:
                    r = ns_train_fox(trees[name], a.fox_steps, Path(tmp) / f"{what}-{name}", eval_image=what == "fox")
                res[name][what] = r
                print(f"{what} {name}: {json.dumps(r)}", flush=True)
            order.reverse()
    b, f = res["before"], res["after"]
    rows = [
        ("benchmarks.train scene (504x378, 10k): steps/s", b["scene"]["steps_per_s"], f["scene"]["steps_per_s"]),
        ("benchmarks.train scene: peak MiB", b["scene"]["peak_rss_mib"], f["scene"]["peak_rss_mib"]),
        (f"ns-train fox: steps/s (steps {f['fox']['steps_timed']})", b["fox"]["steps_per_s"], f["fox"]["steps_per_s"]),
        (f"ns-train fox without the eval image: steps/s (steps {f['fox_no_eval']['steps_timed']})",
         b["fox_no_eval"]["steps_per_s"], f["fox_no_eval"]["steps_per_s"]),
        ("ns-train fox: seconds to the end of the first block (no cache)", b["fox"]["first_block_s"],
         f["fox"]["first_block_s"]),
        ("ns-train fox: peak MiB", b["fox"]["peak_rss_mib"], f["fox"]["peak_rss_mib"]),
    ]
    print("\n| measurement | before | after | after/before |\n|---|---|---|---|")
    for name, x, y in rows:
        print(f"| {name} | {x:.2f} | {y:.2f} | {y / x:.2f} |")


if __name__ == "__main__":
    main()
