import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.dynamics import langevin as lg

D = 0.5
SIM = {"steps_per_obs": 50, "burn_in": 1.0, "burn_in_steps": 100}  # step 0.01


@pytest.fixture(scope="module")
def feats():
    return lg.random_features(jax.random.key(0), 2, 100, 1.0)


@pytest.fixture(scope="module")
def ou_obs():
    """Short dense observations (tau = dt = 0.01) of dX = -X dt + sqrt(2D) dW."""
    x0 = jax.random.normal(jax.random.key(1), (20, 2)) * np.sqrt(D)
    return lg.simulate(jax.random.key(2), lambda x: -x, x0, D, 0.01, 51, steps_per_obs=1)


@pytest.fixture(scope="module")
def ou_increments():
    """Dense Euler increments of the OU process from its invariant law (total time 2000)."""
    kx, kn = jax.random.split(jax.random.key(15))
    x = jax.random.normal(kx, (20000, 2)) * np.sqrt(D)
    dt = 0.1
    dx = -x * dt + np.sqrt(2 * D * dt) * jax.random.normal(kn, x.shape)
    return x, dx, dt


@pytest.fixture(scope="module")
def small_obs():
    x0 = jax.random.normal(jax.random.key(3), (6, 2))
    return lg.simulate(jax.random.key(4), lg.VanDerPol(), x0, D, 0.5, 4, **SIM)


# ---------------------------------------------------------------- simulation


def test_simulate_ou_stationary_variance():
    # OU with f = -x, D = 0.5: stationary variance D = 0.5 per axis.
    x0 = jnp.zeros((500, 2))
    obs = lg.simulate(jax.random.key(5), lambda x: -x, x0, D, 1.0, 2, steps_per_obs=100,
                      burn_in=4.0, burn_in_steps=400)
    var = np.var(np.asarray(obs[:, -1]), axis=0)
    np.testing.assert_allclose(var, D, rtol=0.2)


def test_simulate_deterministic_and_shape(small_obs):
    x0 = jax.random.normal(jax.random.key(3), (6, 2))
    again = lg.simulate(jax.random.key(4), lg.VanDerPol(), x0, D, 0.5, 4, **SIM)
    assert small_obs.shape == (6, 4, 2)
    np.testing.assert_array_equal(np.asarray(small_obs), np.asarray(again))
    other = lg.simulate(jax.random.key(5), lg.VanDerPol(), x0, D, 0.5, 4, **SIM)
    assert not np.allclose(np.asarray(small_obs), np.asarray(other))


# ---------------------------------------------------------------- regression


def _grid_error(model, pts):
    grid = jnp.asarray(np.stack(np.meshgrid(np.linspace(-1, 1, 9), np.linspace(-1, 1, 9)),
                                -1).reshape(-1, 2), jnp.float32)
    w = lg.kde_density(grid, pts, lg.scott_bandwidth(pts))
    err = float(lg.weighted_rmse(lg.predict(model, grid), -grid, w))
    rms = float(lg.weighted_rmse(jnp.zeros_like(grid), -grid, w))
    return err, rms


def test_direct_estimator_recovers_linear_drift_from_dense_data(feats, ou_increments):
    x, dx, dt = ou_increments
    obs = jnp.stack([x, x + dx], axis=1)  # pairs (x_k, x_{k+1}) with tau = dt
    err, rms = _grid_error(lg.direct_estimator(feats, obs, dt, D), x[:2000])
    # Statistical error ~ sqrt(2 D dof / T) with T = 2000: a few % of the drift.
    assert err < 0.15 * rms
    # Noise-free increments: exact up to the prior's shrinkage.
    exact = jnp.stack([x, x - x * dt], axis=1)
    err0, _ = _grid_error(lg.direct_estimator(feats, exact, dt, D), x[:2000])
    assert err0 < 0.03 * rms


def test_drift_reestimation_from_dense_paths_recovers_linear_drift(feats, ou_increments):
    # The M-step on fine paths: fit_drift on weighted increments.
    x, dx, dt = ou_increments
    probe = jnp.array([[0.5, -0.3], [-0.4, 0.2], [0.0, 0.6]])
    full = lg.fit_drift(feats, x, dx, dt, D)
    np.testing.assert_allclose(np.asarray(lg.predict(full, probe)), -np.asarray(probe), atol=0.1)
    # Two bridges per increment, each of weight 1/2, equal the single increment.
    x2, dx2 = jnp.concatenate([x, x]), jnp.concatenate([dx, dx])
    half = lg.fit_drift(feats, x2, dx2, dt, D, weights=jnp.full((x2.shape[0],), 0.5))
    np.testing.assert_allclose(np.asarray(half.coef), np.asarray(full.coef), rtol=1e-2,
                               atol=1e-3)


def test_polynomial_features_are_the_monomials_up_to_the_degree():
    poly = lg.polynomial_features(2, 3, scale=2.0)
    assert poly.size == 10  # comb(2 + 3, 3), constant included
    assert set(poly.exponents) == {(a, b) for a in range(4) for b in range(4) if a + b <= 3}
    x = jnp.array([[-1.0, 3.0], [0.0, -0.5]])
    z = np.asarray(x) / 2.0
    want = np.stack([z[:, 0] ** a * z[:, 1] ** b for a, b in poly.exponents], -1)
    np.testing.assert_allclose(np.asarray(lg.feature_map(poly, x)), want, rtol=1e-6)
    # exact integer powers: negative states and finite gradients at zero
    g = jax.jacfwd(lambda v: lg.feature_map(poly, v[None])[0])(jnp.zeros(2))
    assert np.all(np.isfinite(np.asarray(g)))
    with pytest.raises(ValueError, match="degree must be >= 1"):
        lg.polynomial_features(2, 0)
    with pytest.raises(TypeError, match="feats must be a langevin basis"):
        lg.feature_map((np.ones((3, 2)), np.ones(3)), x)


def test_direct_estimator_on_monomials_recovers_a_polynomial_drift():
    # The double well's drift (-4x^3 + 4x, -y) lies in the degree-3 span: from dense
    # exact (noise-free) increments the fit is the drift up to the prior's shrinkage.
    x = jax.random.normal(jax.random.key(20), (4000, 2)) * jnp.array([0.8, 0.7])
    f = jax.vmap(lg.DoubleWell())(x)
    dt = 0.1
    model = lg.direct_estimator(lg.polynomial_features(2, 3), jnp.stack([x, x + f * dt], 1),
                                dt, D)
    probe = jnp.array([[0.9, -0.4], [-1.1, 0.3], [0.2, 0.5]])
    np.testing.assert_allclose(np.asarray(lg.predict(model, probe)),
                               np.asarray(jax.vmap(lg.DoubleWell())(probe)), atol=0.05)


def test_solve_is_finite_for_long_lengthscales(ou_obs):
    # The float32 Cholesky must not break down (the prior term bounds the conditioning).
    for ell in (0.5, 2.0, 10.0):
        f = lg.random_features(jax.random.key(6), 2, 100, ell)
        model = lg.direct_estimator(f, ou_obs, 0.01, D)
        assert np.all(np.isfinite(np.asarray(model.coef))), ell


def test_fit_drift_jit_matches_eager(feats, ou_obs):
    x = ou_obs[:5, :-1].reshape(-1, 2)
    dx = (ou_obs[:5, 1:] - ou_obs[:5, :-1]).reshape(-1, 2)
    eager = lg.fit_drift(feats, x, dx, 0.01, D).coef
    jitted = jax.jit(lambda a, b: lg.solve_drift(feats, lg.drift_stats(feats, a, b, 0.01), D,
                                                 10.0).coef)(x, dx)
    np.testing.assert_allclose(np.asarray(eager), np.asarray(jitted), rtol=2e-3, atol=2e-4)


# ---------------------------------------------------------------- geometry


def test_geometric_drift_recovers_gradient_drift():
    # Gaussian samples with variance D: rho ~ exp(-|x|^2 / 2D), so D grad log rho = -x.
    pts = np.sqrt(D) * jax.random.normal(jax.random.key(7), (20000, 2))
    obs = pts.reshape(200, 100, 2)
    probe = jnp.array([[0.3, 0.0], [-0.5, 0.4], [0.0, -0.6]])
    h = 0.3
    got = lg.geometric_drift(probe, obs, D, bandwidth=h)
    # The KDE convolves rho with N(0, h^2): exact score is -x / (D + h^2) * D.
    np.testing.assert_allclose(np.asarray(got), -np.asarray(probe) * D / (D + h**2), atol=0.08)


def test_rotating_well_has_same_invariant_density_as_double_well():
    # The Fokker-Planck current J = f rho - D grad rho is divergence-free for
    # rho = exp(-U / D): check numerically at random points.
    f = lg.RotatingWell()

    def u(x):
        return (x[0] ** 2 - 1.0) ** 2 + 0.5 * x[1] ** 2

    def flux(x):
        return jnp.exp(-u(x) / D) * f(x) - D * jax.grad(lambda y: jnp.exp(-u(y) / D))(x)

    xs = jax.random.normal(jax.random.key(8), (10, 2))
    div = jax.jit(jax.vmap(lambda x: jnp.trace(jax.jacfwd(flux)(x))))(xs)
    np.testing.assert_allclose(np.asarray(div), 0.0, atol=1e-4)


# ---------------------------------------------------------------- bridges


@pytest.fixture(scope="module")
def bridge_fn():
    def drift(z):
        return -z

    def one(key, xs, xe):
        return lg.sample_bridges(key, drift, xs, xe, 1.0, D, n_steps=10, n_bridges=4)

    return jax.jit(one)


def test_bridges_start_and_end_at_observations(bridge_fn):
    xs = jnp.array([[0.0, 0.0], [1.0, -1.0], [-2.0, 0.5]])
    xe = jnp.array([[1.0, 1.0], [0.0, 0.0], [2.0, -0.5]])
    br = bridge_fn(jax.random.key(9), xs, xe)
    assert br.paths.shape == (3, 4, 11, 2)
    np.testing.assert_array_equal(np.asarray(br.paths[:, :, 0]),
                                  np.broadcast_to(xs[:, None], (3, 4, 2)))
    np.testing.assert_array_equal(np.asarray(br.paths[:, :, -1]),
                                  np.broadcast_to(xe[:, None], (3, 4, 2)))
    np.testing.assert_allclose(np.asarray(br.weights.sum(1)), 1.0, rtol=1e-5)
    assert np.all(np.isfinite(np.asarray(br.log_weights)))


def test_bridge_midpoint_matches_ou_bridge_mean():
    # For OU (f = -x) the exact bridge mean at t from 0 to v at T is
    # x0 sinh(T - t)/sinh(T) + v sinh(t)/sinh(T); weighted guided bridges must match it.
    xs = jnp.zeros((1, 2))
    xe = jnp.array([[2.0, -2.0]])
    br = lg.sample_bridges(jax.random.key(10), lambda z: -z, xs, xe, 2.0, D, n_steps=40,
                           n_bridges=4000)
    # The weights target the Euler chain (dt = 0.05, a = 1 - dt), whose bridge mean at
    # step 20 of 40 is v Cov(x_20, x_40) / Var(x_40): within 1 % of the continuous one.
    dt, a = 2.0 / 40, 1.0 - 2.0 / 40
    v20 = 2 * D * dt * np.sum(a ** (2 * np.arange(20)))
    euler = np.array([2.0, -2.0]) * a**20 * v20 / (a**40 * v20 + v20)
    want = np.array([2.0, -2.0]) * np.sinh(1.0) / np.sinh(2.0)
    np.testing.assert_allclose(euler, want, rtol=0.03)
    w = np.asarray(br.weights[0], np.float64)
    x20 = np.asarray(br.paths[0, :, 20], np.float64)
    mid = w @ x20
    se = np.sqrt(w**2 @ np.square(x20 - mid))  # self-normalised IS standard error
    assert np.all(np.abs(mid - euler) < 4 * se), (mid, euler, se)
    # ...where the unweighted proposal mean (the Brownian-bridge guide) is biased.
    raw, se_raw = x20.mean(0), x20.std(0) / np.sqrt(x20.shape[0])
    assert np.linalg.norm(raw - euler) > 4 * np.linalg.norm(se_raw)
    # The mean importance weight estimates the Euler chain's transition density
    # (Gaussian for OU: mean 0 from x0 = 0, variance 2 D dt sum_i (1 - dt)^(2i) per axis),
    # within a few of its own standard errors.
    dt = 2.0 / 40
    var = 2 * D * dt * np.sum((1 - dt) ** (2 * np.arange(40)))
    exact = -np.sum(np.square([2.0, -2.0])) / (2 * var) - np.log(2 * np.pi * var)
    w = np.exp(np.asarray(br.log_weights[0], np.float64) - float(br.log_transition[0]))
    se = np.std(w) / np.sqrt(w.size)  # standard error of log(mean w), w scaled to mean 1
    assert abs(float(br.log_transition[0]) - exact) < 4 * se + 1e-3


def test_bridge_weights_constant_for_brownian_motion():
    # f = 0: the Brownian-bridge guide is the exact bridge, so every weight equals the
    # transition density N(x_end; x_start, 2 D tau I), whatever the path.
    xs = jnp.array([[0.0, 0.0], [1.0, -1.0]])
    xe = jnp.array([[1.0, 1.0], [-0.5, 0.0]])
    tau = 0.7
    br = lg.sample_bridges(jax.random.key(16), jnp.zeros_like, xs, xe, tau, D, n_steps=7,
                           n_bridges=5)
    var = 2 * D * tau
    exact = -np.sum(np.square(np.asarray(xe - xs)), -1) / (2 * var) - np.log(2 * np.pi * var)
    np.testing.assert_allclose(np.asarray(br.log_weights),
                               np.broadcast_to(exact[:, None], (2, 5)), atol=2e-4)
    np.testing.assert_allclose(np.asarray(br.log_transition), exact, atol=2e-4)


def test_bridges_vmap_matches_loop(bridge_fn):
    keys = jax.random.split(jax.random.key(11), 3)
    xs = jnp.zeros((2, 2))
    xe = jnp.ones((2, 2))
    batched = jax.vmap(bridge_fn, in_axes=(0, None, None))(keys, xs, xe)
    for i in range(3):
        single = bridge_fn(keys[i], xs, xe)
        np.testing.assert_allclose(np.asarray(batched.paths[i]), np.asarray(single.paths),
                                   rtol=1e-5, atol=1e-5)


def test_path_augmentation_deterministic_and_improves_init(feats):
    # OU observed at tau = 1: the direct estimator is biased toward (e^{-1} - 1) x;
    # augmentation from a zero drift moves toward -x. The returned (selected) iterate
    # is asserted on; later iterates drift away (see docs/langevin.md).
    x0 = jax.random.normal(jax.random.key(12), (100, 2)) * np.sqrt(D)
    obs = lg.simulate(jax.random.key(13), lambda x: -x, x0, D, 1.0, 6, steps_per_obs=100)
    init = lg.DriftModel(feats, jnp.zeros((feats.b.shape[0], 2)))
    probe = jnp.array([[0.5, 0.0], [0.0, -0.5], [-0.4, 0.4]])
    cfg = lg.EMConfig(n_iter=6, n_steps=5, n_bridges=4)
    a = lg.path_augmentation(jax.random.key(14), init, obs, 1.0, D, cfg, probe=probe)
    b = lg.path_augmentation(jax.random.key(14), init, obs, 1.0, D, cfg, probe=probe)
    np.testing.assert_array_equal(np.asarray(a.history), np.asarray(b.history))
    assert a.history.shape == (7, 3, 2)
    err = [float(jnp.sqrt(jnp.mean(jnp.square(h + probe)))) for h in a.history]
    direct = lg.predict(lg.direct_estimator(feats, obs, 1.0, D), probe)
    err_direct = float(jnp.sqrt(jnp.mean(jnp.square(direct + probe))))
    # The returned model is the iterate with the highest estimated log posterior.
    lp = np.asarray(a.log_posterior)
    assert lp.shape == (7,) and np.all(np.isfinite(lp))
    sel = int(a.selected)
    assert sel == int(np.argmax(lp))
    assert err[sel] < 0.5 * err[0]
    assert err[sel] < err_direct
    np.testing.assert_allclose(np.asarray(lg.predict(a.model, probe)),
                               np.asarray(a.history[sel]), rtol=1e-5, atol=1e-5)
    # From a zero drift, EM raises the observed-data objective.
    assert lp[sel] > lp[0]
    # The driver is a scan over init/step: the same keys give the same iterates.
    k_em, k_score = jax.random.split(jax.random.key(14))
    pairs = lg.observation_pairs(obs, 1.0)
    state = lg.augmentation_init(init)
    lps = []
    for k in jax.random.split(k_em, cfg.n_iter):
        state, info = lg.augmentation_step(k, state, pairs, D, cfg, score_key=k_score)
        lps.append(float(info.log_posterior))
    assert int(state.iteration) == cfg.n_iter
    np.testing.assert_allclose(lps, lp[:-1], rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(np.asarray(lg.predict(state.model, probe)),
                               np.asarray(a.history[-1]), rtol=1e-2, atol=1e-3)


def test_holdout_selection_scores_the_held_out_pairs_and_fits_on_the_rest(feats):
    x0 = jax.random.normal(jax.random.key(12), (20, 2)) * np.sqrt(D)
    obs = lg.simulate(jax.random.key(13), lambda x: -x, x0, D, 1.0, 6, steps_per_obs=100)
    init = lg.DriftModel(feats, jnp.zeros((feats.size, 2)))
    probe = jnp.array([[0.5, 0.0], [0.0, -0.5], [-0.4, 0.4]])
    cfg = lg.EMConfig(n_iter=3, n_steps=5, n_bridges=4, select="holdout", holdout_every=4)
    a = lg.path_augmentation(jax.random.key(14), init, obs, 1.0, D, cfg, probe=probe)
    lp = np.asarray(a.log_posterior)
    assert lp.shape == (4,) and int(a.selected) == int(np.argmax(lp))
    # the initial (zero) drift's score: the held-out pairs' (every fourth) Monte-Carlo
    # transition log-likelihood under the score bridges, without the prior
    pairs = lg.observation_pairs(obs, 1.0)
    held = np.arange(pairs.x_start.shape[0]) % 4 == 3
    _, k_score = jax.random.split(jax.random.key(14))
    br = lg.sample_bridges(k_score, lambda z: lg.predict(init, z), pairs.x_start[held],
                           pairs.x_end[held], 1.0, D, n_steps=5, n_bridges=cfg.score_bridges)
    np.testing.assert_allclose(lp[0], float(jnp.sum(br.log_transition)), rtol=1e-4)
    # the EM fits the other pairs only: on them alone, the same key gives the same iterates
    fit = np.flatnonzero(~held)
    sub = jnp.stack([pairs.x_start[fit], pairs.x_end[fit]], 1)
    b = lg.path_augmentation(jax.random.key(14), init, sub, 1.0, D,
                             dataclasses.replace(cfg, select="max_posterior"), probe=probe)
    np.testing.assert_allclose(np.asarray(a.history), np.asarray(b.history), rtol=1e-4,
                               atol=1e-5)
    with pytest.raises(ValueError, match="needs at least holdout_every"):
        lg.path_augmentation(jax.random.key(0), init, obs[:1, :3], 1.0, D, cfg)


# ---------------------------------------------------------------- errors


def test_errors_non_increasing_times(feats, small_obs):
    with pytest.raises(ValueError, match="times must be strictly increasing"):
        lg.direct_estimator(feats, small_obs, 0.5, D, times=jnp.array([0.0, 1.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="times must have one entry"):
        lg.direct_estimator(feats, small_obs, 0.5, D, times=jnp.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="tau must be > 0"):
        lg.sample_bridges(jax.random.key(0), lambda z: -z, small_obs[:, 0], small_obs[:, 1],
                          jnp.array([0.5, 0.5, -0.1, 0.5, 0.5, 0.5]), D)


def test_errors_nan_in_data(feats, small_obs):
    bad = small_obs.at[0, 1, 0].set(jnp.nan)
    with pytest.raises(ValueError, match="obs must be finite"):
        lg.direct_estimator(feats, bad, 0.5, D)
    with pytest.raises(ValueError, match="obs must be finite"):
        lg.path_augmentation(jax.random.key(0), lg.DriftModel(feats, jnp.zeros((100, 2))), bad,
                             0.5, D)
    with pytest.raises(ValueError, match="x_end must be finite"):
        lg.sample_bridges(jax.random.key(0), lambda z: -z, small_obs[:, 0], bad[:, 1], 0.5, D)


def test_errors_bad_arguments(feats, small_obs):
    with pytest.raises(ValueError, match="tau must be > 0"):
        lg.direct_estimator(feats, small_obs, 0.0, D)
    with pytest.raises(ValueError, match="diffusion must be > 0"):
        lg.geometric_drift(small_obs[0], small_obs, -1.0)
    with pytest.raises(TypeError, match="drift must be a drift"):
        lg.simulate(jax.random.key(0), "hopf", jnp.zeros((2, 2)), D, 0.5, 3)
    with pytest.raises(ValueError, match="burn_in_steps"):
        lg.simulate(jax.random.key(0), lg.Hopf(), jnp.zeros((2, 2)), D, 0.5, 3, burn_in=1.0)
    with pytest.raises(ValueError, match="n_bridges must be >= 1"):
        lg.sample_bridges(jax.random.key(0), lambda z: -z, small_obs[:, 0], small_obs[:, 1],
                          0.5, D, n_bridges=0)
    with pytest.raises(ValueError, match="select must be one of"):
        lg.EMConfig(select="best")
    with pytest.raises(ValueError, match="obs needs at least 2 observation times"):
        lg.direct_estimator(feats, small_obs[:, :1], 0.5, D)


def test_fit_drift_rejects_non_positive_dt(feats, ou_increments):
    # Issue 16: dt = 0 used to be accepted and gave a silent, meaningless fit.
    x, dx, _ = ou_increments
    x, dx = x[:50], dx[:50]
    for bad in (0.0, -0.1):
        with pytest.raises(ValueError, match="dt must be > 0"):
            lg.fit_drift(feats, x, dx, bad, D)
    with pytest.raises(ValueError, match="dt must be > 0"):
        lg.fit_drift(feats, x, dx, jnp.full((50,), 0.1).at[3].set(0.0), D)
    with pytest.raises(ValueError, match="x must hold at least one increment"):
        lg.fit_drift(feats, x[:0], dx[:0], 0.1, D)
    # Inside jit the check still fires (equinox.error_if), instead of a NaN-free garbage fit.
    fit = jax.jit(lambda dt: lg.fit_drift(feats, x, dx, dt, D).coef)
    with pytest.raises(Exception, match="dt must be > 0"):
        jax.block_until_ready(fit(jnp.asarray(0.0)))
    assert np.all(np.isfinite(np.asarray(fit(jnp.asarray(0.1)))))


def test_drift_parameters_sweep():
    # vmap over RotatingWell's gamma: gamma = 0 is the double well.
    xs = jnp.array([[0.3, -0.2], [1.1, 0.4]])
    out = jax.jit(jax.vmap(lambda g: jax.vmap(lg.RotatingWell(g))(xs)))(jnp.array([0.0, 2.0]))
    np.testing.assert_allclose(np.asarray(out[0]), np.asarray(jax.vmap(lg.DoubleWell())(xs)),
                               rtol=1e-6)
    assert not np.allclose(np.asarray(out[1]), np.asarray(out[0]))
