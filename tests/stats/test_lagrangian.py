import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.stats import lagrangian as L


@pytest.fixture(scope="module")
def dist():
    """Six feasible covering instances (n = 5, s = 3), dense rows."""
    return L.random_scenarios(jax.random.key(3), n_scenarios=6, n_vars=5, n_coupling=3)


@pytest.fixture(scope="module")
def pis():
    return jnp.asarray(np.random.default_rng(0).uniform(0.0, 2.0, (8, 3)), jnp.float32)


def test_learned_dual_optimum_equals_lp_relaxation():
    # One continuous box instance: max_pi u(pi) is the LP relaxation's value (LP
    # duality), the LP's duals attain it, and averaged SGA and the subgradient method
    # approach it from below.
    one = L.random_scenarios(jax.random.key(1), 1, 6, 3, binary=False)
    inst = one.instances[0]
    lp = L.lp_relaxation(inst)
    best, pi_star = L.best_constant_multiplier(one)
    assert best == pytest.approx(lp.value, rel=1e-6)
    assert float(L.dual(jnp.asarray(lp.multipliers, jnp.float32), inst)) == pytest.approx(
        lp.value, rel=1e-5)
    assert float(one.expected_dual(jnp.asarray(pi_star, jnp.float32))) == pytest.approx(
        lp.value, rel=1e-5)
    radius = 2.0 * float(np.linalg.norm(pi_star))
    res = L.learn_sga(one, jax.random.key(0), 2048, radius)
    learned = float(one.expected_dual(res.multipliers))
    bound = float(L.sga_bound(radius, one.grad_bound(), 2048))
    assert lp.value - bound <= learned <= lp.value + 1e-5
    assert learned == pytest.approx(lp.value, rel=0.02)
    sub = L.subgradient(inst, jnp.zeros(3), 300, jnp.asarray(radius / 2))
    assert float(sub.value) <= lp.value + 1e-5
    assert float(sub.value) == pytest.approx(lp.value, rel=0.02)
    assert np.all(np.diff(np.asarray(sub.best_values)) >= 0)


def test_weak_duality_and_closed_form_against_highs(dist, pis):
    inst = dist.instances
    vals = np.asarray(L.dual(pis[:, None, :], inst))  # (8 multipliers, 6 instances)
    xs = np.asarray(L.subproblem(pis[:, None, :], inst))
    for k in range(inst.batch_shape[0]):
        p = L.to_milp(inst[k])
        opt, _ = L.solve_milp(p)
        lp = L.lp_relaxation(p)
        assert lp.value <= opt + 1e-6
        assert np.all(vals[:, k] <= lp.value + 1e-4)  # u(pi) <= LP <= OPT
        for i in (0, 3, 7):
            ref = L.milp_dual(np.asarray(pis[i]), p)
            assert ref.value == pytest.approx(vals[i, k], rel=1e-5, abs=1e-5)
            np.testing.assert_allclose(ref.x, xs[i, k], atol=1e-6)
            np.testing.assert_allclose(ref.supergradient, np.asarray(
                L.supergradient(pis[i], inst[k])), rtol=1e-5, atol=1e-5)


def test_supergradient_inequality_and_bound(dist, pis):
    inst = dist.instances
    u, g = L.dual_and_supergradient(pis[:, None, :], inst)  # (8, 6), (8, 6, 3)
    u_other = L.dual(pis[::-1][:, None, :], inst)
    lin = u + jnp.sum(g * (pis[::-1] - pis)[:, None, :], -1)
    assert np.all(np.asarray(u_other) <= np.asarray(lin) + 1e-4)
    # jax.grad of the dual is the supergradient (one piece: no tie at these points).
    np.testing.assert_allclose(jax.grad(L.dual)(pis[0], inst[0]), g[0, 0], rtol=1e-5)
    assert np.all(np.linalg.norm(np.asarray(g), axis=-1) <= float(L.supergradient_bound(inst))
                  + 1e-5)
    # F's supergradient is the weighted mean of the instances'.
    np.testing.assert_allclose(dist.expected_supergradient(pis[0]), np.asarray(g[0]).mean(0),
                               rtol=1e-5, atol=1e-6)


def test_lagrangian_bound_beats_lp_with_knapsack_easy_constraints():
    # X = {x binary: 2 x1 + 2 x2 <= 3}: conv X = {x1 + x2 <= 1}, the LP allows 1.5.
    p = L.MILP(c=[-1.0, -1.0], A=[[1.0, 0.0]], b=[0.0], C=[[-2.0, -2.0]], d=[-3.0])
    assert L.lp_relaxation(p).value == pytest.approx(-1.5)
    assert L.milp_dual([0.0], p).value == pytest.approx(-1.0)
    assert L.solve_milp(p)[0] == pytest.approx(-1.0)


def test_warm_start_fit_and_risk():
    rng = np.random.default_rng(1)
    phi = rng.normal(size=(40, 2)).astype(np.float32)
    W = np.array([[0.5, -0.2], [0.1, 0.3]], np.float32)
    targets = phi @ W.T + 2.0
    ws = L.fit_warm_start(targets, phi)
    np.testing.assert_allclose(ws.weights, W, atol=1e-3)
    np.testing.assert_allclose(ws(phi), targets, atol=1e-3)
    const = L.fit_warm_start(targets)
    np.testing.assert_allclose(const(), targets.mean(0), rtol=1e-5)
    mask = (np.arange(40) < 10).astype(np.float32)
    np.testing.assert_allclose(L.fit_warm_start(targets, weights=mask)(), targets[:10].mean(0),
                               rtol=1e-5)
    r0 = float(L.warm_start_risk(const(), targets))
    shifted = float(L.warm_start_risk(const() + jnp.asarray([0.1, -0.2]), targets))
    assert shifted == pytest.approx(r0 + 0.05, rel=1e-4)  # excess = ||shift||^2


def test_iterations_to_gap_by_hand():
    best = jnp.asarray([[0.0, 0.5, 0.96, 0.99], [0.0, 0.1, 0.2, 0.3]])
    iters, reached = L.iterations_to_gap(best, jnp.asarray([1.0, 1.0]), 0.05)
    assert iters.tolist() == [2, 3] and reached.tolist() == [True, False]


def test_same_key_same_result_and_traced_sample_size(dist):
    run = jax.jit(lambda k, n: L.learn_sga(dist, k, n, 3.0, max_samples=64).multipliers)
    a, b = run(jax.random.key(0), 64), run(jax.random.key(0), 64)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, run(jax.random.key(1), 64))
    # A traced N below the static maximum equals the run of exactly N steps.
    direct = L.learn_sga(dist, jax.random.key(0), 40, 3.0).multipliers
    np.testing.assert_allclose(run(jax.random.key(0), 40), direct, rtol=1e-6)


def test_clear_errors(dist):
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="infeasible instance: coupling row 1"):
        L.BoxMILP([1.0, 1.0], [[1.0, 1.0], [0.5, 0.2]], [1.0, 0.9])
    with pytest.raises(ValueError, match=r"b must have shape \(2,\)"):
        L.BoxMILP([1.0, 1.0], [[1.0, 1.0], [0.5, 0.2]], [1.0])
    with pytest.raises(ValueError, match=r"A must have shape"):
        L.BoxMILP([1.0, 1.0, 1.0], [[1.0, 1.0]], [1.0])
    with pytest.raises(ValueError, match="radius must be > 0"):
        L.learn_sga(dist, key, 8, -1.0)
    with pytest.raises(ValueError, match="radius must be > 0"):
        L.project(jnp.ones(3), -2.0)
    with pytest.raises(ValueError, match=r"pi0 must have shape \(3,\)"):
        L.learn_sga(dist, key, 8, 1.0, pi0=jnp.ones(2))
    with pytest.raises(TypeError, match="max_samples .* must be given"):
        jax.jit(lambda n: L.learn_sga(dist, key, n, 1.0).multipliers)(8)
    with pytest.raises(TypeError, match="distribution must be an AbstractDistribution"):
        L.learn_sga(dist.instances, key, 8, 1.0)
    with pytest.raises(ValueError, match="infeasible instance"):  # HiGHS: easy rows empty
        L.milp_dual([0.0], L.MILP([1.0], [[1.0]], [0.5], C=[[1.0]], d=[2.0]))
    with pytest.raises(ValueError, match="infeasible instance"):  # jointly infeasible rows
        L.lp_relaxation(L.MILP([1.0, 1.0], [[1.0, 1.0], [-1.0, -1.0]], [1.5, -0.5]))
    # Infeasible values that appear only inside jit are caught there (error_if): b scaled
    # up by tree_at skips the construction-time check, as a traced program would.
    bad = eqx.tree_at(lambda d: d.instances.b, dist, dist.instances.b * 10.0)
    with pytest.raises(Exception, match="infeasible instance"):  # noqa: PT011
        jax.block_until_ready(L.learn_sga(bad, key, 8, 1.0).multipliers)


def test_experiment_config_validation():
    from jaxsci.experiments import lagrangian as E

    with pytest.raises(ValueError, match="sample_sizes must be strictly increasing"):
        E.LagrangianConfig(sample_sizes=(64, 32, 128))
    with pytest.raises(ValueError, match="n_coupling and s_grid must be <= s_max"):
        E.LagrangianConfig(n_coupling=32)
    with pytest.raises(ValueError, match="spread must be < 1"):
        E.LagrangianConfig(spread=1.0)
    assert E.loglog_slope([1.0, 2.0, 4.0], [8.0, 4.0, 2.0]) == pytest.approx(-1.0)
