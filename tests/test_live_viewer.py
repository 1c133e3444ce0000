"""(slow) The viewer during `ns-train`, in a real headless Chromium: the step readout follows
training and the canvas shows the scene changing from block to block."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

pytest.importorskip("nerfstudio")

from browser import Browser, find_chromium, free_port, shows_a_render, wait_for_port, watch_run  # noqa: E402
from commands import BIN, FOX, command_env  # noqa: E402


@pytest.mark.slow
def test_the_viewer_follows_a_run_while_it_trains(tmp_path):
    if find_chromium() is None:
        pytest.fail("no chromium to look at the viewer with (Debian: apt-get install chromium; .ci/run installs it)")
    port = free_port()
    log = open(tmp_path / "train.log", "w")
    train = subprocess.Popen(
        [str(BIN / "ns-train"), "jax-gs-mcmc", "--data", str(FOX), "--output-dir", str(tmp_path), "--timestamp", "live",
         "--max-num-iterations", "1200", "--vis", "viewer", "--viewer.websocket-port", str(port),
         "--viewer.quit-on-train-completion", "True", "--steps-per-save", "100000",
         "--pipeline.model.num-random", "20000", "--pipeline.model.random-scale", "1.0",
         "--pipeline.model.num-downscales", "0", "--pipeline.model.background-color", "black",
         "nerfstudio-data", "--eval-mode", "interval", "--eval-interval", "8"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=command_env())
    browser, seen = None, []  # (seconds, step readout, canvas)
    try:
        wait_for_port(port, 600, train)
        browser = Browser()
        browser.open(f"http://127.0.0.1:{port}")
        seen = watch_run(browser, train, on_render=(tmp_path / "live.png").write_bytes)
        assert train.wait(300) == 0, (tmp_path / "train.log").read_text()[-3000:]
    finally:
        if browser is not None:
            browser.close()
        if train.poll() is None:
            train.kill()
        log.close()
    steps = [s for _, s, _ in seen]
    assert steps == sorted(steps), steps  # the readout never goes back
    distinct = sorted(set(steps))
    assert len(distinct) >= 4 and distinct[-1] >= 799, f"the step readout barely moved: {distinct}"
    # the canvas changes as training goes: frames at different steps differ
    firsts = [next(c for _, s, c in seen if s == step) for step in distinct]
    changes = [float(np.abs(a - b).mean()) for a, b in zip(firsts, firsts[1:])]
    assert sum(c > 1.0 for c in changes) >= 2, f"the frame hardly changed between blocks: {changes}"
    assert shows_a_render(seen[-1][2]), f"the last frame shows no render: {tmp_path / 'live.png'}"
