r"""Reliability metrics of agent runs: pass@k, pass^k, rerun consistency, flakiness,
regression diffs, bootstrap intervals, and the ``assert_gap`` / ``assert_monotone``
checks that experiment claims use.

Runs are a boolean ``successes`` array of shape ``(tasks, n)``: task ``i`` rerun ``n``
times (same prompt, sampled decoding), ``c_i`` of them successful. Per task:

* **pass@k** (Chen et al. 2021, the unbiased estimator): the probability that at least one
  of ``k`` reruns drawn without replacement from the ``n`` succeeds,
  ``1 - C(n - c, k) / C(n, k)``;
* **pass^k** (tau-bench, Yao et al. 2024): the probability that all ``k`` drawn reruns
  succeed, ``C(c, k) / C(n, k)``. ``pass^1 == pass@1 == c / n``; pass^k falls with ``k``
  for any task that is not always or never solved, so ``pass@1 - pass^k`` is the
  reliability gap;
* **rerun consistency**: the probability that two distinct reruns give the same outcome
  (any hashable outcome: a success flag or the final answer);
* **flakiness**: ``1 -`` consistency of the success flags, ``2 c (n - c) / (n (n - 1))``:
  0 for a task always or never solved.

Means over tasks come with :func:`bootstrap_ci` (resampling tasks, the unit of the
experiment). :func:`regression_diff` compares two prompt versions task by task.

>>> import numpy as np
>>> s = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], bool)
>>> pass_at_k(s, 2).round(3).tolist(), pass_hat_k(s, 2).round(3).tolist()
([1.0, 0.5], [0.5, 0.0])
>>> flakiness(s).round(3).tolist()
[0.5, 0.5]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "pass_at_k",
    "pass_hat_k",
    "rerun_consistency",
    "flakiness",
    "bootstrap_ci",
    "RegressionDiff",
    "regression_diff",
    "assert_gap",
    "assert_monotone",
    "is_monotone",
]


def _successes(successes, name: str = "successes") -> np.ndarray:
    a = np.asarray(successes)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ValueError(f"{name} must have shape (tasks, n) (a success flag per task and "
                         f"rerun), got shape {a.shape}")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one task and one rerun, got shape "
                         f"{a.shape}")
    if a.dtype != bool:
        if not np.isin(a, (0, 1)).all():
            raise ValueError(f"{name} must be booleans (or 0/1), got values "
                             f"{np.unique(a)[:6].tolist()}")
        a = a.astype(bool)
    return a


def _check_k(k, n: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= n:
        raise ValueError(f"k must be an int in [1, n={n}] (n: reruns per task), got {k!r}")
    return int(k)


def _ratio(top: np.ndarray, n: int, k: int) -> np.ndarray:
    # C(top, k) / C(n, k) as prod_{j<k} (top - j) / (n - j): exact in float, no overflow.
    out = np.ones(top.shape, np.float64)
    for j in range(k):
        out *= np.clip(top - j, 0, None) / (n - j)
    return out


def pass_at_k(successes, k: int) -> np.ndarray:
    """Per task, the probability that at least one of ``k`` reruns succeeds.

    Args:
      successes: booleans of shape ``(tasks, n)`` (or ``(n,)`` for one task).
      k: reruns drawn, ``1 <= k <= n``.

    Returns:
      float64 array ``(tasks,)``: ``1 - C(n - c, k) / C(n, k)``.
    """
    s = _successes(successes)
    n = s.shape[1]
    k = _check_k(k, n)
    c = s.sum(1)
    return 1.0 - _ratio(n - c, n, k)


def pass_hat_k(successes, k: int) -> np.ndarray:
    """Per task, the probability that all ``k`` reruns succeed (tau-bench's pass^k).

    Args:
      successes: booleans of shape ``(tasks, n)`` (or ``(n,)``).
      k: reruns drawn, ``1 <= k <= n``.

    Returns:
      float64 array ``(tasks,)``: ``C(c, k) / C(n, k)``.
    """
    s = _successes(successes)
    n = s.shape[1]
    k = _check_k(k, n)
    return _ratio(s.sum(1), n, k)


def rerun_consistency(outcomes) -> np.ndarray:
    """Per task, the probability that two distinct reruns have equal outcomes.

    Args:
      outcomes: shape ``(tasks, n)``, ``n >= 2``, of hashable outcomes (success flags,
        final answers as strings, ...).

    Returns:
      float64 array ``(tasks,)``: ``sum_v m_v (m_v - 1) / (n (n - 1))`` over the distinct
      outcomes ``v`` with counts ``m_v``.
    """
    a = np.asarray(outcomes, dtype=object)
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] < 2:
        raise ValueError(f"outcomes must have shape (tasks, n) with n >= 2 reruns, got "
                         f"shape {a.shape}")
    n = a.shape[1]
    out = np.empty(a.shape[0])
    for i, row in enumerate(a):
        counts: dict[Any, int] = {}
        for v in row:
            counts[v] = counts.get(v, 0) + 1
        out[i] = sum(m * (m - 1) for m in counts.values()) / (n * (n - 1))
    return out


def flakiness(successes) -> np.ndarray:
    """Per task, the probability that two distinct reruns disagree on success.

    Returns:
      float64 array ``(tasks,)``: ``2 c (n - c) / (n (n - 1))``; needs ``n >= 2``.
    """
    s = _successes(successes)
    n = s.shape[1]
    if n < 2:
        raise ValueError(f"flakiness needs n >= 2 reruns per task, got n={n}")
    c = s.sum(1).astype(np.float64)
    return 2.0 * c * (n - c) / (n * (n - 1))


def bootstrap_ci(values, stat: Callable[[np.ndarray], Any] = np.mean, *,
                 n_boot: int = 1000, level: float = 0.95, seed: int = 0
                 ) -> tuple[float, float]:
    """A percentile bootstrap interval of ``stat`` over the rows (tasks) of ``values``.

    Args:
      values: an array whose first axis is the resampled unit (tasks).
      stat: maps a resampled array (same trailing shape) to a number.
      n_boot: resamples; level: the interval's coverage in (0, 1); seed: of the resampling.

    Returns:
      ``(low, high)``.
    """
    v = np.asarray(values)
    if v.ndim == 0 or v.shape[0] == 0:
        raise ValueError(f"values must have at least one row (task), got shape {v.shape}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, v.shape[0], size=(n_boot, v.shape[0]))
    stats = np.array([float(stat(v[i])) for i in idx])
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


class RegressionDiff(NamedTuple):
    """Task-by-task comparison of two versions (:func:`regression_diff`).

    Attributes:
      before, after: mean success rate of each version over the tasks.
      delta: ``after - before``.
      ci: a paired bootstrap interval of ``delta`` (tasks resampled together).
      improved, regressed: indices of the tasks whose success rate rose / fell by more
        than ``tol``.
      unchanged: how many tasks moved by at most ``tol``.
    """

    before: float
    after: float
    delta: float
    ci: tuple[float, float]
    improved: tuple[int, ...]
    regressed: tuple[int, ...]
    unchanged: int


def regression_diff(before, after, *, tol: float = 0.0, n_boot: int = 1000,
                    seed: int = 0) -> RegressionDiff:
    """Compare two prompt (or model) versions run on the same tasks.

    Args:
      before, after: successes of shape ``(tasks, n_before)`` and ``(tasks, n_after)``,
        the same tasks in the same order (rerun counts may differ).
      tol: a change in a task's success rate of at most ``tol`` counts as unchanged.
      n_boot, seed: of the paired bootstrap of the mean difference.

    Returns:
      :class:`RegressionDiff`.
    """
    b = _successes(before, "before").mean(1)
    a = _successes(after, "after").mean(1)
    if a.shape != b.shape:
        raise ValueError(f"before and after must hold the same tasks, got {b.shape[0]} and "
                         f"{a.shape[0]} tasks")
    d = a - b
    return RegressionDiff(float(b.mean()), float(a.mean()), float(d.mean()),
                          bootstrap_ci(d, n_boot=n_boot, seed=seed),
                          tuple(int(i) for i in np.flatnonzero(d > tol)),
                          tuple(int(i) for i in np.flatnonzero(d < -tol)),
                          int(np.sum(np.abs(d) <= tol)))


def assert_gap(high, low, *, min_gap: float = 0.0, names: Sequence[str] = ("high", "low")
               ) -> float:
    """Check ``high - low > min_gap`` (scalars, or means of arrays); return the gap.

    Raises:
      AssertionError: naming both values and the gap when it does not hold.
    """
    h, lo = float(np.mean(high)), float(np.mean(low))
    if not (math.isfinite(h) and math.isfinite(lo)):
        raise AssertionError(f"assert_gap: {names[0]}={h} and {names[1]}={lo} must be finite")
    gap = h - lo
    if not gap > min_gap:
        raise AssertionError(f"assert_gap: expected {names[0]} - {names[1]} > {min_gap}, got "
                             f"{names[0]}={h:.4g}, {names[1]}={lo:.4g}, gap={gap:.4g}")
    return gap


def is_monotone(values, *, decreasing: bool = False, strict: bool = False,
                tol: float = 0.0) -> bool:
    """Whether ``values`` (1-D) never rise (``decreasing``) or never fall, up to ``tol``."""
    v = np.asarray(values, np.float64).ravel()
    d = np.diff(v) * (-1.0 if decreasing else 1.0)
    return bool(np.all(d > tol) if strict else np.all(d >= -tol))


def assert_monotone(values, *, decreasing: bool = False, strict: bool = False,
                    tol: float = 0.0, name: str = "values") -> None:
    """Check that ``values`` are monotone (:func:`is_monotone`).

    Raises:
      AssertionError: naming the first offending pair.
    """
    v = np.asarray(values, np.float64).ravel()
    if v.size < 2:
        raise AssertionError(f"assert_monotone: {name} needs at least 2 values, got {v.size}")
    if is_monotone(v, decreasing=decreasing, strict=strict, tol=tol):
        return
    d = np.diff(v) * (-1.0 if decreasing else 1.0)
    i = int(np.flatnonzero(d <= tol if strict else d < -tol)[0])
    way = "decreasing" if decreasing else "increasing"
    raise AssertionError(f"assert_monotone: expected {name} {'strictly ' if strict else ''}"
                         f"{way} (tol={tol}), got {name}[{i}]={v[i]:.4g}, "
                         f"{name}[{i + 1}]={v[i + 1]:.4g} in {np.round(v, 4).tolist()}")
