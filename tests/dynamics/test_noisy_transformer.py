import math

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.core.sphere import sample_uniform
from jaxsci.dynamics import noisy_transformer as nt

BETA, GAMMA, SIGMA, D = 1.5, 1.0, 1.0, 3


@pytest.fixture(scope="module")
def one_layer_increments():
    """2e5 one-layer increments of two tokens (float64), shared by the moment tests."""
    h, n_samples = 0.01, 200_000
    with jax.enable_x64(True):
        x = nt.two_tokens(0.3, D, jnp.float64)

        def inc(k):
            m = nt.attention_mean(x, BETA)
            return nt.layer(x, nt.sample_noise(k, x, m, "full"), h, BETA, GAMMA, SIGMA) - x

        dx = jax.jit(jax.vmap(inc))(jax.random.split(jax.random.key(0), n_samples))
        b, cov = nt.sde_coefficients(x, BETA, GAMMA, SIGMA)
        return h, np.asarray(x), np.asarray(dx), np.asarray(b), np.asarray(cov)


def test_one_layer_moments_match_ito_sde(one_layer_increments):
    # Mean and covariance of one layer's increment vs the derived Ito drift * h and
    # diffusion * h. Tolerance: 5 Monte-Carlo standard errors + an O(h) bias
    # allowance (odd moments of G vanish, so the next correction is O(h^2)/h).
    h, x, dx, b, cov = one_layer_increments
    n = dx.shape[0]
    mean = dx.mean(0) / h
    se = dx.std(0) / math.sqrt(n) / h
    tol = 5 * se + 3 * h * np.abs(b).max()
    assert np.all(np.abs(mean - b) < tol)
    # The same drift without the normalisation's Ito correction is rejected:
    naive = b + 0.5 * (D - 1) * SIGMA**2 * np.sum(np.asarray(nt.attention_mean(x, BETA)) ** 2,
                                                  -1, keepdims=True) * x
    assert np.any(np.abs(mean - naive) > 10 * tol)
    c = np.cov(dx.reshape(n, -1).T) / h
    want = cov.reshape(2 * D, 2 * D)
    se_c = np.sqrt(2.0 / n) * np.abs(want).max()
    assert np.abs(c - want).max() < 5 * se_c + 3 * h * np.abs(want).max()


def test_two_token_reduction_matches_full_layer(one_layer_increments):
    h, x, dx, _, _ = one_layer_increments
    rho0 = float(x[0] @ x[1])
    rho1 = np.sum((x[0] + dx[:, 0]) * (x[1] + dx[:, 1]), -1)
    drho = rho1 - rho0
    mu, vs = (float(v) for v in nt.rho_coefficients(rho0, BETA, GAMMA, SIGMA, D))
    se = drho.std() / math.sqrt(drho.size)
    assert abs(drho.mean() / h - mu) < 5 * se / h + 3 * h * abs(mu)
    assert drho.var() / h == pytest.approx(vs**2, rel=5 * math.sqrt(2 / drho.size) + 3 * h)


def test_span_noise_equals_full_noise_in_law():
    x = sample_uniform(jax.random.key(2), 2, 6)
    m = nt.attention_mean(x, 2.0)
    keys = jax.random.split(jax.random.key(3), 20_000)
    for noise in ("full", "span"):
        g = jax.vmap(lambda k, noise=noise: nt.sample_noise(k, x, m, noise))(keys)
        g = np.asarray(g).reshape(len(keys), -1)
        want = np.kron(np.asarray(m @ m.T), np.eye(6))  # Cov(G m_i, G m_j) = <m_i, m_j> I
        assert np.abs(np.cov(g.T) - want).max() < 0.05


def test_layers_and_sde_agree_as_h_shrinks():
    # Same matrix Brownian path drives the layers (sqrt(h) G_k = increments) and
    # diffrax's Euler-Maruyama on the limit SDE; errors vs a fine SDE solution.
    with jax.enable_x64(True):
        x0 = sample_uniform(jax.random.key(1), 3, D, dtype=jnp.float64)
        t1 = 0.5

        def errs(k):
            bm = diffrax.VirtualBrownianTree(0.0, t1, tol=1e-4, shape=(D, D), key=k)
            ref = nt.solve_sde(x0, t1, 1 / 512, BETA, GAMMA, SIGMA, bm=bm)
            return jnp.stack([
                jnp.abs(nt.layers_from_brownian(bm, x0, t1, h, BETA, GAMMA, SIGMA) - ref).max()
                for h in (1 / 8, 1 / 128)  # noqa: B023
            ] + [jnp.abs(jnp.linalg.norm(ref, axis=-1) - 1.0).max()])

        e = np.asarray(jax.jit(jax.vmap(errs))(jax.random.split(jax.random.key(0), 8))).mean(0)
    assert e[1] < 0.5 * e[0]  # strong order ~1/2: 16x smaller h, ~4x smaller error
    assert e[2] < 0.1  # the Ito SDE keeps tokens near the sphere (no renormalisation)


def test_layers_keep_norms_jit_eager_vmap_and_key():
    x0 = sample_uniform(jax.random.key(4), 3, 4)
    run = lambda k, beta: nt.run_layers(k, x0, 10, 0.05, beta, GAMMA, SIGMA, n_save=2)
    key = jax.random.key(5)
    eager = run(key, 1.0)
    np.testing.assert_allclose(np.asarray(jnp.linalg.norm(eager.xs, axis=-1)), 1.0, atol=1e-5)
    assert eager.xs.shape == (3, 3, 4) and float(eager.ts[-1]) == pytest.approx(0.5)
    jitted = jax.jit(lambda k, b: run(k, b).final)
    np.testing.assert_allclose(np.asarray(eager.final), np.asarray(jitted(key, 1.0)), atol=1e-5)
    keys = jax.random.split(key, 3)
    betas = jnp.array([0.5, 1.0, 2.0])
    batched = jax.vmap(lambda k, b: run(k, b).final)(keys, betas)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(jitted(keys[i], betas[i])),
                                   atol=1e-5)
    np.testing.assert_array_equal(np.asarray(jitted(key, 1.0)), np.asarray(jitted(key, 1.0)))
    assert not np.allclose(np.asarray(jitted(jax.random.key(6), 1.0)), np.asarray(eager.final))


def test_critical_beta_closed_form_and_boundary_exponent_sign():
    for d in (4, 8, 16):
        assert float(nt.critical_beta(d, 0.0, 1.0)) == pytest.approx(0.5 * math.acosh(d - 2),
                                                                     rel=1e-5)
    assert float(nt.critical_beta(3, 0.0, 1.0)) == 0.0
    p_fn = jax.jit(lambda b, g, d: nt.p_antipodal(0.0, b, g, 1.0, d))
    for d, gamma in ((2, 1.0), (4, 1.0), (8, 0.5)):
        bc = float(nt.critical_beta(d, gamma, 1.0))
        lam_lo, lam_plus = nt.boundary_exponents(bc - 0.05, gamma, 1.0, d)
        lam_hi, _ = nt.boundary_exponents(bc + 0.05, gamma, 1.0, d)
        assert float(lam_lo) > 0 > float(lam_hi)  # -1 repels below beta_c, attracts above
        assert float(lam_plus) < 0  # collapse always attracts
        assert float(p_fn(bc - 0.05, gamma, d)) == 0.0
        assert float(p_fn(bc + 0.5, gamma, d)) > 0.0


def test_p_antipodal_limits_and_martingale():
    # Noiseless: collapse from any rho0 > -1.
    assert float(nt.p_antipodal(-0.9, 3.0, 1.0, 0.0, 4)) == 0.0
    # Monotone in rho0, 0 at rho0 = 1 and 1 at rho0 = -1 (attracting case).
    rhos = jnp.array([-0.999999, -0.5, 0.0, 0.5, 0.999999])
    ps = [float(v) for v in jax.vmap(lambda r: nt.p_antipodal(r, 3.0, 1.0, 1.0, 4))(rhos)]
    assert ps[0] > 0.99 and ps[-1] < 0.01 and all(a > b for a, b in zip(ps, ps[1:], strict=False))
    # Against an independent quadrature of the scale function in rho (NumPy, geometric
    # grids towards both boundaries; the z = atanh(rho) substitution is not used).
    beta, gamma, sigma, d, rho0 = 2.0, 0.5, 1.0, 4, 0.2
    eps = np.geomspace(1e-12, 1.0, 40_000)
    rho = np.unique(np.concatenate([-1 + eps, 1 - eps]))
    k, s = (np.asarray(v, np.float64) for v in nt.two_token_terms(rho, beta, gamma, sigma, d))
    g = k / (sigma**2 * s * (1 - rho * rho))
    lam = np.concatenate([[0.0], np.cumsum(0.5 * (g[1:] + g[:-1]) * np.diff(rho))])
    dens = np.exp(-(lam - lam[np.searchsorted(rho, rho0)]))
    cell = 0.5 * (dens[1:] + dens[:-1]) * np.diff(rho)
    want = cell[rho[1:] > rho0].sum() / cell.sum()
    with jax.enable_x64(True):
        p = float(nt.p_antipodal(rho0, beta, gamma, sigma, d))
    assert p == pytest.approx(want, rel=1e-2)


def test_bad_inputs_raise():
    x = sample_uniform(jax.random.key(0), 2, 3)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="x must lie on the unit sphere"):
        nt.run_layers(key, 2 * x, 2, 0.1, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="x must have d >= 2"):
        nt.run_layers(key, jnp.ones((2, 1)), 2, 0.1, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="beta must be >= 0"):
        nt.run_layers(key, x, 2, 0.1, -1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="x must have 2 dimensions"):
        nt.run_layers(key, x[0], 2, 0.1, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="d must be >= 2"):
        nt.two_tokens(0.0, 1)
    with pytest.raises(ValueError, match="rho0 must be <= 1"):
        nt.p_antipodal(1.5, 1.0, 1.0, 1.0, 3)
    with pytest.raises(ValueError, match="noise must be one of"):
        nt.run_layers(key, x, 2, 0.1, 1.0, 1.0, 1.0, noise="diag")
    with pytest.raises(TypeError, match="key must be a jax.random key"):
        nt.run_layers(1, x, 2, 0.1, 1.0, 1.0, 1.0)


def test_lists_and_static_step_counts():
    key = jax.random.key(0)
    x = nt.two_tokens(0.0, 2)
    a = nt.run_layers(key, np.asarray(x).tolist(), 3, 0.1, 1.0, 1.0, 1.0).final
    b = nt.run_layers(key, x, 3, 0.1, 1.0, 1.0, 1.0).final
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    bm = diffrax.VirtualBrownianTree(0.0, 1.0, tol=0.01, shape=(2, 2), key=jax.random.key(1))
    with pytest.raises(TypeError, match="pass n_layers="):
        jax.jit(lambda h: nt.layers_from_brownian(bm, x, 1.0, h, 1.0, 1.0, 1.0))(0.1)
    # A traced layer step at a static depth: one program for every h.
    out = jax.vmap(lambda h: nt.layers_from_brownian(bm, x, None, h, 1.0, 1.0, 1.0,
                                                     n_layers=4))(jnp.array([0.1, 0.2]))
    ref = nt.layers_from_brownian(bm, x, 0.4, 0.1, 1.0, 1.0, 1.0)
    np.testing.assert_allclose(np.asarray(out[0]), np.asarray(ref), atol=1e-5)
    with pytest.raises(TypeError, match="max_steps"):
        jax.jit(lambda t: nt.solve_sde(x, t, 0.1, 1.0, 1.0, 1.0, bm=bm))(0.5)
