import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.core import sphere


def test_sample_uniform_radius_and_isotropy():
    x = sphere.sample_uniform(jax.random.key(0), 20000, 3, radius=2.0)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(x), axis=1), 2.0, rtol=1e-5)
    # Uniform on the sphere: mean ~ 0, second moment r^2/d * I.
    xs = np.asarray(x)
    assert np.abs(xs.mean(0)).max() < 0.05
    np.testing.assert_allclose(xs.T @ xs / len(xs), 4.0 / 3 * np.eye(3), atol=0.06)
    # Archimedes: the height z of a uniform point on S^2 is uniform on [-r, r].
    counts, _ = np.histogram(xs[:, 2], bins=4, range=(-2, 2))
    assert np.abs(counts / len(xs) - 0.25).max() < 0.02


def test_projection_and_retraction():
    key1, key2 = jax.random.split(jax.random.key(1))
    x = sphere.sample_uniform(key1, 5, 4, radius=3.0)
    v = jax.random.normal(key2, (5, 4))
    t = sphere.project_tangent(x, v)
    np.testing.assert_allclose(np.asarray(jnp.sum(t * x, -1)), 0.0, atol=1e-5)
    # Projection is idempotent.
    np.testing.assert_allclose(np.asarray(sphere.project_tangent(x, t)), np.asarray(t), atol=1e-5)
    y = sphere.retract(x, 0.1 * t)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(y), axis=1), 3.0, rtol=1e-5)
    # Second order: the retraction differs from x + v by O(|v|^2).
    for eps in (1e-1, 1e-2):
        err = jnp.linalg.norm(sphere.retract(x, eps * t) - (x + eps * t), axis=-1).max()
        assert float(err) < 2.0 * eps**2 * float(jnp.linalg.norm(t, axis=-1).max() ** 2)


def test_bad_input():
    with pytest.raises(ValueError, match="d must be >= 2"):
        sphere.sample_uniform(jax.random.key(0), 3, 1)
    with pytest.raises(ValueError, match="radius must be > 0"):
        sphere.sample_uniform(jax.random.key(0), 3, 3, radius=0.0)
