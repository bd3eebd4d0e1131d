"""Property cases for :mod:`jaxsci.dynamics.particles` (see ``tests/properties.py``)."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.dynamics import particles as pt

N, D = 5, 3


def _x0():
    x = np.random.default_rng(0).normal(size=(N, D))
    return jnp.asarray(x / np.linalg.norm(x, axis=1, keepdims=True), float)


def _flow(beta=1.0):
    per = pt.random_perceptron(jax.random.key(0), D, 3, 0.5)
    return pt.make_flow(D, jnp.asarray(beta), perceptron=per)


def _solve_kwargs():
    return {"flow": _flow(), "x0": _x0(), "dt": jnp.asarray(0.1), "n_steps": 6, "n_save": 2,
            "solver": diffrax.Tsit5()}


def _flow_beta(beta):
    return pt.make_flow(D, beta)


CASES = [
    Case("particles.solve", pt.solve, _solve_kwargs,
         out=lambda tr: (tr.final, tr.energy), vmap=("flow", "x0", "dt"),
         batch={"flow": lambda f: jax.vmap(_flow)(jnp.array([0.5, 1.0, 2.0])),
                "x0": lambda x: jnp.stack([x, x[::-1], -x])},
         grad=("flow", "dt"), fd_rtol=1e-5,
         loss=lambda y: jnp.sum(y[0] * jnp.arange(N * D).reshape(N, D)) + y[1][-1],
         bad=(Bad({"x0": 2.0 * _x0()}, ValueError, "x must lie on the unit sphere"),
              Bad({"x0": 2.0 * _x0()}, Exception, "x0 must lie on the unit sphere", jit=True),
              Bad({"dt": jnp.asarray(-0.1)}, Exception, "step size .* must be > 0", jit=True),
              Bad({"solver": "tsit5"}, TypeError, "solver must be a diffrax solver"))),
    Case("particles.solve_to_rest", pt.solve_to_rest,
         lambda: {"flow": _flow(), "x0": _x0(), "t1": jnp.asarray(50.0),
                  "ts": jnp.asarray([0.5, 5.0, 50.0]), "vtol": jnp.asarray(1e-4),
                  "max_steps": 400},
         # the traced arguments the docstring names
         out=lambda r: (r.final, r.t_stop, r.xs), vmap=("flow", "t1", "vtol"),
         batch={"flow": lambda f: jax.vmap(_flow)(jnp.array([0.5, 1.0, 2.0])),
                "t1": lambda t: jnp.asarray([50.0, 60.0, 80.0]),
                "vtol": lambda v: jnp.asarray([1e-4, 1e-3, 1e-2])},
         bad=(Bad({"ts": jnp.asarray([5.0, 0.5, 50.0])}, Exception,
                  "ts must increase within", jit=True),
              Bad({"vtol": 0.0}, ValueError, "vtol must be > 0"),
              Bad({"x0": 2.0 * _x0()}, ValueError, "x must lie on the unit sphere"),
              Bad({"solver": "tsit5"}, TypeError, "solver must be a diffrax solver"))),
    Case("particles.make_flow", _flow_beta, lambda: {"beta": jnp.asarray(2.0)},
         out=lambda f: (f.beta, f.qk), vmap=("beta",),
         bad=(Bad({"beta": -1.0}, ValueError, "beta must be >= 0"),
              Bad({"beta": jnp.asarray(-1.0)}, Exception, "beta must be >= 0", jit=True))),
    Case("particles.velocity", pt.velocity, lambda: {"flow": _flow(), "x": _x0()},
         vmap=("x",), batch={"x": lambda x: jnp.stack([x, x[::-1], jnp.roll(x, 1, 0)])},
         grad=("flow", "x"),
         bad=(Bad({"x": jnp.ones((N, 4))}, ValueError, r"x must have shape \(n, 3\)"),)),
    Case("particles.energy", pt.energy, lambda: {"flow": _flow(), "x": _x0()},
         vmap=("x",), batch={"x": lambda x: jnp.stack([x, x[::-1], -x])},
         grad=("flow", "x")),
    Case("particles.random_perceptron", pt.random_perceptron,
         lambda: {"key": jax.random.key(1), "d": D, "width": 4,
                  "scale": jnp.asarray(1.5), "bias_std": jnp.asarray(0.5)},
         out=lambda p: (p.w, p.b, p.c), vmap=("scale", "bias_std", "key"),
         grad=("scale", "bias_std"), key="key",
         bad=(Bad({"activation": "gelu"}, ValueError, "activation must be one of"),)),
    Case("particles.count_clusters", pt.count_clusters,
         lambda: {"x": jnp.concatenate([_x0(), _x0()]), "tol": jnp.asarray(0.05)},
         vmap=("tol",), zero_grad=("x",), loss=lambda y: jnp.sum(y[0]).astype(float),
         bad=(Bad({"tol": -1.0}, ValueError, "tol must be > 0"),
              Bad({"tol": jnp.asarray(-1.0)}, Exception, "tol must be > 0", jit=True))),
    Case("particles.velocity_weighted", pt.velocity,
         lambda: {"flow": _flow(), "x": _x0(),
                  "weights": jnp.asarray([0.1, 0.3, 0.2, 0.25, 0.15], float)},
         vmap=("weights",), grad=("x", "weights"),
         bad=(Bad({"weights": -jnp.ones(N)}, ValueError, "weights must be >= 0"),
              Bad({"weights": jnp.ones(N + 1)}, ValueError, "weights must have shape"))),
    Case("particles.merge_clusters", pt.merge_clusters,
         lambda: {"x": jnp.concatenate([_x0(), _x0()[:2]]), "tol": jnp.asarray(0.05),
                  "max_clusters": 6},
         out=lambda m: (m.centers, m.weights, m.n_clusters), vmap=("tol",),
         zero_grad=("tol",), loss=lambda y: jnp.sum(y[0]),
         bad=(Bad({"max_clusters": 3}, Exception, "max_clusters is smaller", jit=True),
              Bad({"tol": -1.0}, ValueError, "tol must be > 0"))),
    Case("particles.solve_merging", pt.solve_merging,
         lambda: {"flow": pt.make_flow(D, jnp.asarray(2.0), speed=jnp.exp(-2.0)),
                  "x0": _x0()[:3], "t1": jnp.asarray(1e3),
                  "weights": jnp.asarray([0.5, 0.3, 0.2], float), "max_steps": 2000},
         # event times are step ends: programs whose round-off differs take other
         # steps, so they agree to a step of the final approach (the docstring's word)
         out=lambda h: (h.t_one, h.t_merge, h.n_clusters), vmap=("t1",), rtol=0.05,
         batch={"t1": lambda t: jnp.asarray([1e3, 2e3, 5.0])},
         bad=(Bad({"merge_tol": 0.0}, ValueError, "merge_tol must be > 0"),
              Bad({"x0": 2.0 * _x0()[:3]}, ValueError, "x must lie on the unit sphere"))),
    Case("particles.merge_time_two_clusters", pt.merge_time_two_clusters,
         lambda: {"beta": jnp.asarray(4.0, float), "theta0": jnp.asarray(2.5, float),
                  "theta1": jnp.asarray(0.05, float)},
         vmap=("beta", "theta0"), grad=("beta", "theta0", "theta1"),
         bad=(Bad({"beta": 0.0}, ValueError, "beta must be > 0"),)),
]
