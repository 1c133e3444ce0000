"""A large capture's host memory through `ns-train jax-gs`: resident memory (RSS) over the run's
phases against the bytes of its images (issue 68).

The capture is made from snowmiku: its 97 photos (images_4, 1008x756) upscaled to 2016x1512 (a
phone photo's size at half resolution) and repeated to the number asked for, in the layout COLMAP
captures ship in (`images_2/` beside `sparse/0`, the SIMPLE_RADIAL camera at the photos' full size,
each repeat a pose of its own name), so nerfstudio undistorts every image as it does a phone
capture's. `ns-train jax-gs ... colmap --downscale-factor 2 --pipeline.model.num-downscales 0`
then trains `--steps` steps at full resolution while the process tree's RSS is read every
`--every` seconds. Phases, from the lines the run prints: start-up (imports, dataparser), caching
(nerfstudio's datamanager reads and undistorts the images; jax-gs copies them into its dataset),
engine (jax-gs builds its trainer and places the images), training (from the first block);
steady = the median over the last half of training.

    python -m benchmarks.capture_memory [--photos 100,200,388] [--steps 20] [--keep DIR]
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from benchmarks.capture import SNOWMIKU
from benchmarks.harness import cli

SIZE = (2016, 1512)
MARKERS = (("caching", "Caching / undistorting train images"), ("engine", "training images of up to"),
           ("training", "[jax-gs] training steps"))


def make_capture(out: Path, photos: int, size=SIZE, source: Path = SNOWMIKU) -> int:
    """`photos` images of `size` in `out` (COLMAP: images_2/, sparse/0/): snowmiku's photos upscaled
    and repeated, each repeat under its own name and image id. Returns the images' bytes as uint8
    RGB."""
    from PIL import Image

    sparse = out / "sparse" / "0"
    sparse.mkdir(parents=True, exist_ok=True)
    (out / "images_2").mkdir(exist_ok=True)
    shutil.copy(source / "sparse" / "0" / "cameras.txt", sparse / "cameras.txt")
    shutil.copy(source / "sparse" / "0" / "points3D.bin", sparse / "points3D.bin")
    lines = [ln for ln in (source / "sparse" / "0" / "images.txt").read_text().splitlines() if not ln.startswith("#")]
    entries = [lines[i].split() for i in range(0, len(lines), 2) if lines[i].strip()]
    out_lines, n = [], 0
    while n < photos:
        for e in entries:
            if n == photos:
                break
            name = f"r{n // len(entries)}_{e[9]}"
            target = out / "images_2" / name
            if not target.exists():
                Image.open(source / "images_4" / e[9]).convert("RGB").resize(size, Image.BICUBIC).save(target,
                                                                                                       quality=95)
            out_lines += [" ".join([str(n + 1)] + e[1:9] + [name]), ""]
            n += 1
    (sparse / "images.txt").write_text("\n".join(out_lines) + "\n")
    return photos * size[0] * size[1] * 3


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and its descendants (from /proc)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS:"))
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, StopIteration):
            pass
    return total


def run(capture: Path, steps: int, out: Path, every: float = 0.5) -> dict:
    """One `ns-train jax-gs` run on `capture`: {phase: peak RSS}, steady RSS, the whole time, the
    samples and the return code."""
    cmd = [str(Path(sys.executable).parent / "ns-train"), "jax-gs", "--data", str(capture), "--output-dir", str(out),
           "--timestamp", "run", "--vis", "tensorboard", "--viewer.quit-on-train-completion", "True",
           "--max-num-iterations", str(steps), "--steps-per-save", str(10**6),
           "--pipeline.model.num-downscales", "0", "--pipeline.model.steps-per-block", str(max(steps // 2, 1)),
           "colmap", "--colmap-path", "sparse/0", "--downscale-factor", "2"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            text=True)
    marks, samples, log = {}, [], []

    def read():
        for line in proc.stdout:
            log.append(line)
            for phase, text in MARKERS:
                if text in line and phase not in marks:
                    marks[phase] = time.time() - start

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while proc.poll() is None:
        samples.append((time.time() - start, tree_rss(proc.pid)))
        time.sleep(every)
    reader.join(timeout=10)
    bounds = [("start-up", 0.0)] + sorted(marks.items(), key=lambda kv: kv[1])
    peaks = {}
    for i, (phase, t0) in enumerate(bounds):
        t1 = bounds[i + 1][1] if i + 1 < len(bounds) else float("inf")
        inside = [r for t, r in samples if t0 <= t < t1]
        peaks[phase] = max(inside) if inside else 0
    train_t = marks.get("training", float("inf"))
    tail = sorted(r for t, r in samples if t >= train_t + (samples[-1][0] - train_t) / 2) if samples else []
    return {"peaks": peaks, "steady": tail[len(tail) // 2] if tail else 0, "peak": max(r for _, r in samples),
            "seconds": time.time() - start, "rc": proc.returncode, "samples": samples, "log": "".join(log[-40:])}


def main(photos: str = "100,200,388", steps: int = 20, every: float = 0.5, keep: Optional[Path] = None) -> None:
    """RSS over each run's phases; `every`: seconds between RSS samples; `keep`: a folder for the
    captures (made once, reused)."""
    root = keep or Path(tempfile.mkdtemp(prefix="capture_memory_"))
    gib = 2**30
    print(f"# snowmiku's photos upscaled to {SIZE[0]}x{SIZE[1]} and repeated (COLMAP, SIMPLE_RADIAL: undistorted), "
          f"ns-train jax-gs at full resolution for {steps} steps; RSS of the process tree, GiB")
    print("| photos | images (uint8 RGB) | start-up | caching | engine | training | peak / images | steady | "
          "steady / images | run s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for count in (int(x) for x in photos.split(",")):
        capture = root / f"capture_{count}"
        images = make_capture(capture, count)
        r = run(capture, steps, root / f"out_{count}", every)
        if r["rc"] != 0:
            print(f"| {count} | run failed (exit {r['rc']}) |\n```\n{r['log']}```", flush=True)
            continue
        p = r["peaks"]
        print(f"| {count} | {images / gib:.2f} | " + " | ".join(f"{p.get(k, 0) / gib:.2f}" for k in
                                                                ("start-up", "caching", "engine", "training"))
              + f" | {r['peak'] / gib:.2f} ({r['peak'] / images:.1f}x) | {r['steady'] / gib:.2f} | "
                f"{r['steady'] / images:.1f}x | {r['seconds']:.0f} |", flush=True)
    if keep is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    cli(main, "capture_memory")
