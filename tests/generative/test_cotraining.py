import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.data import cotraining as toy
from jaxsci.generative import cotraining as C

# ------------------------------------------------------------------ reweighting


def test_reweighting_is_the_exact_posterior_of_the_noised_weighted_mixture():
    # y_t = t y_k + (1 - t) eps with k ~ w_k: p(k | y_t) by Bayes with Gaussian densities,
    # written out in float64 NumPy (no shortcut).
    rng = np.random.default_rng(0)
    data = rng.standard_normal((7, 3))
    n, m, w, t = 3, 4, 0.2, 0.6
    x = rng.standard_normal(3)
    wk = np.r_[np.full(n, w / n), np.full(m, (1 - w) / m)]
    sd = 1 - t
    dens = np.exp(-np.sum((x - t * data) ** 2, 1) / (2 * sd**2)) / (2 * np.pi * sd**2) ** 1.5
    post = wk * dens / np.sum(wk * dens)
    g = C.reweighting(jnp.asarray(x, jnp.float32), 0.6, jnp.asarray(data, jnp.float32),
                      C.mixture_log_weights(w, n, m))
    np.testing.assert_allclose(np.asarray(g), post, rtol=1e-4, atol=1e-6)


def test_mixture_weights_sum_to_one_and_w_one_is_real_only():
    lw = np.exp(np.asarray(C.mixture_log_weights(0.3, 4, 6)))
    np.testing.assert_allclose(lw.sum(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(lw[:4], 0.3 / 4, rtol=1e-6)
    assert np.all(np.exp(np.asarray(C.mixture_log_weights(1.0, 4, 6)))[4:] == 0)


def test_optimal_denoiser_hand_case():
    # Two atoms +-1 in 1-D, weights 1/4 and 3/4, x = 0, t = 1/2: the Gaussian terms are
    # equal, so E[y | y_t] = 1/4 - 3/4 = -1/2. At x = 0.5 (t = 1/2, sd = 1/2):
    # logits ln(1/4) - 0 and ln(3/4) - 2, E = (e^{l1} - e^{l2}) / (e^{l1} + e^{l2}).
    data = jnp.array([[1.0], [-1.0]])
    lw = C.mixture_log_weights(0.25, 1, 1)
    assert float(C.optimal_denoiser(jnp.zeros(1), 0.5, data, lw)[0]) == pytest.approx(-0.5,
                                                                                       abs=1e-6)
    l1, l2 = np.log(0.25), np.log(0.75) - 2.0
    want = (np.exp(l1) - np.exp(l2)) / (np.exp(l1) + np.exp(l2))
    assert float(C.optimal_denoiser(jnp.full(1, 0.5), 0.5, data, lw)[0]) == pytest.approx(
        want, rel=1e-5)
    # A far-away latent kernel removes the first atom entirely.
    y, g = C.conditional_optimal_denoiser(jnp.zeros(1), jnp.zeros(1), 0.5,
                                          jnp.array([[10.0], [0.0]]), data, lw, 0.5)
    assert float(g[0]) < 1e-12 and float(y[0]) == pytest.approx(-1.0, abs=1e-6)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="w must be <= 1"):
        C.mixture_log_weights(1.5, 2, 2)
    with pytest.raises(ValueError, match="w must be >= 0"):
        C.arm(-0.1)
    with pytest.raises(ValueError, match="data must have 2 dimensions|data must have ndim"):
        C.reweighting(jnp.zeros(2), 0.5, jnp.zeros(2), jnp.zeros(2))
    with pytest.raises(Exception, match="w must lie in"):
        jax.jit(C.mixture_log_weights, static_argnums=(1, 2))(jnp.asarray(2.0), 2, 2)
    with pytest.raises(ValueError, match="steps .* multiple of n_evals"):
        C.PolicyConfig(steps=10, n_evals=3)


# --------------------------------------------------------------- alignment pieces


def test_sinkhorn_matches_shift_cost_and_sliced_wasserstein_zero_on_equal_clouds():
    # For small epsilon the OT cost between a cloud and its translate by v is ||v||^2.
    a = jax.random.normal(jax.random.key(0), (16, 2))
    v = jnp.array([0.3, -0.4])
    assert float(C.sinkhorn_cost(a, a + v, 0.01, 300)) == pytest.approx(0.25, rel=2e-2)
    assert float(C.sliced_wasserstein(a, a[::-1], jax.random.key(1))) == pytest.approx(
        0.0, abs=1e-6)


def test_gradient_reversal_flips_and_scales_the_gradient():
    g = jax.grad(lambda x: jnp.sum(C.gradient_reversal(x, jnp.asarray(0.5)) ** 2))(
        jnp.array([1.0, 2.0]))
    np.testing.assert_allclose(np.asarray(g), [-1.0, -2.0])
    gs = jax.grad(lambda s: jnp.sum(C.gradient_reversal(jnp.ones(2), s)))(jnp.asarray(0.5))
    assert float(gs) == 0.0  # zero by construction (documented)


def test_probe_accuracy_separates_and_confuses():
    k1, k2 = jax.random.split(jax.random.key(0))
    a = jax.random.normal(k1, (64, 2))
    b = jax.random.normal(k2, (64, 2))
    assert float(C.probe_accuracy(a + 5.0, b)) == 1.0
    assert float(C.probe_accuracy(a, b)) < 0.75


# ----------------------------------------------------------------------- data


def test_toy_regimes_geometry():
    d = toy.sim_real_toy(jax.random.key(0), 32, 64, 16, "overlapping", physics_gap=0.0,
                         noise=0.0)
    assert np.all(np.asarray(d.obs_real)[:, 0] < 0)  # real support s_1 < 0
    ins = np.asarray(d.test_in_support)
    assert ins[:8].all() and not ins[8:].any()
    assert np.all(np.asarray(d.test_obs)[8:, 0] >= 0)
    # Overlapping: a sim observation equals the real one of the mirrored state.
    s = jnp.array([[0.3, -0.2]])
    np.testing.assert_allclose(toy.embed(s, "sim", "overlapping"),
                               toy.embed(s * jnp.array([-1.0, 1.0]), "real"))
    far = toy.embed(s, "sim", "disjoint", 0.5)
    assert float(far[0, 2]) == pytest.approx(3.0)


# ------------------------------------------------------------ training (one tiny fit)


@pytest.fixture(scope="module")
def tiny_fit():
    cfg = C.PolicyConfig(latent_dim=2, hidden=16, steps=60, batch_size=32, align_batch=16,
                         n_evals=2, ode_steps=4, sinkhorn_iters=5, probe_steps=10)
    d = toy.sim_real_toy(jax.random.key(0), 16, 64, 16, "aligned")
    arms = jax.tree.map(lambda *x: jnp.stack(x), C.arm(1.0), C.arm(0.3, 1.0, 0.2, 0.2, 1.0))
    fit = jax.jit(jax.vmap(lambda a, k: C.train(d, a, k, cfg)[1], (0, None)))
    return fit, arms, cfg


def test_train_history_and_determinism(tiny_fit):
    fit, arms, cfg = tiny_fit
    h1 = fit(arms, jax.random.key(3))
    h2 = fit(arms, jax.random.key(3))
    for k in ("err_in", "err_oos", "alignment", "discernibility", "loss"):
        assert h1[k].shape == (2, cfg.n_evals)
        assert np.all(np.isfinite(np.asarray(h1[k])))
        np.testing.assert_array_equal(np.asarray(h1[k]), np.asarray(h2[k]))
    # Training lowers the loss between the two evaluations (both arms).
    assert np.all(np.asarray(h1["loss"][:, 1]) < np.asarray(h1["loss"][:, 0]))


def test_guideline_range_starts_at_natural_proportion():
    lo, hi = C.guideline_range(64, 4000)
    assert lo == pytest.approx(64 / 4064) and hi == 0.5
