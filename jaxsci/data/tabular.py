"""Tabular data with planted dependence, and missingness masks (MCAR, MAR, MNAR).

**The planted table** (:func:`planted_table`): two latent factors ``z1, z2 ~ N(0, 1)``
and six numeric and two binary columns with known, nonlinear dependence on them::

    c0 = z1                              c4 = exp(z2 / 2) + 0.1 e4     (skewed)
    c1 = sin(2 z1) + 0.3 z2 + 0.1 e1     c5 = 0.8 z1 - 0.6 z2 + 0.3 e5
    c2 = z1 z2 + 0.2 e2                  b6 = 1[z1 + z2 / 2 + 0.3 e6 > 0]
    c3 = z2 + (z1^2 - 1) / 2 + 0.2 e3    b7 = 1[sin(2 z1) + z2 / 2 + 0.3 e7 > 0.3]

with independent standard normal ``e``. :data:`PLANTED_CARDINALITIES` is ``0`` for a
numeric column and the number of categories (2) for a binary one.

**Masks** (:func:`missing_mask`, ``True`` = observed), at an expected share ``rate`` of
missing entries over the whole table:

* ``"mcar"``: every entry is missing with probability ``rate``, independently;
* ``"mar"``: the ``observed_columns`` (default: column 0) are always observed; entry
  ``(i, j)`` of another column is missing with probability
  ``sigmoid(a_j u_i + b_j)``, ``u_i`` the standardised always-observed value(s) of row
  ``i`` (their mean), ``a_j = +-strength`` alternating over columns; ``b_j`` is set by
  bisection so the columns' mean rate is ``rate * c / (c - k)`` (``k`` always-observed
  of ``c`` columns), which makes the table's share ``rate``;
* ``"mnar"``: self-masking: ``sigmoid(strength * x_std_ij + b_j)``, large values of a
  column go missing more often; ``b_j`` by bisection to the rate.

The logistic forms are the standard ones of the missing-data benchmarks (hyperimpute,
MIWAE); ``strength`` is our choice (a config field of the experiment).

>>> import jax
>>> from jaxsci.data import tabular
>>> x = tabular.planted_table(jax.random.key(0), 100)
>>> m = tabular.missing_mask(jax.random.key(1), x, "mcar", 0.3)
>>> x.shape, m.shape, str(m.dtype)
((100, 8), (100, 8), 'bool')
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from jaxsci.core.validation import (
    as_array,
    check_array,
    check_choice,
    check_int,
    check_key,
    check_scalar,
)

__all__ = ["MECHANISMS", "PLANTED_CARDINALITIES", "PLANTED_COLUMNS", "SKLEARN_TABLES",
           "planted_table", "sklearn_table", "missing_mask", "with_nans"]

MECHANISMS = ("mcar", "mar", "mnar")
SKLEARN_TABLES = ("wine", "breast_cancer")
PLANTED_COLUMNS = ("c0", "c1", "c2", "c3", "c4", "c5", "b6", "b7")
PLANTED_CARDINALITIES = (0, 0, 0, 0, 0, 0, 2, 2)


def planted_table(key: jax.Array, n: int) -> Float[Array, "n 8"]:
    """``n`` complete rows of the planted table (module docstring); binary columns are
    0/1 floats. Vmappable over ``key``."""
    key = check_key("key", key)
    n = check_int("n", n, min=1)
    kz, ke = jax.random.split(key)
    z1, z2 = jax.random.normal(kz, (2, n))
    e = jax.random.normal(ke, (8, n))
    cols = [
        z1,
        jnp.sin(2 * z1) + 0.3 * z2 + 0.1 * e[1],
        z1 * z2 + 0.2 * e[2],
        z2 + 0.5 * (z1**2 - 1) + 0.2 * e[3],
        jnp.exp(0.5 * z2) + 0.1 * e[4],
        0.8 * z1 - 0.6 * z2 + 0.3 * e[5],
        (z1 + 0.5 * z2 + 0.3 * e[6] > 0).astype(z1.dtype),
        (jnp.sin(2 * z1) + 0.5 * z2 + 0.3 * e[7] > 0.3).astype(z1.dtype),
    ]
    return jnp.stack(cols, axis=1)


def sklearn_table(name: str) -> tuple[np.ndarray, tuple[int, ...], tuple[str, ...], int]:
    """A real table bundled with scikit-learn (offline), its class label as the last column.

    ``"wine"``: 178 rows, 13 numeric columns and the 3-class cultivar;
    ``"breast_cancer"``: 569 rows, 30 numeric columns and the binary diagnosis.

    Returns:
      ``(x, cardinalities, columns, target)``: the complete table ``(n, c)`` (float64,
      the label as codes ``0..K-1``), per column 0 (numeric) or ``K``, the column names,
      and the label's column index (the downstream target).
    """
    from sklearn import datasets

    check_choice("name", name, SKLEARN_TABLES)
    bunch = getattr(datasets, f"load_{name}")()
    x = np.c_[np.asarray(bunch.data, float), np.asarray(bunch.target, float)]
    k = int(np.max(bunch.target)) + 1
    cards = (0,) * bunch.data.shape[1] + (k,)
    cols = tuple(str(c) for c in bunch.feature_names) + ("target",)
    return x, cards, cols, x.shape[1] - 1


def _bisect_offset(score, target, iters=50):
    """``b`` with ``mean(sigmoid(score + b)) = target`` (monotone in ``b``)."""
    def body(_, lohi):
        lo, hi = lohi
        mid = 0.5 * (lo + hi)
        above = jnp.mean(jax.nn.sigmoid(score + mid)) > target
        return jnp.where(above, lo, mid), jnp.where(above, mid, hi)

    lo, hi = jax.lax.fori_loop(0, iters, body, (jnp.asarray(-30.0, score.dtype),
                                                 jnp.asarray(30.0, score.dtype)))
    return 0.5 * (lo + hi)


def _standardise(x):
    return (x - x.mean(0)) / (x.std(0) + 1e-8)


def missing_mask(key: jax.Array, x: Float[ArrayLike, "n c"], mechanism: str,
                 rate: float | Float[ArrayLike, ""], *, strength: float = 2.0,
                 observed_columns: tuple[int, ...] = (0,)) -> Bool[Array, "n c"]:
    """A missingness mask (``True`` = observed) with expected missing share ``rate``.

    Args:
      key: PRNG key.
      x: the complete table ``(n, c)`` (MAR and MNAR read its values).
      mechanism: ``"mcar"``, ``"mar"`` or ``"mnar"`` (module docstring).
      rate: expected share of missing entries over the whole table, in ``[0, 1)``
        (traced: vmappable; ``error_if`` inside jit); for MAR ``rate * c / (c - k)``
        must stay below 1.
      strength: logistic slope of MAR and MNAR.
      observed_columns: MAR's always-observed columns.

    Returns:
      bool mask ``(n, c)``.
    """
    key = check_key("key", key)
    x = as_array("x", x)
    check_array("x", x, ndim=2)
    check_choice("mechanism", mechanism, MECHANISMS)
    check_scalar("rate", rate, ge=0.0, lt=1.0)
    check_scalar("strength", strength)
    n, c = x.shape
    obs = ()
    if mechanism == "mar":
        obs = tuple(sorted({check_int("observed_columns[i]", j, min=0, max=c - 1)
                            for j in observed_columns}))
        if not obs or len(obs) == c:
            raise ValueError(f"observed_columns must name between 1 and {c - 1} of the {c} "
                             f"columns, got {observed_columns}")
        if (not isinstance(rate, jax.core.Tracer)
                and float(rate) * c / (c - len(obs)) >= 1):
            raise ValueError(f"rate {float(rate)} is too high for MAR with {len(obs)} "
                             f"always-observed of {c} columns (rate * c / (c - k) must be "
                             "< 1)")
    rate = jnp.asarray(rate, x.dtype)
    if isinstance(rate, jax.core.Tracer):
        rate = eqx.error_if(rate, (rate < 0) | (rate >= 1), "rate must lie in [0, 1)")
    return _missing_mask(key, x, mechanism, rate, jnp.asarray(strength, x.dtype), obs)


@functools.partial(jax.jit, static_argnames=("mechanism", "obs"))
def _missing_mask(key, x, mechanism, rate, strength, obs):
    # Module-level jit: the bisection's loop body is built once, not at every call.
    n, c = x.shape
    u = jax.random.uniform(key, (n, c), x.dtype)
    if mechanism == "mcar":
        return u >= rate
    if mechanism == "mnar":
        score = strength * _standardise(x)
        b = jax.vmap(_bisect_offset, in_axes=(1, None))(score, rate)
        return u >= jax.nn.sigmoid(score + b)
    per_col = rate * c / (c - len(obs))
    drive = _standardise(x[:, list(obs)]).mean(1)
    sign = jnp.asarray(np.where(np.arange(c) % 2 == 0, 1.0, -1.0), x.dtype)
    score = strength * sign[None, :] * drive[:, None]
    b = jax.vmap(_bisect_offset, in_axes=(1, None))(score, per_col)
    miss = u < jax.nn.sigmoid(score + b)
    keep = jnp.zeros(c, bool).at[jnp.asarray(obs)].set(True)
    return ~miss | keep[None, :]


def with_nans(x: Float[ArrayLike, "n c"], mask: Bool[ArrayLike, "n c"]) -> Float[Array, "n c"]:
    """``x`` with NaN where ``mask`` is False (the form the AugMask API takes)."""
    x = as_array("x", x)
    mask = jnp.asarray(mask)
    check_array("mask", mask, shape=tuple(x.shape), dtype="bool")
    return jnp.where(mask, x, jnp.nan)
