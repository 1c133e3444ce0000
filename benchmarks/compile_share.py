"""How much of a short training run on a real capture is compilation (#53, part 5): the same
`ns-train` run twice, side by side in one invocation, first with an empty compilation cache (a
first run on a machine), then with the cache that run filled (every later run of the same
configuration on the same capture). For each: the whole command's wall time, and XLA's compile
time by program (JAX's own monitoring events, `/jax/core/compile/backend_compile_duration`,
logged by a wrapper around nerfstudio's `ns-train` entry point), with JAX's tracing and lowering.

    python -m benchmarks.compile_share [--scene snowmiku] [--steps 300] [--method jax-gs]
    python -m benchmarks.compile_share --two-captures [--steps 300]

`--two-captures` measures a second capture instead: the snowmiku photos split in two captures
(odd and even frames; the same camera, so images of one size; other view counts, poses and
extents), the second trained with the cache the first filled, and again with an empty cache.
What a second capture compiles again is what the programs hold as static shapes and constants:
docs/time_to_quality.md (part 5).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .time_to_quality import SCENES

# runs ns-train in this process with a listener on JAX's compile events; prints them as JSON at exit
WRAPPER = """
import atexit, json, sys
from jax import monitoring
events = []
def heard(event, seconds, **kw):
    if event.startswith("/jax/core/compile/"):
        events.append((event.rsplit("/", 1)[-1], seconds, str(kw.get("fun_name", ""))))
monitoring.register_event_duration_secs_listener(heard)
atexit.register(lambda: print("COMPILE_EVENTS " + json.dumps(events), file=sys.stderr, flush=True))
from nerfstudio.scripts.train import entrypoint
sys.argv[0] = "ns-train"
entrypoint()
"""


def split_capture(scene: str, half: int, folder: Path) -> Path:
    """A COLMAP capture of every other frame of `scene` (half 0: the first, third, ...), in
    `folder`: its images linked, its cameras and 3D points copied, its images.txt filtered."""
    data, _ = SCENES[scene]
    lines = (data / "sparse" / "0" / "images.txt").read_text().splitlines()
    comments = [line for line in lines if line.startswith("#")]
    body = [line for line in lines if not line.startswith("#")]
    entries = [body[i:i + 2] for i in range(0, len(body) - 1, 2)]  # each image: its pose line, its points line
    mine = entries[half::2]
    (folder / "sparse" / "0").mkdir(parents=True)
    (folder / "images_4").mkdir()
    for name in ("cameras.txt", "points3D.bin"):
        (folder / "sparse" / "0" / name).write_bytes((data / "sparse" / "0" / name).read_bytes())
    (folder / "sparse" / "0" / "images.txt").write_text("\n".join(comments + [x for e in mine for x in e]) + "\n")
    for pose, _ in mine:
        name = pose.split()[-1]
        (folder / "images_4" / name).symlink_to(data / "images_4" / name)
    return folder


def run(method: str, scene, steps: int, out: Path, cache: str) -> dict:
    """One ns-train run (`scene`: a name of SCENES, or the folder of a COLMAP capture shaped as
    snowmiku); its wall seconds and compile events."""
    data, parser = SCENES[scene] if isinstance(scene, str) else (scene, SCENES["snowmiku"][1])
    cmd = [sys.executable, "-c", WRAPPER, method, "--data", str(data), "--output-dir", str(out),
           "--max-num-iterations", str(steps), "--vis", "tensorboard", "--viewer.quit-on-train-completion", "True",
           *parser]
    env = dict(os.environ, JAXGS_COMPILATION_CACHE=cache, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    marks = [line for line in proc.stderr.splitlines() if line.startswith("COMPILE_EVENTS ")]
    if proc.returncode != 0 or not marks:
        raise RuntimeError(f"ns-train failed (rc {proc.returncode}):\n" + (proc.stdout + proc.stderr)[-3000:])
    return {"wall": wall, "events": json.loads(marks[-1][len("COMPILE_EVENTS "):])}


def summary(events) -> dict:
    total = lambda kind: sum(s for k, s, _ in events if k == kind)
    compiles = sorted(((s, name) for k, s, name in events if k == "backend_compile_duration"), reverse=True)
    return {"programs": len(compiles), "compile": total("backend_compile_duration"),
            "trace_lower": total("jaxpr_trace_duration") + total("jaxpr_to_mlir_module_duration"),
            "largest": compiles[:5]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scene", default="snowmiku", choices=sorted(SCENES))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--method", default="jax-gs")
    ap.add_argument("--two-captures", action="store_true", help="a second capture of the same camera (snowmiku)")
    a = ap.parse_args()
    if a.two_captures:
        return two_captures(a.method, a.steps)
    print(f"# python -m benchmarks.compile_share --scene {a.scene} --steps {a.steps} --method {a.method}")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "cache")
        for name in ("empty cache", "filled cache"):
            r = run(a.method, a.scene, a.steps, Path(tmp) / name.replace(" ", "-"), cache)
            rows[name] = (r["wall"], summary(r["events"]))
            print(f"{name}: {r['wall']:.1f} s", flush=True)
    print("\n| ns-train | whole command (s) | XLA compile (s) | share | programs compiled or loaded | "
          "JAX tracing + lowering (s) |\n|---|---|---|---|---|---|")
    for name, (wall, s) in rows.items():
        print(f"| {name} | {wall:.1f} | {s['compile']:.1f} | {s['compile'] / wall:.0%} | {s['programs']} | "
              f"{s['trace_lower']:.1f} |")
    print("\nLargest compiles, empty cache (s, program): "
          + "; ".join(f"{sec:.2f} {name}" for sec, name in rows["empty cache"][1]["largest"]))
    saved = rows["empty cache"][0] - rows["filled cache"][0]
    print(f"The filled cache saves {saved:.1f} s ({saved / rows['empty cache'][0]:.0%} of the first run).")


def two_captures(method: str, steps: int):
    print(f"# python -m benchmarks.compile_share --two-captures --steps {steps} --method {method}")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        first, second = (split_capture("snowmiku", half, Path(tmp) / f"capture{half}") for half in (0, 1))
        shared, empty = str(Path(tmp) / "cache"), str(Path(tmp) / "empty")
        for name, capture, cache in (("capture A (odd frames), empty cache", first, shared),
                                     ("capture B (even frames), the cache A filled", second, shared),
                                     ("capture B, empty cache", second, empty)):
            r = run(method, capture, steps, Path(tmp) / f"run{len(rows)}", cache)
            rows[name] = (r["wall"], summary(r["events"]))
            print(f"{name}: {r['wall']:.1f} s", flush=True)
    print("\n| ns-train | whole command (s) | XLA compile (s) | programs compiled or loaded | largest compiles (s) |"
          "\n|---|---|---|---|---|")
    for name, (wall, s) in rows.items():
        largest = ", ".join(f"{sec:.1f} {prog}" for sec, prog in s["largest"][:3])
        print(f"| {name} | {wall:.1f} | {s['compile']:.1f} | {s['programs']} | {largest} |")
    (after, s_after), (alone, s_alone) = rows["capture B (even frames), the cache A filled"], rows["capture B, empty cache"]
    print(f"Capture B after capture A: {s_after['compile']:.1f} s of compilation against {s_alone['compile']:.1f} s "
          f"alone; the whole command {after:.1f} against {alone:.1f} s.")


if __name__ == "__main__":
    main()
