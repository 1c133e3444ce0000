"""Two processes on this machine, CPU collectives (gloo), `jax.distributed` from environment
variables, each holding its share of the views: they end with identical parameters, equal to a
single process training on two devices with the same views."""
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from browser import free_port
from commands import command_env

HERE = Path(__file__).resolve().parent


def _run_together(commands, timeout=900) -> list:
    """Start every (args, env) at once (the processes of one multi-host run), wait for all and return
    their output; every one must exit 0 (all are killed when one times out)."""
    procs = [subprocess.Popen([str(a) for a in args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, text=True) for args, env in commands]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a multi-process run timed out")
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outs)
    return outs


@pytest.mark.parametrize("tile_devices", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_two_processes_end_identical_and_match_two_devices(tmp_path, tile_devices):
    """One device per process; or (slow suite) two per process, each host's Gaussians split over
    its two (a 2 x 2 mesh over the hosts: replicas across them, Gaussian shards within each)."""
    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={tile_devices}",
               JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2")
    _run_together([([sys.executable, HERE / "multihost_worker.py", tmp_path / f"p{i}.npz", tile_devices],
                    dict(env, JAX_PROCESS_ID=str(i))) for i in range(2)])
    a, b = (np.load(tmp_path / f"p{i}.npz") for i in range(2))
    assert int(a["count"]) == 2 and {int(a["process"]), int(b["process"])} == {0, 1}
    for k in ("means", "scales", "quats", "opacities", "sh0", "shN", "alive"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)  # bit-identical across hosts
    # each host trained on its own share: even views on host 0, odd on host 1
    assert set(np.unique(a["global_views"]) % 2) == {0} and set(np.unique(b["global_views"]) % 2) == {1}

    # the same run in one process on two devices: same views, same parameters
    assert len(jax.local_devices()) >= 2, "conftest forces 4 CPU devices"
    sys.path.insert(0, str(HERE))
    from multihost_worker import train_local

    one = train_local(replicas=2)
    np.testing.assert_array_equal(one["views"][:, 0], a["global_views"][:, 0])
    np.testing.assert_array_equal(one["views"][:, 1], b["global_views"][:, 0])
    np.testing.assert_array_equal(one["alive"], a["alive"])
    for k in ("means", "scales", "quats", "opacities", "sh0"):
        np.testing.assert_allclose(one[k], a[k], rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.slow
def test_ns_train_on_two_processes_matches_two_devices_and_exports(tmp_path):
    """nerfstudio's machine flags start JAX's multi-host runtime: `ns-train jax-gs` as two processes
    on this machine (CPU collectives), one JAX device each, trains as one process on two devices
    (the same parameters); process 0 alone writes the config and checkpoints, and ns-export and
    ns-eval work on what it wrote."""
    import torch

    from commands import BIN, FOX, run_command

    common = [BIN / "ns-train", "jax-gs", "--data", FOX, "--max-num-iterations", "20", "--vis", "tensorboard",
              "--viewer.quit-on-train-completion", "True", "--output-dir", tmp_path,
              "--pipeline.model.steps-per-block", "10", "--pipeline.model.num-random", "2000",
              "--pipeline.model.random-scale", "1.0"]
    port = free_port()
    env = command_env(XLA_FLAGS="--xla_force_host_platform_device_count=1")
    outs = _run_together([(common + ["--timestamp", "mh", "--machine.num-machines", "2", "--machine.machine-rank",
                                     str(i), "--machine.dist-url", f"tcp://127.0.0.1:{port}"], env) for i in range(2)])
    assert "process 0 of 2: training on 31 of 61 views" in outs[0] and "process 1 of 2: training on 30 of 61" in outs[1]
    assert "data parallel: 2 process(es) x 1 device(s) x 1 view(s) per step" in outs[0]
    run = tmp_path / "fox" / "jax-gs"
    assert sorted(p.name for p in run.iterdir()) == ["mh"]  # one run folder, process 0's
    ckpts = sorted((run / "mh" / "nerfstudio_models").glob("*.ckpt"))
    assert [c.name for c in ckpts] == ["step-000000019.ckpt"]
    run_command(common + ["--timestamp", "dp", "--machine.num-devices", "2"],
                XLA_FLAGS="--xla_force_host_platform_device_count=2")
    key = "_model.jaxgs.train.gaussians."
    two_hosts = torch.load(ckpts[0], weights_only=True)["pipeline"]
    two_devices = torch.load(run / "dp" / "nerfstudio_models" / "step-000000019.ckpt", weights_only=True)["pipeline"]
    assert int(two_hosts["_model.jaxgs.processes"]) == 2 and int(two_devices["_model.jaxgs.processes"]) == 1
    np.testing.assert_array_equal(two_hosts[key + "alive"].numpy(), two_devices[key + "alive"].numpy())
    for name in ("means", "scales", "quats", "opacities", "sh0"):
        np.testing.assert_allclose(two_hosts[f"{key}params['{name}']"].numpy(), two_devices[f"{key}params['{name}']"].numpy(),
                                   rtol=1e-4, atol=1e-5, err_msg=name)

    config = run / "mh" / "config.yml"
    run_command([BIN / "ns-export", "gaussian-splat", "--load-config", config, "--output-dir", tmp_path / "export"])
    from jax_backend import read_ply

    assert read_ply(tmp_path / "export" / "splat.ply")["means"].shape[0] == int(two_hosts[key + "alive"].sum())
    run_command([BIN / "ns-eval", "--load-config", config, "--output-path", tmp_path / "eval.json"])
    assert "psnr" in (tmp_path / "eval.json").read_text()
