r"""Autobidding under model refinement: when do better predictions raise platform metrics?

Paper: the ICML 2026 paper on model refinement, auction formats and autobidders (only
its abstract was available). A platform predicts
conversion rates; autobidders bid through those predictions; the question is when a
*better* prediction model raises the platform's revenue, welfare or liquid welfare.

The formalisation (our choices; the paper body was not available)
------------------------------------------------------------------
* **Queries** ``q = 1..Q`` with masses ``m_q >= 0`` (traffic). **Bidders** ``i = 1..N``
  with true conversion probabilities ``p_iq`` in ``[0, 1]``, a value per conversion
  ``v_i`` (the tCPA target, or the max CPA) and a budget ``B_i`` (``inf``: none).
* **A prediction model** is a partition of the queries into clusters (integer
  ``labels``, one per query, values in ``[0, Q)``) with *calibrated* cluster means
  ``phat_iq = sum_{q' in c} m_q' p_iq' / sum_{q' in c} m_q'`` for ``q`` in cluster ``c``
  (:func:`predictions`). One partition is shared by all bidders (it is the platform's
  model).
* **A refinement** is a finer partition: every fine cluster lies inside one coarse
  cluster (:func:`is_refinement`). The partitions form a filtration, and by the tower
  property the coarse predictions are conditional expectations of the fine ones:
  ``phat^coarse = E_m[phat^fine | coarse cluster]``.
* **Bids** are uniform: bidder ``i`` bids ``alpha_i * phat_iq`` on query ``q``; one
  multiplier per bidder. Queries of one cluster look identical to everybody, so a
  cluster is sold as one good of mass ``M_c``; bidder ``i``'s expected conversions from
  all of it are ``W_ic = M_c phat_ic = sum_{q in c} m_q p_iq`` - the *true* expected
  conversions, because the allocation is measurable with respect to the partition.
  Calibration therefore makes every metric below a true expected value.
* **Formats** (single slot, one auction per query): :class:`FirstPrice` (the winner
  pays its bid), :class:`SecondPrice` (the highest competing bid) and :class:`VCG`.
  With one slot VCG's price is the externality, the highest competing bid: VCG equals
  second price here (a test pins it). Multi-slot would need position effects (a CTR per
  slot), allocation by sorted bids, and VCG's externality prices, which then differ
  from GSP's; not implemented.
* **Bidders** (:class:`TargetCPA`, :class:`MaxCPA`): a tCPA bidder maximises conversions
  subject to ``spend <= v_i * conversions`` (and ``spend <= B_i``); a max-CPA bidder is
  quasi-linear with value ``v_i`` per conversion: it never bids above ``v_i`` per
  conversion and, with a budget, is paced (multiplier ``<= v_i`` as large as the budget
  allows). In second price that is the utility-maximising uniform bid (truthful, then
  paced). In first price a max-CPA bidder does not shade here (its max CPA is a bid
  cap), so first price treats tCPA and max-CPA bidders alike: a tCPA bidder in first
  price pays ``alpha_i`` per conversion, its constraint is ``alpha_i <= v_i``.
* **Metrics**: revenue ``sum_i spend_i``; welfare ``sum_i v_i conv_i``; liquid welfare
  ``sum_i min(B_i, v_i conv_i)``.

The equilibrium (what is computed, and why)
-------------------------------------------
Every bidder plays its *largest feasible multiplier* given the others: it wins the
clusters in increasing order of its threshold ``theta_c = max_{j != i} alpha_j W_jc /
W_ic`` (the multiplier it needs) while its constraints hold, and takes the largest
feasible *share* of the first cluster it cannot take whole (a tie at ``alpha_i =
theta_c``). That best response is exact: one sort and a breakpoint search over the
cumulative spend and conversions (:func:`best_response`; piecewise linear in the share).
With discrete (unsplit) clusters, budgets and second-price tCPA bidders generally have
no pure equilibrium (the marginal cluster is either unaffordable or leaves slack), so
fractional shares at ties are part of the equilibrium, as in pacing equilibria
(Conitzer et al., 2018, 2019).

:func:`solve` iterates best responses (Gauss-Seidel over bidders, :func:`init` /
:func:`step`) from ``alpha = cap``. Where strategies are dominant the first sweep is
the equilibrium, for any ``N``: first price without budgets (``alpha_i = v_i``) and
second price with max-CPA bidders without budgets (truthful ``alpha_i = v_i``). In
second price two bidders can end at a *mutual tie* (both marginal on the same cluster,
shares that need not add to one); there the step clears the tie by a bisection on the
common scale of ``(alpha_1, alpha_2)`` along the tie ray (the excess share is monotone
in it), which is exact to float precision. The outcome is *verified*: ``result`` is
``RESULTS.successful`` only when a further sweep changes no multiplier by more than
``tol`` and every bidder's constraints hold at the final allocation; otherwise
``RESULTS.max_steps_reached`` (reported, never a silent number). Second-price
equilibria of ROI-constrained bidders can be multiple, and computing one is PPAD-hard
in general (Li and Tang, 2022): the one computed here is the limit of best responses
from ``alpha = cap``; first-price pacing equilibria are unique (Conitzer et al., 2019).
The mutual-tie clearing is for ``N = 2``; with ``N > 2`` strategic cells may end
unverified (flagged). tCPA multipliers in second price are capped at
``max_multiplier * v_i`` (a platform bid cap; default 100), so a bidder that can win
everything still bids a finite amount.

Monotonicity in first price (the proof)
---------------------------------------
First price, uniform bidding, tCPA bidders, no budgets: the best response is
``alpha_i = v_i`` whatever the others do (spend ``= alpha_i conv_i``, so the
constraint is ``alpha_i <= v_i``, and conversions are non-decreasing in ``alpha_i``).
Each cluster is sold at the highest bid, so

    revenue(P) = sum_c M_c max_i v_i phat^P_ic = E_m[ f(phat^P) ] * sum_q m_q,
    f(x) = max_i v_i x_i.

``f`` is convex (a maximum of linear functions). If ``P'`` refines ``P``, then
``phat^P = E_m[phat^P' | P]`` and conditional Jensen gives ``f(phat^P) <=
E_m[f(phat^P') | P]`` cluster by cluster; summing, ``revenue(P) <= revenue(P')``.
Here revenue equals welfare and liquid welfare (each cluster's winner pays exactly
``v_i`` per conversion), so all three are monotone. In second price the price is the
*second-highest* bid, not a convex function of the predictions, and the tCPA bidders'
multipliers move with the partition; budgets cap spend. Either breaks the argument,
and the experiment (``jaxsci reproduce auctions``) finds the counterexamples.
(Truthful second price with max-CPA bidders allocates efficiently, so its *welfare*
``sum_c M_c max_i v_i phat_ic`` is monotone by the same Jensen step; its revenue is not.)

Gradients: allocations are piecewise constant in the inputs; gradients are not provided.

>>> import jax.numpy as jnp
>>> from jaxsci.stats import auctions as au
>>> inst = au.Instance(masses=[1.0, 1.0], probs=[[0.8, 0.2], [0.3, 0.5]], values=[1.0, 1.0])
>>> coarse, fine = jnp.array([0, 0]), jnp.array([0, 1])
>>> r0 = au.solve(inst, coarse, au.FirstPrice(), au.TargetCPA()).revenue
>>> r1 = au.solve(inst, fine, au.FirstPrice(), au.TargetCPA()).revenue
>>> round(float(r0), 4), round(float(r1), 4)
(1.0, 1.3)
"""

from __future__ import annotations

import abc
import functools
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxsci.core.status import RESULTS
from jaxsci.core.validation import as_array, check_int, check_key, check_scalar

__all__ = [
    "Instance",
    "Market",
    "AbstractFormat",
    "FirstPrice",
    "SecondPrice",
    "VCG",
    "AbstractBidder",
    "TargetCPA",
    "MaxCPA",
    "Rules",
    "rules",
    "solve_rules",
    "State",
    "Info",
    "Solution",
    "predictions",
    "is_refinement",
    "check_refinement",
    "market",
    "best_response",
    "allocate",
    "init",
    "step",
    "solve",
    "first_price_revenue",
    "random_instance",
    "random_chain",
]

_TIE = 1e-6  # relative tolerance of a tie between two bids (float32 products)


def _is_tracer(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def _concrete_check(name: str, x: Any, lo: float | None, hi: float | None,
                    allow_inf: bool = False) -> None:
    if _is_tracer(x):
        return
    arr = np.asarray(x)
    if np.any(np.isnan(arr)) or (not allow_inf and np.any(np.isinf(arr))):
        raise ValueError(f"{name} must be {'non-NaN' if allow_inf else 'finite'}, got "
                         f"{int(np.sum(~np.isfinite(arr)))} non-finite value(s)")
    if lo is not None and arr.size and np.min(arr) < lo:
        raise ValueError(f"{name} must be >= {lo}, got minimum {np.min(arr)}")
    if hi is not None and arr.size and np.max(arr) > hi:
        raise ValueError(f"{name} must be <= {hi}, got maximum {np.max(arr)}")


# --------------------------------------------------------------------------- instances


class Instance(eqx.Module):
    """One market: ``masses (Q,)``, true ``probs (N, Q)``, ``values (N,)``, ``budgets (N,)``.

    ``budgets`` defaults to ``inf`` (no budget). Concrete values are checked at
    construction (masses ``>= 0`` with a positive total, probabilities in ``[0, 1]``,
    values ``>= 0``, budgets ``> 0``); :func:`solve` checks them again inside ``jit``
    (``equinox.error_if``). A leading batch axis on every field is allowed (``vmap``).
    """

    masses: Float[Array, " q"] = eqx.field(converter=lambda x: as_array("masses", x))
    probs: Float[Array, "n q"] = eqx.field(converter=lambda x: as_array("probs", x))
    values: Float[Array, " n"] = eqx.field(converter=lambda x: as_array("values", x))
    budgets: Float[Array, " n"] | None = eqx.field(
        default=None, converter=lambda x: x if x is None else as_array("budgets", x))

    def __post_init__(self):
        if self.budgets is None:
            self.budgets = jnp.full(np.shape(self.values), jnp.inf)

    def __check_init__(self):
        q = np.shape(self.masses)
        if len(q) < 1 or q[-1] < 1:
            raise ValueError(f"masses must be a 1-D array of at least 1 query, got shape {q}")
        pshape = np.shape(self.probs)
        if len(pshape) < 2 or pshape[-1] != q[-1] or pshape[-2] < 1:
            raise ValueError(f"probs must have shape (n_bidders, {q[-1]}) (one row per "
                             f"bidder, one column per query), got {pshape}")
        n = pshape[-2]
        if np.shape(self.values)[-1:] != (n,):
            raise ValueError(f"values must have shape ({n},) (one per bidder), got "
                             f"{np.shape(self.values)}")
        if np.shape(self.budgets)[-1:] != (n,):
            raise ValueError(f"budgets must have shape ({n},) (one per bidder), got "
                             f"{np.shape(self.budgets)}")
        _concrete_check("masses", self.masses, 0.0, None)
        _concrete_check("probs", self.probs, 0.0, 1.0)
        _concrete_check("values", self.values, 0.0, None)
        _concrete_check("budgets", self.budgets, None, None, allow_inf=True)
        if not _is_tracer(self.budgets) and np.any(np.asarray(self.budgets) <= 0):
            raise ValueError(f"budgets must be > 0 (inf: no budget), got minimum "
                             f"{np.min(np.asarray(self.budgets))}")
        if not _is_tracer(self.masses) and np.any(np.sum(np.asarray(self.masses), -1) <= 0):
            raise ValueError("masses must have a positive total (an empty market)")

    @property
    def n_bidders(self) -> int:
        return self.probs.shape[-2]

    @property
    def n_queries(self) -> int:
        return self.masses.shape[-1]

    def checked(self) -> Instance:
        """The instance with its values checked inside ``jit`` (one ``error_if``)."""
        m, p, v, b = self.masses, self.probs, self.values, self.budgets
        bad = jnp.stack([jnp.any(~(m >= 0)) | ~(jnp.sum(m) > 0),
                         jnp.any(~((p >= 0) & (p <= 1))),
                         jnp.any(~(v >= 0) | ~jnp.isfinite(v)),
                         jnp.any(~(b > 0))])
        m = eqx.branched_error_if(m, jnp.any(bad), jnp.argmax(bad), (
            "masses must be >= 0 with a positive total",
            "probs must be in [0, 1]",
            "values must be finite and >= 0",
            "budgets must be > 0 (inf: no budget)"))
        return Instance(m, p, v, b)


class Market(NamedTuple):
    """An instance seen through a partition: one good per cluster.

    ``mass[c]`` is the cluster's mass, ``conv[i, c] = sum_{q in c} m_q p_iq`` bidder
    ``i``'s expected conversions from all of it (a bid multiplier ``alpha_i`` bids
    ``alpha_i * conv[i, c]`` on the whole cluster). Empty cluster ids have zero mass.
    """

    mass: Float[Array, " k"]
    conv: Float[Array, "n k"]
    values: Float[Array, " n"]
    budgets: Float[Array, " n"]


def _check_labels(name: str, labels: Any, n_queries: int) -> Array:
    if not hasattr(labels, "shape"):
        labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != n_queries:
        raise ValueError(f"{name} must be a 1-D integer array of one cluster id per query "
                         f"(shape ({n_queries},)), got shape {tuple(labels.shape)}")
    if n_queries == 0:
        raise ValueError(f"{name} is an empty partition (no queries)")
    if not jnp.issubdtype(labels.dtype, jnp.integer):
        raise TypeError(f"{name} must have an integer dtype (cluster ids), got {labels.dtype}")
    if not _is_tracer(labels):
        arr = np.asarray(labels)
        if arr.min() < 0 or arr.max() >= n_queries:
            raise ValueError(f"{name} must hold cluster ids in [0, {n_queries}), got values in "
                             f"[{arr.min()}, {arr.max()}]")
    return jnp.asarray(labels, jnp.int32)


def _labels_in_jit(labels: Array, n: int) -> Array:
    return eqx.error_if(labels, jnp.any((labels < 0) | (labels >= n)),
                        "labels must hold cluster ids in [0, n_queries)")


def _aggregate(masses, probs, labels):
    q = masses.shape[0]
    mass = jax.ops.segment_sum(masses, labels, num_segments=q)
    conv = jax.vmap(lambda p: jax.ops.segment_sum(masses * p, labels, num_segments=q))(probs)
    return mass, conv


def predictions(instance: Instance, labels: Int[ArrayLike, " q"]) -> Float[Array, "n q"]:
    """Calibrated predictions ``phat (N, Q)``: each query gets its cluster's
    mass-weighted mean of the true probabilities (zero-mass clusters: the plain mean
    is irrelevant, 0 is returned). Jittable and vmappable in both arguments."""
    labels = _check_labels("labels", labels, instance.n_queries)
    mass, conv = _aggregate(instance.masses, instance.probs, labels)
    mean = conv / jnp.where(mass > 0, mass, 1.0)
    return jnp.where(mass[labels] > 0, mean[:, labels], 0.0)


def is_refinement(fine: Int[ArrayLike, " q"], coarse: Int[ArrayLike, " q"]) -> Bool[Array, ""]:
    """Whether partition ``fine`` refines ``coarse``: two queries in one fine cluster are
    in one coarse cluster. Jittable; ``O(Q^2)``."""
    fine, coarse = jnp.asarray(fine), jnp.asarray(coarse)
    same_fine = fine[:, None] == fine[None, :]
    same_coarse = coarse[:, None] == coarse[None, :]
    return jnp.all(~same_fine | same_coarse)


def check_refinement(fine: Int[ArrayLike, " q"], coarse: Int[ArrayLike, " q"]) -> Array:
    """Return ``fine`` after checking that it refines ``coarse``: raises ``ValueError``
    naming a pair of queries that ``fine`` puts together and ``coarse`` separates
    (eagerly), or an ``equinox`` runtime error inside ``jit``."""
    if not hasattr(fine, "shape"):
        fine = np.asarray(fine)
    fine = _check_labels("fine", fine, fine.shape[0] if fine.ndim == 1 else -1)
    coarse = _check_labels("coarse", coarse, fine.shape[0])
    if not (_is_tracer(fine) or _is_tracer(coarse)):
        f, c = np.asarray(fine), np.asarray(coarse)
        bad = (f[:, None] == f[None, :]) & (c[:, None] != c[None, :])
        if bad.any():
            a, b = np.argwhere(bad)[0]
            raise ValueError(f"fine is not a refinement of coarse: queries {a} and {b} share "
                             f"fine cluster {f[a]} but lie in coarse clusters {c[a]} and {c[b]}")
        return fine
    return eqx.error_if(fine, ~is_refinement(fine, coarse),
                        "fine is not a refinement of coarse (a fine cluster spans two coarse "
                        "clusters)")


def market(instance: Instance, labels: Int[ArrayLike, " q"]) -> Market:
    """The :class:`Market` of ``instance`` under the partition ``labels``."""
    labels = _check_labels("labels", labels, instance.n_queries)
    mass, conv = _aggregate(instance.masses, instance.probs, labels)
    return Market(mass, conv, instance.values, instance.budgets)


# --------------------------------------------------------------------------- strategies


class AbstractFormat(eqx.Module):
    """A single-slot auction format: who pays what when winning a cluster."""

    pays_own_bid: eqx.AbstractClassVar[bool]


class FirstPrice(AbstractFormat):
    """First price: the winner pays its own bid."""

    pays_own_bid: ClassVar[bool] = True


class SecondPrice(AbstractFormat):
    """Second price: the winner pays the highest competing bid."""

    pays_own_bid: ClassVar[bool] = False


class VCG(AbstractFormat):
    """VCG with one slot: the winner pays its externality, the highest competing bid
    (the same outcome as :class:`SecondPrice`; multi-slot VCG needs position effects)."""

    pays_own_bid: ClassVar[bool] = False


class AbstractBidder(eqx.Module):
    """A bidder type: the cap on its multiplier and whether it has a CPA constraint."""

    @abc.abstractmethod
    def cap(self, values: Float[Array, " n"], fmt: AbstractFormat) -> Float[Array, " n"]:
        """The largest multiplier each bidder may use."""

    @abc.abstractmethod
    def cpa_constrained(self, fmt: AbstractFormat) -> bool:
        """Whether ``spend <= value * conversions`` is a constraint to check per cluster."""


class TargetCPA(AbstractBidder):
    """tCPA: maximise conversions subject to ``spend <= v_i conv_i`` (and the budget).

    ``max_multiplier`` (traced) caps second-price multipliers at ``max_multiplier * v_i``
    (a platform bid cap); in first price the constraint itself caps ``alpha_i <= v_i``.
    """

    max_multiplier: Float[Array, ""] = eqx.field(
        default=100.0, converter=lambda x: as_array("max_multiplier", x))

    def __check_init__(self):
        if not _is_tracer(self.max_multiplier):
            check_scalar("max_multiplier", np.asarray(self.max_multiplier), ge=1.0)

    def cap(self, values, fmt):
        return values if fmt.pays_own_bid else values * self.max_multiplier

    def cpa_constrained(self, fmt):
        return not fmt.pays_own_bid


class MaxCPA(AbstractBidder):
    """max-CPA: quasi-linear with value ``v_i`` per conversion; bids at most ``v_i`` per
    conversion (truthful in second price), paced down only by a budget."""

    def cap(self, values, fmt):
        return values

    def cpa_constrained(self, fmt):
        return False


class Rules(NamedTuple):
    """A cell's rules as arrays (so that one compiled program serves every cell, and
    ``vmap`` runs over cells): first price or not, a CPA constraint or not, the caps."""

    first_price: Bool[Array, ""]
    cpa: Bool[Array, ""]
    cap_scale: Float[Array, ""]  # the multiplier cap as a multiple of the value

    def caps(self, values: Float[Array, " n"]) -> Float[Array, " n"]:
        return self.cap_scale * values


def rules(fmt: AbstractFormat, bidder: AbstractBidder) -> Rules:
    """The :class:`Rules` of ``fmt`` with every bidder of type ``bidder``."""
    _check_strategies(fmt, bidder)
    return Rules(jnp.asarray(fmt.pays_own_bid), jnp.asarray(bidder.cpa_constrained(fmt)),
                 jnp.asarray(bidder.cap(jnp.ones(()), fmt), jnp.zeros((), float).dtype))


def _check_strategies(fmt, bidder):
    if not isinstance(fmt, AbstractFormat):
        raise TypeError(f"fmt must be an AbstractFormat (FirstPrice(), SecondPrice(), VCG()), "
                        f"got {type(fmt).__name__}")
    if not isinstance(bidder, AbstractBidder):
        raise TypeError(f"bidder must be an AbstractBidder (TargetCPA(), MaxCPA()), got "
                        f"{type(bidder).__name__}")


# --------------------------------------------------------------------------- best response


class Response(NamedTuple):
    alpha: Float[Array, ""]  # the multiplier
    cluster: Int[Array, ""]  # the cluster it is marginal on (a tie), or -1
    share: Float[Array, ""]  # its largest feasible share of that cluster
    position: Float[Array, ""]  # clusters taken whole + share (in its threshold order)
    next: Int[Array, ""]  # the first cluster it does not take whole (-1: none)


def _competition(alpha, conv, i):
    bids = alpha[:, None] * conv
    mine = jnp.arange(conv.shape[0])[:, None] == i
    return jnp.max(jnp.where(mine, 0.0, bids), axis=0)


def best_response(mkt: Market, alpha: Float[Array, " n"], i: Int[ArrayLike, ""],
                  fmt: AbstractFormat, bidder: AbstractBidder) -> Response:
    """Bidder ``i``'s exact best response to the others' multipliers ``alpha``.

    Its largest feasible multiplier: clusters sorted by the threshold ``theta_c = max_{j
    != i} alpha_j conv_jc / conv_ic``; take them whole while the constraints hold (cap,
    budget, and in second price the CPA constraint on the cumulative spend), then the
    largest feasible share of the first one that does not fit (linear in the share), and
    bid at its threshold. Jittable; ``i`` may be traced.
    """
    return _best_response(mkt, alpha, jnp.asarray(i), rules(fmt, bidder))


def _best_response(mkt, alpha, i, rl):
    conv = mkt.conv
    w = conv[i]
    h = _competition(alpha, conv, i)
    pos = w > 0
    theta = jnp.where(pos, h / jnp.where(pos, w, 1.0), jnp.inf)
    order = jnp.argsort(theta)
    th, ws, hs = theta[order], w[order], h[order]
    c_prev = jnp.cumsum(ws) - ws
    # A relative 1e-6 of slack on the constraints: a profile whose constraint binds
    # exactly (the equilibria do) must not lose its cluster to float32 round-off.
    v, bud = mkt.values[i] * (1 + _TIE), mkt.budgets[i] * (1 + _TIE)
    cap = rl.caps(mkt.values)[i]
    inf = jnp.inf
    ws_safe = jnp.where(ws > 0, ws, 1.0)
    # First price: spend = alpha * conversions with alpha >= theta.
    th_safe = jnp.where(th > 0, th, 1.0)
    s_first = jnp.where(th > 0, (bud / th_safe - c_prev) / ws_safe, inf)
    # Second price: spend = the sum of the competing bids of the clusters taken.
    s_prev = jnp.cumsum(hs) - hs
    s_second = jnp.where(hs > 0, (bud - s_prev) / jnp.where(hs > 0, hs, 1.0), inf)
    over = rl.cpa & (th > v)
    s_cpa = (v * c_prev - s_prev) / (ws_safe * jnp.where(over, th - v, 1.0))
    s_second = jnp.minimum(s_second, jnp.where(over, s_cpa, inf))
    s = jnp.where(rl.first_price, s_first, s_second)
    s = jnp.where((th <= cap * (1 + _TIE)) & (ws > 0), jnp.clip(s, 0.0, 1.0), 0.0)
    short = s < 1.0
    k = jnp.argmax(short)
    any_short = jnp.any(short)
    total = jnp.sum(ws)
    room = jnp.where(rl.first_price & (c_prev[k] > 0),
                     bud / jnp.where(c_prev[k] > 0, c_prev[k], 1.0), inf)
    room_all = jnp.where(rl.first_price & (total > 0), bud / jnp.where(total > 0, total, 1.0),
                         inf)
    sk, thk = s[k], th[k]
    a_short = jnp.where(sk > 0, thk, jnp.minimum(jnp.minimum(cap, thk), room))
    a = jnp.where(any_short, a_short, jnp.minimum(cap, room_all))
    tie = any_short & (a >= thk * (1 - _TIE)) & jnp.isfinite(thk)
    cluster = jnp.where(tie, order[k], -1)
    position = jnp.where(any_short, k + sk, ws.shape[0])
    return Response(a, cluster, jnp.where(tie, sk, 0.0), position.astype(a.dtype),
                    jnp.where(any_short, order[k], -1))


# --------------------------------------------------------------------------- allocation


class Outcome(NamedTuple):
    share: Float[Array, "n k"]
    spend: Float[Array, " n"]
    conversions: Float[Array, " n"]


def allocate(mkt: Market, alpha: Float[Array, " n"], cluster: Int[Array, " n"],
             share: Float[Array, " n"], fmt: AbstractFormat) -> Outcome:
    """Shares, spend and conversions at multipliers ``alpha`` (see :func:`_allocate`)."""
    if not isinstance(fmt, AbstractFormat):
        raise TypeError(f"fmt must be an AbstractFormat, got {type(fmt).__name__}")
    return _allocate(mkt, alpha, cluster, share, jnp.asarray(fmt.pays_own_bid))


def _allocate(mkt, alpha, cluster, share, first_price) -> Outcome:
    """Shares, spend and conversions at multipliers ``alpha``.

    Each cluster goes to its highest bid. At a tie (bids within a relative ``1e-6``),
    a bidder marginal on that cluster (``cluster[i] == c``) gets its ``share[i]``; the
    other tied bidders split what is left; if every tied bidder is marginal, their
    shares are scaled to sum to one.
    """
    conv = mkt.conv
    n, k = conv.shape
    bids = alpha[:, None] * conv
    top = jnp.max(bids, axis=0)
    tied = (bids >= top * (1 - _TIE)) & (top > 0) & (conv > 0)
    marg = tied & (cluster[:, None] == jnp.arange(k)[None, :])
    claimed = jnp.sum(jnp.where(marg, share[:, None], 0.0), axis=0)
    n_free = jnp.sum(tied & ~marg, axis=0)
    rest = jnp.maximum(1.0 - claimed, 0.0) / jnp.maximum(n_free, 1)
    scale = jnp.where(n_free > 0, jnp.minimum(1.0, 1.0 / jnp.maximum(claimed, 1e-30)),
                      1.0 / jnp.maximum(claimed, 1e-30))
    only_marg_zero = (n_free == 0) & (claimed <= 0)
    n_tied = jnp.maximum(jnp.sum(tied, axis=0), 1)
    x = jnp.where(marg, share[:, None] * scale, jnp.where(tied, rest, 0.0))
    x = jnp.where(only_marg_zero & tied, 1.0 / n_tied, x)
    second = jax.vmap(lambda i: _competition(alpha, conv, i))(jnp.arange(n))
    price = jnp.where(first_price, bids, second)
    return Outcome(x, jnp.sum(x * price, axis=1), jnp.sum(x * conv, axis=1))


# --------------------------------------------------------------------------- the solver


class State(NamedTuple):
    alpha: Float[Array, " n"]
    cluster: Int[Array, " n"]
    share: Float[Array, " n"]
    change: Float[Array, ""]  # largest relative change of a multiplier or share, last sweep
    sweeps: Int[Array, ""]


class Info(NamedTuple):
    change: Float[Array, ""]


class Solution(NamedTuple):
    """The computed equilibrium and its metrics (one instance; vmap adds a leading axis)."""

    alpha: Float[Array, " n"]
    share: Float[Array, "n k"]  # bidder i's share of cluster c
    spend: Float[Array, " n"]
    conversions: Float[Array, " n"]
    revenue: Float[Array, ""]
    welfare: Float[Array, ""]
    liquid_welfare: Float[Array, ""]
    sweeps: Int[Array, ""]  # best-response sweeps (0: two bidders, solved by enumeration)
    n_equilibria: Int[Array, ""]  # distinct verified equilibria found (two bidders)
    result: RESULTS


def init(mkt: Market, rl: Rules) -> State:
    """Every bidder at its cap (``v_i``; tCPA in second price ``max_multiplier v_i``)."""
    cap = rl.caps(mkt.values)
    n = cap.shape[0]
    return State(cap, jnp.full(n, -1, jnp.int32), jnp.zeros(n, cap.dtype),
                 jnp.asarray(jnp.inf, cap.dtype), jnp.zeros((), jnp.int32))


def _sweep(mkt, rl, state):
    def body(i, carry):
        alpha, cluster, share = carry
        r = _best_response(mkt, alpha, i, rl)
        return alpha.at[i].set(r.alpha), cluster.at[i].set(r.cluster), share.at[i].set(r.share)

    return jax.lax.fori_loop(0, mkt.conv.shape[0], body,
                             (state.alpha, state.cluster, state.share))


def step(mkt: Market, rl: Rules, state: State) -> tuple[State, Info]:
    """One Gauss-Seidel sweep of exact best responses (bidder 0, then 1, ...)."""
    alpha, cluster, share = _sweep(mkt, rl, state)
    rel = jnp.abs(alpha - state.alpha) / jnp.maximum(jnp.abs(state.alpha), 1e-12)
    rel = jnp.where(jnp.isfinite(rel), rel, jnp.where(alpha == state.alpha, 0.0, jnp.inf))
    change = jnp.maximum(jnp.max(rel), jnp.max(jnp.abs(share - state.share)))
    return State(alpha, cluster, share, change, state.sweeps + 1), Info(change)


class Check(NamedTuple):
    outcome: Outcome
    verified: Bool[Array, ""]


def _verify(mkt, alpha, cluster, share, rl) -> Check:
    """An equilibrium check of a profile: at the allocation every bidder holds its
    best-response position (clusters whole + share) given the others' multipliers, up
    to the share of an oversubscribed tie, its constraints hold, and no multiplier
    exceeds its cap."""
    out = _allocate(mkt, alpha, cluster, share, rl.first_price)
    n = mkt.conv.shape[0]
    held = jnp.sum(jnp.where(mkt.conv > 0, out.share, 0.0), axis=1)
    resp = jax.vmap(lambda i: _best_response(mkt, alpha, i, rl))(jnp.arange(n))
    best = resp.position
    v, b = mkt.values, mkt.budgets
    slack = 1e-4 * (1.0 + jnp.abs(out.spend))
    # A bidder may hold less than its best position only inside its marginal cluster
    # (an oversubscribed tie: more of it would need the whole cluster, which it cannot
    # afford), never a whole cluster less.
    tol = 1e-4 * (1.0 + best)
    bids = alpha[:, None] * mkt.conv
    nxt = jnp.maximum(resp.next, 0)
    at_tie = (resp.next >= 0) & (bids[jnp.arange(n), nxt]
                                 >= jnp.max(bids, axis=0)[nxt] * (1 - _TIE))
    short = held < best - tol
    ok = jnp.all(held <= best + tol) & jnp.all(held >= jnp.floor(best + tol) - tol)
    ok &= jnp.all(~short | at_tie)
    ok &= jnp.all(out.spend <= b + slack)
    ok &= ~rl.cpa | jnp.all(out.spend <= v * out.conversions + slack)
    ok &= jnp.all(alpha <= rl.caps(v) * (1 + 1e-5))
    return Check(out, ok & jnp.all(jnp.isfinite(out.spend)))


_BISECT = 40


def _pair_candidates(mkt, rl):
    """Every candidate equilibrium structure of two bidders.

    In an equilibrium each bidder is blocked: at its cap, at a tie it cannot take more
    of, or with a binding constraint. So:
    (a) a *mutual tie* on cluster ``c``: ``alpha = (a, kappa_c a)`` with ``kappa_c =
    conv_0c / conv_1c``; along that ray each bidder's best-response position is
    non-increasing in ``a``, so the largest ``a`` at which the two positions still cover
    every cluster is found by bisection on ``log a``, and bidder 0 takes its position's
    share of ``c``; (b) bidder 0 at its cap, bidder 1 at its exact best response;
    (c) the converse; (d) both at their caps; (e) no tie: a cut of the clusters in
    the order of ``conv_0c / conv_1c`` with each bidder's multiplier the largest its
    opponent's constraints allow (first price: its own budget), which covers the
    equilibria where a constraint binds strictly between two thresholds.
    """
    conv = mkt.conv
    k = conv.shape[1]
    cap = rl.caps(mkt.values)
    live = jnp.sum(jnp.any(conv > 0, axis=0)).astype(conv.dtype)
    r = jnp.where(conv[1] > 0, conv[0] / jnp.where(conv[1] > 0, conv[1], 1.0), jnp.inf)
    scale = jnp.maximum(jnp.max(cap), 1e-12)

    def mutual(c):
        valid = (conv[0, c] > 0) & (conv[1, c] > 0)
        kappa = conv[0, c] / jnp.where(valid, conv[1, c], 1.0)
        above0 = jnp.sum((conv[0] > 0) & (r > r[c] * (1 + _TIE))).astype(conv.dtype)
        above1 = jnp.sum((conv[1] > 0) & (r < r[c] * (1 - _TIE))).astype(conv.dtype)

        def positions(log_a):
            a = jnp.exp(log_a)
            prof = jnp.stack([a, kappa * a])
            p0 = _best_response(mkt, prof, 0, rl).position
            p1 = _best_response(mkt, prof, 1, rl).position
            return p0, p1

        def bisect(_, lohi):
            lo, hi = lohi
            mid = 0.5 * (lo + hi)
            p0, p1 = positions(mid)
            cover = jnp.minimum(p0, above0 + 1) + jnp.minimum(p1, above1 + 1) >= live
            return jnp.where(cover, mid, lo), jnp.where(cover, hi, mid)

        lo0 = jnp.log(scale) - 25.0
        hi0 = jnp.log(scale) + 2.0
        lo, _ = jax.lax.fori_loop(0, _BISECT, bisect, (lo0, hi0))
        a = jnp.exp(lo)
        p0, _ = positions(lo)
        s0 = jnp.clip(p0 - above0, 0.0, 1.0)
        return (jnp.stack([a, kappa * a]), jnp.stack([c, c]).astype(jnp.int32),
                jnp.stack([s0, 1.0 - s0]), valid)

    al, cl, sh, valid = jax.vmap(mutual)(jnp.arange(k))

    def capped(i):
        resp = _best_response(mkt, cap, 1 - i, rl)
        alpha = cap.at[1 - i].set(resp.alpha)
        cluster = jnp.full(2, -1, jnp.int32).at[1 - i].set(resp.cluster)
        share = jnp.zeros(2, conv.dtype).at[1 - i].set(resp.share)
        return alpha, cluster, share

    both = (cap, jnp.full(2, -1, jnp.int32), jnp.zeros(2, conv.dtype))
    extra = jax.tree_util.tree_map(lambda *x: jnp.stack(x), capped(0), capped(1), both)

    # (e) cuts: bidder 0 holds the clusters it ranks first, bidder 1 the rest, no tie;
    # each multiplier is the largest that keeps its holder's constraints (spend is
    # linear in the multipliers at a fixed allocation).
    order = jnp.argsort(-r)
    a_cum = jnp.concatenate([jnp.zeros(1, conv.dtype), jnp.cumsum(conv[0, order])])
    b_cum = jnp.concatenate([jnp.zeros(1, conv.dtype), jnp.cumsum(conv[1, order])])
    a0, b1 = a_cum, b_cum[-1] - b_cum  # bidder 0's, bidder 1's conversions at each cut
    v, bud = mkt.values, mkt.budgets
    inf = jnp.inf

    def ratio(num, den):
        return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), inf)

    # Second price: bidder 0 pays alpha_1 * (bidder 1's conversions on its clusters).
    p0, p1 = b_cum, a_cum[-1] - a_cum
    m1 = jnp.minimum(cap[1], ratio(bud[0], p0))
    m0 = jnp.minimum(cap[0], ratio(bud[1], p1))
    m1 = jnp.where(rl.cpa, jnp.minimum(m1, ratio(v[0] * a0, p0)), m1)
    m0 = jnp.where(rl.cpa, jnp.minimum(m0, ratio(v[1] * b1, p1)), m0)
    m0 = jnp.where(rl.first_price, jnp.minimum(cap[0], ratio(bud[0], a0)), m0)
    m1 = jnp.where(rl.first_price, jnp.minimum(cap[1], ratio(bud[1], b1)), m1)
    cut_alpha = jnp.stack([m0, m1], axis=1)
    cut = (cut_alpha, jnp.full((k + 1, 2), -1, jnp.int32), jnp.zeros((k + 1, 2), conv.dtype))
    alpha = jnp.concatenate([al, extra[0], cut[0]])
    cluster = jnp.concatenate([cl, extra[1], cut[1]])
    share = jnp.concatenate([sh, extra[2], cut[2]])
    valid = jnp.concatenate([valid, jnp.ones(3, bool), jnp.all(jnp.isfinite(cut_alpha), 1)])
    return alpha, cluster, share, valid


def _select(mkt, rl, alpha, cluster, share, valid):
    """Verify every candidate; keep the verified one with the highest revenue (the
    platform-optimal equilibrium) and count the distinct verified outcomes."""
    checks = jax.vmap(lambda a, c, s: _verify(mkt, a, c, s, rl))(alpha, cluster, share)
    ok = checks.verified & valid
    score = jnp.where(ok, jnp.sum(checks.outcome.spend, axis=1), -jnp.inf)
    best = jnp.argmax(score)
    key = jnp.concatenate([checks.outcome.spend, checks.outcome.conversions], axis=1)
    close = jnp.all(jnp.abs(key[:, None] - key[None, :]) <= 1e-4 * (1 + jnp.abs(key[None])),
                    axis=-1)
    earlier = jnp.tril(close & ok[None, :] & ok[:, None], k=-1)
    n_eq = jnp.sum(ok & ~jnp.any(earlier, axis=1))
    outcome = jax.tree_util.tree_map(lambda x: x[best], checks.outcome)
    return alpha[best], outcome, ok[best], n_eq


def solve(instance: Instance, labels: Int[ArrayLike, " q"], fmt: AbstractFormat,
          bidder: AbstractBidder, *, max_sweeps: int = 50, tol: float = 1e-5,
          throw: bool = False) -> Solution:
    """The equilibrium of the autobidders under the prediction model ``labels``.

    Args:
      instance: the :class:`Instance` (all fields traced; vmap over instances).
      labels: one cluster id per query, in ``[0, Q)`` (traced; vmap over partitions).
      fmt: :class:`FirstPrice`, :class:`SecondPrice` or :class:`VCG`.
      bidder: :class:`TargetCPA` or :class:`MaxCPA` (every bidder of the instance).
      max_sweeps: the largest number of best-response sweeps (static).
      tol: the relative change of every multiplier and share in the last sweep at which
        the profile counts as an equilibrium (static float).
      throw: raise (also inside ``jit``) when the result is not verified.

    Returns:
      :class:`Solution`: multipliers, shares, spend, conversions, ``revenue``,
      ``welfare``, ``liquid_welfare``, and ``result`` (``RESULTS.successful`` when the
      fixed point is reached and every constraint holds at the allocation).
    """
    if not isinstance(instance, Instance):
        raise TypeError(f"instance must be an Instance, got {type(instance).__name__}")
    _check_strategies(fmt, bidder)
    if instance.probs.ndim != 2:
        raise ValueError(f"instance.probs must be 2-D (one instance; vmap over a batch), "
                         f"got shape {tuple(instance.probs.shape)}")
    labels = _check_labels("labels", labels, instance.n_queries)
    max_sweeps = check_int("max_sweeps", max_sweeps, min=1)
    check_scalar("tol", tol, gt=0.0)
    if not isinstance(throw, bool):
        raise TypeError(f"throw must be a bool, got {type(throw).__name__}")
    return _solve(instance, labels, rules(fmt, bidder), max_sweeps,
                  float(tol), throw)


def solve_rules(instance: Instance, labels: Int[ArrayLike, " q"], rl: Rules, *,
                max_sweeps: int = 50, tol: float = 1e-5) -> Solution:
    """:func:`solve` with the cell given as :class:`Rules` arrays (from :func:`rules`):
    one compiled program for every format and bidder type, and ``vmap`` over cells."""
    if not isinstance(instance, Instance):
        raise TypeError(f"instance must be an Instance, got {type(instance).__name__}")
    if not isinstance(rl, Rules):
        raise TypeError(f"rl must be a Rules (auctions.rules(fmt, bidder)), got "
                        f"{type(rl).__name__}")
    labels = _check_labels("labels", labels, instance.n_queries)
    max_sweeps = check_int("max_sweeps", max_sweeps, min=1)
    check_scalar("tol", tol, gt=0.0)
    return _solve(instance, labels, rl, max_sweeps, float(tol), False)


@eqx.filter_jit
def _solve(instance, labels, rl, max_sweeps, tol, throw):
    instance = instance.checked()
    labels = _labels_in_jit(labels, instance.n_queries)
    mkt = market(instance, labels)
    if mkt.conv.shape[0] == 2:
        cands = _pair_candidates(mkt, rl)
        alpha, out, ok, n_eq = _select(mkt, rl, *cands)
        sweeps = jnp.zeros((), jnp.int32)
    else:
        state = init(mkt, rl)
        state = jax.lax.while_loop(
            lambda s: (s.sweeps < max_sweeps) & (s.change > tol),
            lambda s: step(mkt, rl, s)[0], state)
        check = _verify(mkt, state.alpha, state.cluster, state.share, rl)
        alpha, out, sweeps = state.alpha, check.outcome, state.sweeps
        ok = (state.change <= tol) & check.verified
        n_eq = ok.astype(jnp.int32)
    result = RESULTS.where(ok, RESULTS.successful, RESULTS.max_steps_reached)
    v, b = mkt.values, mkt.budgets
    value = v * out.conversions
    sol = Solution(alpha, out.share, out.spend, out.conversions, jnp.sum(out.spend),
                   jnp.sum(value), jnp.sum(jnp.minimum(b, value)), sweeps,
                   n_eq.astype(jnp.int32), result)
    if throw:
        sol = result.error_if(sol, result != RESULTS.successful)
    return sol


def first_price_revenue(instance: Instance, labels: Int[ArrayLike, " q"]) -> Float[Array, ""]:
    """The closed form of first price with tCPA bidders and no budgets:
    ``sum_c max_i v_i conv_ic`` (= welfare = liquid welfare), any number of bidders."""
    mkt = market(instance, labels)
    return jnp.sum(jnp.max(mkt.values[:, None] * mkt.conv, axis=0))


# --------------------------------------------------------------------------- random draws


def random_instance(key: jax.Array, n_bidders: int, n_queries: int, *,
                    budget_fraction: float | None = None,
                    min_queries: int = 2) -> Instance:
    """A random market: masses ``Exp(1)`` with a random number of queries in
    ``[min_queries, n_queries]`` active (the others get mass 0), probabilities
    ``U(0, 1)^2`` (skewed to small rates), values ``U(0.5, 2)``. With
    ``budget_fraction = f``, budget ``B_i = U(f/2, f) * v_i * sum_q m_q p_iq`` (a fraction
    of the bidder's value of all the traffic); otherwise no budgets. Jittable in
    ``key``."""
    check_key("key", key)
    n_bidders = check_int("n_bidders", n_bidders, min=1)
    n_queries = check_int("n_queries", n_queries, min=1)
    min_queries = check_int("min_queries", min_queries, min=1, max=n_queries)
    k1, k2, k3, k4, k5, k6 = jax.random.split(key, 6)
    n_active = jax.random.randint(k1, (), min_queries, n_queries + 1)
    active = jax.random.permutation(k2, jnp.arange(n_queries)) < n_active
    masses = jnp.where(active, jax.random.exponential(k3, (n_queries,)), 0.0)
    probs = jax.random.uniform(k4, (n_bidders, n_queries)) ** 2
    values = jax.random.uniform(k5, (n_bidders,), minval=0.5, maxval=2.0)
    if budget_fraction is None:
        budgets = jnp.full((n_bidders,), jnp.inf)
    else:
        check_scalar("budget_fraction", budget_fraction, gt=0.0)
        frac = jax.random.uniform(k6, (n_bidders,), minval=0.5, maxval=1.0) * budget_fraction
        budgets = jnp.maximum(frac * values * (probs @ masses), 1e-6)
    return Instance(masses, probs, values, budgets)


def random_chain(key: jax.Array, n_queries: int, length: int) -> Int[Array, "l q"]:
    """A random refinement chain ``(length + 1, Q)``, coarsest first: row 0 is one
    cluster, the last row the finest (every query alone), and each row refines the one
    before. Built by merging random clusters from the finest partition (a random merge
    tree), keeping ``length + 1`` of its levels. Jittable in ``key``."""
    check_key("key", key)
    n_queries = check_int("n_queries", n_queries, min=1)
    length = check_int("length", length, min=1, max=max(n_queries - 1, 1))
    return _random_chain(key, n_queries, length)


@functools.partial(jax.jit, static_argnames=("n_queries", "length"))
def _random_chain(key, n_queries, length):
    # Module-level jit: a second call compiles nothing (the loop body's closure is new
    # at every trace).
    k1, k2 = jax.random.split(key)
    # Merge tree: at step t (t = 1..Q-1) merge cluster of query perm[t] into that of an
    # earlier query perm[j], j < t, chosen at random: levels 0..Q-1 of clusters.
    perm = jax.random.permutation(k1, n_queries)
    parent_pos = jnp.floor(jax.random.uniform(k2, (n_queries,)) * jnp.arange(n_queries)
                           ).astype(jnp.int32)

    def level(n_merged):
        # Labels after the first n_merged merges: union-find by following parents.
        lab = jnp.arange(n_queries)
        def body(t, lab):
            src, dst = perm[t], perm[parent_pos[t]]
            merge = t <= n_merged
            return jnp.where(merge & (lab == lab[src]), lab[dst], lab)
        return jax.lax.fori_loop(1, n_queries, body, lab)

    # Levels with Q - 1 merges (one cluster) down to 0 merges (finest), evenly spaced.
    merges = jnp.round(jnp.linspace(n_queries - 1, 0, length + 1)).astype(jnp.int32)
    return jax.vmap(level)(merges).astype(jnp.int32)
