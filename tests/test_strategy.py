import math

import jax
import jax.numpy as jnp
import numpy as np

from jax_backend.gaussians import Gaussians, init_from_points
from jax_backend.optim import OptimConfig, make_optimizer
from jax_backend.strategy import DefaultStrategy, MCMCStrategy, relocation


def _hand_made(capacity=8):
    """4 live Gaussians: 0 small with a high gradient (clone), 1 large and elongated along its own
    x axis with a high gradient (split), 2 nearly transparent (prune), 3 ordinary."""
    g = init_from_points(np.array([[0.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]]), sh_degree=1, capacity=capacity)
    p = dict(g.params)
    p["scales"] = p["scales"].at[0].set(math.log(0.005)).at[1].set(jnp.log(jnp.array([0.5, 0.001, 0.001])))
    p["scales"] = p["scales"].at[2:4].set(math.log(0.05))
    c, s = math.cos(0.3), math.sin(0.3)  # rotation of 0.6 rad about z
    p["quats"] = p["quats"].at[1].set(jnp.array([c, 0, 0, s]))
    p["opacities"] = p["opacities"].at[2].set(math.log(0.001 / 0.999)).at[0].set(0.5)
    g = Gaussians(p, g.alive)
    tx = make_optimizer(OptimConfig(), 1.0, 1000)
    opt = tx.init(g.params)
    _, opt = tx.update(jax.tree_util.tree_map(jnp.ones_like, g.params), opt, g.params)
    stats = {"grad2d": jnp.zeros(capacity).at[:2].set(1.0), "count": jnp.zeros(capacity).at[:4].set(1.0)}
    return g, opt, stats


def _mu(opt, name):
    return np.asarray(opt.inner_states[name].inner_state[0].mu[name])


def test_clone_split_prune_on_hand_made_state():
    g, opt, stats = _hand_made()
    strat = DefaultStrategy()
    out, opt2, stats2, info = strat._grow_and_prune(jax.random.PRNGKey(0), g, opt, stats, 600, 1.0)
    assert bool(info.refined) and int(info.n_clone) == 1 and int(info.n_split) == 1 and int(info.n_pruned) == 1
    alive = np.asarray(out.alive)
    np.testing.assert_array_equal(alive, [1, 1, 0, 1, 1, 1, 0, 0])
    p, p0 = {k: np.asarray(v) for k, v in out.params.items()}, {k: np.asarray(v) for k, v in g.params.items()}
    for k in p:  # slot 4: exact clone of 0; slot 3 untouched
        np.testing.assert_array_equal(p[k][4], p0[k][0], err_msg=k)
        np.testing.assert_array_equal(p[k][3], p0[k][3], err_msg=k)
    # split: parent (slot 1) and child (slot 5) both at scales / 1.6, drawn in the parent's frame
    for i in (1, 5):
        np.testing.assert_allclose(p["scales"][i], p0["scales"][1] - math.log(1.6), rtol=1e-6)
        d = p["means"][i] - p0["means"][1]
        axis = np.array([math.cos(0.6), math.sin(0.6), 0.0])
        assert np.linalg.norm(d - axis * (d @ axis)) < 0.01  # off the long axis only by the thin scales
        assert abs(d @ axis) < 4 * 0.5
    assert not np.allclose(p["means"][1], p["means"][5])
    # Adam moments: zero for the new slots and the split parent, kept for the clone source
    for name in ("means", "opacities"):
        mu = _mu(opt2, name)
        assert np.all(mu[[1, 4, 5]] == 0) and np.all(mu[[0, 3]] != 0), name
    assert float(jnp.sum(stats2["grad2d"])) == 0.0


def test_opacity_reset_clamps_and_zeroes_only_opacity_moments():
    g, opt, _ = _hand_made()
    out, opt2 = DefaultStrategy()._reset_opacity(g, opt)
    o = jax.nn.sigmoid(out.params["opacities"])
    assert float(o.max()) <= 0.01 + 1e-6 and float(o[2]) < 0.002  # already lower ones unchanged
    assert np.all(_mu(opt2, "opacities") == 0) and np.all(_mu(opt2, "means")[:4] != 0)


def test_no_room_changes_nothing_and_reports_slots_needed():
    g, opt, stats = _hand_made(capacity=4)
    out, _, stats2, info = DefaultStrategy()._grow_and_prune(jax.random.PRNGKey(0), g, opt, stats, 600, 1.0)
    assert not bool(info.refined) and int(info.slots_needed) == 6
    for k in g.params:
        np.testing.assert_array_equal(np.asarray(out.params[k]), np.asarray(g.params[k]))
    np.testing.assert_array_equal(np.asarray(out.alive), np.asarray(g.alive))
    assert float(jnp.sum(stats2["grad2d"])) == 2.0  # statistics kept for the retry


def test_budget_keeps_the_largest_gradients():
    g, opt, stats = _hand_made()
    stats["grad2d"] = stats["grad2d"].at[1].set(5.0)
    out, _, _, info = DefaultStrategy(budget=5)._grow_and_prune(jax.random.PRNGKey(0), g, opt, stats, 600, 1.0)
    assert bool(info.budget_bound) and int(info.n_added) == 1 and int(info.n_split) == 1 and int(info.n_clone) == 0


def test_refine_schedule_at_block_boundaries():
    g, opt, stats = _hand_made()
    s = DefaultStrategy(refine_start=500, refine_every=100, reset_every=3000)
    key = jax.random.PRNGKey(0)
    assert not bool(s.refine(key, g, opt, stats, 400, 500, 1.0)[3].refined)  # not after 500
    assert bool(s.refine(key, g, opt, stats, 550, 650, 1.0)[3].refined)  # 600 inside the block
    assert not bool(s.refine(key, g, opt, stats, 610, 690, 1.0)[3].refined)
    assert bool(s.refine(key, g, opt, stats, 2950, 3050, 1.0)[3].opacity_reset)


def test_relocation_formula():
    o = jnp.array([0.3, 0.8, 0.05, 0.99])
    s = jnp.ones((4, 3)) * 0.2
    for r in range(1, 6):
        new_o, new_s = relocation(o, s, jnp.full(4, r))
        np.testing.assert_allclose(1 - (1 - np.asarray(new_o)) ** r, np.asarray(o), rtol=1e-5)
        # the double sum of Kheradmand et al. Eq. 9, written out
        for i in range(4):
            no = float(new_o[i])
            denom = sum(math.comb(j - 1, k) * (-1) ** k / math.sqrt(k + 1) * no ** (k + 1)
                        for j in range(1, r + 1) for k in range(j))
            np.testing.assert_allclose(float(new_s[i, 0]), float(o[i]) / denom * 0.2, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(relocation(o, s, jnp.ones(4))[1]), np.asarray(s), rtol=1e-5)


def test_mcmc_relocates_dead_and_adds_five_percent():
    rng = np.random.default_rng(0)
    g = init_from_points(rng.normal(size=(40, 3)), sh_degree=1, capacity=64)
    p = dict(g.params)
    p["opacities"] = jnp.asarray(rng.normal(0, 1, 64), jnp.float32).at[:3].set(-8.0)  # 3 dead
    g = Gaussians(p, g.alive)
    tx = make_optimizer(OptimConfig(), 1.0, 1000)
    opt = tx.init(g.params)
    out, _, info = MCMCStrategy(cap_max=1000)._relocate_and_add(jax.random.PRNGKey(1), g, opt)
    assert int(info.n_relocated) == 3 and int(info.n_added) == 2
    alive = np.asarray(out.alive)
    assert alive.sum() == 42
    o = np.asarray(jax.nn.sigmoid(out.params["opacities"]))[alive]
    assert o.min() >= 0.005 - 1e-6
    # relocated slots now sit exactly on live Gaussians
    m = np.asarray(out.params["means"])
    for i in range(3):
        assert np.min(np.linalg.norm(m[3:40] - m[i], axis=1)) == 0.0


def test_mcmc_growth_beyond_the_capacity_asks_the_host():
    rng = np.random.default_rng(0)
    g = init_from_points(rng.normal(size=(64, 3)), sh_degree=1, capacity=64)  # full
    tx = make_optimizer(OptimConfig(), 1.0, 1000)
    out, _, info = MCMCStrategy(cap_max=1000)._relocate_and_add(jax.random.PRNGKey(1), g, tx.init(g.params))
    assert int(info.n_added) == 0 and int(info.slots_needed) == 67 and not bool(info.budget_bound)
    assert np.asarray(out.alive).sum() == 64
    _, _, info = MCMCStrategy(cap_max=64)._relocate_and_add(jax.random.PRNGKey(1), g, tx.init(g.params))
    assert int(info.slots_needed) == 64 and bool(info.budget_bound)  # the budget, not the capacity, binds


def test_mcmc_sampling_follows_the_weights_and_skips_masked_slots():
    w = jnp.array([0.0, 1.0, 3.0, 100.0])
    mask = jnp.array([True, True, True, False])
    idx = np.asarray(MCMCStrategy()._sample(jax.random.PRNGKey(0), w, mask, 40000))
    counts = np.bincount(idx, minlength=4) / len(idx)
    assert counts[0] == 0 and counts[3] == 0
    np.testing.assert_allclose(counts[1:3], [0.25, 0.75], atol=0.01)


def test_mcmc_refinement_memory_is_linear_in_capacity():
    """65,536 slots: the compiled relocation must not build capacity^2 arrays (that was 17 GB)."""
    cap = 1 << 16
    g = init_from_points(np.random.default_rng(0).normal(size=(1000, 3)), sh_degree=1, capacity=cap)
    tx = make_optimizer(OptimConfig(), 1.0, 1000)
    opt = tx.init(g.params)
    fn = jax.jit(lambda k, g, o: MCMCStrategy()._relocate_and_add(k, g, o))
    temp = fn.lower(jax.random.PRNGKey(0), g, opt).compile().memory_analysis().temp_size_in_bytes
    assert temp < 400 * cap * 4, temp  # a few hundred floats per slot at most
