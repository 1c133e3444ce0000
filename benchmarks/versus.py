"""The rasterizer and training benchmarks of two checkouts side by side, in one run: every
configuration is measured in the "before" tree and in this one, one process each, alternating
which goes first, and the table prints both figures and their ratio.

    git worktree add /tmp/before <commit>
    python -m benchmarks.versus --before /tmp/before [--sizes 10000 100000 300000] [--repeats 3] [--rounds 3]

With --rounds R each configuration is measured R times in each tree (a fresh process each time,
the order alternating), and the table gives the median of the R figures: on a shared host one
process's figure can be off by a third either way.

Each tree runs its own benchmark code (`benchmarks.rasterizer.measure`, `benchmarks.train.measure`,
through `harness.in_process`) from its own folder, so each imports its own jax_backend.
"""
from __future__ import annotations

from typing import List

from benchmarks.harness import ROOT, alternate, cli, in_process

HERE = str(ROOT)


def pair(before: str, function: str, flip: bool, rounds: int = 1, **kwargs):
    """(before's result, this tree's result) of `function`(**kwargs), each the round with the median
    of its key figure, the trees alternating."""
    trees = {"after": HERE, "before": before} if flip else {"before": before, "after": HERE}
    runs = alternate({name: (lambda tree=tree: in_process(function, tree=tree, **kwargs)) for name, tree in trees.items()},
                     rounds)
    key = "steps_per_s" if "steps_per_s" in runs["before"][0] else "median_s"
    middle = {k: sorted(v, key=lambda x: x[key])[len(v) // 2] for k, v in runs.items()}
    return middle["before"], middle["after"]


def main(before: str, sizes: List[int] = [10_000, 100_000, 300_000], repeats: int = 3, rounds: int = 1,
         train_steps: int = 40, train_configs: List[str] = ["scan-flat", "scan-standard"],
         modes: List[str] = ["forward", "fwd+bwd"]) -> None:
    """`before`: a checkout of the commit to compare against; `rounds`: processes per configuration
    and tree (median taken); `modes`: the rasterizer's, also "eager" (a viewer frame: an eager call
    that sizes its own buffer; both trees' benchmarks need the mode)."""
    print(f"# before: {before}; after: {HERE}; {rounds} process(es) per figure and tree (median), "
          f"alternating order", flush=True)
    # a throwaway first process: the first one of a run measured slower (page cache, clocks)
    in_process("benchmarks.rasterizer:measure", n=sizes[0], rasterizer="flat", mode="forward", repeats=1)
    rows = []
    flip = False
    for n in sizes:
        for r in ("flat", "standard"):
            for m in modes:
                b, f = pair(before, "benchmarks.rasterizer:measure", flip, rounds, n=n, rasterizer=r, mode=m,
                            repeats=repeats)
                flip = not flip
                assert b["intersections"] == f["intersections"], (b, f)  # the same work
                rows.append((f"rasterizer {r} {m}, N={n}", "ms", b["median_s"] * 1e3, f["median_s"] * 1e3,
                             b["peak_rss_mib"], f["peak_rss_mib"]))
                print(rows[-1], flush=True)
    for name in train_configs:
        b, f = pair(before, "benchmarks.train:measure", flip, rounds, n=10_000, name=name, steps=train_steps)
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
    cli(main, "versus")
