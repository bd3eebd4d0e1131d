r"""G-RANS: residual-aware neural subspace corrections for sparse linear systems.

Paper: "G-RANS: Generalizable Residual-Aware Neural Solver" (ICML 2026); jaxsci issue
#7 gives the method in detail.

Iteration (subspace correction)
-------------------------------
For ``A x = b`` with residual ``r_k = b - A x_k``:

1. map ``r_k`` onto the matrix graph (nodes = unknowns, edges = stored entries, edge
   features = the entries scaled as ``a_ij / sqrt(|a_ii a_jj|)``);
2. a message-passing network generates ``m`` correction vectors
   ``V_k = Phi_theta(r_k; A) in R^{n x m}``, multi-scale through graph coarsening (the
   unknowns are binned into coarser and coarser aggregates, each level passes
   messages along the aggregated edges, and the levels are unpooled and mixed);
3. the coefficients come from a projection, by default the Galerkin projection
   ``(V_k^T A V_k) c_k = V_k^T r_k``, and ``x_{k+1} = x_k + V_k c_k``.

Strategies are values (final ``equinox.Module`` s under an abstract base), set when the
model is made (:func:`init_model`) and stored in it:

* projections (:class:`AbstractProjection`): :class:`Galerkin` (the paper's; for SPD
  ``A`` it minimises the A-norm of the error over ``x_k + span(V_k)``, so no step
  increases it, whatever the network outputs) and :class:`MinRes` (the Petrov-Galerkin
  minimal-residual coefficients ``argmin ||r_k - A V_k c||``, which never increase the
  residual norm for any ``A``: non-symmetric, indefinite). Both orthonormalise ``V_k``
  (QR) and add a relative ridge to the projected ``m x m`` system.
* smoothers (:class:`AbstractSmoother`): :class:`Jacobi` (weighted, ``omega = 2/3``,
  the standard two-level choice) and :class:`L1Jacobi` (``a_ii`` replaced by
  ``sum_j |a_ij|``; Baker, Falgout, Kolev & Yang 2011: convergent for every SPD ``A``,
  far less amplifying on rows that are not diagonally dominant). ``nu`` sweeps before
  and after each correction; the correction vectors are smoothed by the same operator,
  as smoothed aggregation smooths its prolongator.

One such cycle is :func:`cycle`. The stand-alone solver has :func:`init` / :func:`step`
(:class:`SolveState` / :class:`SolveInfo`) and :func:`solve`, a thin ``lax.while_loop``
driver over them; :func:`solve_fgmres` uses the cycle as the right preconditioner of
flexible GMRES (flexible because the network makes the preconditioner nonlinear).

Differentiability
-----------------
:func:`solve` and :func:`solve_fgmres` have an implicit adjoint
(``lax.custom_linear_solve``): ``x`` is treated as ``A^{-1} b``, so ``jax.grad`` of a
function of ``result.x`` works with respect to ``b`` and to the matrix entries
``graph.values`` (the backward pass solves ``A^T lambda = g`` with G-RANS-preconditioned
FGMRES on the transposed graph, :func:`transpose_graph`). The gradient with respect to
the network parameters, the smoother and the projection is **zero by construction**
(the exact solution does not depend on how it was found); train the network through
:func:`cycle_loss`. ``iterations``, ``residuals`` and ``result`` carry no gradient.

Training (self-supervised, progressive bootstrap)
-------------------------------------------------
The loss is the relative residual left by one cycle, ``|| r - A e(r) || / || r ||``
with ``e(r) = cycle(r)`` (no solutions needed). Stage 0 trains on the right-hand
sides; stage ``s`` runs the current solver on the training systems and adds the
residuals of its later iterations to the data set, so the network meets the residual
distribution the iteration actually produces (the stagnation the paper names).
:func:`bootstrap_residuals` makes a stage's data; :func:`train` runs the stages
through :func:`jaxsci.core.fit`, with the settings of :class:`GRANSTrainConfig`.

Success (lineax style): every solve returns ``result``, an item of
:data:`jaxsci.core.RESULTS`: ``successful`` (relative residual at most ``tol``),
``max_steps_reached`` (``maxiter`` reached) or ``nonfinite`` (a non-finite residual
appeared; the iteration stops there and ``x`` is the last finite iterate). With
``throw=True`` (the default) a failure raises, also inside ``jit``.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import sparse as jsparse
from jaxtyping import Array, Float, Int

from jaxsci.core.status import RESULTS, raise_if_failed
from jaxsci.core.train import TrainConfig, fit
from jaxsci.core.validation import (
    check_array,
    check_int,
    check_key,
    check_scalar,
)
from jaxsci.data.fem import check_system

__all__ = [
    "AbstractProjection",
    "Galerkin",
    "MinRes",
    "AbstractSmoother",
    "Jacobi",
    "L1Jacobi",
    "GRANSConfig",
    "GRANSTrainConfig",
    "Graph",
    "GRANS",
    "SolveResult",
    "SolveState",
    "SolveInfo",
    "build_graph",
    "stack_graphs",
    "transpose_graph",
    "matvec",
    "init_model",
    "basis",
    "galerkin_correction",
    "minres_correction",
    "jacobi",
    "cycle",
    "cycle_loss",
    "init",
    "step",
    "solve",
    "fgmres",
    "solve_fgmres",
    "bootstrap_residuals",
    "train",
]


@dataclasses.dataclass(frozen=True)
class GRANSConfig:
    """Architecture and cycle sweep counts (the abstract gives no numbers; ours are
    small, CPU-sized choices, named so a user can change them). Validated on
    construction. The strategies (projection, smoother) are values passed to
    :func:`init_model`, not fields here.

    Attributes:
      n_basis: correction vectors per step, ``m``.
      hidden: channels of the message-passing network.
      layers: message-passing layers on the fine graph.
      levels: coarsening levels (each halves the aggregate grid per side); a graph must
        be built with the same ``levels`` (:func:`build_graph`).
      basis_smoothing: smoother sweeps applied to ``V`` (smoothed aggregation's
        prolongator smoothing).
      pre_smooth, post_smooth: smoother sweeps around each correction (standard nu = 2).
    """

    n_basis: int = 8
    hidden: int = 16
    layers: int = 2
    levels: int = 3
    basis_smoothing: int = 2
    pre_smooth: int = 2
    post_smooth: int = 2

    def __post_init__(self):
        check_int("n_basis", self.n_basis, min=1)
        check_int("hidden", self.hidden, min=1)
        check_int("layers", self.layers, min=0)
        check_int("levels", self.levels, min=0)
        check_int("basis_smoothing", self.basis_smoothing, min=0)
        check_int("pre_smooth", self.pre_smooth, min=0)
        check_int("post_smooth", self.post_smooth, min=0)


@dataclasses.dataclass(frozen=True)
class GRANSTrainConfig:
    """Progressive-bootstrap training settings (:func:`train`); the one owner of these
    numbers (the experiment nests this config). The paper gives no numbers; these are
    the library's CPU-sized defaults.

    Attributes:
      stages: bootstrap stages (stage 0 on the right-hand sides).
      steps_per_stage: Adam steps per stage.
      iters_per_stage: solver iterations whose residuals each later stage adds.
      batch_size: residuals per step.
      learning_rate: Adam's step size.
    """

    stages: int = 3
    steps_per_stage: int = 200
    iters_per_stage: int = 4
    batch_size: int = 8
    learning_rate: float = 1e-3

    def __post_init__(self):
        check_int("stages", self.stages, min=1)
        check_int("steps_per_stage", self.steps_per_stage, min=1)
        check_int("iters_per_stage", self.iters_per_stage, min=1)
        check_int("batch_size", self.batch_size, min=1)
        check_scalar("learning_rate", self.learning_rate, gt=0.0)


class Graph(NamedTuple):
    """The matrix graph of ``A`` (a pytree; graphs of equal ``n`` and ``nnz`` stack).

    Attributes:
      rows, cols: edge endpoints (padding edges have ``mask = 0`` and value 0).
      values: the matrix entries ``a_ij`` in the system's dtype (the matvec; the
        solves differentiate with respect to them).
      edge: ``(nnz, 2)`` float32 features ``[a_ij / sqrt(|a_ii a_jj|), [i == j]]``.
      mask: ``(nnz,)`` 1 for real edges, 0 for padding.
      inv_diag: ``1 / a_ii``.
      inv_l1: ``1 / sum_j |a_ij|`` (the l1-Jacobi smoother's diagonal).
      clusters: ``(levels, n)`` aggregate index of each unknown at each level.
    """

    rows: Int[Array, " nnz"]
    cols: Int[Array, " nnz"]
    values: Float[Array, " nnz"]
    edge: Float[Array, "nnz 2"]
    mask: Float[Array, " nnz"]
    inv_diag: Float[Array, " n"]
    inv_l1: Float[Array, " n"]
    clusters: Int[Array, "levels n"]


def build_graph(
    matrix: jsparse.BCOO,
    coords: Float[Array, "n 2"] | np.ndarray,
    *,
    levels: int = 3,
    nnz: int | None = None,
) -> Graph:
    """The :class:`Graph` of ``matrix``; ``coords`` (node positions) drive the coarsening.

    Level ``l`` bins the unknowns on a ``ceil(sqrt(n) / 2^l)``-per-side grid over their
    bounding box (geometric aggregation, as multiscale mesh GNNs do). ``nnz`` pads the
    edge list so graphs with different sparsity patterns stack for training.
    """
    if not isinstance(matrix, jsparse.BCOO):
        raise TypeError(f"matrix must be a BCOO (see fem.to_bcoo), got {type(matrix).__name__}")
    n = matrix.shape[0]
    check_system(matrix, jnp.zeros(n, matrix.dtype))
    coords = np.asarray(check_array("coords", coords, shape=(n, 2), dtype="floating"))
    check_int("levels", levels, min=0)
    idx = np.asarray(matrix.indices)
    vals = np.asarray(matrix.data)
    keep = vals != 0  # explicit zeros (e.g. to_bcoo padding) are not edges
    idx, vals = idx[keep], vals[keep]
    rows, cols = idx[:, 0].astype(np.int32), idx[:, 1].astype(np.int32)
    diag = np.zeros(n, vals.dtype)
    np.add.at(diag, rows[rows == cols], vals[rows == cols])
    if np.any(diag == 0):
        raise ValueError(
            f"matrix must have a non-zero diagonal (Jacobi smoothing and the edge scaling "
            f"divide by it), got {int(np.sum(diag == 0))} zero diagonal entries"
        )
    l1 = np.zeros(n, vals.dtype)
    np.add.at(l1, rows, np.abs(vals))
    scale = np.sqrt(np.abs(diag))
    feat = np.stack([vals / (scale[rows] * scale[cols]), (rows == cols).astype(vals.dtype)], 1)
    m = len(vals)
    if nnz is not None:
        check_int("nnz", nnz, min=m)
        pad = nnz - m
        rows = np.concatenate([rows, np.zeros(pad, np.int32)])
        cols = np.concatenate([cols, np.zeros(pad, np.int32)])
        vals = np.concatenate([vals, np.zeros(pad, vals.dtype)])
        feat = np.concatenate([feat, np.zeros((pad, 2), feat.dtype)])
    mask = (np.arange(len(vals)) < m).astype(np.float32)
    lo, hi = coords.min(0), coords.max(0)
    unit = (coords - lo) / np.maximum(hi - lo, 1e-12)
    side = max(1, int(np.ceil(np.sqrt(n))))
    clusters = []
    for level in range(1, levels + 1):
        g = max(1, int(np.ceil(side / 2**level)))
        cell = np.minimum((unit * g).astype(np.int64), g - 1)
        _, inv = np.unique(cell[:, 0] * g + cell[:, 1], return_inverse=True)
        clusters.append(inv.astype(np.int32))
    clusters_arr = np.stack(clusters) if clusters else np.zeros((0, n), np.int32)
    return Graph(
        rows=jnp.asarray(rows),
        cols=jnp.asarray(cols),
        values=jnp.asarray(vals),
        edge=jnp.asarray(feat, jnp.float32),
        mask=jnp.asarray(mask),
        inv_diag=jnp.asarray(1.0 / diag, vals.dtype),
        inv_l1=jnp.asarray(1.0 / l1, vals.dtype),
        clusters=jnp.asarray(clusters_arr),
    )


def stack_graphs(graphs: list[Graph]) -> Graph:
    """Stack graphs of equal shapes along a leading axis (for vmapped training)."""
    graphs = list(graphs)
    if not graphs or not all(isinstance(g, Graph) for g in graphs):
        raise TypeError("graphs must be a non-empty list of Graph (see build_graph)")
    shapes = {tuple(x.shape for x in g) for g in graphs}
    if len(shapes) != 1:
        raise ValueError("graphs must share n, nnz and levels to stack (pass build_graph "
                         f"one nnz= for all); got {len(shapes)} different shapes")
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *graphs)


def transpose_graph(graph: Graph) -> Graph:
    """The graph of ``A^T``: edges reversed (same features, same diagonal), l1 row sums
    of ``A^T`` (the column sums of ``|A|``). Used by the solves' adjoint."""
    n = graph.inv_diag.shape[-1]
    col_l1 = jax.ops.segment_sum(jnp.abs(graph.values), graph.cols, num_segments=n)
    return graph._replace(rows=graph.cols, cols=graph.rows,
                          inv_l1=1.0 / jnp.where(col_l1 > 0, col_l1, 1.0))


def matvec(graph: Graph, x: Float[Array, "n ..."]) -> Float[Array, "n ..."]:
    """``A x`` from the graph's edge list (``x`` may carry trailing columns)."""
    n = graph.inv_diag.shape[0]
    vals = graph.values.reshape((-1,) + (1,) * (x.ndim - 1))
    return jax.ops.segment_sum(vals * x[graph.cols], graph.rows, num_segments=n)


def jacobi(graph: Graph, x, b, sweeps: int, omega: float | Array, *, l1: bool = False):
    """``sweeps`` weighted-Jacobi steps ``x <- x + omega D^{-1} (b - A x)``.

    With ``l1=True``, ``D`` is ``diag(sum_j |a_ij|)`` (l1-Jacobi; pass ``omega = 1``).
    ``omega`` may be traced; ``sweeps`` is a static loop count. Prefer the smoother
    values :class:`Jacobi` and :class:`L1Jacobi`.
    """
    inv = graph.inv_l1 if l1 else graph.inv_diag
    d = inv.reshape((-1,) + (1,) * (x.ndim - 1))

    def body(_, x):
        return x + omega * d * (b - matvec(graph, x))

    return jax.lax.fori_loop(0, sweeps, body, x) if sweeps else x




# --------------------------------------------------------------------------- strategies


class AbstractSmoother(eqx.Module):
    """A stationary smoother ``x <- x + W (b - A x)`` with a diagonal ``W`` from the graph."""

    @abc.abstractmethod
    def weights(self, graph: Graph) -> Float[Array, " n"]:
        """The diagonal ``W``."""

    def __call__(self, graph: Graph, x: Array, b: Array, sweeps: int) -> Array:
        """``sweeps`` (a static count) smoothing steps on ``A x = b`` from ``x``
        (``x``, ``b`` may carry trailing columns)."""
        if not sweeps:
            return x
        w = self.weights(graph).astype(x.dtype).reshape((-1,) + (1,) * (x.ndim - 1))
        return _smooth(w, graph, x, b, sweeps)


@eqx.filter_jit
def _smooth(w, graph, x, b, sweeps):
    # Module-level jit: a second eager call compiles nothing (the loop body's closure).
    def body(_, x):
        return x + w * (b - matvec(graph, x))

    return jax.lax.fori_loop(0, sweeps, body, x)


class Jacobi(AbstractSmoother):
    """Weighted Jacobi, ``W = omega D^{-1}`` (the paper's arrangement, ``omega = 2/3``).

    ``omega`` may be a traced array (sweep it with ``vmap``); a Python float (the
    default) is held fixed by :func:`train`, an array would be trained with the network.
    """

    omega: float | Array = 2.0 / 3.0

    def __check_init__(self):
        check_scalar("omega", self.omega, gt=0.0, le=1.0)

    def weights(self, graph: Graph) -> Array:
        return self.omega * graph.inv_diag


class L1Jacobi(AbstractSmoother):
    """l1-Jacobi, ``W = diag(sum_j |a_ij|)^{-1}``, undamped (Baker, Falgout, Kolev &
    Yang 2011): convergent for every SPD ``A``."""

    def weights(self, graph: Graph) -> Array:
        return graph.inv_l1


class AbstractProjection(eqx.Module):
    """Coefficients of the correction: ``V c`` from the basis ``V`` and the residual."""

    ridge: eqx.AbstractVar[float | Array]

    @abc.abstractmethod
    def __call__(
        self, apply_a: Callable[[Array], Array], v: Float[Array, "n m"], r: Float[Array, " n"]
    ) -> Float[Array, " n"]:
        """The update ``V c`` for ``A e = r`` (``apply_a`` maps an ``(n, m)`` block)."""


class Galerkin(AbstractProjection):
    """The paper's Galerkin projection (:func:`galerkin_correction`): optimal in the
    A-norm of the error for SPD ``A``. ``ridge``: the relative ridge ``eps``."""

    ridge: float | Array = 1e-6

    def __check_init__(self):
        check_scalar("ridge", self.ridge, ge=0.0)

    def __call__(self, apply_a, v, r):
        return galerkin_correction(apply_a, v, r, self.ridge)


class MinRes(AbstractProjection):
    """The minimal-residual (Petrov-Galerkin) projection (:func:`minres_correction`):
    never increases ``||r||`` for any ``A``. ``ridge``: the relative ridge ``eps``."""

    ridge: float | Array = 1e-6

    def __check_init__(self):
        check_scalar("ridge", self.ridge, ge=0.0)

    def __call__(self, apply_a, v, r):
        return minres_correction(apply_a, v, r, self.ridge)


# --------------------------------------------------------------------------- network


def _mlp(key, d_in, d_out, hidden, depth=1):
    return eqx.nn.MLP(d_in, d_out, hidden, depth, activation=jax.nn.gelu, key=key)


class GRANS(eqx.Module):
    """The residual-aware basis generator ``Phi_theta`` with its projection and smoother
    (an equinox Module; make it with :func:`init_model`)."""

    encoder: eqx.nn.MLP
    edge_nets: list
    node_nets: list
    coarse_edge_nets: list
    coarse_nets: list
    decoder: eqx.nn.MLP
    projection: AbstractProjection
    smoother: AbstractSmoother
    config: GRANSConfig = eqx.field(static=True)


def init_model(
    key: jax.Array,
    config: GRANSConfig = GRANSConfig(),
    *,
    projection: AbstractProjection | None = None,
    smoother: AbstractSmoother | None = None,
) -> GRANS:
    """Random initial parameters for ``config``, with the given strategies (``None``:
    the paper's :class:`Galerkin` projection and weighted :class:`Jacobi`)."""
    key = check_key("key", key)
    projection = Galerkin() if projection is None else projection
    smoother = Jacobi() if smoother is None else smoother
    if not isinstance(config, GRANSConfig):
        raise TypeError(f"config must be a GRANSConfig, got {type(config).__name__}")
    if not isinstance(projection, AbstractProjection):
        raise TypeError("projection must be an AbstractProjection (Galerkin() or MinRes()), "
                        f"got {type(projection).__name__} {projection!r}")
    if not isinstance(smoother, AbstractSmoother):
        raise TypeError("smoother must be an AbstractSmoother (Jacobi() or L1Jacobi()), "
                        f"got {type(smoother).__name__} {smoother!r}")
    h, nl, nv = config.hidden, config.layers, config.levels
    keys = iter(jax.random.split(key, 2 + 2 * nl + 2 * nv))
    return GRANS(
        encoder=_mlp(next(keys), 2, h, h),
        edge_nets=[_mlp(next(keys), 2, h, h) for _ in range(nl)],
        node_nets=[_mlp(next(keys), 2 * h, h, h) for _ in range(nl)],
        coarse_edge_nets=[_mlp(next(keys), 2, h, h) for _ in range(nv)],
        coarse_nets=[_mlp(next(keys), 2 * h, h, h) for _ in range(nv)],
        decoder=_mlp(next(keys), h * (1 + nv), config.n_basis, h),
        projection=projection,
        smoother=smoother,
        config=config,
    )


def _check_agreement(model: GRANS, graph: Graph) -> None:
    """The graph's coarsening levels must be the model's (shapes: checked at trace time),
    and its aggregate indices below :func:`_aggregate_counts` (when concrete)."""
    levels = graph.clusters.shape[-2]
    if levels != model.config.levels:
        raise ValueError(
            f"graph has {levels} coarsening levels (build_graph(..., levels={levels})) but "
            f"the model has {model.config.levels} (GRANSConfig.levels); build the graph "
            f"with levels={model.config.levels}"
        )
    if levels and not isinstance(graph.clusters, jax.core.Tracer):
        top = np.asarray(graph.clusters).max(axis=-1).reshape(-1, levels).max(0)
        counts = _aggregate_counts(graph.clusters.shape[-1], levels)
        if np.any(top >= np.asarray(counts)):
            raise ValueError(
                f"graph.clusters has aggregate indices {top.tolist()} at or above the "
                f"counts {list(counts)} that build_graph's grids allow; build the graph "
                f"with build_graph"
            )


def _aggregate_counts(n: int, levels: int) -> tuple[int, ...]:
    """Static upper bounds of the aggregate count per level: the cells of
    :func:`build_graph`'s ``ceil(sqrt(n) / 2^l)``-per-side grids (at most ``n``)."""
    side = max(1, int(np.ceil(np.sqrt(n))))
    return tuple(min(n, max(1, int(np.ceil(side / 2**lv))) ** 2) for lv in range(1, levels + 1))


def _rms_normalise(v):
    return v / (jnp.sqrt(jnp.mean(v * v)) + 1e-30)


def _edge_weights(model: GRANS, graph: Graph):
    """The residual-independent part of the network: per-edge channel weights."""
    ew = graph.edge * graph.mask[:, None]
    fine = [jax.vmap(net)(ew) * graph.mask[:, None] for net in model.edge_nets]
    coarse = [jax.vmap(net)(ew) * graph.mask[:, None] for net in model.coarse_edge_nets]
    return fine, coarse


def basis(
    model: GRANS, graph: Graph, r: Float[Array, " n"], weights=None
) -> Float[Array, "n m"]:
    """The correction vectors ``V = Phi_theta(r; A)``, smoothed, in ``r``'s dtype."""
    _check_agreement(model, graph)
    n = r.shape[0]
    fine_w, coarse_w = _edge_weights(model, graph) if weights is None else weights
    r32 = jax.lax.stop_gradient(r).astype(jnp.float32)
    z = _rms_normalise(r32 * graph.inv_diag.astype(jnp.float32))
    feats = jnp.stack([_rms_normalise(r32), z], 1)
    h = jax.vmap(model.encoder)(feats)
    for w, net in zip(fine_w, model.node_nets, strict=True):
        msg = jax.ops.segment_sum(w * h[graph.cols], graph.rows, num_segments=n)
        h = h + jax.vmap(net)(jnp.concatenate([h, msg], 1))
    outs = [h]
    counts = _aggregate_counts(n, len(coarse_w))  # level l works on ~n / 4^l aggregates
    for lvl, (w, net) in enumerate(zip(coarse_w, model.coarse_nets, strict=True)):
        cl = graph.clusters[lvl]
        m = counts[lvl]
        count = jax.ops.segment_sum(jnp.ones((n, 1), h.dtype), cl, num_segments=m)
        hc = jax.ops.segment_sum(h, cl, num_segments=m) / jnp.maximum(count, 1.0)
        # messages between aggregates along the fine edges that join them: a dilated
        # aggregation whose reach doubles with every level
        msg = jax.ops.segment_sum(w * hc[cl[graph.cols]], cl[graph.rows], num_segments=m)
        msg = msg / jnp.maximum(count, 1.0)
        hc = hc + jax.vmap(net)(jnp.concatenate([hc, msg], 1))
        outs.append(hc[cl])
    v = jax.vmap(model.decoder)(jnp.concatenate(outs, 1)).astype(r.dtype)
    # V <- (I - W A)^s V: smooths the piecewise-constant coarse components
    return model.smoother(graph, v, jnp.zeros_like(v), model.config.basis_smoothing)


def galerkin_correction(
    apply_a: Callable[[Array], Array], v: Float[Array, "n m"], r: Float[Array, " n"],
    ridge: float | Array = 1e-6,
) -> Float[Array, " n"]:
    """The projected update ``V c`` with ``(V^T A V + eps I) c = V^T r`` (``V`` orthonormalised).

    ``apply_a`` maps an ``(n, m)`` block to ``A`` times it. ``eps`` is ``ridge`` times
    the mean diagonal of ``V^T A V``.
    """
    q, _ = jnp.linalg.qr(v)
    aq = apply_a(q)
    g = q.T @ aq
    eps = ridge * jnp.abs(jnp.trace(g)) / g.shape[0]
    c = jnp.linalg.solve(g + eps * jnp.eye(g.shape[0], dtype=g.dtype), q.T @ r)
    return q @ c


def minres_correction(
    apply_a: Callable[[Array], Array], v: Float[Array, "n m"], r: Float[Array, " n"],
    ridge: float | Array = 1e-6,
) -> Float[Array, " n"]:
    """The minimal-residual update ``V c``, ``c = argmin ||r - A V c||^2 + eps ||c||^2``.

    The Petrov-Galerkin projection (test space ``A V`` instead of ``V``): the normal
    equations ``(W^T W + eps I) c = W^T r`` with ``W = A Q``, ``Q`` the orthonormalised
    ``V``, ``eps = ridge * trace(W^T W) / m``. For every ``A`` (non-symmetric,
    indefinite) ``||r - W c|| <= ||r||``, since ``c = 0`` is admissible; the Galerkin
    condition only gives that in the A-norm of the error, and only for SPD ``A``.
    Same cost as :func:`galerkin_correction` (one block product ``A Q``, one ``m x m``
    Gram matrix).
    """
    q, _ = jnp.linalg.qr(v)
    w = apply_a(q)
    g = w.T @ w
    eps = ridge * jnp.trace(g) / g.shape[0]
    c = jnp.linalg.solve(g + eps * jnp.eye(g.shape[0], dtype=g.dtype), w.T @ r)
    return q @ c


@eqx.filter_jit
def cycle(model: GRANS, graph: Graph, r: Float[Array, " n"], weights=None) -> Float[Array, " n"]:
    """One G-RANS cycle for ``A e = r`` from ``e = 0``: pre-smooth, correct, post-smooth.

    Differentiable in the network parameters (the training loss); the network's input
    residual is behind ``stop_gradient``."""
    cfg = model.config
    e = model.smoother(graph, jnp.zeros_like(r), r, cfg.pre_smooth)
    res = r - matvec(graph, e)
    v = basis(model, graph, res, weights)
    e = e + model.projection(lambda q: matvec(graph, q), v, res)
    return model.smoother(graph, e, r, cfg.post_smooth)


@eqx.filter_jit
def cycle_loss(model: GRANS, graph: Graph, r: Float[Array, " n"]) -> Float[Array, ""]:
    """Self-supervised loss: relative residual ``||r - A cycle(r)|| / ||r||``."""
    e = cycle(model, graph, r)
    return jnp.linalg.norm(r - matvec(graph, e)) / jnp.linalg.norm(r)


# --------------------------------------------------------------------------- solvers


class SolveResult(NamedTuple):
    """Result of a solve.

    Attributes:
      x: the last iterate (differentiable in ``b`` and ``graph.values``: implicit adjoint).
      iterations: iterations taken (cycles for :func:`solve`, preconditioned Krylov
        steps for :func:`solve_fgmres`).
      residuals: relative residual norms ``||b - A x_k|| / ||b||``, entry ``k`` after
        ``k`` iterations (for FGMRES the Givens estimate inside a restart cycle and the
        recomputed true residual at each restart); NaN past ``iterations`` (unused
        slots, not results).
      result: a :data:`jaxsci.core.RESULTS` item (``successful``,
        ``max_steps_reached`` or ``nonfinite``).
    """

    x: Float[Array, " n"]
    iterations: Int[Array, ""]
    residuals: Float[Array, " k"]
    result: RESULTS


class SolveState(NamedTuple):
    """State of the stand-alone iteration (:func:`init`, :func:`step`).

    Attributes:
      x: the iterate; r: its residual ``b - A x``; rel: ``||r|| / ||b||``;
      bnorm: ``||b||`` (1 where ``b = 0``); iteration: cycles taken.
    """

    x: Float[Array, " n"]
    r: Float[Array, " n"]
    rel: Float[Array, ""]
    bnorm: Float[Array, ""]
    iteration: Int[Array, ""]


class SolveInfo(NamedTuple):
    """What one :func:`step` did: ``rel``, the relative residual of the proposed iterate
    (may be non-finite), and ``finite``, whether it was accepted."""

    rel: Float[Array, ""]
    finite: Array


def _check_model_graph(model, graph):
    if not isinstance(model, GRANS):
        raise TypeError(f"model must be a GRANS (see init_model), got {type(model).__name__}")
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a Graph (see build_graph), got {type(graph).__name__}")
    _check_agreement(model, graph)


def _as_vector(name, v, n, dtype):
    if not hasattr(v, "dtype"):
        v = jnp.asarray(np.asarray(v, dtype=np.dtype(dtype)))
    check_array(name, v, shape=(n,), dtype="floating")
    return v


def _check_solve_args(model, graph, b, x0, tol, maxiter, throw):
    _check_model_graph(model, graph)
    n = graph.inv_diag.shape[0]
    b = _as_vector("b", b, n, graph.values.dtype)
    if x0 is not None:
        x0 = _as_vector("x0", x0, n, b.dtype).astype(b.dtype)
    check_scalar("tol", tol, gt=0.0)
    check_int("maxiter", maxiter, min=1)
    if not isinstance(throw, bool):
        raise TypeError(f"throw must be a bool, got {type(throw).__name__} {throw!r}")
    return b, x0, jnp.asarray(tol, b.dtype)


def init(
    model: GRANS, graph: Graph, b: Float[Array, " n"], x0: Float[Array, " n"] | None = None
) -> SolveState:
    """The state before the first cycle (``x0 = 0`` by default)."""
    _check_model_graph(model, graph)
    n = graph.inv_diag.shape[0]
    b = _as_vector("b", b, n, graph.values.dtype)
    x = jnp.zeros_like(b) if x0 is None else _as_vector("x0", x0, n, b.dtype).astype(b.dtype)
    bnorm = jnp.linalg.norm(b)
    bnorm = jnp.where(bnorm > 0, bnorm, jnp.ones_like(bnorm))
    r = b - matvec(graph, x)
    return SolveState(x, r, jnp.linalg.norm(r) / bnorm, bnorm, jnp.asarray(0))


def step(
    model: GRANS, graph: Graph, b: Float[Array, " n"], state: SolveState, weights=None
) -> tuple[SolveState, SolveInfo]:
    """One cycle ``x <- x + cycle(b - A x)``; the residual is recomputed from ``x``.

    A non-finite residual is not accepted: the state keeps the last finite iterate
    (``info.finite`` is False). ``weights`` (the network's residual-independent part)
    may be precomputed once per graph."""
    x_new = state.x + cycle(model, graph, state.r, weights)
    r_new = b - matvec(graph, x_new)
    rel = jnp.linalg.norm(r_new) / state.bnorm
    ok = jnp.isfinite(rel)
    new = SolveState(
        jnp.where(ok, x_new, state.x), jnp.where(ok, r_new, state.r),
        jnp.where(ok, rel, state.rel), state.bnorm, state.iteration + 1,
    )
    return new, SolveInfo(rel, ok)


def _result(rel, finite, tol):
    return RESULTS.where(
        ~finite, RESULTS.nonfinite,
        RESULTS.where(rel <= tol, RESULTS.successful, RESULTS.max_steps_reached),
    )


def _no_grad(tree):
    return jax.tree_util.tree_map(
        lambda x: jax.lax.stop_gradient(x) if eqx.is_array(x) else x, tree)


def _implicit(model, graph, b, forward, tol, maxiter, throw):
    """``x = A^{-1} b`` by ``forward(rhs) -> (x, aux)``, with the implicit adjoint: the
    cotangent solves ``A^T lambda = g`` by FGMRES preconditioned with G-RANS on the
    transposed graph (same shapes as the forward's stats)."""
    # The solution does not depend on how it is found: only the matvec carries
    # tangents (the network, smoother, projection and the graph's derived features
    # get an exactly zero gradient).
    model, solver_graph = _no_grad((model, graph))
    gt = transpose_graph(solver_graph)
    wt = _edge_weights(model, gt)

    def adjoint(vecmat, g):
        res = fgmres(vecmat, g, lambda v: cycle(model, gt, v, wt), tol=tol,
                     restart=20, maxiter=maxiter, throw=False)
        x = raise_if_failed(res.x, res.result, throw)
        return x, (res.iterations, res.residuals, res.result)

    return jax.lax.custom_linear_solve(
        lambda v: matvec(graph, v), b, lambda _, rhs: forward(rhs), adjoint, has_aux=True
    )


def solve(
    model: GRANS,
    graph: Graph,
    b: Float[Array, " n"],
    x0: Float[Array, " n"] | None = None,
    *,
    tol: float | Array = 1e-5,
    maxiter: int = 200,
    throw: bool = True,
) -> SolveResult:
    """Iterate :func:`step` until ``||b - A x|| <= tol ||b||`` (a jittable
    ``lax.while_loop`` over :func:`init` / :func:`step`).

    ``b`` (an array-like) and ``tol`` are traced (vmappable); ``maxiter`` is a static
    loop bound. ``result.x`` is differentiable in ``b`` and ``graph.values`` (implicit
    adjoint, exact to ``tol``); its gradient in the model is zero by construction.
    ``throw=True`` raises on failure (``max_steps_reached``, ``nonfinite``);
    ``throw=False`` returns the failure in ``result``.
    """
    b, x0, tol = _check_solve_args(model, graph, b, x0, tol, maxiter, throw)
    return _solve(model, graph, b, x0, tol, maxiter, throw)


@eqx.filter_jit
def _solve(model, graph, b, x0, tol, maxiter, throw):
    model_, graph_ = _no_grad((model, graph))  # see _implicit
    weights = _edge_weights(model_, graph_)

    def forward(rhs):
        state = init(model_, graph_, rhs, x0)
        hist = jnp.full((maxiter + 1,), jnp.nan, rhs.dtype).at[0].set(state.rel)

        def cond(carry):
            s, finite, _ = carry
            return (s.iteration < maxiter) & (s.rel > tol) & finite

        def body(carry):
            s, _, hist = carry
            s_new, info = step(model_, graph_, rhs, s, weights)
            return s_new, info.finite, hist.at[s_new.iteration].set(info.rel)

        finite0 = jnp.isfinite(state.rel)
        s, finite, hist = jax.lax.while_loop(cond, body, (state, finite0, hist))
        return s.x, (s.iteration, hist, _result(s.rel, finite, tol))

    x, (k, hist, result) = _implicit(model, graph, b, forward, tol, maxiter, throw)
    return raise_if_failed(SolveResult(x, k, hist, result), result, throw)


def fgmres(
    apply_a: Callable[[Array], Array],
    b: Float[Array, " n"],
    precond: Callable[[Array], Array] | None = None,
    x0: Float[Array, " n"] | None = None,
    *,
    tol: float | Array = 1e-5,
    restart: int = 20,
    maxiter: int = 200,
    throw: bool = True,
) -> SolveResult:
    """Right-preconditioned flexible GMRES(``restart``) (Saad 1993), jittable.

    The preconditioned directions ``z_j = precond(v_j)`` are stored, so ``precond`` may
    change from step to step (nonlinear, as a network is). Givens rotations track the
    residual estimate; at each restart the true residual ``b - A x`` is recomputed
    and decides convergence. ``iterations`` counts Arnoldi steps (one matvec and one
    preconditioner application each). ``result`` as in :class:`SolveResult`; ``throw``
    raises on failure. Not differentiated implicitly (use :func:`solve_fgmres`).
    """
    if not isinstance(throw, bool):
        raise TypeError(f"throw must be a bool, got {type(throw).__name__} {throw!r}")
    check_int("restart", restart, min=1)
    check_int("maxiter", maxiter, min=1)
    check_scalar("tol", tol, gt=0.0)
    precond = (lambda v: v) if precond is None else precond
    dtype = b.dtype
    n = b.shape[0]
    m = restart
    x = jnp.zeros_like(b) if x0 is None else x0.astype(dtype)
    bnorm = jnp.linalg.norm(b)
    bnorm = jnp.where(bnorm > 0, bnorm, 1.0)
    r = b - apply_a(x)
    rel0 = jnp.linalg.norm(r) / bnorm
    hist = jnp.full((maxiter + 1,), jnp.nan, dtype).at[0].set(rel0)

    def arnoldi(x, r, k0, hist):
        beta = jnp.linalg.norm(r)
        vs = jnp.zeros((m + 1, n), dtype).at[0].set(r / beta)
        zs = jnp.zeros((m, n), dtype)
        h = jnp.zeros((m + 1, m), dtype)
        cs = jnp.zeros((m,), dtype)
        sn = jnp.zeros((m,), dtype)
        g = jnp.zeros((m + 1,), dtype).at[0].set(beta)

        def cond(s):
            j, *_, g, est, k, _ = s
            return (j < m) & (est > tol) & (k < maxiter) & jnp.isfinite(est)

        def body(s):
            j, vs, zs, h, cs, sn, g, _, k, hist = s
            z = precond(vs[j])
            w = apply_a(z)

            def mgs(i, carry):
                w, hcol = carry
                hij = jnp.where(i <= j, jnp.vdot(vs[i], w), 0.0)
                return w - hij * vs[i], hcol.at[i].set(hij)

            w, hcol = jax.lax.fori_loop(0, m, mgs, (w, jnp.zeros((m + 1,), dtype)))
            hnext = jnp.linalg.norm(w)
            hcol = hcol.at[j + 1].set(hnext)
            vs = vs.at[j + 1].set(w / jnp.where(hnext > 0, hnext, 1.0))

            def rot(i, hcol):
                a, bb = hcol[i], hcol[i + 1]
                new_a = cs[i] * a + sn[i] * bb
                new_b = -sn[i] * a + cs[i] * bb
                keep = i < j
                return hcol.at[i].set(jnp.where(keep, new_a, a)).at[i + 1].set(
                    jnp.where(keep, new_b, bb)
                )

            hcol = jax.lax.fori_loop(0, m, rot, hcol)
            a, bb = hcol[j], hcol[j + 1]
            den = jnp.sqrt(a * a + bb * bb)
            den = jnp.where(den > 0, den, 1.0)
            c, s_ = a / den, bb / den
            hcol = hcol.at[j].set(c * a + s_ * bb).at[j + 1].set(0.0)
            cs, sn = cs.at[j].set(c), sn.at[j].set(s_)
            gj = g[j]
            g = g.at[j].set(c * gj).at[j + 1].set(-s_ * gj)
            h = h.at[:, j].set(hcol)
            zs = zs.at[j].set(z)
            est = jnp.abs(g[j + 1]) / bnorm
            return j + 1, vs, zs, h, cs, sn, g, est, k + 1, hist.at[k + 1].set(est)

        init_ = (0, vs, zs, h, cs, sn, g, beta / bnorm, k0, hist)
        j, vs, zs, h, cs, sn, g, est, k, hist = jax.lax.while_loop(cond, body, init_)
        idx = jnp.arange(m)
        used = idx < j
        rmat = jnp.where(used[:, None] & used[None, :], h[:m, :m], 0.0) + jnp.diag(
            jnp.where(used, 0.0, 1.0)
        )
        y = jax.scipy.linalg.solve_triangular(rmat, jnp.where(used, g[:m], 0.0), lower=False)
        x = x + zs.T @ y
        r = b - apply_a(x)
        rel = jnp.linalg.norm(r) / bnorm
        # Givens estimates inside a cycle; the true residual at each restart
        hist = hist.at[k].set(rel)
        return x, r, k, hist, rel

    def cond(s):
        _, _, k, _, rel = s
        return (k < maxiter) & (rel > tol) & jnp.isfinite(rel)

    def body(s):
        x, r, k, hist, _ = s
        return arnoldi(x, r, k, hist)

    x, r, k, hist, rel = jax.lax.while_loop(cond, body, (x, r, jnp.asarray(0), hist, rel0))
    result = _result(rel, jnp.isfinite(rel), tol)
    return raise_if_failed(SolveResult(x, k, hist, result), result, throw)


def solve_fgmres(
    model: GRANS,
    graph: Graph,
    b: Float[Array, " n"],
    x0: Float[Array, " n"] | None = None,
    *,
    tol: float | Array = 1e-5,
    restart: int = 20,
    maxiter: int = 200,
    throw: bool = True,
) -> SolveResult:
    """Flexible GMRES with one G-RANS :func:`cycle` as the right preconditioner.

    Same conventions as :func:`solve` (traced ``b`` and ``tol``; implicit adjoint in
    ``b`` and ``graph.values``; zero gradient in the model; ``throw``)."""
    b, x0, tol = _check_solve_args(model, graph, b, x0, tol, maxiter, throw)
    check_int("restart", restart, min=1)
    return _solve_fgmres(model, graph, b, x0, tol, restart, maxiter, throw)


@eqx.filter_jit
def _solve_fgmres(model, graph, b, x0, tol, restart, maxiter, throw):
    model_, graph_ = _no_grad((model, graph))  # see _implicit
    weights = _edge_weights(model_, graph_)

    def forward(rhs):
        res = fgmres(lambda v: matvec(graph_, v), rhs,
                     lambda v: cycle(model_, graph_, v, weights), x0, tol=tol,
                     restart=restart, maxiter=maxiter, throw=False)
        return res.x, (res.iterations, res.residuals, res.result)

    x, (k, hist, result) = _implicit(model, graph, b, forward, tol, maxiter, throw)
    return raise_if_failed(SolveResult(x, k, hist, result), result, throw)


# --------------------------------------------------------------------------- training


@eqx.filter_jit
def _rollout(model, graph, b, steps):
    def body(x, _):
        r = b - matvec(graph, x)
        x = x + cycle(model, graph, r)
        return x, r

    _, rs = jax.lax.scan(body, jnp.zeros_like(b), None, length=steps)
    return rs


def bootstrap_residuals(
    model: GRANS, graphs: Graph, rhs: Float[Array, "p n"], start: int, stop: int
) -> tuple[Float[Array, "q n"], Int[Array, " q"]]:
    """Residuals ``r_k`` of the current solver at iterations ``start <= k < stop`` on every
    training system (``graphs`` stacked), each scaled to unit norm, and the index of the
    system each belongs to: the data of a bootstrap stage. Residuals that are zero or
    not finite are dropped."""
    check_int("start", start, min=0)
    check_int("stop", stop, min=start + 1)
    _check_model_graph(model, graphs)
    rs = jax.vmap(lambda g, b: _rollout(model, g, b, stop))(graphs, rhs)[:, start:]
    owner = jnp.repeat(jnp.arange(rs.shape[0]), rs.shape[1])
    rs = rs.reshape(-1, rs.shape[-1])
    norms = jnp.linalg.norm(rs, axis=1, keepdims=True)
    keep = np.asarray(jnp.isfinite(norms[:, 0]) & (norms[:, 0] > 0))
    return (rs / jnp.where(norms > 0, norms, 1.0))[keep], owner[keep]


def train(
    model: GRANS,
    graphs: Graph,
    rhs: Float[Array, "p n"],
    key: jax.Array,
    config: GRANSTrainConfig = GRANSTrainConfig(),
    *,
    progress: bool = False,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
) -> tuple[GRANS, np.ndarray]:
    """Progressive-bootstrap self-supervised training (:func:`cycle_loss`).

    Stage 0 trains on the right-hand sides ``rhs`` (the residuals at ``x_0 = 0``);
    stage ``s >= 1`` adds the residuals of iterations ``(s-1) T + 1 .. s T`` of the
    current solver (``T = config.iters_per_stage``) and trains on the union. Each stage
    is one :func:`jaxsci.core.fit` call continuing the same Adam state; with
    ``checkpoint_every > 0`` each stage checkpoints under ``checkpoint_dir/stage<s>``
    and an interrupted run resumes exactly. Returns the model and the loss history.
    """
    if not isinstance(model, GRANS):
        raise TypeError(f"model must be a GRANS, got {type(model).__name__}")
    if not isinstance(config, GRANSTrainConfig):
        raise TypeError(f"config must be a GRANSTrainConfig, got {type(config).__name__}")
    if not isinstance(graphs, Graph):
        raise TypeError(f"graphs must be a stacked Graph (stack_graphs), got "
                        f"{type(graphs).__name__}")
    key = check_key("key", key)
    check_int("checkpoint_every", checkpoint_every, min=0)
    check_array("rhs", rhs, ndim=2, dtype="floating")
    _check_agreement(model, graphs)
    if graphs.inv_diag.shape != rhs.shape:
        raise ValueError(
            f"rhs must have shape {graphs.inv_diag.shape} (one row per stacked graph), "
            f"got {rhs.shape}"
        )
    p = rhs.shape[0]
    data = rhs / jnp.linalg.norm(rhs, axis=1, keepdims=True)
    owner = jnp.arange(p)
    optimizer = optax.adam(config.learning_rate)
    state, history = None, []
    for stage in range(config.stages):
        if stage > 0:
            lo = (stage - 1) * config.iters_per_stage + 1
            new, new_owner = bootstrap_residuals(
                state.params, graphs, rhs, lo, lo + config.iters_per_stage
            )
            data = jnp.concatenate([data, new.astype(data.dtype)])
            owner = jnp.concatenate([owner, new_owner])
        d, o = data, owner

        def batch_fn(step, k, d=d, o=o):
            idx = jax.random.randint(k, (config.batch_size,), 0, d.shape[0])
            return o[idx], d[idx]

        def loss_fn(m, batch, k):
            own, rs = batch
            g = jax.tree_util.tree_map(lambda a: a[own], graphs)
            return jnp.mean(jax.vmap(lambda gi, ri: cycle_loss(m, gi, ri))(g, rs))

        ckpt = None
        if checkpoint_every and checkpoint_dir is not None:
            ckpt = os.path.join(os.fspath(checkpoint_dir), f"stage{stage}")
        cfg = TrainConfig(
            steps=(stage + 1) * config.steps_per_stage, progress=progress,
            log_every=max(1, config.steps_per_stage // 4),
            checkpoint_every=checkpoint_every if ckpt else 0, checkpoint_dir=ckpt,
            desc=f"grans network, bootstrap stage {stage + 1}/{config.stages}",
        )
        state, losses = fit(
            loss_fn,
            model if state is None else state.params,
            optimizer,
            jax.random.fold_in(key, stage),
            cfg,
            batch_fn=batch_fn,
            state=state,
            full_history=ckpt is not None,  # a resumed stage returns its whole history
        )
        history.append(np.asarray(losses))
    return state.params, np.concatenate(history)
