"""Baselines for sparse systems at one stopping rule: ``||b - A x||_2 <= tol ||b||_2``.

Thin wrappers so every peer runs to the same relative residual from ``x_0 = 0``:

* ``jax_cg``, ``jax_gmres``: ``jax.scipy.sparse.linalg`` (GMRES restart 20). JAX does
  not expose their iteration counts (``iterations = -1``).
* ``lineax_cg``, ``lineax_gmres``, ``lineax_bicgstab``: lineax, with its tolerance set
  to the same 2-norm rule (``rtol = 0``, ``atol = tol ||b||_2``, 2-norm).
* ``scipy_cg``, ``scipy_gmres``, ``scipy_bicgstab``: ``scipy.sparse.linalg`` (GMRES
  restart 20; iterations counted by callback, inner steps for GMRES).
* ``amg``, ``amg_pcg``: pyamg smoothed aggregation as a stand-alone V-cycle solver and as
  the preconditioner of CG (of GMRES for non-symmetric matrices, where CG does not apply).

CG variants apply only to symmetric matrices (:func:`applies`). The wrappers return the
iterate and a ``result`` (:data:`jaxsci.core.RESULTS`): ``successful`` only when the
relative residual of the returned iterate, recomputed, is at most ``tol`` (whatever the
library says), ``max_steps_reached`` otherwise, ``nonfinite`` for a NaN/inf iterate,
``breakdown`` where scipy reports one. ``throw=True`` (the default, as in lineax) raises
on failure. :func:`relative_residual` recomputes the residual in float64 so the stopping
rule is checked the same way for every solver. pyamg is imported lazily (it is a
benchmark dependency, not a core one).
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from jax.experimental import sparse as jsparse
from lineax.internal import two_norm

from jaxsci.core.status import RESULTS, raise_if_failed
from jaxsci.core.validation import check_array, check_choice, check_int, check_scalar

__all__ = [
    "JAX_SOLVERS",
    "HOST_SOLVERS",
    "SOLVERS",
    "KrylovResult",
    "applies",
    "jax_solver",
    "host_solver",
    "amg_hierarchy",
    "relative_residual",
]

JAX_SOLVERS = ("jax_cg", "jax_gmres", "lineax_cg", "lineax_gmres", "lineax_bicgstab")
HOST_SOLVERS = ("scipy_cg", "scipy_gmres", "scipy_bicgstab", "amg", "amg_pcg")
SOLVERS = JAX_SOLVERS + HOST_SOLVERS
_CG = ("jax_cg", "lineax_cg", "scipy_cg")
GMRES_RESTART = 20  # scipy's and JAX's default restart length


class KrylovResult(NamedTuple):
    """``x``; ``iterations`` (-1 where the library does not report it); ``result``, a
    :data:`jaxsci.core.RESULTS` item (see the module docstring); ``residuals``: the
    relative residual history where the library reports one (else empty: scipy's CG and
    BiCGStab report iterates, not residuals)."""

    x: np.ndarray | jax.Array
    iterations: int | jax.Array
    result: RESULTS
    residuals: np.ndarray


def _jax_result(mv, b, x, tol):
    """Honest success: the returned iterate's relative residual, recomputed."""
    bnorm = jnp.linalg.norm(b)
    rel = jnp.linalg.norm(b - mv(x)) / jnp.where(bnorm > 0, bnorm, 1.0)
    ok = jnp.isfinite(rel)
    return RESULTS.where(
        ~ok, RESULTS.nonfinite,
        RESULTS.where(rel <= tol * (1 + 1e-6), RESULTS.successful, RESULTS.max_steps_reached))


def _host_result(matrix, b, x, tol, breakdown=False):
    if not np.all(np.isfinite(x)):
        return RESULTS.nonfinite
    if relative_residual(matrix, b, x) <= tol * (1 + 1e-6):
        return RESULTS.successful
    return RESULTS.breakdown if breakdown else RESULTS.max_steps_reached


def applies(name: str, symmetric: bool) -> bool:
    """Whether solver ``name`` applies to a (non-)symmetric matrix."""
    check_choice("name", name, SOLVERS)
    return symmetric or name not in _CG


def relative_residual(matrix: sp.spmatrix, rhs: np.ndarray, x) -> float:
    """``||b - A x||_2 / ||b||_2`` in float64."""
    x = np.asarray(x, np.float64)
    b = np.asarray(rhs, np.float64)
    return float(np.linalg.norm(b - matrix @ x) / np.linalg.norm(b))


def jax_solver(name: str, matrix: jsparse.BCOO, *, tol: float = 1e-5, maxiter: int = 10_000,
               throw: bool = True):
    """A jitted ``solve(b) -> KrylovResult`` for the JAX solver ``name`` on ``matrix``
    (``throw=True``: a failure raises, inside ``jit``).

    The compiled program takes the matrix and ``tol`` as arguments: matrices of one shape
    and ``nnz`` (pad with ``fem.to_bcoo(..., nnz=)``) share one compilation."""
    check_choice("name", name, JAX_SOLVERS)
    if not isinstance(throw, bool):
        raise TypeError(f"throw must be a bool, got {type(throw).__name__} {throw!r}")
    check_scalar("tol", tol, gt=0.0)
    check_int("maxiter", maxiter, min=1)
    if not isinstance(matrix, jsparse.BCOO):
        raise TypeError(f"matrix must be a BCOO, got {type(matrix).__name__}")
    tol_arr = jnp.asarray(tol, matrix.dtype)
    return lambda b: _jax_solve(name, matrix, b, tol_arr, maxiter, throw)


@eqx.filter_jit
def _jax_solve(name, matrix, b, tol, maxiter, throw):
    n = matrix.shape[0]
    mv = lambda v: matrix @ v  # noqa: E731
    empty = jnp.zeros((0,), b.dtype)
    if name == "jax_cg":
        x, _ = jax.scipy.sparse.linalg.cg(mv, b, tol=tol, atol=0.0, maxiter=maxiter)
        out = KrylovResult(x, jnp.asarray(-1), _jax_result(mv, b, x, tol), empty)
    elif name == "jax_gmres":
        x, _ = jax.scipy.sparse.linalg.gmres(
            mv, b, tol=tol, atol=0.0, restart=GMRES_RESTART, maxiter=maxiter
        )
        out = KrylovResult(x, jnp.asarray(-1), _jax_result(mv, b, x, tol), empty)
    else:
        struct = jax.ShapeDtypeStruct((n,), matrix.dtype)
        tags = lx.positive_semidefinite_tag if name == "lineax_cg" else ()
        op = lx.FunctionLinearOperator(mv, struct, tags=tags)
        atol = tol * jnp.linalg.norm(b)
        kw = dict(rtol=0.0, atol=atol, norm=two_norm, max_steps=maxiter)
        if name == "lineax_cg":
            solver = lx.CG(**kw)
        elif name == "lineax_gmres":
            solver = lx.GMRES(**kw, restart=GMRES_RESTART)
        else:
            solver = lx.BiCGStab(**kw)
        sol = lx.linear_solve(op, b, solver, throw=False)
        result = RESULTS.where(sol.result == lx.RESULTS.successful,
                               _jax_result(mv, b, sol.value, tol), RESULTS.max_steps_reached)
        out = KrylovResult(sol.value, sol.stats["num_steps"], result, empty)
    return raise_if_failed(out, out.result, throw)


def amg_hierarchy(matrix: sp.spmatrix, symmetric: bool = True):
    """pyamg's smoothed-aggregation hierarchy with its defaults (``symmetry='nonsymmetric'``
    for non-symmetric matrices)."""
    import pyamg

    return pyamg.smoothed_aggregation_solver(
        sp.csr_matrix(matrix), symmetry="hermitian" if symmetric else "nonsymmetric"
    )


def host_solver(
    name: str,
    matrix: sp.spmatrix,
    rhs: np.ndarray,
    *,
    tol: float = 1e-5,
    maxiter: int = 10_000,
    symmetric: bool = True,
    hierarchy=None,
    throw: bool = True,
) -> KrylovResult:
    """Solve with the scipy/pyamg solver ``name`` (``hierarchy``: a prebuilt pyamg solver;
    ``throw=True``: a failure raises ``RuntimeError`` with the RESULTS message)."""
    check_choice("name", name, HOST_SOLVERS)
    if not isinstance(throw, bool):
        raise TypeError(f"throw must be a bool, got {type(throw).__name__} {throw!r}")
    check_scalar("tol", tol, gt=0.0)
    check_int("maxiter", maxiter, min=1)
    if not sp.issparse(matrix):
        raise TypeError(f"matrix must be a scipy.sparse matrix, got {type(matrix).__name__}")
    if matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"matrix must be square, got shape {matrix.shape}")
    check_array("rhs", rhs, shape=(matrix.shape[0],), dtype="floating")
    a = sp.csr_matrix(matrix)
    b = np.asarray(rhs, np.float64)
    bnorm = np.linalg.norm(b)
    hist: list[float] = []
    if name.startswith("scipy"):
        if name == "scipy_gmres":
            x, info = spla.gmres(
                a, b, rtol=tol, atol=0.0, restart=GMRES_RESTART, maxiter=maxiter,
                callback=lambda pr: hist.append(float(pr)), callback_type="pr_norm",
            )
            iters = len(hist)
        else:
            fn = spla.cg if name == "scipy_cg" else spla.bicgstab
            count = [0]  # the callback sees iterates, not residuals: count only

            def tick(xk):
                count[0] += 1

            x, info = fn(a, b, rtol=tol, atol=0.0, maxiter=maxiter, callback=tick)
            iters = count[0]
        result = _host_result(a, b, x, tol, breakdown=info < 0)
        out = KrylovResult(x, iters, result, np.asarray(hist))
        return _raise_host(out, throw)
    ml = hierarchy if hierarchy is not None else amg_hierarchy(a, symmetric)
    accel = None if name == "amg" else ("cg" if symmetric else "gmres")
    res: list[float] = []
    x = ml.solve(b, tol=tol, maxiter=maxiter, accel=accel, residuals=res)
    rel = np.asarray(res) / bnorm
    out = KrylovResult(x, max(len(res) - 1, 0), _host_result(a, b, x, tol), rel)
    return _raise_host(out, throw)


def _raise_host(out: KrylovResult, throw: bool) -> KrylovResult:
    if throw and out.result != RESULTS.successful:
        raise RuntimeError(f"{RESULTS[out.result]}")
    return out
