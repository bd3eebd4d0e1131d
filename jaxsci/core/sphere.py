"""Geometry of the sphere of radius ``r`` in R^d, used by the sphere-based methods.

Points are rows ``x`` with ``|x| = r``. The tangent space at ``x`` is
``{v : <v, x> = 0}``; ``project_tangent`` is the orthogonal projector
``P_x^perp v = v - <v, x> x / r^2`` and ``retract`` maps ``x + v`` back onto the
sphere by radial normalisation (the metric-projection retraction, second-order
accurate for tangent ``v``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxsci.core.validation import check_int, check_key, check_scalar

__all__ = ["sample_uniform", "project_tangent", "retract", "normalize"]


def normalize(x: Float[Array, "... d"], radius: float = 1.0) -> Float[Array, "... d"]:
    """Rescale each row to norm ``radius``."""
    return radius * x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def sample_uniform(
    key: jax.Array, n: int, d: int, radius: float = 1.0, dtype=jnp.float32
) -> Float[Array, "n d"]:
    """``n`` points uniform on the sphere of radius ``radius`` in R^d.

    Normalised standard Gaussians: the Gaussian is rotation invariant, so its
    direction is uniform on the sphere.
    """
    check_key("key", key)
    n = check_int("n", n, min=1)
    d = check_int("d", d, min=2)
    check_scalar("radius", radius, gt=0.0)
    g = jax.random.normal(key, (n, d), dtype=dtype)
    return normalize(g, radius)


def project_tangent(x: Float[Array, "... d"], v: Float[Array, "... d"]) -> Float[Array, "... d"]:
    """Project ``v`` onto the tangent space of the sphere at ``x`` (any radius)."""
    sq = jnp.sum(x * x, axis=-1, keepdims=True)
    return v - jnp.sum(v * x, axis=-1, keepdims=True) / sq * x


def retract(x: Float[Array, "... d"], v: Float[Array, "... d"]) -> Float[Array, "... d"]:
    """Move from ``x`` along ``v`` and map back to the sphere through ``x``'s radius."""
    radius = jnp.linalg.norm(x, axis=-1, keepdims=True)
    y = x + v
    return radius * y / jnp.linalg.norm(y, axis=-1, keepdims=True)
