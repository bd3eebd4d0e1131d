"""Property cases for :mod:`jaxsci.dynamics.sysid` (see ``tests/properties.py``)."""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.dynamics import sysid as S

T, L = 24, 2


def _system():
    return S.make_system(jax.random.key(0), n_x=3, n_y=2, n_u=1, m=3, rho=0.5)


def _attack():
    return S.Attack(delta=jnp.asarray(np.full((2, 3), 2.0)), mean=jnp.asarray([1.0, -1.0]),
                    scale=1.0, corr=0.5)


def _simulate_kwargs():
    return {"key": jax.random.key(1), "system": _system(),
            "u": S.ar_inputs(jax.random.key(2), T, 1), "L": L,
            "p": jnp.asarray(0.3), "attack": _attack(), "noise": jnp.asarray(0.1)}


def _data():
    rng = np.random.default_rng(0)
    phi = rng.normal(size=(30, 3))
    y = phi @ rng.normal(size=(3, 2)) + rng.standard_t(2.0, size=(30, 2))
    return jnp.asarray(phi, float), jnp.asarray(y, float)


def _ls_kwargs():
    phi, y = _data()
    return {"phi": phi, "y": y, "ridge": jnp.asarray(0.1)}


def _l2_kwargs():
    phi, y = _data()
    # tol 1e-4: float32's default certified duality gap (its rounding floor is ~1e-5).
    return {"phi": phi, "y": y, "tol": jnp.asarray(1e-4), "ridge": jnp.asarray(0.0)}


def _objective_kwargs():
    phi, y = _data()
    return {"theta": jnp.asarray(np.ones((2, 3)), float), "phi": phi, "y": y}


CASES = [
    Case("sysid.simulate", S.simulate, _simulate_kwargs,
         out=lambda r: r[1], vmap=("p", "noise", "key"), grad=("noise",), zero_grad=("p",),
         key="key",
         bad=(Bad({"p": 1.5}, ValueError, "p must be <= 1"),
              Bad({"p": jnp.asarray(1.5)}, Exception, "p must be in", jit=True),
              Bad({"u": [[0.1]] * 3}, ValueError, "L must be <= 1"))),
    Case("sysid.ar_inputs", S.ar_inputs,
         lambda: {"key": jax.random.key(3), "t_len": 16, "n_u": 2,
                  "mean": jnp.asarray(0.5), "corr": jnp.asarray(0.7)},
         vmap=("mean", "corr"), grad=("mean", "corr"), key="key",
         bad=(Bad({"corr": 1.0}, ValueError, "corr must be < 1"),)),
    Case("sysid.make_system", S.make_system,
         lambda: {"key": jax.random.key(4), "n_x": 3, "n_y": 2, "n_u": 1, "m": 3,
                  "rho": jnp.asarray(0.5)},
         out=lambda s: (s.a, s.b, s.c), vmap=("rho",), grad=("rho",), key="key",
         bad=(Bad({"rho": 1.0}, ValueError, "rho must be < 1"),)),
    Case("sysid.least_squares", S.least_squares, _ls_kwargs,
         vmap=("y", "ridge"), grad=("y", "phi", "ridge"),
         bad=(Bad({"phi": jnp.ones((2, 3)), "y": jnp.ones((2, 2)), "ridge": 0.0}, ValueError,
                  "phi has fewer samples"),
              Bad({"phi": jnp.ones((30, 3)), "ridge": jnp.asarray(0.0)}, Exception,
                  "singular", jit=True))),
    Case("sysid.l2_norm_estimator", S.l2_norm_estimator, _l2_kwargs,
         out=lambda e: (e.theta, e.objective), vmap=("y", "tol"), rtol=1e-4, atol=1e-5,
         bad=(Bad({"phi": jnp.ones((0, 3)), "y": jnp.ones((0, 2))}, ValueError,
                  "phi must be non-empty"),
              Bad({"phi": jnp.ones((30, 3))}, Exception, "non-finite", jit=True),
              Bad({"y": [[1.0, 2.0]] * 29}, ValueError, "one row per row of phi"))),
    Case("sysid.l2_objective", S.l2_objective, _objective_kwargs,
         vmap=("theta",), grad=("theta", "y"),
         bad=(Bad({"theta": jnp.ones((3, 2))}, ValueError, "theta must have shape"),)),
    Case("sysid.lagged_features", S.lagged_features,
         lambda: {"psi": jnp.asarray(np.arange(12.0).reshape(6, 2)), "L": 3},
         vmap=("psi",), grad=("psi",),
         bad=(Bad({"L": 6}, ValueError, "L must be <= 5"),)),
]
