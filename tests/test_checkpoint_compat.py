"""Checkpoints written before the backend's layout change (commit 2699e2a, tests/data) load, and
ones that do not fit fail with one line that says why."""
from pathlib import Path

import jax
import numpy as np
import pytest

from jax_backend import CheckpointError, DefaultStrategy, TrainConfig, Trainer, init_random

from jax_backend.training import state_arrays
from synthetic import known_scene

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def scene():
    return known_scene()


def _assert_gaussians(g, expected):
    e = np.load(expected)
    np.testing.assert_array_equal(np.asarray(g.alive), e["alive"])
    for name in g.params:
        np.testing.assert_array_equal(np.asarray(g.params[name]), e[name], err_msg=name)
    return int(e["step"])


def test_old_trainer_checkpoint_resumes(scene):
    _, train, _ = scene
    cfg = TrainConfig(max_steps=100, steps_per_block=20, sh_degree=1,
                      strategy=DefaultStrategy(refine_start=10, refine_every=20))
    tr = Trainer(cfg, train, init_random(64, -1, 1, sh_degree=1, capacity=64), scene_extent=1.5)
    state_arrays.restore(tr, DATA / "old_trainer.npz")
    assert tr.step == _assert_gaussians(tr.state.gaussians, DATA / "old_expected.npz") == 40
    metrics, _ = tr.run_block()  # and it trains on from there
    assert tr.step == 60 and np.isfinite(metrics["loss"]).all()


def test_checkpoint_of_another_configuration_fails_naming_the_entry(scene, tmp_path):
    _, train, _ = scene
    tr = Trainer(TrainConfig(sh_degree=2), train, init_random(64, -1, 1, sh_degree=2, capacity=64), scene_extent=1.5)
    with pytest.raises(CheckpointError, match=r"old_trainer.npz: entry .*shN.* has shape"):
        state_arrays.restore(tr, DATA / "old_trainer.npz")


def test_old_plugin_state_dict_loads_for_viewing_and_for_training(scene):
    import torch
    from nerfstudio.data.scene_box import SceneBox

    from nerfstudio_jaxgs import checkpoint_entries
    from nerfstudio_jaxgs.model import JaxGSModelConfig
    from nerfstudio_jaxgs.pipeline import build_engine

    state = torch.load(DATA / "old_model_state.pt", weights_only=True)
    cfg = JaxGSModelConfig(num_random=64, random_scale=2.0, sh_degree=1, steps_per_block=20, warmup_length=10,
                           refine_every=20)

    def model():
        return cfg.setup(scene_box=SceneBox(aabb=torch.tensor([[-1.0, -1, -1], [1, 1, 1]])), num_train_data=1,
                         seed_points=None)

    viewer = model()  # ns-viewer / ns-export: no engine
    viewer.load_state_dict(state)
    _assert_gaussians(viewer.gaussians, DATA / "old_model_expected.npz")
    assert viewer.num_points == int(np.load(DATA / "old_model_expected.npz")["alive"].sum())

    _, train, _ = scene
    # ns-train --load-dir: the engine is built from the loaded state (`JaxGSPipeline.load_state_dict`)
    engine = build_engine(cfg, checkpoint_entries.read(state), train, 1.5, 100)
    step = _assert_gaussians(engine.state.gaussians, DATA / "old_model_expected.npz")
    assert engine.step == step == 20
    # and the state a training pipeline saves now (`checkpoint_entries.entries` of its engine) loads back into the same place
    engine_again = build_engine(cfg, checkpoint_entries.read(checkpoint_entries.entries(model(), engine)), train, 1.5,
                                100)
    for a, b in zip(jax.tree_util.tree_leaves(engine_again.state), jax.tree_util.tree_leaves(engine.state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
