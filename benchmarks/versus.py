"""The rasterizer and training benchmarks of two checkouts side by side, in one run: every
configuration is measured in the "before" tree and in this one, one process each, alternating
which goes first, and the table prints both figures and their ratio.

    git worktree add /tmp/before <commit>
    python -m benchmarks.versus --before /tmp/before [--sizes 10000 100000 300000] [--repeats 3] [--rounds 3]

With --rounds R each configuration is measured R times in each tree (a fresh process each time,
the order alternating), and the table gives the median of the R figures: on a shared host one
process's figure can be off by a third either way.

Each tree runs its own benchmark code (`python -m benchmarks.rasterizer --child ...`,
`python -m benchmarks.train --child ...`) from its own folder, so each imports its own jax_backend.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tree_env(tree, **overrides) -> dict:
    """The environment of a process that runs `tree`'s code: PYTHONPATH puts the tree first (CPU
    unless JAX_PLATFORMS says otherwise), then `overrides`."""
    return {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"), "PYTHONPATH": str(tree), **overrides}


def child(tree: str, args) -> dict:
    out = subprocess.run([sys.executable, "-m", *map(str, args)], capture_output=True, text=True, cwd=tree,
                         env=tree_env(tree))
    if out.returncode:
        raise RuntimeError(f"{tree}: {' '.join(map(str, args))} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def pair(before: str, args, flip: bool, rounds: int = 1):
    """(before's result, this tree's result), each the round with the median of its `key` figure."""
    runs = {"before": [], "after": []}
    for r in range(rounds):
        order = [("after", HERE), ("before", before)] if flip ^ (r % 2 == 1) else [("before", before), ("after", HERE)]
        for name, tree in order:
            runs[name].append(child(tree, args))
    key = "steps_per_s" if "steps_per_s" in runs["before"][0] else "median_s"
    middle = {k: sorted(v, key=lambda x: x[key])[len(v) // 2] for k, v in runs.items()}
    return middle["before"], middle["after"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="a checkout of the commit to compare against")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1, help="processes per configuration and tree (median taken)")
    ap.add_argument("--train-steps", type=int, default=40)
    ap.add_argument("--train-configs", nargs="+", default=["scan-flat", "scan-standard"])
    ap.add_argument("--modes", nargs="+", default=["forward", "fwd+bwd"], help="rasterizer modes; also: eager "
                    "(a viewer frame: an eager call that sizes its own buffer; both trees' benchmarks need the mode)")
    a = ap.parse_args()
    print(f"# before: {a.before}; after: {HERE}; {a.rounds} process(es) per figure and tree (median), "
          f"alternating order", flush=True)
    # a throwaway first process: the first one of a run measured slower (page cache, clocks)
    child(HERE, ["benchmarks.rasterizer", "--child", a.sizes[0], "flat", "forward", "--repeats", 1])
    rows = []
    flip = False
    for n in a.sizes:
        for r in ("flat", "standard"):
            for m in a.modes:
                b, f = pair(a.before, ["benchmarks.rasterizer", "--child", n, r, m, "--repeats", a.repeats], flip, a.rounds)
                flip = not flip
                assert b["intersections"] == f["intersections"], (b, f)  # the same work
                rows.append((f"rasterizer {r} {m}, N={n}", "ms", b["median_s"] * 1e3, f["median_s"] * 1e3,
                             b["peak_rss_mib"], f["peak_rss_mib"]))
                print(rows[-1], flush=True)
    for name in a.train_configs:
        b, f = pair(a.before, ["benchmarks.train", "--child", name, "--steps", a.train_steps], flip, a.rounds)
        flip = not flip
        rows.append((f"training {name}, 10k Gaussians", "steps/s", b["steps_per_s"], f["steps_per_s"],
                     b["peak_rss_mib"], f["peak_rss_mib"]))
        print(rows[-1], flush=True)
    print()
    print("| measurement | before | after | after/before | peak MiB before | after |")
    print("|---|---|---|---|---|---|")
    for name, unit, b, f, mb, mf in rows:
        print(f"| {name} | {b:.1f} {unit} | {f:.1f} {unit} | {f / b:.2f} | {mb:.0f} | {mf:.0f} |")


if __name__ == "__main__":
    main()
