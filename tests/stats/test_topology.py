import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.distance import cdist

from jaxsci.stats import topology as T


def _circle(n, radius=1.0):
    z = T.circle_latents(n)
    return radius * jnp.stack([jnp.cos(z), jnp.sin(z)], 1)


@pytest.mark.parametrize("n", [10, 12, 15])
def test_rips_h1_bar_of_evenly_spaced_circle_points_is_exact(n):
    # Adamaszek-Adams: VR of n evenly spaced points joined up to k steps is a circle
    # for k / n < 1/3 and not for k / n >= 1/3, so the one H1 bar is born at the side
    # 2 R sin(pi / n) and dies at the chord 2 R sin(pi ceil(n / 3) / n).
    r = 1.7
    dg = T.rips_persistence(T.pairwise_distances(_circle(n, r)), maxdim=1, n_bars=3)
    assert int(dg.counts[1]) == 1
    np.testing.assert_allclose(float(dg.births[1, 0]), 2 * r * math.sin(math.pi / n), rtol=1e-5)
    np.testing.assert_allclose(float(dg.deaths[1, 0]),
                               2 * r * math.sin(math.pi * math.ceil(n / 3) / n), rtol=1e-5)
    assert np.all(np.asarray(dg.deaths[1, 1:]) == 0)  # padding: length-0 bars
    assert np.asarray(T.betti_numbers(dg, 1.0 * r)).tolist() == [1, 1]


def test_uniform_shift_keeps_the_filtration_order():
    # Limit distances of the noisy circle: d^2 = 2 (1 - cos) + 2 sigma^2 off the diagonal,
    # a monotone map of the noiseless ones, so the bars map through it exactly.
    n, sigma = 12, 0.4
    z = T.circle_latents(n)
    dg = T.rips_persistence(T.limit_distances(T.FourierCircle(), T.GaussianNoise(sigma), z),
                            maxdim=1, n_bars=2)
    shift = 2 * sigma**2
    np.testing.assert_allclose(float(dg.births[1, 0]) ** 2 - shift,
                               4 * math.sin(math.pi / n) ** 2, rtol=1e-4)
    np.testing.assert_allclose(float(dg.deaths[1, 0]) ** 2 - shift, 3.0, rtol=1e-4)


def test_blockwise_gram_and_distances_match_direct():
    y = jax.random.normal(jax.random.key(0), (7, 5))
    for bs in (1, 3, 7, 50):
        np.testing.assert_allclose(np.asarray(T.gram(y, bs)), np.asarray(y @ y.T) / 5,
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(T.pairwise_distances(y, bs, 4.0)),
                                   cdist(np.asarray(y), np.asarray(y)) / 2, rtol=1e-4, atol=1e-5)
    assert np.all(np.diagonal(np.asarray(T.pairwise_distances(y))) == 0)


@pytest.fixture(scope="module")
def mean_grams():
    """Monte-Carlo means of <Y_i, Y_j> / p over realisations (one compiled sweep each)."""
    out = {}
    z_c = T.circle_latents(5)
    z_t = T.sample_torus(jax.random.key(2), 5)
    models = {"circle": (T.FourierCircle((1.0, 0.5)), T.GaussianNoise(0.7), z_c),
              "grid": (T.GridCells(2.5), T.PoissonNoise(3.0), z_t)}
    keys = jax.random.split(jax.random.key(1), 1500)
    for name, (fn, noise, z) in models.items():
        g = jax.jit(jax.vmap(lambda k, fn=fn, noise=noise, z=z: T.gram(
            T.simulate(fn, noise, z, k, p=16))))(keys)
        out[name] = (np.asarray(g), np.asarray(T.expected_gram(fn, noise, z)))
    return out


@pytest.mark.parametrize("name", ["circle", "grid"])
def test_expected_gram_is_the_mean_dot_product(mean_grams, name):
    g, want = mean_grams[name]
    se = g.std(0) / math.sqrt(g.shape[0])
    assert np.all(np.abs(g.mean(0) - want) < 4.5 * se + 1e-4), (g.mean(0) - want) / se
    # The diagonal carries the noise's shift s (sigma^2, or E h / rate).
    assert np.all(np.diagonal(want) > np.max(want - np.diag(np.diagonal(want))))


def test_fourier_kernel_and_grid_mean_closed_forms():
    z = jnp.asarray([0.0, 0.3, 2.0])
    f = T.FourierCircle((1.0, 0.25)).kernel(z, z)
    dz = np.subtract.outer(np.asarray(z), np.asarray(z))
    np.testing.assert_allclose(np.asarray(f), np.cos(dz) + 0.25 * np.cos(2 * dz), rtol=1e-5,
                               atol=1e-6)
    # E h = exp(-kappa) E exp(kappa g); at kappa -> 0, E h -> 1 - kappa (E g = 0).
    assert float(T.GridCells(1e-3).mean()) == pytest.approx(1 - 1e-3, rel=1e-5)


def test_grid_cell_metric_is_locally_isotropic():
    # Hexagonal symmetry makes the kernel's Hessian isotropic: the induced metric is flat
    # and the same in every direction (the premise of the isometry score).
    g = T.GridCells(2.0, quadrature=64)
    inv = np.linalg.inv(T.LATTICE)
    delta = 0.05
    dirs = np.stack([[np.cos(t), np.sin(t)] for t in np.linspace(0, np.pi, 7)[:-1]])
    u = jnp.asarray(np.vstack([np.zeros((1, 2)), delta * dirs @ inv]) + 0.1)
    f = np.asarray(g.kernel(u, u))
    d2 = f[0, 0] + np.diagonal(f)[1:] - 2 * f[0, 1:]
    assert d2.max() / d2.min() < 1 + 1e-3
    # And the flat-torus distance of those displacements is delta.
    np.testing.assert_allclose(np.asarray(T.torus_distance(u[1:], u[:1]))[:, 0], delta,
                               rtol=1e-4)


def test_torus_distance_known_values():
    u = jnp.asarray([[0.0, 0.0], [0.5, 0.5], [1 / 3, 1 / 3], [0.9, 0.0], [0.0, 1.0]])
    d = np.asarray(T.torus_distance(u, u[:1]))[:, 0]
    np.testing.assert_allclose(d, [0.0, 0.5, 1 / math.sqrt(3), 0.1, 0.0], atol=1e-6)


def test_effective_dimension_exact_and_estimated():
    for pe in (1.0, 6.5, 40.0, 64.0):
        c = T.feature_scales(64, pe)
        assert float(T.effective_dimension(c**2)) == pytest.approx(pe, rel=1e-5)
        assert float(jnp.mean(c**2)) == pytest.approx(1.0, rel=1e-5)
    cov = jnp.diag(jnp.asarray([4.0, 1.0, 1.0, 2.0]))
    assert float(T.effective_dimension(cov)) == pytest.approx(2.0, rel=1e-5)
    # From noise residuals (samples at one latent): the Marchenko-Pastur edge biases the
    # top eigenvalue up by about (1 + sqrt(p_eff / n))^2 = 1.1 here.
    c = T.feature_scales(100, 25.0)
    e = T.GaussianNoise(1.0).sample(jax.random.key(1), jnp.zeros((10000, 100))) * c
    est = float(T.estimate_effective_dimension(e))
    assert 0.85 * 25 < est < 25, est


def test_dot_product_error_shrinks_like_one_over_sqrt_p():
    fn, noise = T.FourierCircle(), T.GaussianNoise(0.5)
    z = T.circle_latents(20)
    want = T.expected_gram(fn, noise, z)
    errs = {}
    for p in (256, 4096):
        errs[p] = np.mean([float(T.dot_product_error(T.gram(T.simulate(
            fn, noise, z, jax.random.key(s), p=p)), want)) for s in range(8)])
    assert 0.15 < errs[4096] / errs[256] < 0.4  # 1/4 expected


def test_isometry_score_and_betti_on_known_cases():
    u = T.sample_torus(jax.random.key(0), 12)
    lat = T.torus_distance(u, u)
    assert float(T.isometry_score(jnp.sqrt(0.3 + 2.0 * lat**2) * (1 - jnp.eye(12)), lat)) \
        == pytest.approx(1.0, abs=1e-5)
    noisy = jnp.abs(lat + 0.1 * jax.random.normal(jax.random.key(1), lat.shape))
    assert float(T.isometry_score(noisy, lat)) < 0.95
    dg = T.Diagrams(jnp.asarray([[0.0, 0.0], [0.2, 0.5]]), jnp.asarray([[jnp.inf, 0.3],
                                                                        [1.0, 0.6]]),
                    jnp.asarray([2, 2]))
    assert np.asarray(T.betti_numbers(dg, 0.55)).tolist() == [1, 2]
    assert np.asarray(T.betti_numbers(dg, 0.25)).tolist() == [2, 1]
    assert float(T.persistence_gap(dg, 1)) == pytest.approx(0.7, rel=1e-6)
    assert float(T.top_persistence(dg, 1)) == pytest.approx(0.8, rel=1e-6)


def test_clear_errors():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="sigma must be finite and >= 0"):
        T.GaussianNoise(-1.0)
    with pytest.raises(ValueError, match="kappa must be > 0"):
        T.GridCells(0.0)
    with pytest.raises(ValueError, match="rate must be > 0"):
        T.PoissonNoise(0.0)
    with pytest.raises(ValueError, match="weights must be > 0"):
        T.FourierCircle((1.0, -0.5))
    with pytest.raises(ValueError, match="z must have 1 dimensions"):
        T.simulate(T.FourierCircle(), T.GaussianNoise(), jnp.zeros((4, 2)), key, p=8)
    with pytest.raises(ValueError, match="z must be finite"):
        T.simulate(T.FourierCircle(), T.GaussianNoise(), jnp.asarray([0.0, jnp.nan]), key, p=8)
    with pytest.raises(ValueError, match="scales must have shape \\(8\\)"):
        T.simulate(T.FourierCircle(), T.GaussianNoise(), jnp.zeros(4), key, p=8,
                   scales=jnp.ones(7))
    with pytest.raises(ValueError, match="y must be finite, got 1 NaN"):
        T.pairwise_distances(jnp.asarray([[0.0, 1.0], [jnp.nan, 2.0]]))
    with pytest.raises(ValueError, match="y must have at least 2 rows"):
        T.gram(jnp.ones((1, 3)))
    with pytest.raises(ValueError, match="p_eff must be >= 1"):
        T.feature_scales(8, 0.5)
    with pytest.raises(ValueError, match="expected must have the shape of g"):
        T.dot_product_error(jnp.ones((3, 3)), jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="k must be <= 2"):
        T.persistence_gap(T.rips_persistence(T.pairwise_distances(_circle(6)), 1, 3), 1, 3)
    with pytest.raises(ValueError, match="threshold must be a number or inf, got nan"):
        T.rips_persistence(jnp.zeros((3, 3)), threshold=math.nan)


def test_experiment_oracle_scale_and_config_validation():
    from jaxsci.experiments import topology as E

    # H1 bars [0.2, 1.0) and [0.5, 0.6); H2 bar [0.55, 0.9): (b1, b2) = (2, 1) on
    # [0.55, 0.6) only; the longest (b1, b2) = (1, 0) run is [0.2, 0.5).
    dg = T.Diagrams(jnp.asarray([[0.0, 0.0], [0.2, 0.5], [0.55, 0.0]]),
                    jnp.asarray([[jnp.inf, 0.0], [1.0, 0.6], [0.9, 0.0]]), jnp.asarray([1, 2, 1]))
    mid, width = E.oracle_scale(dg, (2, 1))
    assert mid == pytest.approx(0.575) and width == pytest.approx(0.05)
    assert E.oracle_scale(dg, (1, 0))[0] == pytest.approx(0.35)
    assert math.isnan(E.oracle_scale(dg, (3, 0))[0])
    with pytest.raises(ValueError, match="torus_p_effs\\[i\\] must be <= 512"):
        E.TopologyConfig(torus_p=512, torus_p_effs=(8.0, 64.0, 1024.0))
    with pytest.raises(ValueError, match="circle_ps must be strictly increasing"):
        E.TopologyConfig(circle_ps=(64, 32, 128))
    with pytest.raises(ValueError, match="phase_sigmas must be at least 2"):
        E.TopologyConfig(phase_sigmas=(0.1,))
