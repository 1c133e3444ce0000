"""(slow) The viewer during `ns-train`, in a real headless Chromium: the step readout follows
training and the canvas shows the scene changing from block to block. The same for jax-2dgs
over two data-parallel devices, watched by a client that speaks the browser's protocol but draws
nothing (`viser_client.ViserClient`): renders arrive between blocks and change with them, and show
the normals at full size after the user picks them in the panel."""
from __future__ import annotations

import io
import subprocess

import numpy as np
import pytest


from browser import Browser, find_chromium, free_port, shows_a_render, wait_for_port, watch_run  # noqa: E402
from commands import BIN, FOX, command_env  # noqa: E402
from viser_client import ViserClient  # noqa: E402


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


def _decoded(jpeg: bytes):
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")).astype(np.float64)


@pytest.mark.slow
def test_the_viewer_follows_2dgs_on_two_data_parallel_devices(tmp_path):
    port = free_port()
    log = open(tmp_path / "train.log", "w")
    train = subprocess.Popen(
        [str(BIN / "ns-train"), "jax-2dgs", "--data", str(FOX), "--output-dir", str(tmp_path), "--timestamp", "live",
         "--max-num-iterations", "500", "--vis", "viewer", "--viewer.websocket-port", str(port),
         "--viewer.quit-on-train-completion", "True", "--steps-per-save", "100000", "--machine.num-devices", "2",
         "--pipeline.model.num-random", "5000", "--pipeline.model.random-scale", "1.0",
         "--pipeline.model.num-downscales", "0", "--pipeline.model.background-color", "black",
         "nerfstudio-data", "--eval-mode", "interval", "--eval-interval", "8"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        env=command_env(XLA_FLAGS="--xla_force_host_platform_device_count=3"))  # 2 training, 1 spare
    client, normals_from = None, None
    try:
        wait_for_port(port, 600, train)
        client = ViserClient(port)
        while train.poll() is None:
            # The user picks the normals once the colour renders have changed twice (renders arrive a
            # while after the step readout that asked for them: on a loaded CPU several readouts may pass
            # before the next one), or late in the run at the latest.
            changed = len(set(client.images)) >= 3 or (client.steps and client.steps[-1][1] >= 300)
            output = client.gui.get("Output type", {})
            if normals_from is None and changed and "normals" in output.get("options", ()):
                normals_from = len(client.frames)  # then the user picks normals
                client.set_gui("Output type", "normals")
            try:
                train.wait(0.5)
            except subprocess.TimeoutExpired:
                pass
        assert train.returncode == 0, (tmp_path / "train.log").read_text()[-3000:]
    finally:
        if client is not None:
            client.close()
        if train.poll() is None:
            train.kill()
        log.close()
    text = (tmp_path / "train.log").read_text()
    assert "data parallel: 2 device(s)" in text, text[-3000:]
    steps = [s for _, s in client.steps]
    assert steps == sorted(steps), steps
    assert len(set(steps)) >= 3 and steps[-1] >= 399, f"the step readout barely moved: {sorted(set(steps))}"
    assert len(client.frames) >= 3, f"renders received: {client.frames}"
    assert normals_from is not None, f"no normals to pick in the panel: {client.gui.get('Output type')}"
    assert len(client.frames) > normals_from, "no render after picking the normals"
    shown = [_decoded(jpeg) for jpeg in client.images[:normals_from]]  # the colour renders, in order
    # After the pick the view comes back at full size and shows the normals. The pick drops
    # nerfstudio's render state machine to "low_move"; it climbs back to "high" only when 0.2 s pass
    # after a render with nothing new asked. While viewer renders waited for each block's end (they
    # were dealt over the devices the block ran on), each ended as the block's "step" render was
    # asked, and every render after the pick stayed at 64x40 (#56).
    full = max((x.shape for x in shown), key=lambda shape: shape[0] * shape[1])
    after = [_decoded(jpeg) for jpeg in client.images[normals_from:]]
    assert any(a.shape == full for a in after), f"no full-size render after the pick: {[a.shape for a in after]}"
    colour, normals = [x for x in shown if x.shape == full][-1], [a for a in after if a.shape == full][-1]
    assert np.abs(normals - colour).mean() > 10.0, "the render after the pick looks like the colour render"
    last, changes = {}, []  # each render against the previous one of its size (low and high ones alternate)
    for image in shown:
        if image.shape in last:
            changes.append(float(np.abs(image - last[image.shape]).mean()))
        last[image.shape] = image
    assert sum(c > 1.0 for c in changes) >= 1, f"the render hardly changed between blocks: {changes}"
