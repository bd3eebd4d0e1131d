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
        np.testing.assert_allclose(batch[i], one, rtol=1e-5, atol=1e-6)


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


def test_regime_prior_extrapolates_trend_and_oscillation():
    tau = jnp.arange(48.0)
    c, h = 32, 16
    # A pure sinusoid with an integer number of periods in the context: the prior
    # continues it.
    wave = jnp.sin(2 * jnp.pi * 4 * tau / c)
    prior = bf.regime_prior(wave[None, :c], h)[0]
    np.testing.assert_allclose(prior, wave[c:], atol=0.05)
    # A straight line: the prior starts on its continuation with the context's slope.
    line = 0.1 * tau
    prior = bf.regime_prior(line[None, :c], h)[0]
    assert float(prior[0]) == pytest.approx(float(line[c]), abs=0.01)
    assert bool(jnp.all(jnp.diff(prior) > 0))


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
    f = lambda k: bf.sample_forecast(model, k, ctx[:4], 8, 3, steps=4)
    a = f(jax.random.key(0))
    np.testing.assert_array_equal(a, f(jax.random.key(0)))
    np.testing.assert_allclose(eqx.filter_jit(f)(jax.random.key(0)), a, atol=1e-5)
    assert a.shape == (3, 4, 8)
    # The loss is finite and differentiable.
    g = eqx.filter_grad(lambda m: bf.cfm_loss(m, jax.random.key(2), ctx, fut))(model)
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
    with pytest.raises(ValueError, match="source"):
        bf.sample_forecast(model, jax.random.key(0), ctx, 8, 2, source="uniform")
