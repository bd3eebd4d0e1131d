import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.dynamics import bioflow as bf

NAMES = tuple(bf.FAMILIES)


def _one(name, params, y0, n_times=41):
    i = NAMES.index(name)
    return bf.simulate(jnp.array([i]), jnp.asarray([params], jnp.float32),
                       jnp.asarray([y0], jnp.float32), n_times)[0]


def _pad(v, n):
    return list(v) + [0.0] * (n - len(v))


def test_logistic_matches_closed_form():
    r, K, n0 = 1.2, 1.5, 0.1
    y = _one("logistic", _pad([r, K], bf.P), _pad([n0], bf.D))
    t = np.linspace(0, bf.FAMILIES["logistic"].t_end, 41)
    want = K / (1 + (K / n0 - 1) * np.exp(-r * t))
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_linear_families_match_closed_form():
    t_el = np.linspace(0, bf.FAMILIES["elimination"].t_end, 41)
    y = _one("elimination", _pad([0.3], bf.P), _pad([2.0], bf.D))
    np.testing.assert_allclose(y, 2.0 * np.exp(-0.3 * t_el), rtol=1e-4, atol=1e-6)
    w, z = 1.5, 0.1
    t = np.linspace(0, bf.FAMILIES["damped_oscillator"].t_end, 41)
    y = _one("damped_oscillator", _pad([w, z], bf.P), _pad([1.0, 0.0], bf.D))
    wd = w * math.sqrt(1 - z * z)
    want = np.exp(-z * w * t) * (np.cos(wd * t) + z * w / wd * np.sin(wd * t))
    np.testing.assert_allclose(y, want, atol=1e-4)


def test_vmap_over_systems_equals_loop():
    fam, params, y0 = bf.sample_systems(jax.random.key(0), 1)
    batch = bf.simulate(fam, params, y0, 24)
    for i in (0, 4, 9):
        one = bf.simulate(fam[i:i + 1], params[i:i + 1], y0[i:i + 1], 24)[0]
        # Two float32 adaptive solves agree to the solver's own tolerance (rtol 1e-5 per
        # step, accumulated over the horizon), not bit for bit: XLA may fuse the batched
        # program differently (seen: 3e-5 relative on a clean-clone CI run).
        np.testing.assert_allclose(batch[i], one, rtol=1e-4, atol=1e-5)


def test_regime_labels_on_constructed_cases():
    t = jnp.linspace(0, 20, 64)
    cases = {
        "growth": 1 / (1 + 20 * jnp.exp(-t)),
        "decay": jnp.exp(-0.3 * t),
        "damped_oscillation": jnp.exp(-0.25 * t) * jnp.cos(2 * t),
        "sustained_oscillation": jnp.sin(1.5 * t) + 0.01 * t,
        "switching": t * jnp.exp(-0.5 * t),
    }
    for name, y in cases.items():
        assert bf.REGIMES[int(bf.label_regime(y))] == name, name


C_, H_ = 32, 16
TAU = jnp.arange(C_ + H_, dtype=jnp.float32)
CLEAN = {  # name -> (series, the candidate that must win the context backtest)
    "constant": (jnp.full_like(TAU, 2.0), None),
    "sinusoid": (jnp.sin(2 * jnp.pi * 0.13 * TAU + 0.4), "damped_oscillation"),
    "damped_sinusoid": (0.5 + 0.94**TAU * jnp.cos(2 * jnp.pi * 0.08 * TAU),
                        "damped_oscillation"),
    "saturation": (3.0 - 4.0 * 0.93**TAU, "saturating"),
}


@pytest.fixture(scope="module")
def clean_prior():
    series = jnp.stack([v[0] for v in CLEAN.values()])
    return series, bf.regime_prior(series[:, :C_], H_)


def test_regime_prior_recovers_clean_regimes(clean_prior):
    series, fit = clean_prior
    for i, name in enumerate(CLEAN):
        np.testing.assert_allclose(fit.mean[i], series[i, C_:], atol=0.03, err_msg=name)


def test_backtest_selects_the_generating_rule(clean_prior):
    _, fit = clean_prior
    names = bf.RegimePrior().candidates
    for i, (name, (_, want)) in enumerate(CLEAN.items()):
        if want is not None:
            assert names[int(jnp.argmax(fit.weights[i]))] == want, name
    np.testing.assert_allclose(fit.weights.sum(1), 1.0, atol=1e-5)


def test_source_width_positive_finite_and_growing(clean_prior):
    _, fit = clean_prior
    spec = bf.RegimePrior()
    assert bool(jnp.all(jnp.isfinite(fit.sigma))) and bool(jnp.all(fit.sigma >= spec.sigma_min))
    assert bool(jnp.all(jnp.diff(fit.sigma, axis=1) >= 0))
    # Clean regimes are backtested exactly: the width sits at its floor.
    np.testing.assert_allclose(fit.sigma, spec.sigma_min, rtol=1e-5)
    # A noisy context gets a wider source than its floor.
    noisy = jnp.sin(0.3 * TAU[:C_]) + 0.5 * jax.random.normal(jax.random.key(3), (C_,))
    wide = bf.regime_prior(jnp.stack([noisy] * 4), H_).sigma[0]
    assert float(wide[-1]) > spec.sigma_min and float(wide[-1]) > float(wide[0])


def test_line_and_constant_recovered_exactly_by_undamped_trend():
    spec = bf.RegimePrior(candidates=("damped_trend", "persistence"), phi=1.0, temperature=0.0)
    line = 0.1 * TAU - 1.0
    ctx = jnp.stack([line[:C_], jnp.full((C_,), 0.7)])
    fit = bf.regime_prior(ctx, H_, spec)
    np.testing.assert_allclose(fit.mean[0], line[C_:], atol=1e-4)
    np.testing.assert_allclose(fit.mean[1], 0.7, atol=1e-5)
    # jit == eager (the prior is a pure function of each context).
    with jax.disable_jit():
        eager = bf.regime_prior(ctx, H_, spec)
    np.testing.assert_allclose(eager.mean, fit.mean, atol=1e-5)
    np.testing.assert_allclose(eager.sigma, fit.sigma, atol=1e-6)


def test_normalize_uses_context_only():
    traj = jnp.concatenate([jnp.ones((1, 8)), 100 * jnp.ones((1, 8))], 1) + jnp.arange(16.0)
    c1, f1, mu, s = bf.normalize_windows(traj, 8)
    c2, f2, _, _ = bf.normalize_windows(traj.at[:, 8:].mul(3.0), 8)
    np.testing.assert_allclose(c1, c2)
    np.testing.assert_allclose(mu, traj[:, :8].mean(1))


def test_crps_known_values():
    y = jnp.zeros((1, 1))
    # One sample: CRPS = |x - y|.
    assert float(bf.crps(jnp.full((1, 1, 1), 2.0), y)[0, 0]) == pytest.approx(2.0)
    # Two samples +-1 around y: E|X - y| = 1, E|X - X'| = 1 -> 0.5.
    s = jnp.array([1.0, -1.0]).reshape(2, 1, 1)
    assert float(bf.crps(s, y)[0, 0]) == pytest.approx(0.5)


@pytest.fixture(scope="module")
def trained():
    """A tiny regime-source model on a handful of sinusoids, trained a few steps."""
    key = jax.random.key(0)
    tau = jnp.arange(24.0)
    ph = jax.random.uniform(key, (64, 1)) * 6.28
    traj = jnp.sin(0.8 * tau + ph)
    ctx, fut, _, _ = bf.normalize_windows(traj, 16)
    model = bf.ConditionalVelocity(8, 16, 16, 1, key=jax.random.key(1))
    return model, ctx, fut


def test_forecast_determinism_and_jit(trained):
    import equinox as eqx

    model, ctx, fut = trained
    prior = bf.regime_prior(ctx, 8, bf.RegimePrior(candidates=("persistence",)))
    p4 = (prior.mean[:4], prior.sigma[:4])
    f = lambda k: bf.sample_forecast(model, k, ctx[:4], 8, 3, prior=p4, steps=4)
    a = f(jax.random.key(0))
    np.testing.assert_array_equal(a, f(jax.random.key(0)))
    np.testing.assert_allclose(eqx.filter_jit(f)(jax.random.key(0)), a, atol=1e-5)
    assert a.shape == (3, 4, 8)
    # The loss is finite and differentiable.
    g = eqx.filter_grad(lambda m: bf.cfm_loss(m, jax.random.key(2), ctx, fut,
                                              prior=(prior.mean, prior.sigma)))(model)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(
        eqx.filter(g, eqx.is_inexact_array)))


def test_errors_name_the_argument(trained):
    model, ctx, _ = trained
    with pytest.raises(ValueError, match="context must have at least 4 time steps"):
        bf.regime_prior(jnp.zeros((2, 3)), 4)
    with pytest.raises(ValueError, match="context must have 2 dimensions"):
        bf.regime_prior(jnp.zeros(10), 4)
    with pytest.raises(ValueError, match="context must be finite"):
        bf.sample_forecast(model, jax.random.key(0), ctx.at[0, 0].set(jnp.nan), 8, 2)
    with pytest.raises(ValueError, match="traj must be finite"):
        bf.normalize_windows(jnp.full((2, 10), jnp.nan), 5)
    with pytest.raises(TypeError, match="source must be an AbstractSource"):
        bf.sample_forecast(model, jax.random.key(0), ctx, 8, 2, source="gaussian")
    with pytest.raises(ValueError, match="candidates"):
        bf.RegimePrior(candidates=("spline",))
    with pytest.raises(ValueError, match="backtest must be <="):
        bf.regime_prior(ctx, 8, bf.RegimePrior(backtest=13))
    with pytest.raises(ValueError, match="sigma_min"):
        bf.RegimePrior(sigma_min=0.0)
    with pytest.raises(ValueError, match="prior.mean"):
        bf.sample_forecast(model, jax.random.key(0), ctx, 8, 2,
                           prior=(jnp.zeros((2, 8)), jnp.ones((2, 8))))
