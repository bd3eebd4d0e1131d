import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.stats import auctions as au

# The hand-solvable market: two queries of mass 1, two bidders with value 1 per conversion.
#   bidder 0 converts with probability 0.8 on q0 and 0.2 on q1,
#   bidder 1 with 0.3 on q0 and 0.5 on q1.
# Coarse model (one cluster): conversions from the whole cluster W = (1.0, 0.8).
# Fine model (each query alone): W = (0.8, 0.3) on q0 and (0.2, 0.5) on q1.
HAND = au.Instance(masses=[1.0, 1.0], probs=[[0.8, 0.2], [0.3, 0.5]], values=[1.0, 1.0])
HAND_BUDGET = au.Instance(HAND.masses, HAND.probs, HAND.values, [0.5, jnp.inf])
COARSE, FINE = jnp.array([0, 0]), jnp.array([0, 1])
CELLS = {
    "fp_tcpa": au.rules(au.FirstPrice(), au.TargetCPA()),
    "sp_tcpa": au.rules(au.SecondPrice(), au.TargetCPA()),
    "sp_max": au.rules(au.SecondPrice(), au.MaxCPA()),
    "vcg_max": au.rules(au.VCG(), au.MaxCPA()),
}


@pytest.fixture(scope="module")
def hand():
    """One compiled program: the hand market, both partitions, every cell, +- budget."""
    rl = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *CELLS.values())
    f = jax.jit(jax.vmap(jax.vmap(jax.vmap(au.solve_rules, (None, 0, None)),
                                  (None, None, 0)), (0, None, None)))
    both = jax.tree_util.tree_map(lambda *x: jnp.stack(x), HAND, HAND_BUDGET)
    sol = f(both, jnp.stack([COARSE, FINE]), rl)
    names = list(CELLS)
    return lambda budget, cell, part: jax.tree_util.tree_map(
        lambda x: x[int(budget), names.index(cell), part], sol)


@pytest.fixture(scope="module")
def random_batch():
    """300 random two-bidder markets with refinement chains, every cell, one program."""
    def one(key, rl):
        k1, k2 = jax.random.split(key)
        inst = au.random_instance(k1, 2, 4)
        chain = au.random_chain(k2, 4, 3)
        sol = jax.vmap(lambda lab: au.solve_rules(inst, lab, rl))(chain)
        closed = jax.vmap(lambda lab: au.first_price_revenue(inst, lab))(chain)
        return sol, closed, chain
    rl = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *CELLS.values())
    keys = jax.random.split(jax.random.key(0), 300)
    return jax.jit(jax.vmap(jax.vmap(one, (0, None)), (None, 0)))(keys, rl)


def test_hand_first_price_tcpa(hand):
    # alpha = v = 1 (dominant): coarse max(1.0, 0.8) = 1.0; fine 0.8 + 0.5 = 1.3.
    for part, rev in ((0, 1.0), (1, 1.3)):
        s = hand(False, "fp_tcpa", part)
        assert int(s.result._value) == 0
        np.testing.assert_allclose(s.alpha, [1.0, 1.0])
        assert float(s.revenue) == pytest.approx(rev, rel=1e-5)
        assert float(s.welfare) == pytest.approx(rev, rel=1e-5)


def test_hand_second_price_truthful_loses_revenue(hand):
    # Truthful bids W: coarse, bidder 0 wins and pays bidder 1's 0.8 (welfare 1.0);
    # fine, q0 to bidder 0 at 0.3, q1 to bidder 1 at 0.2: revenue 0.5 < 0.8, welfare 1.3.
    c, f = hand(False, "sp_max", 0), hand(False, "sp_max", 1)
    assert float(c.revenue) == pytest.approx(0.8, rel=1e-5)
    assert float(f.revenue) == pytest.approx(0.5, rel=1e-5)
    assert float(c.welfare) == pytest.approx(1.0, rel=1e-5)
    assert float(f.welfare) == pytest.approx(1.3, rel=1e-5)
    # One slot: VCG = second price.
    assert float(hand(False, "vcg_max", 1).revenue) == pytest.approx(0.5, rel=1e-6)


def test_hand_second_price_tcpa(hand):
    # Coarse: bidder 0 wins the cluster paying alpha_1 * 0.8 <= 1.0 (its target times its
    # conversions); bidder 1 sits at the tie alpha_1 = 1.25 alpha_0 and cannot afford it
    # (CPA alpha_0 / 0.8 > 1 for alpha_0 > 0.8): the platform-optimal equilibrium has
    # revenue 1.0. Fine: the split with both constraints tight, alpha_1 * 0.3 = 0.8 and
    # alpha_0 * 0.2 = 0.5, i.e. alpha = (2.5, 8/3), revenue 1.3; bidder 0 winning both
    # at revenue 1.0 is a second equilibrium.
    c, f = hand(False, "sp_tcpa", 0), hand(False, "sp_tcpa", 1)
    assert int(c.result._value) == 0 and int(f.result._value) == 0
    assert float(c.revenue) == pytest.approx(1.0, rel=1e-4)
    assert float(f.revenue) == pytest.approx(1.3, rel=1e-4)
    np.testing.assert_allclose(f.alpha, [2.5, 8 / 3], rtol=1e-4)
    assert int(f.n_equilibria) >= 2
    np.testing.assert_allclose(f.spend, [0.8, 0.5], rtol=1e-4)


def test_hand_first_price_budget(hand):
    # Budget 0.5 for bidder 0. Coarse: bidder 1 bids 0.8 for the cluster; bidder 0 ties at
    # 0.8 and affords the share 0.5 / 0.8 = 0.625; bidder 1 pays 0.8 * 0.375 = 0.3.
    # Fine: bidder 0 takes q0 (threshold 0.3 / 0.8 = 0.375) at alpha = 0.5 / 0.8 = 0.625,
    # q1 goes to bidder 1 at 0.5: revenue 1.0.
    c, f = hand(True, "fp_tcpa", 0), hand(True, "fp_tcpa", 1)
    np.testing.assert_allclose(c.share[:, 0], [0.625, 0.375], rtol=1e-4)
    assert float(c.revenue) == pytest.approx(0.8, rel=1e-4)
    assert float(c.liquid_welfare) == pytest.approx(0.8, rel=1e-4)
    assert float(c.welfare) == pytest.approx(0.925, rel=1e-4)
    assert float(f.alpha[0]) == pytest.approx(0.625, rel=1e-4)
    assert float(f.revenue) == pytest.approx(1.0, rel=1e-4)


def test_jensen_first_price_revenue_never_decreases(random_batch):
    sol, closed, _ = random_batch
    fp = jax.tree_util.tree_map(lambda x: np.asarray(x[0]), sol._replace(result=None))
    assert np.all(np.asarray(sol.result._value[0]) == 0)
    rev = fp.revenue
    assert np.all(np.diff(rev, axis=1) >= -1e-5 * (1 + rev[:, :-1]))
    np.testing.assert_allclose(rev, np.asarray(closed[0]), rtol=1e-5)
    np.testing.assert_allclose(fp.welfare, rev, rtol=1e-5)
    # ... while truthful second price does lose revenue on some refinement step.
    sp = np.asarray(sol.revenue[2])
    assert np.any(np.diff(sp, axis=1) < -1e-3)
    # VCG with one slot is second price.
    np.testing.assert_allclose(np.asarray(sol.revenue[3]), sp, rtol=1e-6)


def test_chains_are_refinements_and_predictions_are_calibrated(random_batch):
    _, _, chain = random_batch
    chain = np.asarray(chain[0, :5])
    for ch in chain:
        assert len(set(ch[0].tolist())) == 1 and len(set(ch[-1].tolist())) == 4
        for a, b in zip(ch[:-1], ch[1:], strict=True):
            assert bool(au.is_refinement(b, a)) and au.check_refinement(b, a) is not None
    # Tower property: coarse predictions are the mass-weighted means of the fine ones.
    inst = au.random_instance(jax.random.key(3), 2, 4)
    m = np.asarray(inst.masses)
    for a, b in zip(chain[0][:-1], chain[0][1:], strict=True):
        pc, pf = np.asarray(au.predictions(inst, a)), np.asarray(au.predictions(inst, b))
        for c in set(a.tolist()):
            idx = (a == c) & (m > 0)
            if idx.any():
                np.testing.assert_allclose(pc[:, idx].mean(1) * 0 + (pf[:, idx] * m[idx]).sum(1)
                                           / m[idx].sum(), pc[:, idx][:, 0], rtol=1e-5)


def test_same_key_same_draw():
    a = au.random_instance(jax.random.key(1), 2, 4, budget_fraction=0.5)
    b = au.random_instance(jax.random.key(1), 2, 4, budget_fraction=0.5)
    np.testing.assert_array_equal(np.asarray(a.probs), np.asarray(b.probs))
    np.testing.assert_array_equal(np.asarray(au.random_chain(jax.random.key(1), 5, 2)),
                                  np.asarray(au.random_chain(jax.random.key(1), 5, 2)))


def test_clear_errors():
    with pytest.raises(ValueError, match="probs must be <= 1"):
        au.Instance([1.0, 1.0], [[1.2, 0.1]], [1.0])
    with pytest.raises(ValueError, match="masses must be >= 0"):
        au.Instance([-1.0, 1.0], [[0.2, 0.1]], [1.0])
    with pytest.raises(ValueError, match="positive total"):
        au.Instance([0.0, 0.0], [[0.2, 0.1]], [1.0])
    with pytest.raises(ValueError, match="probs must have shape \\(n_bidders, 2\\)"):
        au.Instance([1.0, 1.0], [[0.2, 0.1, 0.3]], [1.0])
    with pytest.raises(ValueError, match="budgets must be > 0"):
        au.Instance([1.0, 1.0], [[0.2, 0.1]], [1.0], [0.0])
    with pytest.raises(ValueError, match="labels is an empty partition|masses must be a 1-D"):
        au.Instance(np.zeros(0), np.zeros((1, 0)), [1.0])
    with pytest.raises(ValueError, match="labels must hold cluster ids in \\[0, 2\\)"):
        au.solve(HAND, jnp.array([0, 2]), au.FirstPrice(), au.TargetCPA())
    with pytest.raises(ValueError, match="labels must be a 1-D integer array"):
        au.predictions(HAND, jnp.array([0, 0, 1]))
    with pytest.raises(TypeError, match="fmt must be an AbstractFormat"):
        au.solve(HAND, COARSE, "first", au.TargetCPA())
    with pytest.raises(ValueError, match="fine is not a refinement of coarse: queries 0 and 1"):
        au.check_refinement(jnp.array([0, 0, 1]), jnp.array([0, 1, 1]))
    with pytest.raises(ValueError, match="empty partition"):
        au.check_refinement(jnp.zeros(0, jnp.int32), jnp.zeros(0, jnp.int32))
    with pytest.raises(Exception, match="not a refinement"):
        jax.jit(au.check_refinement)(jnp.array([0, 0, 1]), jnp.array([0, 1, 1])
                                     ).block_until_ready()
    with pytest.raises(ValueError, match="max_multiplier must be >= 1"):
        au.TargetCPA(0.5)


def test_experiment_config_validation():
    from jaxsci.experiments import auctions as E

    with pytest.raises(ValueError, match="chain_length must be <= 3"):
        E.AuctionsConfig(n_queries=4, chain_length=4)
    ok = np.array([[True, True, False]])
    both, drop = E.decreases(np.array([[1.0, 0.5, 0.1]]), ok)
    assert both.tolist() == [[True, False]] and drop.tolist() == [[True, False]]
