"""Property cases for :mod:`jaxsci.stats.topology` (see ``tests/properties.py``)."""

import jax
import jax.numpy as jnp
from properties import Bad, Case

from jaxsci.stats import topology as T


def _torus(n=8):
    return T.sample_torus(jax.random.key(3), n)


def _simulate_kwargs():
    return {"fn": T.GridCells(jnp.asarray(2.0, float)),
            "noise": T.GaussianNoise(jnp.asarray(0.3, float)), "z": _torus(),
            "key": jax.random.key(0), "p": 16,
            "scales": T.feature_scales(16, jnp.asarray(10.0, float))}


def _points():
    z = T.circle_latents(9)
    y = jnp.stack([jnp.cos(z), jnp.sin(z), 0.3 * jnp.cos(2 * z)], 1)
    return y + 0.05 * jax.random.normal(jax.random.key(1), y.shape)


def _distances_kwargs():
    return {"y": _points(), "block_size": 4, "scale": jnp.asarray(2.0, float)}


def _rips_kwargs():
    return {"d": T.pairwise_distances(_points()), "maxdim": 1, "n_bars": 3,
            "threshold": jnp.asarray(1.8, float)}


def _isometry_kwargs():
    u = _torus(10)
    lat = T.torus_distance(u, u)
    d = jnp.sqrt(0.5 + 2.0 * lat**2 + 0.02 * jnp.abs(jnp.sin(7 * lat)))
    d = d * (1 - jnp.eye(10))
    return {"d": d, "latent": lat, "radius": jnp.asarray(0.45, float)}


NAN = jnp.full((9, 3), jnp.nan)

CASES = [
    Case("topology.simulate", T.simulate, _simulate_kwargs,
         vmap=("key", "scales"), grad=("fn", "noise"), key="key",
         bad=(Bad({"z": jnp.zeros((8, 3))}, ValueError, "z must have shape"),
              Bad({"z": jnp.full((8, 2), jnp.nan)}, Exception, "z must be finite", jit=True),
              Bad({"noise": 0.3}, TypeError, "noise must be an AbstractNoise"))),
    Case("topology.pairwise_distances", T.pairwise_distances, _distances_kwargs,
         vmap=("y", "scale"), grad=("y", "scale"),
         bad=(Bad({"y": NAN}, Exception, "y must be finite", jit=True),
              Bad({"y": jnp.ones(5)}, ValueError, "y must have 2 dimensions"))),
    Case("topology.gram", T.gram, _distances_kwargs,
         vmap=("y", "scale"), grad=("y",),
         bad=(Bad({"y": NAN}, Exception, "y must be finite", jit=True),
              Bad({"block_size": 0}, ValueError, "block_size must be >= 1"))),
    Case("topology.rips_persistence", T.rips_persistence, _rips_kwargs,
         out=lambda dg: (dg.births, dg.deaths, dg.counts), vmap=("d", "threshold"),
         bad=(Bad({"d": jnp.ones((4, 3))}, ValueError, "d must be a square"),
              Bad({"d": jnp.full((9, 9), jnp.nan)}, Exception, "d must be finite", jit=True),
              Bad({"maxdim": 4}, ValueError, "maxdim must be <= 3"))),
    Case("topology.isometry_score", T.isometry_score, _isometry_kwargs,
         vmap=("d", "radius"), grad=("d", "latent"),
         bad=(Bad({"latent": jnp.ones((3, 3))}, ValueError, "must be square matrices of one"),)),
    Case("topology.expected_gram", T.expected_gram,
         lambda: {"fn": T.GridCells(jnp.asarray(1.5, float), quadrature=16),
                  "noise": T.PoissonNoise(jnp.asarray(4.0, float)), "z": _torus(5)},
         grad=("fn", "noise"),
         bad=(Bad({"fn": "grid"}, TypeError, "fn must be an AbstractRandomFunction"),)),
    Case("topology.feature_scales", T.feature_scales,
         lambda: {"p": 12, "p_eff": jnp.asarray(6.5, float)},
         vmap=("p_eff",), grad=("p_eff",),
         bad=(Bad({"p_eff": 13.0}, ValueError, "p_eff must be <= 12"),
              Bad({"p_eff": jnp.asarray(20.0)}, Exception, "p_eff must be in", jit=True))),
]
