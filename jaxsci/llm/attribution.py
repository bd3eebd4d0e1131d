"""Accountability attribution of training stages: what each stage did to the model.

The paper (ICML 2026, "accountability attribution of training stages") asks, for a
model trained in stages (pretraining, fine-tuning rounds, alignment), how its
behaviour would differ had stage ``s``'s updates not happened, estimated without
retraining and accounting for the data, the learning-rate schedule, momentum and
weight decay.

The training run is a replay of ``T`` optimiser steps (one batch each, in a fixed
order) with a weight ``w_t`` per step (:func:`replay`):

* ``g_t = grad_theta mean_i loss(theta_t, x_{t,i})``;
* ``u_t, S'_t = opt.update(g_t, S_t, theta_t)`` for any optax ``GradientTransformation``;
* ``theta_{t+1} = theta_t + w_t u_t`` and ``S_{t+1} = S_t + w_t (S'_t - S_t)`` on the
  optimiser state's floating leaves; its integer leaves (the step count that drives a
  schedule) always advance, so the later stages keep their learning rates in time.

``w = 1`` is the real run; ``w_t = 0`` on stage ``s``'s steps is the **counterfactual
run without stage s** (its steps happen, but change neither the parameters nor the
momentum / moment estimates). The stage effect is ``delta_s = theta_T(without s) -
theta_T`` (:func:`retrain_effects`, the ground truth, one replay per stage, vmapped).

Estimators without retraining (all stages in one vmapped program):

* **naive** subtraction (:func:`stage_effects` with ``mode="naive"``): ``delta_s ~
  -(theta_{b_s} - theta_{a_s})``, the stage's own displacement (``[a_s, b_s)`` its
  steps), ignoring everything after it;
* **optimiser-aware** (``mode="optimizer"``): the removal ``(theta_{a_s} - theta_{b_s},
  S_{a_s} - S_{b_s})`` at the end of stage ``s`` propagated through the later steps'
  optimiser dynamics linearised in parameters and state, with the gradient held fixed
  (``d g_t / d theta = 0``: momentum, decay, schedule, Adam's preconditioner, no
  curvature). Exact when the gradients do not depend on the parameters and the update
  is linear in the state (a linear loss with SGD, momentum and weight decay; tested);
* **tangent** (``mode="tangent"``): the same removal pushed through ``jax.jvp`` of the
  replay of the later steps (the tangent of the training map), which adds the
  curvature term ``H_t`` to the gradient's response; the exact first-order estimate
  (it matches finite-difference retraining on a quadratic; tested);
* **TracIn-style per-example decomposition** (:func:`tracin_scores`): the change of a
  behaviour ``f`` caused by example ``i`` of step ``t``, ``c_{t,i} = w_t grad f(theta_t)^T
  (d u_t / d g) grad loss(theta_t, x_{t,i}) / B``, with the optimiser's update
  linearised in the gradient (``-eta_t I`` for SGD; Adam's preconditioner otherwise).
  Summed over a stage's steps it is the stage's (first-order, no-carry-over) effect on
  ``f``; removing the stage changes ``f`` by ``-sum_{t in s} sum_i c_{t,i}``.

The three estimators of ``delta_s`` return parameter-space displacements; a behaviour
``f`` is then read at ``theta_T + delta_s`` (what undoing the stage would give) or
linearly, by the caller.

For Adam-type optimisers pass ``eps_root > 0`` (say ``1e-16``): the derivative of
``sqrt(nu)`` is infinite where a coordinate's squared gradient underflows to zero, and the
linearised update (optimizer, tangent, TracIn) would be NaN there.

Departures from the paper: the counterfactual keeps the schedule in time (the paper's
text leaves open whether the later stages would start their schedule earlier); the
per-step batches are given (a fixed data order), so the data randomness is not part of
the estimate.

>>> import jax, jax.numpy as jnp, optax
>>> from jaxsci.llm import attribution as A
>>> loss = lambda p, x: 0.5 * jnp.sum((p - x) ** 2)
>>> batches = jnp.arange(6.0).reshape(6, 1, 1)  # 6 steps, 1 example of 1 feature
>>> stages = jnp.asarray([0, 0, 1, 1, 2, 2])
>>> opt = optax.sgd(0.3, momentum=0.5)
>>> est = A.stage_effects(loss, opt, jnp.zeros(1), batches, stages, 3, mode="tangent")
>>> est.shape
(3, 1)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int, PyTree

from jaxsci.core.validation import check_array, check_choice, check_int

__all__ = ["MODES", "Replay", "ravel_effects", "replay", "retrain_effects", "stage_effects",
           "stage_masks", "tracin_scores"]

MODES = ("naive", "optimizer", "tangent")

Loss = Callable[[PyTree, PyTree], Array]  # loss(params, one example) -> scalar


class Replay(NamedTuple):
    """The output of :func:`replay`."""

    params: PyTree  # theta_T
    opt_state: PyTree  # S_T
    losses: Float[Array, " T"]  # the batch loss at each step (before its update)


def _leading(name: str, batches: PyTree) -> int:
    leaves = jax.tree_util.tree_leaves(batches)
    if not leaves:
        raise ValueError(f"{name} must hold at least one array, got an empty pytree")
    t = {jnp.shape(x)[0] if jnp.ndim(x) >= 2 else None for x in leaves}
    if None in t or len(t) != 1:
        raise ValueError(f"{name} must be a pytree of arrays of shape (steps, batch, ...) "
                         f"with one common number of steps, got shapes "
                         f"{[tuple(jnp.shape(x)) for x in leaves]}")
    return t.pop()


def _check_params(params):
    leaves = jax.tree_util.tree_leaves(params)
    if not leaves or not all(jnp.issubdtype(jnp.result_type(x), jnp.inexact)
                             for x in leaves):
        raise TypeError("params must be a non-empty pytree of floating arrays, got "
                        f"{jax.tree_util.tree_map(lambda x: getattr(x, 'dtype', type(x)), params)}")


def _check_optimizer(opt):
    if not isinstance(opt, optax.GradientTransformation):
        raise TypeError("optimizer must be an optax.GradientTransformation, got "
                        f"{type(opt).__name__}")


def _check_stages(stages, steps: int, n_stages: int) -> Array:
    check_array("stages", stages, shape=(steps,), dtype="integer")
    if not isinstance(stages, jax.core.Tracer):
        # NumPy: inside a transformation, jnp on constants would give tracers.
        s = np.asarray(stages)
        bad = (s < 0) | (s >= n_stages)
        if bad.any():
            raise ValueError(f"stages must lie in [0, n_stages={n_stages}), got values "
                             f"{sorted(set(s[bad].tolist()))}")
        if (np.diff(s) < 0).any():
            raise ValueError("stages must be non-decreasing (each stage one contiguous run "
                             f"of steps), got {s.tolist()}")
    return jnp.asarray(stages)


def _batch_loss(loss: Loss, params, batch):
    per = jax.vmap(loss, in_axes=(None, 0))(params, batch)
    return jnp.mean(per)


def _mix(new, old, w):
    """Float leaves: ``old + w (new - old)``; integer leaves (counts): ``new``."""
    def one(n, o):
        if eqx.is_inexact_array(n):
            return o + w.astype(n.dtype) * (n - o)
        return n
    return jax.tree_util.tree_map(one, new, old)


def _step(loss, opt, params, state, batch, w, grad=None):
    """One weighted optimiser step; ``grad`` given: that gradient, held fixed."""
    if grad is None:
        value, g = jax.value_and_grad(_batch_loss, argnums=1)(loss, params, batch)
    else:
        value, g = jnp.zeros(()), grad
    u, new_state = opt.update(g, state, params)
    params = jax.tree_util.tree_map(lambda p, d: p + w.astype(p.dtype) * d, params, u)
    return params, _mix(new_state, state, w), value


def stage_masks(stages: Int[Array, " T"], n_stages: int) -> Float[Array, "S T"]:
    """Per-step weights of the counterfactual runs: row ``s`` is 0 on stage ``s``, else 1.

    Args:
      stages: ``(T,)`` the stage of each step (non-decreasing integers).
      n_stages: the number of stages ``S`` (static).

    Returns:
      ``(S, T)`` float weights for :func:`replay` (vmap over rows).
    """
    n_stages = check_int("n_stages", n_stages, min=1)
    stages = jnp.asarray(stages)
    return (stages[None, :] != jnp.arange(n_stages)[:, None]).astype(jnp.result_type(float))


@eqx.filter_jit
def _replay(loss, opt, params, batches, weights, state=None):
    def body(carry, xs):
        p, s = carry
        batch, w = xs
        p, s, v = _step(loss, opt, p, s, batch, w)
        return (p, s), v

    state = opt.init(params) if state is None else state
    (p, s), values = jax.lax.scan(body, (params, state), (batches, weights))
    return Replay(p, s, values)


def replay(loss: Loss, optimizer: optax.GradientTransformation, params: PyTree,
           batches: PyTree, weights: Float[Array, " T"] | None = None,
           opt_state: PyTree | None = None) -> Replay:
    """Train from ``params`` over the given batches, step ``t``'s update scaled by ``w_t``.

    Args:
      loss: ``loss(params, example) -> scalar``; the batch loss is the mean over the
        batch's leading axis.
      optimizer: any optax ``GradientTransformation`` (schedules, momentum, decay).
      params: the initial parameters (a pytree of floating arrays).
      batches: a pytree whose leaves have shape ``(T, B, ...)``: the examples of each step.
      weights: ``(T,)`` per-step weights (traced; vmappable; ``None``: all 1). ``w_t = 0``
        skips step ``t`` (module docstring: the schedule's count still advances).
      opt_state: the optimiser state to start from (``None``: ``optimizer.init(params)``);
        a :class:`Replay`'s ``opt_state`` resumes a run exactly.

    Returns:
      :class:`Replay` with ``theta_T``, ``S_T`` and the per-step batch losses.
    """
    _check_optimizer(optimizer)
    _check_params(params)
    steps = _leading("batches", batches)
    if weights is None:
        weights = jnp.ones((steps,))
    check_array("weights", weights, shape=(steps,), dtype="floating")
    return _replay(loss, optimizer, params, batches, jnp.asarray(weights), opt_state)


@eqx.filter_jit
def _retrain(loss, opt, params, batches, masks):
    # The real run is one more row of the same vmap (one scan in the program).
    rows = jnp.concatenate([masks, jnp.ones((1, masks.shape[1]), masks.dtype)])
    run = jax.vmap(lambda w: _replay(loss, opt, params, batches, w).params)(rows)
    return jax.tree_util.tree_map(lambda a: a[:-1] - a[-1:], run)


def retrain_effects(loss: Loss, optimizer: optax.GradientTransformation, params: PyTree,
                    batches: PyTree, stages: Int[Array, " T"], n_stages: int) -> PyTree:
    """The ground truth: ``theta_T(without stage s) - theta_T`` for every stage, by retraining.

    Args:
      loss, optimizer, params, batches: as in :func:`replay`.
      stages: ``(T,)`` the stage of each step (non-decreasing integers in ``[0, S)``).
      n_stages: ``S`` (static).

    Returns:
      the parameters' pytree with a leading ``(S,)`` axis: each stage's effect.
    """
    _check_optimizer(optimizer)
    _check_params(params)
    steps = _leading("batches", batches)
    n_stages = check_int("n_stages", n_stages, min=1)
    stages = _check_stages(stages, steps, n_stages)
    return _retrain(loss, optimizer, params, batches, stage_masks(stages, n_stages))


def _split(state):
    return eqx.partition(state, eqx.is_inexact_array)


@eqx.filter_jit
def _effects(loss, opt, params, batches, stages, n_stages, mode):
    steps = stages.shape[0]
    one_w = jnp.ones((), dtype=jnp.result_type(float))
    first = jnp.concatenate([jnp.ones((1,), bool), stages[1:] != stages[:-1]])
    # First and last step of each stage (a stage with no steps gets a zero effect).
    idx = jnp.arange(steps)
    present = jnp.arange(n_stages)[:, None] == stages[None, :]
    last = jnp.max(jnp.where(present, idx, -1), axis=1)

    def one(s_last):
        def body(carry, xs):
            p, st, snap_p, snap_s, tp, ts = carry
            t, batch, start = xs
            snap_p = jax.tree_util.tree_map(lambda a, b: jnp.where(start, a, b), p, snap_p)
            fs, _ = _split(st)
            snap_s = jax.tree_util.tree_map(lambda a, b: jnp.where(start, a, b), fs, snap_s)
            if mode == "naive":
                p2, st2, _ = _step(loss, opt, p, st, batch, one_w)
                tp2, ts2 = tp, ts
            else:
                fs, rest = _split(st)
                # "optimizer": the gradient is computed outside the linearisation, so its
                # response to the removal (the curvature) is dropped, while it still
                # depends on params for reverse-mode derivatives of the estimate.
                g = (None if mode == "tangent" else
                     jax.grad(_batch_loss, argnums=1)(loss, p, batch))

                def f(pp, ff):
                    out_p, out_s, _ = _step(loss, opt, pp, eqx.combine(ff, rest), batch,
                                            one_w, grad=g)
                    out_f, out_rest = _split(out_s)
                    return (out_p, out_f), out_rest

                (p2, fs2), (tp2, ts2), rest2 = jax.jvp(f, (p, fs), (tp, ts), has_aux=True)
                st2 = eqx.combine(fs2, rest2)
            # At the end of stage s, inject the removal (start - end) as the tangent.
            inject = t == s_last
            fs2, _ = _split(st2)
            tp2 = jax.tree_util.tree_map(lambda a, b, c: jnp.where(inject, a - b, c),
                                         snap_p, p2, tp2)
            ts2 = jax.tree_util.tree_map(lambda a, b, c: jnp.where(inject, a - b, c),
                                         snap_s, fs2, ts2)
            return (p2, st2, snap_p, snap_s, tp2, ts2), None

        st0 = opt.init(params)
        fs0, _ = _split(st0)
        zp = jax.tree_util.tree_map(jnp.zeros_like, params)
        zs = jax.tree_util.tree_map(jnp.zeros_like, fs0)
        carry = (params, st0, params, fs0, zp, zs)
        carry, _ = jax.lax.scan(body, carry, (idx, batches, first))
        tp = carry[4]
        return jax.tree_util.tree_map(lambda x: jnp.where(s_last >= 0, x, 0.0), tp)

    return jax.vmap(one)(last)


def stage_effects(loss: Loss, optimizer: optax.GradientTransformation, params: PyTree,
                  batches: PyTree, stages: Int[Array, " T"], n_stages: int, *,
                  mode: Literal["naive", "optimizer", "tangent"] = "tangent") -> PyTree:
    """Estimate every stage's effect ``delta_s`` on the final parameters without retraining.

    Args:
      loss, optimizer, params, batches: as in :func:`replay`.
      stages: ``(T,)`` the stage of each step (non-decreasing integers in ``[0, S)``).
      n_stages: ``S`` (static).
      mode: ``"naive"`` (minus the stage's displacement), ``"optimizer"`` (propagated
        through the later optimiser dynamics, no curvature) or ``"tangent"`` (``jax.jvp``
        through the replay of the later steps); module docstring.

    Returns:
      the parameters' pytree with a leading ``(S,)`` axis, to compare with
      :func:`retrain_effects`. Differentiable in ``params`` and the batches (forward or
      reverse mode through the scan).
    """
    _check_optimizer(optimizer)
    _check_params(params)
    check_choice("mode", mode, MODES)
    steps = _leading("batches", batches)
    n_stages = check_int("n_stages", n_stages, min=1)
    stages = _check_stages(stages, steps, n_stages)
    return _effects(loss, optimizer, params, batches, stages, n_stages, mode)


@eqx.filter_jit
def _tracin(loss, behaviour, opt, params, batches, weights):
    def body(carry, xs):
        p, st = carry
        batch, w = xs
        g = jax.grad(_batch_loss, argnums=1)(loss, p, batch)
        gf = jax.grad(behaviour)(p)
        # v = (d u / d g)^T grad f: one vjp of the update in the gradient.
        _, vjp = jax.vjp(lambda gg: opt.update(gg, st, p)[0], g)
        (v,) = vjp(gf)
        per = lambda pp: jax.vmap(loss, in_axes=(None, 0))(pp, batch)  # noqa: E731
        _, c = jax.jvp(per, (p,), (v,))
        n = c.shape[0]
        p2, st2, _ = _step(loss, opt, p, st, batch, w)
        return (p2, st2), w * c / n

    _, scores = jax.lax.scan(body, (params, opt.init(params)), (batches, weights))
    return scores


def tracin_scores(loss: Loss, behaviour: Callable[[PyTree], Array],
                  optimizer: optax.GradientTransformation, params: PyTree, batches: PyTree,
                  weights: Float[Array, " T"] | None = None) -> Float[Array, "T B"]:
    """Per-example contributions ``c_{t,i}`` of the training run to the behaviour ``f``.

    Args:
      loss, optimizer, params, batches, weights: as in :func:`replay`.
      behaviour: ``f(params) -> scalar``, the behaviour to account for (say, the
        mean log-probability of the spurious class on patched images).

    Returns:
      ``(T, B)``: ``w_t grad f(theta_t)^T (d u_t/d g) grad loss(theta_t, x_{t,i}) / B``
      (module docstring); a stage's removal changes ``f`` by about minus the sum of its
      rows (``jax.ops.segment_sum`` over the stage ids).
    """
    _check_optimizer(optimizer)
    _check_params(params)
    if not callable(behaviour):
        raise TypeError(f"behaviour must be callable f(params) -> scalar, got "
                        f"{type(behaviour).__name__}")
    steps = _leading("batches", batches)
    if weights is None:
        weights = jnp.ones((steps,))
    check_array("weights", weights, shape=(steps,), dtype="floating")
    return _tracin(loss, behaviour, optimizer, params, batches, jnp.asarray(weights))


def ravel_effects(tree: PyTree) -> Array:
    """Leaves of a pytree with a leading ``(S,)`` axis, raveled to ``(S, P)``."""
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.concatenate([x.reshape(x.shape[0], -1) for x in leaves], axis=1)

