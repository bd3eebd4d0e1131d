"""Property cases of :mod:`jaxsci.solvers.grans` (see tests/properties.py).

Tiny systems (a 6 x 6 node mesh, 16 unknowns) and a tiny network keep each compile
short. The solves are checked in float64 at ``tol = 1e-12``, so the implicit adjoint
(exact derivative of ``A^{-1} b``) and central finite differences of the iterative
solve agree to ~1e-6.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.data import fem
from jaxsci.solvers import grans as gr

CFG = gr.GRANSConfig(n_basis=4, hidden=4, layers=1, levels=1, basis_smoothing=1,
                     pre_smooth=1, post_smooth=1)


@functools.cache
def _problem():
    return fem.assemble(jax.random.key(0), "advection_diffusion", size=6)


def _system():
    p = _problem()
    dtype = jnp.zeros((), float).dtype  # float64 inside the gradient checks
    graph = gr.build_graph(fem.to_bcoo(p.matrix, dtype), p.coords, levels=CFG.levels)
    model = gr.init_model(jax.random.key(1), CFG, projection=gr.MinRes(),
                          smoother=gr.L1Jacobi())
    b = jnp.asarray(p.rhs, float)
    tol = 1e-12 if dtype == jnp.float64 else 1e-4
    return model, graph, b, tol


def _solve_kwargs():
    model, graph, b, tol = _system()
    return {"model": model, "graph": graph, "b": b, "tol": tol, "maxiter": 60}


def _with_values(model, graph, values, b, tol, maxiter):
    """``solve`` on the matrix with entries ``values`` (the graph's sparsity pattern)."""
    return gr.solve(model, graph._replace(values=values), b, tol=tol, maxiter=maxiter)


def _values_kwargs():
    kw = _solve_kwargs()
    return {**kw, "values": kw["graph"].values}


def _wrong_levels():
    p = _problem()
    return gr.build_graph(fem.to_bcoo(p.matrix, jnp.zeros((), float).dtype), p.coords,
                          levels=2)


def _loss(x):
    return jnp.sum(jnp.sin(x))


def _cycle_kwargs():
    model, graph, b, _ = _system()
    return {"model": model, "graph": graph, "r": b}


def _jacobi(omega, graph, x, b):
    return gr.Jacobi(omega)(graph, x, b, 3)


def _jacobi_kwargs():
    _, graph, b, _ = _system()
    return {"omega": jnp.asarray(0.6, float), "graph": graph, "x": jnp.zeros_like(b), "b": b}


def _init_kwargs():
    return {"key": jax.random.key(3), "config": CFG}


def _build_kwargs():
    p = _problem()
    return {"matrix": fem.to_bcoo(p.matrix), "coords": p.coords, "levels": 1}


CASES = [
    Case(
        "grans.solve", gr.solve, _solve_kwargs,
        out=lambda r: r.x, loss=_loss,
        vmap=("b",), grad=("b",), zero_grad=("model",),
        bad=(
            Bad({"b": jnp.ones(5)}, ValueError, "b must have shape"),
            Bad({"graph": "A"}, TypeError, "graph must be a Graph"),
            Bad({"graph": _wrong_levels()}, ValueError, "coarsening levels"),
            Bad({"tol": -1.0}, ValueError, "tol must be > 0"),
            # throw=True: a failure is an error, also inside jit (equinox.error_if)
            Bad({"maxiter": 1}, Exception, "maximum number of steps", jit=True),
        ),
        rtol=1e-4, atol=1e-6,
    ),
    Case(
        "grans.solve_values", _with_values, _values_kwargs,
        out=lambda r: r.x, loss=_loss, grad=("values",), jit=False,
    ),
    Case(
        "grans.solve_fgmres", gr.solve_fgmres, _solve_kwargs,
        out=lambda r: r.x, loss=_loss, grad=("b",), jit=False,
        bad=(Bad({"restart": 0}, ValueError, "restart must be >= 1"),),
    ),
    Case(
        "grans.cycle_loss", gr.cycle_loss, _cycle_kwargs,
        vmap=("r",), grad=("model",),
        bad=(Bad({"graph": _wrong_levels()}, ValueError, "coarsening levels"),),
        rtol=1e-4, atol=1e-6,
    ),
    Case(
        "grans.Jacobi", _jacobi, _jacobi_kwargs,
        vmap=("omega",), grad=("omega", "b"),
        bad=(Bad({"omega": 1.5}, ValueError, "omega must be <= 1"),),
    ),
    Case(
        "grans.init_model", gr.init_model, _init_kwargs,
        out=lambda m: m.decoder, key="key", jit=False,
        bad=(Bad({"config": {"levels": 1}}, TypeError, "config must be a GRANSConfig"),
             Bad({"projection": "galerkin"}, TypeError,
                 "projection must be an AbstractProjection")),
    ),
    Case(
        "grans.build_graph", gr.build_graph, _build_kwargs,
        out=lambda g: (g.values, g.inv_l1), jit=False,
        bad=(Bad({"coords": np.zeros((3, 2))}, ValueError, "coords must have shape"),
             Bad({"levels": -1}, ValueError, "levels must be >= 0")),
    ),
]
