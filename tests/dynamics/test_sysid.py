import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.dynamics import sysid as S

T = 300
L = 3


@pytest.fixture(scope="module")
def system():
    return S.make_system(jax.random.key(0), n_x=4, n_y=2, n_u=2, m=5, rho=0.5)


@pytest.fixture(scope="module")
def inputs():
    return S.ar_inputs(jax.random.key(1), T, 2)


@pytest.fixture(scope="module")
def attack():
    return S.Attack(
        delta=5.0 * jax.random.normal(jax.random.key(2), (2, 5)),
        mean=jnp.array([6.0, -4.0]),
        scale=3.0,
        corr=0.8,
    )


@pytest.fixture(scope="module")
def pipeline(system, inputs, attack):
    """One compiled simulate + both estimators, vmappable over (key, p)."""

    def one(key, p):
        phi, y, y_clean, flags = S._simulate(key, system, inputs, L, p, attack, 0.01)
        ls = S._weighted_ls(phi, y, jnp.ones(phi.shape[0]), 0.0)
        est = S._irls(phi, y, 200, 1e-7, 1e-8, 0.0)
        return (
            S.prediction_error(ls, phi, y_clean),
            S.prediction_error(est.theta, phi, y_clean),
            est.theta,
            flags,
        )

    return one


@pytest.fixture(scope="module")
def batched(pipeline):
    return jax.jit(jax.vmap(pipeline))


def test_inputs_are_correlated_nonzero_mean_non_gaussian():
    u = np.asarray(S.ar_inputs(jax.random.key(3), 20000, 1, mean=0.5, corr=0.7))[:, 0]
    assert abs(u.mean() - 0.5) < 0.05
    lag1 = np.corrcoef(u[1:], u[:-1])[0, 1]
    assert lag1 == pytest.approx(0.7, abs=0.03)
    # Uniform innovations: the innovation's excess kurtosis is -1.2, not 0.
    eta = u[1:] - 0.5 - 0.7 * (u[:-1] - 0.5)
    z = (eta - eta.mean()) / eta.std()
    assert np.mean(z**4) - 3.0 == pytest.approx(-1.2, abs=0.1)


def test_lagged_features_layout():
    psi = jnp.arange(20.0).reshape(10, 2)
    phi = S.lagged_features(psi, 3)
    assert phi.shape == (7, 6)
    for i in range(7):
        t = 3 + i
        for k in range(1, 4):
            np.testing.assert_array_equal(phi[i, 2 * (k - 1) : 2 * k], psi[t - k])


def test_markov_parameters_are_the_exact_map(system, inputs, attack):
    # Noise-free, no attack: the truncation error of Theta*_L decays like rho^L.
    errs = []
    for lag in (1, 4, 16):
        phi, y, yc, _ = S.simulate(jax.random.key(4), system, inputs, lag, 0.0, attack, 0.0)
        np.testing.assert_array_equal(np.asarray(y), np.asarray(yc))
        errs.append(float(S.prediction_error(S.markov_parameters(system, lag), phi, yc)))
    assert all(b < a for a, b in zip(errs, errs[1:], strict=False))
    assert errs[-1] < 1e-3 < errs[0]


def test_l2_recovers_truth_exactly_without_attack_or_noise(inputs, attack):
    # rho = 0: finite memory, the truth is exactly Theta* = [C B, 0, ...] for every L.
    sysm = S.make_system(jax.random.key(5), n_x=4, n_y=2, n_u=2, m=5, rho=0.0)
    phi, y, _, _ = S.simulate(jax.random.key(6), sysm, inputs, L, 0.0, attack, 0.0)
    est = S.l2_norm_estimator(phi, y)
    truth = S.markov_parameters(sysm, L)
    np.testing.assert_allclose(np.asarray(est.theta), np.asarray(truth), atol=2e-4)
    assert float(est.objective) < 1e-3 * float(jnp.sum(jnp.linalg.norm(y, axis=1)))


def test_single_huge_outlier_breaks_least_squares_not_l2(system, inputs, attack):
    phi, y, yc, _ = S.simulate(jax.random.key(7), system, inputs, 20, 0.0, attack, 0.0)
    y = y.at[100].add(jnp.array([1e4, -1e4]))
    ls = S.least_squares(phi, y)
    est = S.l2_norm_estimator(phi, y)
    err_ls = float(S.prediction_error(ls, phi, yc))
    err_l2 = float(S.prediction_error(est.theta, phi, yc))
    assert err_ls > 1.0
    assert err_l2 < 1e-2
    assert bool(est.converged)


def test_l2_objective_not_worse_than_least_squares(system, inputs, attack):
    phi, y, _, _ = S.simulate(jax.random.key(8), system, inputs, L, 0.3, attack, 0.05)
    est = S.l2_norm_estimator(phi, y)
    ls = S.least_squares(phi, y)
    assert float(est.objective) < float(S.l2_objective(ls, phi, y))
    assert float(est.objective) == pytest.approx(float(S.l2_objective(est.theta, phi, y)))


def test_matches_cvxpy_on_small_problem():
    cp = pytest.importorskip("cvxpy")
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        phi = rng.normal(size=(60, 6))
        theta = rng.normal(size=(2, 6))
        y = phi @ theta.T + 0.1 * rng.normal(size=(60, 2))
        y[rng.random(60) < 0.2] += rng.normal(5.0, 3.0, size=2)
        est = S.l2_norm_estimator(jnp.asarray(phi), jnp.asarray(y), tol=1e-12, eps=1e-10,
                                  max_iter=2000)
        var = cp.Variable((2, 6))
        obj = cp.sum(cp.norm(y - phi @ var.T, 2, axis=1))
        prob = cp.Problem(cp.Minimize(obj))
        prob.solve(solver=cp.CLARABEL)
        assert float(est.objective) == pytest.approx(prob.value, rel=1e-6)
        np.testing.assert_allclose(np.asarray(est.theta), var.value, atol=1e-4)


def test_attack_flags_follow_p_and_l2_beats_ls_below_threshold(batched):
    keys = jax.random.split(jax.random.key(9), 4)
    ps = jnp.array([0.0, 0.2, 0.3, 0.9])
    err_ls, err_l2, _, flags = batched(keys, ps)
    rate = np.asarray(flags).mean(1)
    np.testing.assert_allclose(rate, np.asarray(ps), atol=0.08)
    assert np.all(np.asarray(err_l2[1:3]) < 0.2 * np.asarray(err_ls[1:3]))
    assert float(err_l2[3]) > 1.0  # p = 0.9: past the threshold the adversary wins


def test_simulate_jit_equals_eager_and_determinism(pipeline, batched, system, inputs, attack):
    key = jax.random.key(10)
    eager = S._simulate.__wrapped__(key, system, inputs, L, 0.2, attack, 0.01)
    jitted = S.simulate(key, system, inputs, L, 0.2, attack, 0.01)
    for a, b in zip(eager, jitted, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    keys = jax.random.split(key, 4)
    ps = jnp.full(4, 0.2)
    first, again = batched(keys, ps), batched(keys, ps)
    np.testing.assert_array_equal(np.asarray(again[2]), np.asarray(first[2]))
    other = batched(jax.random.split(jax.random.key(11), 4), ps)
    assert not np.allclose(np.asarray(other[2]), np.asarray(first[2]))


def test_estimator_vmap_equals_loop_and_jit_equals_eager():
    with jax.enable_x64(True):
        rng = np.random.default_rng(1)
        phi = jnp.asarray(rng.normal(size=(3, 80, 4)))
        y = jnp.einsum("btd,yd->bty", phi, jnp.asarray(rng.normal(size=(2, 4))))
        y = y + jnp.asarray(rng.standard_t(1.5, size=y.shape))  # heavy-tailed residuals
        batched = jax.vmap(lambda a, b: S._irls(a, b, 500, 1e-12, 1e-10, 0.0).theta)(phi, y)
        for i in range(3):
            loop = S.l2_norm_estimator(phi[i], y[i], max_iter=500, tol=1e-12, eps=1e-10)
            np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(loop.theta),
                                       rtol=1e-6, atol=1e-8)
        eager = S._irls.__wrapped__(phi[0], y[0], 500, 1e-12, 1e-10, 0.0).theta
        np.testing.assert_allclose(np.asarray(eager), np.asarray(batched[0]),
                                   rtol=1e-6, atol=1e-8)


def test_clear_errors(system, inputs, attack):
    k = jax.random.key(0)
    with pytest.raises(ValueError, match="L must be >= 1"):
        S.simulate(k, system, inputs, 0, 0.1, attack)
    with pytest.raises(ValueError, match="p must be <= 1"):
        S.simulate(k, system, inputs, 2, 1.5, attack)
    with pytest.raises(ValueError, match="p must be >= 0"):
        S.simulate(k, system, inputs, 2, -0.1, attack)
    phi = jnp.ones((10, 3))
    y = jnp.ones((10, 2)).at[3, 1].set(jnp.nan)
    with pytest.raises(ValueError, match="y must be finite"):
        S.l2_norm_estimator(phi, y)
    with pytest.raises(ValueError, match="one row per row of phi"):
        S.least_squares(phi, jnp.ones((9, 2)))
    with pytest.raises(ValueError, match="L must be >= 1"):
        S.lagged_features(jnp.ones((5, 2)), 0)
    with pytest.raises(TypeError, match="key"):
        S.ar_inputs(0, 10, 1)
