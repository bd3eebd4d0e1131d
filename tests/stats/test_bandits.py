import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.stats import bandits as B

MEANS = jnp.asarray([0.7, 0.45, 0.3])
S = 0.5
T = 8
N_RUNS = 6000


@pytest.fixture(scope="module")
def mc_uucb():
    """One compiled simulator (uncertain-UCB, horizon T), vmapped over the runs' keys."""
    policy = B.UncertainUCB()
    sim = jax.jit(jax.vmap(lambda k: B.simulate(policy, B.BernoulliArms(MEANS), S, k, (T,))))
    res = sim(jax.random.split(jax.random.key(0), N_RUNS))
    return sim, res


def test_exact_value_by_hand_ucb1_three_rounds():
    # Rounds 1, 2 pull arm 0 then arm 1; round 3 compares equal radii, so the better
    # empirical mean wins (a tie goes to arm 0): arm 1 iff r0 = 0 and r1 = 1.
    sat, reg = B.exact_expected_regret(B.UCB1(), [0.8, 0.3], 0.5, 3)
    p1 = 0.2 * 0.3
    assert float(sat) == pytest.approx(0.2 + 0.2 * p1, rel=1e-5)
    assert float(reg) == pytest.approx(0.5 + 0.5 * p1, rel=1e-5)


def test_monte_carlo_mean_matches_exact_enumeration(mc_uucb):
    _, res = mc_uucb
    exact_sat, exact_reg = B.exact_expected_regret(B.UncertainUCB(), MEANS, S, T)
    sat = np.asarray(res.satisficing_regret[:, -1], np.float64)
    reg = np.asarray(res.regret[:, -1], np.float64)
    for mc, ex in ((sat, exact_sat), (reg, exact_reg)):
        se = mc.std() / math.sqrt(N_RUNS)
        assert abs(mc.mean() - float(ex)) < 4 * se + 1e-6, (mc.mean(), float(ex), se)
    # Pseudo-regrets are exact functions of the counts.
    counts = np.asarray(res.counts[:, -1])
    assert np.all(counts.sum(1) == T)
    np.testing.assert_allclose(sat, counts @ np.maximum(S - np.asarray(MEANS), 0), rtol=1e-6)


def test_same_key_same_run(mc_uucb):
    sim, res = mc_uucb
    again = sim(jax.random.split(jax.random.key(0), N_RUNS))
    np.testing.assert_array_equal(np.asarray(res.counts), np.asarray(again.counts))


def test_uncertain_ucb_commits_and_rejects():
    # A certified arm is played (commit); with every upper bound below S, UCB1 decides.
    p = B.UncertainUCB()
    st = B.PolicyState(jnp.asarray([400, 400]), jnp.asarray([360.0, 80.0]), jnp.asarray(800))
    arm, info = p.select(st, jnp.asarray(0.5), jax.random.key(0))
    assert int(arm) == 0 and bool(info.exploit)
    st = B.PolicyState(jnp.asarray([400, 40]), jnp.asarray([120.0, 8.0]), jnp.asarray(440))
    arm, info = p.select(st, jnp.asarray(0.9), jax.random.key(0))
    u1_arm, _ = B.UCB1().select(st, jnp.asarray(0.9), jax.random.key(0))
    assert int(arm) == int(u1_arm) == 1 and not bool(info.exploit)


def test_bounds_closed_forms():
    means = jnp.asarray([0.9, 0.6, 0.4])
    gaps = np.array([0.3, 0.5])
    t = 1000
    assert float(B.ucb_bound(means, t)) == pytest.approx(
        float(np.sum(8 * math.log(t) / gaps + (1 + math.pi**2 / 3) * gaps)), rel=1e-5)
    kl = [p * math.log(p / 0.9) + (1 - p) * math.log((1 - p) / 0.1) for p in (0.6, 0.4)]
    assert float(B.lai_robbins_bound(means, t)) == pytest.approx(
        float(np.sum(gaps * math.log(t) / np.array(kl))), rel=1e-4)
    # Lower-bound shape: log(Delta / ((K - 1) Delta_*)) / Delta_i over arms below S.
    s = 0.88  # Delta_* = 0.02, Delta = 0.3
    want = sum(math.log(0.3 / (2 * 0.02)) / g for g in gaps)
    assert float(B.satisficing_lower_bound(means, s)) == pytest.approx(want, rel=1e-5)
    assert float(B.satisficing_lower_bound(means, 0.3)) == 0.0  # Delta large: no arm below S
    assert math.isinf(float(B.uncertain_ucb_bound(means, 0.95)))  # non-realisable
    # Of order sum_i log(K / Delta_*) / Delta_i as Delta_* -> 0: the ratio settles.
    ratios = []
    for d in (1e-2, 1e-3, 1e-4, 1e-5):
        mu = B.make_means(0.5, d, jnp.asarray([0.2, 0.3]))
        order = sum(math.log(3 / d) / (g) for g in (0.2, 0.3))
        ratios.append(float(B.uncertain_ucb_bound(mu, 0.5)) / order)
    assert max(ratios) / min(ratios) < 1.5
    assert float(B.satisficing_lower_bound(mu, 0.5)) < float(B.uncertain_ucb_bound(mu, 0.5))


def test_clear_errors():
    arms = B.BernoulliArms([0.6, 0.4])
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="threshold must be >= 0"):
        B.simulate(B.UCB1(), arms, -0.1, key, (4,))
    with pytest.raises(ValueError, match="means must be <= 1"):
        B.BernoulliArms([0.5, 1.5])
    with pytest.raises(ValueError, match="means must be a 1-D array of at least 2 arms"):
        B.BernoulliArms([0.5])
    with pytest.raises(ValueError, match="arms.means must be 1-D"):
        B.simulate(B.UCB1(), B.BernoulliArms([[0.5, 0.4]]), 0.5, key, (4,))
    with pytest.raises(ValueError, match="sigma must be > 0"):
        B.GaussianArms([0.5, 0.4], sigma=0.0)
    with pytest.raises(ValueError, match="width must be > 0"):
        B.UncertainUCB(width=-1.0)
    with pytest.raises(TypeError, match="policy must be an AbstractPolicy"):
        B.simulate("ucb", arms, 0.5, key, (4,))
    with pytest.raises(TypeError, match="key must be a jax.random key"):
        B.simulate(B.UCB1(), arms, 0.5, 0, (4,))
    with pytest.raises(ValueError, match="checkpoints\\[i\\] must be >= 1"):
        B.simulate(B.UCB1(), arms, 0.5, key, (0, 4))


def test_experiment_config_validation():
    from jaxsci.experiments import bandits as E

    with pytest.raises(ValueError, match="excess_gaps must be strictly decreasing"):
        E.BanditsConfig(excess_gaps=(0.01, 0.1, 0.05))
    with pytest.raises(ValueError, match="nonrealisable_means"):
        E.BanditsConfig(nonrealisable_means=(0.5, 0.4))
    with pytest.raises(ValueError, match="threshold must be <= 1"):
        E.BanditsConfig(threshold=1.2)
    assert E.loglog_slope(np.array([1.0, 2.0, 4.0]), np.array([3.0, 6.0, 12.0])) == \
        pytest.approx(1.0)
