"""Property cases for :mod:`jaxsci.dynamics.noisy_transformer` (``tests/properties.py``)."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.dynamics import noisy_transformer as nt


def _x0():
    x = np.random.default_rng(0).normal(size=(3, 3))
    return jnp.asarray(x / np.linalg.norm(x, axis=1, keepdims=True), float)


def _layers_kwargs():
    return {"key": jax.random.key(0), "x0": _x0(), "n_layers": 6, "h": jnp.asarray(0.05),
            "beta": jnp.asarray(1.0), "gamma": jnp.asarray(1.0), "sigma": jnp.asarray(0.5)}


def _sde(key, x0, beta, sigma):
    bm = diffrax.VirtualBrownianTree(0.0, 0.2, tol=0.01, shape=(2, 2), key=key)
    return nt.solve_sde(x0, 0.2, 0.05, beta, 1.0, sigma, bm=bm)


CASES = [
    Case("noisy_transformer.run_layers", nt.run_layers, _layers_kwargs,
         out=lambda p: p.final, vmap=("key", "x0", "h", "beta", "gamma", "sigma"),
         batch={"x0": lambda x: jnp.stack([x, x[::-1], -x])},
         grad=("h", "beta", "gamma", "sigma"), key="key",
         loss=lambda y: jnp.sum(y * jnp.arange(9.0).reshape(3, 3)),
         bad=(Bad({"x0": 2.0 * _x0()}, ValueError, "x must lie on the unit sphere"),
              Bad({"x0": 2.0 * _x0()}, Exception, "x must lie on the unit sphere", jit=True),
              Bad({"sigma": jnp.asarray(-1.0)}, Exception, "beta and sigma must be >= 0",
                  jit=True),
              Bad({"noise": "diag"}, ValueError, "noise must be one of"))),
    Case("noisy_transformer.two_tokens", nt.two_tokens,
         lambda: {"rho0": jnp.asarray(0.3), "d": 3}, vmap=("rho0",), grad=("rho0",),
         bad=(Bad({"rho0": 1.5}, ValueError, "rho0 must be <= 1"),
              Bad({"rho0": jnp.asarray(1.5)}, Exception, "rho0 must be in", jit=True))),
    Case("noisy_transformer.p_antipodal", nt.p_antipodal,
         lambda: {"rho0": jnp.asarray(0.0), "beta": jnp.asarray(2.0),
                  "gamma": jnp.asarray(0.5), "sigma": jnp.asarray(1.0), "d": 3,
                  "n_grid": 801},
         vmap=("rho0", "beta", "gamma", "sigma"), grad=("rho0", "beta", "gamma", "sigma"),
         bad=(Bad({"rho0": 1.5}, ValueError, "rho0 must be <= 1"),)),
    Case("noisy_transformer.critical_beta", nt.critical_beta,
         lambda: {"d": jnp.asarray(6.0), "gamma": jnp.asarray(0.5), "sigma": jnp.asarray(1.0)},
         vmap=("d", "gamma", "sigma"), grad=("d", "gamma", "sigma"),
         bad=(Bad({"sigma": 0.0}, ValueError, "sigma must be > 0"),)),
    Case("noisy_transformer.solve_sde", _sde,
         lambda: {"key": jax.random.key(1), "x0": nt.two_tokens(jnp.asarray(0.2), 2),
                  "beta": jnp.asarray(1.0), "sigma": jnp.asarray(0.5)},
         grad=("beta", "sigma"), key="key",
         bad=(Bad({"x0": jnp.ones((2, 2))}, ValueError, "x must lie on the unit sphere"),)),
]
