"""What watching a run costs (#56): the same `ns-train` on the fox with `--vis tensorboard`, then
with `--vis viewer` watched by a client that draws nothing (`viser_client.ViserClient`: the
browser's messages, no WebGL), then watched by a real headless Chromium, each for the whole run
with the camera still, one after the other in one invocation. Prints each run's training speed
(steps per second over the blocks after the first, as the run logs them), the ratios to the plain
run, the CPU seconds Chromium's processes used while it watched, and how each viewer followed the
run: the renders the client received, the step readouts the browser showed and how often its
canvas changed.

    python -m benchmarks.live_viewer [--steps 1500] [--method jax-gs-mcmc] [--watchers client,browser,moving]
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from browser import Browser, free_port, shows_a_render, wait_for_port, watch_run  # noqa: E402
from commands import BIN, FOX, command_env  # noqa: E402
from viser_client import ViserClient  # noqa: E402

from benchmarks.harness import cli  # noqa: E402


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


def cpu_seconds(pid: int, name: str = "") -> float:
    """User and system CPU seconds of process `pid` and every live descendant (from /proc); with
    `name`, of those whose command name starts with it alone."""
    parents, times, names = {}, {}, {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                head, rest = open(f"/proc/{d}/stat").read().rsplit(")", 1)
            except OSError:
                continue
            fields = rest.split()
            parents[int(d)] = int(fields[1])
            times[int(d)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            names[int(d)] = head.split("(", 1)[1]
    tree, grown = {pid}, True
    while grown:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        tree, grown = tree | more, bool(more)
    tree = {p for p in tree if names.get(p, "").startswith(name)}
    return sum(times.get(p, 0.0) for p in tree)


def run_watched(method, steps, out, watcher: str):
    """The run with the viewer, watched by `watcher` ("client", "moving": the client turning the
    camera every 5 s, or "browser"): (steps/s per block, what was seen: the browser's [(seconds,
    step, canvas)] or the client's (frames, steps, seconds from each turn to the next render),
    Chromium's CPU seconds (None for the client), the run's wall seconds)."""
    port = free_port()
    log = open(out / f"viewer_{watcher}.log", "w")
    start = time.time()
    train = subprocess.Popen(command(method, steps, out, f"viewer_{watcher}", "viewer+tensorboard", port),
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=command_env())
    browser, client, seen, cpu = None, None, [], None
    try:
        wait_for_port(port, 600, train)
        if watcher == "browser":
            browser = Browser()
            browser.open(f"http://127.0.0.1:{port}")
            seen = watch_run(browser, train, timeout=3600)
            cpu = cpu_seconds(os.getpid(), "chrom")  # the browser Playwright started
        else:
            client = ViserClient(port)
            latencies = []
            while watcher == "moving" and train.poll() is None:  # after the first block: a turn every 5 s
                time.sleep(5.0)
                if client.steps and client.steps[-1][1] > 0 and train.poll() is None:
                    try:
                        latencies.append(client.orbit(15.0))
                    except Exception:  # the run ended and its viewer closed the connection
                        break
            train.wait(3600)
            seen = (client.frames, client.steps, latencies)
        if train.wait(300):
            raise RuntimeError(f"the watched run failed: {out / f'viewer_{watcher}.log'}")
    finally:
        if browser is not None:
            browser.close()
        if client is not None:
            client.close()
        if train.poll() is None:
            train.kill()
        log.close()
    return steps_per_sec(next(out.glob(f"*/*/viewer_{watcher}"))), seen, cpu, time.time() - start


def main(steps: int = 1500, method: str = "jax-gs-mcmc", watchers: str = "client,browser,moving",
         out: Optional[Path] = None) -> None:
    """`watchers`: which watched runs, in order (client, browser, moving); `out`: where the runs go."""
    import numpy as np

    out = out or Path(tempfile.mkdtemp(prefix="live_viewer_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"# runs in {out}")
    plain = run_plain(method, steps, out)
    watched = {w: run_watched(method, steps, out, w) for w in watchers.split(",")}
    p = float(np.mean([v for _, v in plain]))
    label = {"client": "--vis viewer, a client that draws nothing", "browser": "--vis viewer, Chromium attached",
             "moving": "--vis viewer, the client turning the camera every 5 s"}
    print("| run | steps/s (blocks after the first) | ratio to plain | per block |")
    print("|---|---|---|---|")
    print(f"| --vis tensorboard | {p:.2f} | 1 | {', '.join(f'{v:.1f}' for _, v in plain)} |")
    for w, (rates, _, _, _) in watched.items():
        m = float(np.mean([v for _, v in rates]))
        print(f"| {label[w]} | {m:.2f} | {m / p:.2f} | {', '.join(f'{v:.1f}' for _, v in rates)} |")
    if "client" in watched:
        _, (frames, shown, _), _, wall = watched["client"]
        print(f"client: {len(frames)} renders received over {wall:.0f} s "
              f"(at {', '.join(f'{t:.0f}' for t, _ in frames[:40])} s); step readouts: {sorted(set(s for _, s in shown))}")
    if "moving" in watched:
        lat = [x for x in watched["moving"][1][2]]
        got = [x for x in lat if x is not None]
        print(f"camera turns while training: {len(lat)}; seconds to the next render: median "
              f"{np.median(got) if got else float('nan'):.2f}, max {max(got) if got else float('nan'):.2f}"
              f"{f', {len(lat) - len(got)} with none within 60 s' if len(got) < len(lat) else ''}; "
              f"all: {', '.join('-' if x is None else f'{x:.2f}' for x in lat)}")
    if "browser" not in watched:
        return
    _, seen, cpu, wall = watched["browser"]
    print(f"Chromium's processes used {cpu:.0f} CPU seconds over the watched run's {wall:.0f} s "
          f"({cpu / wall:.2f} of a core; the machine has {os.cpu_count()})")
    steps = [s for _, s, _ in seen]
    distinct = sorted(set(steps))
    frames = [next(c for _, s, c in seen if s == step) for step in distinct]
    changes = [float(np.abs(x - y).mean()) for x, y in zip(frames, frames[1:])]
    print(f"screenshots every 2 s: {len(seen)}; step readouts shown: {distinct}")
    print(f"canvas change between successive readouts (mean |difference|, grey levels): "
          f"{', '.join(f'{c:.1f}' for c in changes)}")
    print(f"last screenshot shows a render: {bool(seen) and shows_a_render(seen[-1][2])}")


if __name__ == "__main__":
    cli(main, "live_viewer")
