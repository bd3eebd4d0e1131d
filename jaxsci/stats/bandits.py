r"""Satisficing bandits: satisficing regret, uncertain-UCB and its baselines.

Paper: the ICML 2026 paper introducing uncertain-UCB (only its abstract was
available). A learner pulls one of ``K`` arms per round; arm
``i`` pays a reward with mean ``mu_i``. With a known threshold ``S`` the aim is to
play *some* arm with ``mu_i >= S``, not the best one. With ``mu* = max_i mu_i``:

* excess gap ``Delta_* = mu* - S`` (realisable when ``> 0``), gaps ``Delta_i = mu* - mu_i``;
* satisficing pseudo-regret ``R_S(T) = sum_t (S - mu_{A_t})^+`` (an arm below ``S`` costs
  ``S - mu_i = Delta_i - Delta_*``; an arm at or above ``S`` costs nothing), and the
  standard pseudo-regret ``R(T) = sum_t (mu* - mu_{A_t})``.

The paper's uncertain-UCB attains ``R_S(T) = O(sum_{i: Delta_i > Delta_*}
log(K / Delta_*) / Delta_i)`` for every ``T`` (time-independent), recovers the
standard ``O(sum_i log T / Delta_i)`` when no arm reaches ``S``, and a lower bound
``Omega(sum_{i: Delta_i > Delta_*} log(Delta / ((K - 1) Delta_*)) / Delta_i)`` holds in
the small excess-gap regime.

The uncertain-UCB rule (designed here: the paper's rule was not available)
---------------------------------------------------------------------------
Confidence intervals ``[L_i, U_i] = m_i -/+ w sqrt(log t / n_i)`` (``m_i`` the empirical
mean after ``n_i`` pulls, ``t`` the rounds so far, ``w = sqrt 2`` the UCB1 width for
rewards in ``[0, 1]``). An arm is *certified* when ``L_i >= S``, *uncertain* when
``L_i < S <= U_i`` (its interval still contains ``S``), *rejected* when ``U_i < S``.

0. Pull every arm once.
1. If an arm is certified, play the certified arm with the largest ``L_i`` (commit).
2. Else, if an arm is uncertain, play the uncertain arm with the largest empirical mean
   (optimism decides which arms are *plausible*; among them the one closest to being
   certified is played, with no exploration bonus).
3. Else (every upper bound is below ``S``: the instance looks non-realisable) play UCB1,
   ``argmax_i U_i``.

Why it attains the bound (a sketch; the constants are ours). Hoeffding with
``w^2 = 2``: an interval fails with probability ``<= 2 t^{-4}`` per ``(t, n_i)``, so the
rounds outside the *good event* (all intervals hold) are ``O(1)`` in expectation.

* On the good event the best arm is never rejected (``U_{i*} >= mu* > S``), so step 3
  never runs, and a bad arm (``mu_i < S``, i.e. ``Delta_i > Delta_*``) is played in step 1
  only when falsely certified (a failed interval: ``O(1)`` rounds).
* In step 2 a bad arm needs ``U_i >= S`` (``2 r_i >= Delta_i - Delta_*``) and
  ``m_i >= m_{i*}`` (``r_i + r_{i*} >= Delta_i``), ``r = w sqrt(log t / n)``. If
  ``Delta_i >= 2 Delta_*`` the first gives ``n_i <= 16 w^2 log t / Delta_i^2``; otherwise
  the second gives the same unless the best arm itself has ``n_{i*} <= 4 w^2 log t /
  Delta_i^2``, rounds charged to the best arm's own count. So ``n_i = O(log t /
  Delta_i^2)``: each bad arm costs ``(Delta_i - Delta_*) n_i = O(log t / Delta_i)``.
* Steps 0-2 run only until some arm is certified. Every round before that pulls a bad
  arm (counts above) or an arm at or above ``S``; by the same two conditions with
  ``Delta_*`` in place of ``Delta_i`` such an arm is pulled ``O(log t / Delta_*^2)`` times
  before one is certified. So certification happens by the time ``tau`` solving
  ``tau = a log tau``, ``a = 32 w^2 K / Delta_*^2``: ``log tau = O(log(K / Delta_*))``.
  After ``tau`` the certified arm stays certified except on failed intervals (its ``n``
  grows like ``t``, its radius shrinks): no ``log T`` term is left, and
  ``R_S(T) <= sum_{Delta_i > Delta_*} (Delta_i - Delta_*) (16 w^2 log tau / Delta_i^2 + c)
  = O(sum_{Delta_i > Delta_*} log(K / Delta_*) / Delta_i)`` for every ``T``
  (:func:`uncertain_ucb_bound`).
* Non-realisable (``mu* < S``): step 1 needs a failed interval (``O(1)`` rounds); in step
  2 an arm is played only while ``U_j >= S``, i.e. ``n_j <= 4 w^2 log t / (S - mu_j)^2 <=
  4 w^2 log t / Delta_j^2``; step 3 is UCB1. The standard regret is therefore
  ``O(sum_j log T / Delta_j)``, UCB1's order (:func:`ucb_bound`); the experiment measures
  the two within a few percent of each other.

Baselines: :class:`UCB1`; :class:`SatUCB` ("satisficing UCB", the prior art: exploit the
empirical best arm when its *empirical mean* is at least ``S``, else UCB), whose
guarantee degrades like ``1 / Delta_*`` because an empirical mean near ``S`` is noise; and
:class:`Select` (SELECT-style LCB testing: rounds of UCB exploration, a test of the
empirical best on fresh samples by a Hoeffding lower bound at level ``delta / (k+1)^2``,
exploitation of a candidate that passes for a geometrically growing stretch).

API
---
Arms are values (:class:`BernoulliArms`, :class:`GaussianArms` under
:class:`AbstractArms`); policies are values (final equinox Modules under
:class:`AbstractPolicy`: ``init(n_arms) -> PolicyState``,
``select(state, threshold, key) -> (arm, PolicyInfo)``,
``update(state, arm, reward, threshold) -> PolicyState``), so a new rule drops in
without editing this module. Their parameters are array leaves: ``vmap`` over
``UCB1(width=jnp.array([...]))``, over the arms' means, the threshold and the key
sweeps them in one compiled program. The simulator is ``init``/``step``
(:func:`init`, :func:`step`) with :func:`simulate` a thin driver: one ``lax.scan`` over
checkpoint segments, each a ``fori_loop`` over rounds, recording the regrets (computed
exactly from the pull counts) only at the checkpoints, so ``T = 10^6`` needs no
per-step history. Everything here is discrete in the arms' choices: gradients with
respect to the means or thresholds are zero almost everywhere and not provided.

>>> import jax, jax.numpy as jnp
>>> from jaxsci.stats import bandits
>>> means = bandits.make_means(0.6, 0.05, jnp.array([0.3, 0.4]))  # best arm first
>>> res = bandits.simulate(bandits.UncertainUCB(), bandits.BernoulliArms(means), 0.6,
...                        jax.random.key(0), checkpoints=(1000, 10000))
>>> res.satisficing_regret.shape
(2,)
"""

from __future__ import annotations

import abc
import math
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxsci.core.validation import check_array, check_int, check_key, check_scalar

__all__ = [
    "AbstractArms",
    "BernoulliArms",
    "GaussianArms",
    "AbstractPolicy",
    "AbstractIndexPolicy",
    "UCB1",
    "UncertainUCB",
    "SatUCB",
    "Select",
    "PolicyState",
    "PolicyInfo",
    "SelectAux",
    "StepInfo",
    "SimResult",
    "init_statistics",
    "update_statistics",
    "make_means",
    "excess_gap",
    "satisficing_gaps",
    "init",
    "step",
    "simulate",
    "log_checkpoints",
    "exact_expected_regret",
    "uncertain_ucb_bound",
    "ucb_bound",
    "satisficing_lower_bound",
    "lai_robbins_bound",
]

SQRT2 = math.sqrt(2.0)


def _is_tracer(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def _float(x: Any) -> Array:
    """A floating JAX array (tracers pass through; ints and bools become floats)."""
    if _is_tracer(x):
        return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(float)
    arr = np.asarray(x)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"expected a real number or array, got {type(x).__name__}")
    if np.iscomplexobj(arr):
        raise TypeError(f"expected a real number or array, got dtype {arr.dtype}")
    return jnp.asarray(x, dtype=float) if not np.issubdtype(arr.dtype, np.floating) \
        else jnp.asarray(x)


def _check_range(name: str, value: Any, lo: float | None = None, hi: float | None = None,
                 gt: float | None = None) -> None:
    """Value check of a scalar or array parameter, when it is concrete."""
    if _is_tracer(value):
        return
    arr = np.asarray(value)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {value}")
    if lo is not None and np.any(arr < lo):
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and np.any(arr > hi):
        raise ValueError(f"{name} must be <= {hi}, got {value}")
    if gt is not None and np.any(arr <= gt):
        raise ValueError(f"{name} must be > {gt}, got {value}")


# --------------------------------------------------------------------------- arms


class AbstractArms(eqx.Module):
    """``K`` arms with means ``means``; a new reward model subclasses this."""

    means: eqx.AbstractVar[Float[Array, " k"]]

    @abc.abstractmethod
    def sample(self, key: jax.Array, arm: Int[Array, ""]) -> Float[Array, ""]:
        """One reward of ``arm``."""

    @abc.abstractmethod
    def checked(self, threshold: Float[Array, ""]) -> tuple[AbstractArms, Float[Array, ""]]:
        """``(arms, threshold)`` with their values checked inside jit (``error_if``)."""


def _check_means(means: Any) -> None:
    # A leading batch axis is allowed (arms to vmap over); simulate checks one instance.
    shape = tuple(np.shape(means))
    if len(shape) < 1 or shape[-1] < 2:
        raise ValueError(f"means must be a 1-D array of at least 2 arms (or a batch of "
                         f"them), got shape {shape}")


class BernoulliArms(AbstractArms):
    """Bernoulli arms: arm ``i`` pays 1 with probability ``means[i]`` in ``[0, 1]``, else 0."""

    means: Float[Array, " k"] = eqx.field(converter=_float)

    def __check_init__(self):
        _check_means(self.means)
        _check_range("means", self.means, lo=0.0, hi=1.0)

    def sample(self, key, arm):
        return (jax.random.uniform(key, dtype=self.means.dtype) < self.means[arm]).astype(
            self.means.dtype)

    def checked(self, threshold):
        bad_mu = jnp.any(~((self.means >= 0) & (self.means <= 1)))
        bad_s = ~((threshold >= 0) & (threshold <= 1))
        # One runtime check (one host callback) for both values.
        means, threshold = eqx.branched_error_if(
            (self.means, threshold), bad_mu | bad_s, bad_s.astype(jnp.int32),
            ("means of Bernoulli arms must be in [0, 1]",
             "threshold S must be in [0, 1] for Bernoulli arms"))
        return BernoulliArms(means), threshold


class GaussianArms(AbstractArms):
    """Gaussian arms: arm ``i`` pays ``N(means[i], sigma^2)``.

    The policies' default width ``sqrt 2`` is calibrated for rewards in ``[0, 1]``
    (sub-Gaussian with variance proxy ``1/4``); for ``sigma``, pass ``width = 2 sigma sqrt 2``.
    """

    means: Float[Array, " k"] = eqx.field(converter=_float)
    sigma: Float[Array, ""] = eqx.field(default=0.5, converter=_float)

    def __check_init__(self):
        _check_means(self.means)
        _check_range("means", self.means)
        _check_range("sigma", self.sigma, gt=0.0)

    def sample(self, key, arm):
        return self.means[arm] + self.sigma * jax.random.normal(key, dtype=self.means.dtype)

    def checked(self, threshold):
        means = eqx.error_if(self.means, ~jnp.all(jnp.isfinite(self.means)),
                             "means must be finite")
        sigma = eqx.error_if(self.sigma, ~(self.sigma > 0), "sigma must be > 0")
        threshold = eqx.error_if(threshold, ~jnp.isfinite(threshold),
                                 "threshold S must be finite")
        return GaussianArms(means, sigma), threshold


def make_means(
    threshold: float | Float[Array, ""], excess_gap: float | Float[Array, ""],
    gaps: Float[ArrayLike, " m"],
) -> Float[Array, " k"]:
    """Means of an instance with the best arm first: ``mu* = S + Delta_*``, then
    ``mu* - gaps``. Traced in every argument (``vmap`` over ``excess_gap`` sweeps
    ``Delta_*`` with the other gaps fixed); ``excess_gap <= 0`` is non-realisable."""
    gaps = _float(gaps)
    check_array("gaps", gaps, ndim=1)
    best = _float(threshold) + _float(excess_gap)
    return jnp.concatenate([best[None], best - gaps])


def excess_gap(means: Float[ArrayLike, " k"], threshold: float | Float[Array, ""]
               ) -> Float[Array, ""]:
    """``Delta_* = max_i mu_i - S`` (positive: a satisficing arm exists)."""
    return jnp.max(_float(means)) - _float(threshold)


def satisficing_gaps(means: Float[ArrayLike, " k"], threshold: float | Float[Array, ""]
                     ) -> Float[Array, " k"]:
    """Per-pull satisficing regret ``(S - mu_i)^+`` of each arm."""
    return jnp.maximum(_float(threshold) - _float(means), 0.0)


# --------------------------------------------------------------------------- policies


class PolicyState(NamedTuple):
    """Sufficient statistics every policy keeps, plus its own ``aux`` pytree."""

    counts: Int[Array, " k"]  # pulls per arm
    sums: Float[Array, " k"]  # reward sums per arm
    t: Int[Array, ""]  # rounds played so far
    aux: Any = ()


class PolicyInfo(NamedTuple):
    """What a policy's ``select`` saw: the indices it compared and whether the arm came
    from a commit/exploit branch (a certified arm, an empirical mean above ``S``, a
    passed test)."""

    index: Float[Array, " k"]
    exploit: Bool[Array, ""]


def init_statistics(n_arms: int, dtype: Any = None) -> PolicyState:
    """Zero counts and sums for ``n_arms`` arms (``aux = ()``)."""
    n_arms = check_int("n_arms", n_arms, min=2)
    dtype = jnp.zeros((), float).dtype if dtype is None else dtype
    return PolicyState(jnp.zeros(n_arms, jnp.int32), jnp.zeros(n_arms, dtype),
                       jnp.zeros((), jnp.int32))


def update_statistics(state: PolicyState, arm: Int[Array, ""], reward: Float[Array, ""]
                      ) -> PolicyState:
    """Add one pull of ``arm`` with ``reward`` to the counts and sums (``aux`` kept)."""
    return PolicyState(state.counts.at[arm].add(1),
                       state.sums.at[arm].add(reward.astype(state.sums.dtype)),
                       state.t + 1, state.aux)


def _intervals(state: PolicyState, width):
    """Empirical means and ``m -/+ w sqrt(log t / n)``; unpulled arms get ``+/-inf``."""
    n = state.counts
    pulled = n > 0
    nf = jnp.maximum(n, 1).astype(state.sums.dtype)
    mean = state.sums / nf
    log_t = jnp.log(jnp.maximum(state.t, 1).astype(state.sums.dtype))
    radius = width * jnp.sqrt(log_t / nf)
    inf = jnp.asarray(jnp.inf, state.sums.dtype)
    return (jnp.where(pulled, mean, -inf), jnp.where(pulled, mean + radius, inf),
            jnp.where(pulled, mean - radius, -inf))


def _width(x):
    return eqx.field(default=x, converter=_float)


class AbstractPolicy(eqx.Module):
    """A bandit policy: ``init`` its state, ``select`` an arm, ``update`` with the reward.

    ``select`` must be a pure function of ``(state, threshold, key)``; deterministic
    policies ignore ``key`` (then :func:`exact_expected_regret` applies to them).
    Concrete policies build on :func:`init_statistics` / :func:`update_statistics`.
    """

    @abc.abstractmethod
    def init(self, n_arms: int) -> PolicyState:
        """The state before the first round."""

    @abc.abstractmethod
    def select(self, state: PolicyState, threshold: Float[Array, ""], key: jax.Array
               ) -> tuple[Int[Array, ""], PolicyInfo]:
        """The arm to pull next and what the choice was based on."""

    @abc.abstractmethod
    def update(self, state: PolicyState, arm: Int[Array, ""], reward: Float[Array, ""],
               threshold: Float[Array, ""]) -> PolicyState:
        """The state after ``arm`` paid ``reward``."""



class AbstractIndexPolicy(AbstractPolicy):
    """A policy whose state is the counts and sums alone and whose choice compares
    confidence intervals of width ``width`` (traced); subclasses define ``select``."""

    width: eqx.AbstractVar[Float[Array, ""]]

    def __check_init__(self):
        _check_range("width", self.width, gt=0.0)

    def init(self, n_arms):
        return init_statistics(n_arms)

    def update(self, state, arm, reward, threshold):
        return update_statistics(state, arm, reward)


class UCB1(AbstractIndexPolicy):
    """UCB1 (Auer et al., 2002): ``argmax_i m_i + w sqrt(log t / n_i)``, ``w = sqrt 2``.

    Ignores the threshold. ``width`` is traced (``vmap`` over an array of widths).
    """

    width: Float[Array, ""] = _width(SQRT2)

    def select(self, state, threshold, key):
        _, ucb, _ = _intervals(state, self.width)
        return jnp.argmax(ucb), PolicyInfo(ucb, jnp.asarray(False))


class UncertainUCB(AbstractIndexPolicy):
    """Uncertain-UCB (the rule of the module docstring): commit to the certified arm
    with the largest lower bound ``m_i - w sqrt(log t / n_i) >= S``; otherwise play the
    uncertain arm (interval containing ``S``) with the largest empirical mean; UCB1 when
    every upper bound is below ``S``. ``width`` is traced."""

    width: Float[Array, ""] = _width(SQRT2)

    def select(self, state, threshold, key):
        mean, ucb, lcb = _intervals(state, self.width)
        certified = lcb >= threshold
        plausible = ucb >= threshold  # certified or uncertain: not rejected
        commit = jnp.any(certified)
        unpulled = state.counts == 0
        arm = jnp.where(
            jnp.any(unpulled), jnp.argmax(unpulled),
            jnp.where(commit, jnp.argmax(jnp.where(certified, lcb, -jnp.inf)),
                      jnp.where(jnp.any(plausible),
                                jnp.argmax(jnp.where(plausible, mean, -jnp.inf)),
                                jnp.argmax(ucb))))
        return arm, PolicyInfo(jnp.where(commit, lcb, ucb), commit & ~jnp.any(unpulled))


class SatUCB(AbstractIndexPolicy):
    """Satisficing UCB (the prior art): after one pull of every arm, play the empirical
    best arm when its empirical mean is at least ``S``, otherwise UCB1. ``width`` is
    traced."""

    width: Float[Array, ""] = _width(SQRT2)

    def select(self, state, threshold, key):
        mean, ucb, _ = _intervals(state, self.width)
        best = jnp.argmax(mean)
        exploit = jnp.all(state.counts > 0) & (mean[best] >= threshold)
        return jnp.where(exploit, best, jnp.argmax(ucb)), PolicyInfo(
            jnp.where(exploit, mean, ucb), exploit)


class SelectAux(NamedTuple):
    """:class:`Select`'s phase machine: ``phase`` 0 explore, 1 test, 2 exploit."""

    phase: Int[Array, ""]
    round: Int[Array, ""]
    remaining: Int[Array, ""]  # rounds left in this phase
    candidate: Int[Array, ""]
    test_count: Int[Array, ""]  # fresh pulls of the candidate in this test
    test_sum: Float[Array, ""]


_EXPLORE, _TEST, _EXPLOIT = 0, 1, 2
_MAX_LEN = 2**30


class Select(AbstractPolicy):
    """SELECT-style LCB testing (after Hajiesmaili et al.'s SELECT; simplified).

    Round ``k = 0, 1, ...``: explore with UCB1 (on all samples so far) for
    ``base * 2^k`` rounds; test the arm with the best empirical mean on
    ``base * 2^k`` fresh pulls; if the Hoeffding lower bound
    ``mean - sqrt(log(1/delta_k) / (2 n))`` with ``delta_k = delta / (k + 1)^2`` is at
    least ``S``, exploit it for ``base * 4^(k + 1)`` rounds; then the next round. The
    fresh test samples make each test exact at its level (Hoeffding for rewards in
    ``[0, 1]``). ``width`` and ``delta`` are traced; ``base`` (rounds) is an int.
    """

    width: Float[Array, ""] = _width(SQRT2)
    delta: Float[Array, ""] = _width(0.05)
    base: int = eqx.field(default=8, static=True)

    def __check_init__(self):
        _check_range("width", self.width, gt=0.0)
        _check_range("delta", self.delta, gt=0.0, hi=1.0)
        check_int("base", self.base, min=1)

    def init(self, n_arms):
        s = init_statistics(n_arms)
        aux = SelectAux(jnp.asarray(_EXPLORE), jnp.asarray(0),
                        jnp.asarray(max(self.base, n_arms)), jnp.asarray(0),
                        jnp.asarray(0), jnp.zeros((), s.sums.dtype))
        return s._replace(aux=aux)

    def select(self, state, threshold, key):
        _, ucb, _ = _intervals(state, self.width)
        aux = state.aux
        explore = aux.phase == _EXPLORE
        arm = jnp.where(explore, jnp.argmax(ucb), aux.candidate)
        return arm, PolicyInfo(ucb, aux.phase == _EXPLOIT)

    def update(self, state, arm, reward, threshold):
        new = update_statistics(state, arm, reward)
        a = state.aux
        in_test = a.phase == _TEST
        count = a.test_count + in_test.astype(a.test_count.dtype)
        total = a.test_sum + jnp.where(in_test, reward, 0.0).astype(a.test_sum.dtype)
        left = a.remaining - 1
        done = left <= 0
        mean, _, _ = _intervals(new, self.width)
        k = a.round
        scale = jnp.minimum(2 ** jnp.minimum(k, 29), _MAX_LEN // self.base)
        # Hoeffding at level delta_k on the fresh test pulls.
        log_inv = jnp.log((k + 1.0) ** 2 / self.delta)
        lcb = total / jnp.maximum(count, 1) - jnp.sqrt(log_inv / (2.0 * jnp.maximum(count, 1)))
        passed = lcb >= threshold
        nxt_scale = jnp.minimum(2 ** jnp.minimum(k + 1, 29), _MAX_LEN // self.base)
        exploit_len = jnp.minimum(self.base * 4 * scale * scale, _MAX_LEN)
        # Transitions at the end of a phase.
        from_explore = SelectAux(jnp.asarray(_TEST), k, self.base * scale,
                                 jnp.argmax(mean).astype(a.candidate.dtype),
                                 jnp.zeros_like(count), jnp.zeros_like(total))
        from_test = SelectAux(jnp.where(passed, _EXPLOIT, _EXPLORE), jnp.where(passed, k, k + 1),
                              jnp.where(passed, exploit_len, self.base * nxt_scale),
                              a.candidate, count, total)
        from_exploit = SelectAux(jnp.asarray(_EXPLORE), k + 1, self.base * nxt_scale,
                                 a.candidate, count, total)
        ended = jax.tree_util.tree_map(
            lambda e, t, x: jnp.where(a.phase == _EXPLORE, e,
                                      jnp.where(a.phase == _TEST, t, x)),
            from_explore, from_test, from_exploit)
        going = SelectAux(a.phase, k, left, a.candidate, count, total)
        aux = jax.tree_util.tree_map(lambda e, g: jnp.where(done, e, g).astype(g.dtype),
                                     ended, going)
        return new._replace(aux=aux)


# --------------------------------------------------------------------------- simulator


class StepInfo(NamedTuple):
    arm: Int[Array, ""]
    reward: Float[Array, ""]
    policy: PolicyInfo


class SimResult(NamedTuple):
    """Regrets at the checkpoints (exact pseudo-regrets from the pull counts).

    ``exploit[j]`` is the policy's commit/exploit flag in the last round before
    checkpoint ``j`` (uncertain-UCB: an arm was certified).
    """

    times: Int[Array, " c"]
    satisficing_regret: Float[Array, " c"]
    regret: Float[Array, " c"]
    counts: Int[Array, "c k"]
    exploit: Bool[Array, " c"]


def init(policy: AbstractPolicy, arms: AbstractArms) -> PolicyState:
    """The simulator's state before round 1: the policy's initial state."""
    return policy.init(arms.means.shape[0])


def step(policy: AbstractPolicy, arms: AbstractArms, threshold: Float[Array, ""],
         state: PolicyState, key: jax.Array) -> tuple[PolicyState, StepInfo]:
    """One round: the policy selects, the arm pays, the policy updates."""
    # The reward uses ``key`` itself and the policy a key folded from it: a policy that
    # ignores its key costs no extra random bits (the fold is dead code then).
    arm, info = policy.select(state, threshold, jax.random.fold_in(key, 1))
    reward = arms.sample(key, arm)
    return policy.update(state, arm, reward, threshold), StepInfo(arm, reward, info)


def _check_checkpoints(checkpoints) -> tuple[int, ...]:
    if isinstance(checkpoints, int | np.integer):
        checkpoints = (int(checkpoints),)
    try:
        cps = tuple(checkpoints)
    except TypeError:
        raise TypeError(f"checkpoints must be an int or a sequence of ints, got "
                        f"{type(checkpoints).__name__}") from None
    if not cps:
        raise ValueError("checkpoints must be non-empty")
    cps = tuple(check_int("checkpoints[i]", c, min=1) for c in cps)
    if any(b <= a for a, b in zip(cps, cps[1:], strict=False)):
        raise ValueError(f"checkpoints must be strictly increasing, got {cps}")
    if cps[-1] >= 2**31 - 1:
        raise ValueError(f"checkpoints must be < 2**31 - 1 (int32 counts), got {cps[-1]}")
    return cps


def _check_problem(policy, arms, threshold):
    if not isinstance(policy, AbstractPolicy):
        raise TypeError(f"policy must be an AbstractPolicy (UCB1(), UncertainUCB(), ...), "
                        f"got {type(policy).__name__}")
    if not isinstance(arms, AbstractArms):
        raise TypeError(f"arms must be an AbstractArms (BernoulliArms(means), ...), got "
                        f"{type(arms).__name__}")
    if arms.means.ndim != 1:
        raise ValueError(f"arms.means must be 1-D (one instance; vmap over a batch of arms), "
                         f"got shape {tuple(arms.means.shape)}")
    if isinstance(arms, BernoulliArms):
        check_scalar("threshold", threshold, ge=0.0, le=1.0)
    else:
        check_scalar("threshold", threshold)
    return _float(threshold)


def simulate(
    policy: AbstractPolicy,
    arms: AbstractArms,
    threshold: float | Float[Array, ""],
    key: jax.Array,
    checkpoints: int | tuple[int, ...] = (1000,),
) -> SimResult:
    """Play ``policy`` on ``arms`` for ``checkpoints[-1]`` rounds.

    Args:
      policy: an :class:`AbstractPolicy` value (its parameters traced).
      arms: :class:`BernoulliArms` or :class:`GaussianArms` (means traced).
      threshold: the satisficing threshold ``S`` (traced; in ``[0, 1]`` for Bernoulli
        arms: outside raises, also inside ``jit``/``vmap``).
      key: a ``jax.random`` key; round ``t`` uses ``fold_in(key, t)``, so the same key
        gives the same run whatever the checkpoints.
      checkpoints: strictly increasing round counts (static) at which the regrets are
        recorded; the last is the horizon ``T``.

    Returns:
      :class:`SimResult` with ``satisficing_regret`` ``sum_t (S - mu_{A_t})^+`` and
      ``regret`` ``sum_t (mu* - mu_{A_t})`` at each checkpoint. Jittable and vmappable
      over ``key``, ``threshold``, the arms' means and the policy's parameters.
    """
    check_key("key", key)
    cps = _check_checkpoints(checkpoints)
    threshold = _check_problem(policy, arms, threshold)
    return _simulate(policy, arms, threshold, key, cps)


@eqx.filter_jit
def _simulate(policy, arms, threshold, key, cps):
    arms, threshold = arms.checked(threshold)
    sat_gap = satisficing_gaps(arms.means, threshold)
    gap = jnp.max(arms.means) - arms.means
    starts = jnp.asarray((0,) + cps[:-1], jnp.int32)
    ends = jnp.asarray(cps, jnp.int32)

    def one_round(t, carry):
        state, _ = carry
        state, info = step(policy, arms, threshold, state, jax.random.fold_in(key, t))
        return state, info.policy.exploit

    def segment(carry, bounds):
        carry = jax.lax.fori_loop(bounds[0], bounds[1], one_round, carry)
        counts = carry[0].counts
        nf = counts.astype(sat_gap.dtype)
        return carry, (nf @ sat_gap, nf @ gap, counts, carry[1])

    carry = (init(policy, arms), jnp.asarray(False))
    _, (sat, reg, counts, exploit) = jax.lax.scan(segment, carry, jnp.stack([starts, ends], 1))
    return SimResult(ends, sat, reg, counts, exploit)


def log_checkpoints(horizon: int, per_decade: int = 1) -> tuple[int, ...]:
    """Log-spaced checkpoints ending at ``horizon`` (``per_decade`` per factor 10)."""
    horizon = check_int("horizon", horizon, min=1)
    per_decade = check_int("per_decade", per_decade, min=1)
    n = max(1, int(round(per_decade * math.log10(horizon))))
    pts = {int(round(horizon / 10 ** (i / per_decade))) for i in range(n + 1)}
    return tuple(sorted(p for p in pts if p >= 1))


# --------------------------------------------------------------------------- exact values


def exact_expected_regret(
    policy: AbstractPolicy,
    means: Float[ArrayLike, " k"],
    threshold: float | Float[Array, ""],
    horizon: int,
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Exact expected ``(R_S(T), R(T))`` of a deterministic policy on Bernoulli arms.

    Enumerates all ``2^T`` reward sequences (the pulled arm's reward each round): the
    policy's choice is a function of the past rewards, and a path's probability is
    ``prod_t mu_{A_t}^{r_t} (1 - mu_{A_t})^{1 - r_t}``. Exact for policies whose
    ``select`` ignores its key (all four here); ``horizon <= 16``.
    """
    if not isinstance(policy, AbstractPolicy):
        raise TypeError(f"policy must be an AbstractPolicy, got {type(policy).__name__}")
    arms = BernoulliArms(means)
    horizon = check_int("horizon", horizon, min=1, max=16)
    check_scalar("threshold", threshold, ge=0.0, le=1.0)
    return _exact(policy, arms, _float(threshold), horizon)


@eqx.filter_jit
def _exact(policy, arms, threshold, horizon):
    arms, threshold = arms.checked(threshold)
    mu = arms.means
    sat_gap = satisficing_gaps(mu, threshold)
    gap = jnp.max(mu) - mu
    paths = jnp.arange(2**horizon, dtype=jnp.int32)
    key = jax.random.key(0)

    def one(path):
        def body(carry, t):
            state, logp = carry
            arm, _ = policy.select(state, threshold, key)
            r = ((path >> t) & 1).astype(mu.dtype)
            p = jnp.where(r > 0, mu[arm], 1.0 - mu[arm])
            state = policy.update(state, arm, r, threshold)
            return (state, logp + jnp.log(p)), None

        (state, logp), _ = jax.lax.scan(body, (policy.init(mu.shape[0]), jnp.zeros((), mu.dtype)),
                                        jnp.arange(horizon))
        nf = state.counts.astype(mu.dtype)
        return jnp.exp(logp), nf @ sat_gap, nf @ gap

    prob, sat, reg = jax.vmap(one)(paths)
    return jnp.sum(prob * sat), jnp.sum(prob * reg)


# --------------------------------------------------------------------------- bounds


def _split(means, threshold):
    mu = _float(means)
    check_array("means", mu, ndim=1)
    if mu.shape[0] < 2:
        raise ValueError(f"means must have at least 2 arms, got shape {tuple(mu.shape)}")
    s = _float(threshold)
    best = jnp.max(mu)
    return mu, s, best - s, best - mu


def uncertain_ucb_bound(
    means: Float[ArrayLike, " k"], threshold: float | Float[Array, ""],
    width: float | Float[Array, ""] = SQRT2,
) -> Float[Array, ""]:
    """The derived time-independent bound on uncertain-UCB's expected ``R_S(T)``.

    ``sum_{i: mu_i < S} (S - mu_i) (16 w^2 log tau / Delta_i^2 + 2 + pi^2 / 2)`` with
    ``tau`` the largest solution of ``tau = a log tau``, ``a = 32 w^2 K / Delta_*^2``
    (module docstring; the constant term collects the failed-interval rounds).
    ``+inf`` when no arm exceeds ``S``. Of order ``sum_i log(K / Delta_*) / Delta_i``.
    Traced in all arguments.
    """
    mu, s, _, _ = _split(means, threshold)
    return _uucb_bound(mu, s, _float(width))


@jax.jit
def _uucb_bound(mu, s, width):
    best = jnp.max(mu)
    d_star, gaps = best - s, best - mu
    w2 = width**2
    bad = mu < s
    safe_gap = jnp.where(bad, gaps, 1.0)
    d = jnp.where(d_star > 0, d_star, 1.0)
    a = jnp.maximum(32.0 * w2 * mu.shape[0] / d**2, jnp.e)
    # Largest root of tau = a log tau (a >= e): the iteration tau <- a log tau from
    # tau = a^2 decreases monotonically onto it.
    tau = jax.lax.fori_loop(0, 60, lambda _, x: a * jnp.log(x), a * a)
    per = (s - mu) * (16.0 * w2 * jnp.log(tau) / safe_gap**2 + 2.0 + jnp.pi**2 / 2)
    bound = jnp.sum(jnp.where(bad, per, 0.0))
    return jnp.where(d_star > 0, bound, jnp.inf)


def ucb_bound(
    means: Float[ArrayLike, " k"], horizon: int | Float[Array, ""],
    width: float | Float[Array, ""] = SQRT2,
) -> Float[Array, ""]:
    """UCB1's finite-time bound on the standard regret (Auer et al., 2002, Thm 1):
    ``sum_{Delta_i > 0} 4 w^2 log T / Delta_i + (1 + pi^2 / 3) Delta_i`` (``w = sqrt 2``:
    ``8 log T / Delta_i``). Traced."""
    mu, _, _, gaps = _split(means, jnp.max(_float(means)))
    pos = gaps > 0
    safe = jnp.where(pos, gaps, 1.0)
    log_t = jnp.log(jnp.maximum(_float(horizon), 1.0))
    per = 4.0 * _float(width) ** 2 * log_t / safe + (1.0 + jnp.pi**2 / 3) * gaps
    return jnp.sum(jnp.where(pos, per, 0.0))


def satisficing_lower_bound(
    means: Float[ArrayLike, " k"], threshold: float | Float[Array, ""],
) -> Float[Array, ""]:
    """The paper's lower-bound shape ``sum_{Delta_i > Delta_*} log(Delta / ((K-1)
    Delta_*))^+ / Delta_i``, with ``Delta = min_{Delta_i > Delta_*} Delta_i`` (our reading:
    the paper's ``Delta`` was not defined in the abstract) and the unknown constant set to
    1. Zero when no arm exceeds ``S`` or no arm is below it. Traced."""
    mu, s, _, _ = _split(means, threshold)
    return _lower_bound(mu, s)


@jax.jit
def _lower_bound(mu, s):
    best = jnp.max(mu)
    d_star, gaps = best - s, best - mu
    k = mu.shape[0]
    bad = gaps > d_star
    safe = jnp.where(bad, gaps, 1.0)
    big = jnp.min(jnp.where(bad, gaps, jnp.inf))
    d = jnp.where(d_star > 0, d_star, 1.0)
    term = jnp.maximum(jnp.log(big / ((k - 1) * d)), 0.0)
    out = jnp.sum(jnp.where(bad, term / safe, 0.0))
    return jnp.where((d_star > 0) & jnp.any(bad), out, 0.0)


def _kl_bernoulli(p, q):
    eps = 1e-12
    p = jnp.clip(p, eps, 1 - eps)
    q = jnp.clip(q, eps, 1 - eps)
    return p * jnp.log(p / q) + (1 - p) * jnp.log((1 - p) / (1 - q))


def lai_robbins_bound(
    means: Float[ArrayLike, " k"], horizon: int | Float[Array, ""],
) -> Float[Array, ""]:
    """Lai-Robbins' asymptotic lower bound on the standard regret of Bernoulli arms,
    ``sum_{Delta_i > 0} Delta_i log T / kl(mu_i, mu*)``. Traced."""
    mu, _, _, gaps = _split(means, jnp.max(_float(means)))
    best = jnp.max(mu)
    pos = gaps > 0
    kl = jnp.where(pos, _kl_bernoulli(mu, best), 1.0)
    log_t = jnp.log(jnp.maximum(_float(horizon), 1.0))
    return jnp.sum(jnp.where(pos, gaps * log_t / kl, 0.0))

