r"""Sound, compositional verification by CROWN bounds and branch-and-bound on boxes.

Each subsystem ``i`` is verified on its own local input box (:func:`~.certificates.domain_box`:
its state box, the reachability-bounded ``delta_i``, its neighbours' boxes, the
disturbance box) against its condition program (:func:`~.certificates.condition_program`):
conditions (C1), (C2) must be ``<= 0``; guards ``V(arg) <= 1``, ``S_i <= limit`` define
the reachable part of the box.

Branch-and-bound (input splitting, as in alpha-beta-CROWN's input BaB)
----------------------------------------------------------------------
A queue of boxes, processed in batches by one jitted, vmapped CROWN call:

* **certified** -- the CROWN upper bound of every condition is ``<= 0``;
* **pruned** -- the CROWN lower bound of some guard exceeds its limit: no reachable
  point is in the box (counted with the certified volume);
* **falsified** -- a point of the box violates a condition while satisfying every
  guard: a genuine counterexample, returned for training. The points tried are the
  centre, the vertex that maximises the linear upper bound of the worst condition,
  and the end points of a short projected gradient ascent from each (``attack_steps``
  signed-gradient steps on the largest condition minus a penalty on violated guards,
  projected on the box: the PGD falsifier of alpha-beta-CROWN's input BaB);
* otherwise the box is **split** in two along the coordinate with the largest
  ``|coefficient| x width`` of the worst condition's linear bound (BaBSR-style),
  until ``max_boxes`` boxes were bounded or a box is narrower than ``min_width``
  (relative to the root) in every coordinate: **unknown** (the split goes to the
  best-scoring coordinate that can still be halved).

The subsystem is certified when the queue empties with no falsified or unknown box.
Before any box: a subsystem whose certificates are quadratic and whose map is linear
or a ``tanh``/``sin`` ridge map is first given to the S-procedure (:mod:`.quadratic`,
``s_procedure=True``), which proves such conditions on a whole box at once where
branch-and-bound would need millions of boxes; where it proves only a box
``rho [lower, upper]`` around the equilibrium (dyadic ``rho >= 2^-s_procedure_halvings``),
branch-and-bound covers the rest and counts boxes inside it as proven.
Soundness rests on the bounds (:mod:`.bounds`: float rounding accounted for) and on
the guards being necessary conditions of reachability; the gain condition (G) is
checked exactly in float64 (:func:`~.certificates.gain_report`). Work is
``sum_i (boxes of subsystem i)``: with fixed neighbourhood sizes it grows linearly in
``N``; :func:`verify` reports the time per subsystem.
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.common import bounds as bd
from jaxsci.core.status import RESULTS, raise_if_failed
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.dynamics.lyapunov import certificates as ct
from jaxsci.dynamics.lyapunov import quadratic
from jaxsci.dynamics.lyapunov.systems import FAST_COMPILE, InterconnectedSystem, skeleton

__all__ = [
    "VerifyConfig",
    "SubsystemResult",
    "VerificationResult",
    "branch_and_bound",
    "local_problems",
    "verify_subsystem",
    "verify",
    "verify_modes",
]


@dataclasses.dataclass(frozen=True)
class VerifyConfig:
    """Branch-and-bound budget and options."""

    batch: int = 256  # boxes per jitted CROWN call
    max_boxes: int = 50_000  # boxes bounded per subsystem before giving up (unknown)
    min_width: float = 1e-4  # smallest split width, relative to the root box
    max_counterexamples: int = 32  # stop a subsystem after this many (0: never early)
    intermediate: str = "crown"  # pre-activation bounds: "crown" or "ibp"
    attack_steps: int = 8  # projected gradient ascent steps per box for falsification
    s_procedure: bool = True  # quadratic certificates: prove by the S-procedure first
    s_procedure_halvings: int = 6  # else prove it on 2^-k of the box (k <= this), BaB the rest

    def __post_init__(self):
        check_int("batch", self.batch, min=1)
        check_int("max_boxes", self.max_boxes, min=1)
        check_scalar("min_width", self.min_width, gt=0.0, lt=1.0)
        check_int("max_counterexamples", self.max_counterexamples, min=0)
        check_int("attack_steps", self.attack_steps, min=0)
        check_int("s_procedure_halvings", self.s_procedure_halvings, min=0)
        if self.intermediate not in ("crown", "ibp"):
            raise ValueError(f"intermediate must be 'crown' or 'ibp', got {self.intermediate!r}")


class SubsystemResult(NamedTuple):
    """One subsystem's branch-and-bound outcome.

    ``result`` is :data:`jaxsci.core.RESULTS` ``.successful`` when every box was proven
    or pruned, ``.not_verified`` otherwise (a counterexample, or the budget ran out);
    ``certified`` is the same as a Python bool.
    """

    result: RESULTS
    certified_fraction: float  # volume proven or pruned, over the box volume
    falsified_fraction: float
    unknown_fraction: float
    boxes: int
    seconds: float
    counterexamples: np.ndarray  # (k, n_u) local inputs violating a condition
    violations: np.ndarray  # (k,) the largest condition value at each
    proof: str = "branch-and-bound"  # or "s-procedure" (:mod:`.quadratic`, no boxes)

    @property
    def certified(self) -> bool:
        return bool(self.result == RESULTS.successful)


class VerificationResult(NamedTuple):
    """The whole system's verification.

    ``result`` is ``RESULTS.successful`` when every subsystem is certified and the gain
    condition (G) holds, ``RESULTS.not_verified`` otherwise; ``certified`` is the same
    as a Python bool.
    """

    result: RESULTS
    certified_fraction: float  # mean over subsystems
    seconds: float  # branch-and-bound time, all subsystems (compilation excluded)
    compile_seconds: float
    boxes: int
    subsystems: list[SubsystemResult]
    gains: ct.GainReport

    @property
    def certified(self) -> bool:
        return bool(self.result == RESULTS.successful)


def _bound_batch_impl(skel, data_i, prog_i, lo, hi, eta, eta_reach, intermediate,
                      attack_steps=0):
    """CROWN bounds of every box in the batch, plus the conditions at the points tried
    for falsification (centre, worst vertex, and their projected-gradient ascents)."""
    cp = ct.condition_program(skel, data_i, prog_i, eta=eta, eta_reach=eta_reach)
    n_c = ct.n_conditions(skel)
    limits = ct.guard_limits(skel, data_i)

    def attack_objective(u):
        v = ct.condition_values(skel, data_i, prog_i, u, eta=eta, eta_reach=eta_reach)
        scale = jnp.maximum(limits, 1e-6)
        return jnp.max(v[:n_c]) - 10.0 * jnp.sum(jax.nn.relu(v[n_c:] - limits) / scale)

    grad_obj = jax.grad(attack_objective)

    def attack(u, lo_b, hi_b):
        step = (hi_b - lo_b) / 4.0

        def body(t, u):
            s = step / (1.0 + t)
            return jnp.clip(u + s * jnp.sign(grad_obj(u)), lo_b, hi_b)

        return jax.lax.fori_loop(0, attack_steps, body, u)

    def one(lo_b, hi_b):
        lb = bd.crown(cp, lo_b, hi_b, intermediate=intermediate)
        coef = lb.upper_coef[:n_c]
        worst = jnp.argmax(lb.upper[:n_c])
        vertex = jnp.where(coef[worst] > 0, hi_b, lo_b)
        centre = 0.5 * (lo_b + hi_b)
        pts = [centre, vertex]
        if attack_steps:
            pts += [attack(centre, lo_b, hi_b), attack(vertex, lo_b, hi_b)]
        pts = jnp.stack(pts)
        vals = bd.apply(cp, pts)
        return (lb.upper[:n_c], lb.lower[n_c:], lb.upper[n_c:], coef[worst],
                lb.lower_coef[n_c:], pts, vals)

    return jax.vmap(one)(lo, hi)


_BOUND_CACHE: dict = {}


def _bound_fn(skel, data_i, prog_i, eta, eta_reach, intermediate, attack_steps=0):
    """A jitted ``(lo, hi) -> bounds`` for one subsystem.

    The static structure (programs' activation codes, the system's flags) is split off
    once and keys a cache of ``jax.jit`` functions of the flat array leaves: every
    subsystem of a system (and every ``N``) shares one compiled function, and a call
    costs a plain ``jit`` dispatch (``eqx.filter_jit`` re-partitions the pytrees at
    every call, tens of milliseconds here).
    """
    dyn, static = eqx.partition((skel, data_i, prog_i), eqx.is_array)
    leaves, treedef = jax.tree_util.tree_flatten(dyn)
    key = (treedef, jax.tree_util.tree_structure(static), tuple(
        jax.tree_util.tree_leaves(static)), eta, eta_reach, intermediate, attack_steps)
    fn = _BOUND_CACHE.get(key)
    if fn is None:
        def run(leaves, lo, hi):
            sk, d, p = eqx.combine(jax.tree_util.tree_unflatten(treedef, leaves), static)
            return _bound_batch_impl(sk, d, p, lo, hi, eta, eta_reach, intermediate,
                                     attack_steps)

        # Compile time dominates on CPU (small, unrolled programs): XLA's backend
        # optimisation level 0 compiles ~3x faster at a negligible cost in run time.
        fn = jax.jit(run, compiler_options=FAST_COMPILE)
        _BOUND_CACHE[key] = fn
    return lambda lo, hi: fn(leaves, lo, hi)


def _split_dims(ub, lbg, ubg, coef, gcoef, width, rel_width, limits, splittable):
    """Split score per coordinate, each term normalised to sum 1 over coordinates:
    the worst condition's ``|coef| width`` (BaBSR-style), for every guard undecided on
    the box its ``|coef| width`` (splitting there lets it prune the unreachable part),
    and half the relative width (so that coordinates that enter only through
    relaxation looseness, not the linear bound's slope, are split too).

    Only ``splittable`` coordinates (not yet at the minimum width) compete: a box is
    given up as unknown when none is left, not when the best-scoring coordinate is
    exhausted (a steep guard can keep scoring highest on an already thin side).
    Returns the chosen coordinates and whether each box had one."""
    def norm(x):
        return x / np.maximum(x.sum(-1, keepdims=True), 1e-30)

    score = norm(np.abs(coef) * width)
    undecided = (lbg <= limits) & (ubg > limits)  # (B, G)
    gs = np.abs(gcoef) * width[:, None, :]  # (B, G, n)
    score = score + np.sum(undecided[..., None] * norm(gs), axis=1)
    score = score + 0.5 * norm(rel_width)
    score = np.where(splittable, score, -np.inf)
    return np.argmax(score, axis=1), splittable.any(axis=1)


def branch_and_bound(bound_fn, lower, upper, n_cond, limits, config: VerifyConfig,
                     inner=None):
    """Generic BaB over ``[lower, upper]``; ``bound_fn(lo (B,n), hi (B,n))`` returns
    ``(ub_cond (B,c), lb_guard (B,g), ub_guard (B,g), coef (B,n), guard_coef (B,g,n),
    points (B,P,n), values (B,P,c+g))`` (``coef``: the worst condition's upper linear
    bound; ``guard_coef``: the guards' lower linear bounds). ``inner = (lo, hi)``: a box
    already proven (by :func:`~.quadratic.local_radius`); boxes inside it count as
    proven without being bounded.

    Returns a :class:`SubsystemResult` (``seconds`` measured here).
    """
    lower, upper = np.asarray(lower, np.float32), np.asarray(upper, np.float32)
    if lower.shape != upper.shape or lower.ndim != 1:
        raise ValueError(f"lower and upper must be vectors of one shape, got {lower.shape} "
                         f"and {upper.shape}")
    bad = np.flatnonzero(lower > upper)
    if bad.size:
        raise ValueError(f"empty domain: lower > upper at index {int(bad[0])} "
                         f"({lower[bad[0]]} > {upper[bad[0]]})")
    limits = np.asarray(limits, np.float32)
    t0 = time.perf_counter()
    root_w = upper - lower
    live = root_w > 0
    denom = np.where(live, root_w, 1.0)

    def frac_volume(lo, hi):
        return np.prod(np.where(live, (hi - lo) / denom, 1.0), axis=-1)

    q_lo, q_hi = [lower[None]], [upper[None]]
    done_vol = fals_vol = unk_vol = 0.0
    boxes = 0
    cex, viol = [], []
    B = config.batch
    while q_lo and boxes < config.max_boxes:
        lo = np.concatenate(q_lo, 0)
        hi = np.concatenate(q_hi, 0)
        take = min(B, lo.shape[0])
        cur_lo, cur_hi = lo[:take], hi[:take]
        rest_lo, rest_hi = lo[take:], hi[take:]
        pad = B - take
        blo = np.concatenate([cur_lo, np.repeat(cur_lo[:1], pad, 0)], 0)
        bhi = np.concatenate([cur_hi, np.repeat(cur_hi[:1], pad, 0)], 0)
        out = [np.asarray(v)[:take] for v in bound_fn(blo, bhi)]
        ub, lbg, ubg, coef, gcoef, pts, vals = out
        boxes += take
        vol = frac_volume(cur_lo, cur_hi)
        pruned = np.any(lbg > limits, axis=1)
        proven = np.all(ub <= 0.0, axis=1) | pruned
        done_vol += float(vol[proven].sum())
        cond_v = vals[..., :n_cond]
        guard_ok = np.all(vals[..., n_cond:] <= limits, axis=-1)
        bad_pt = np.any(cond_v > 0, axis=-1) & guard_ok  # (take, P)
        falsified = ~proven & bad_pt.any(1)
        for b in np.flatnonzero(falsified):
            p = int(np.argmax(np.where(bad_pt[b], cond_v[b].max(-1), -np.inf)))
            cex.append(pts[b, p])
            viol.append(float(cond_v[b, p].max()))
        fals_vol += float(vol[falsified].sum())
        split = ~proven & ~falsified
        new_lo, new_hi = [rest_lo], [rest_hi]
        if split.any():
            s_lo, s_hi = cur_lo[split], cur_hi[split]
            w = s_hi - s_lo
            dim, can_split = _split_dims(ub[split], lbg[split], ubg[split], coef[split],
                                         gcoef[split], w, w / denom * live, limits,
                                         live & (w >= config.min_width * denom))
            too_small = ~can_split
            unk_vol += float(frac_volume(s_lo[too_small], s_hi[too_small]).sum())
            keep = ~too_small
            s_lo, s_hi, dim = s_lo[keep], s_hi[keep], dim[keep]
            rows = np.arange(dim.size)
            mid = 0.5 * (s_lo[rows, dim] + s_hi[rows, dim])
            left_hi = s_hi.copy()
            left_hi[rows, dim] = mid
            right_lo = s_lo.copy()
            right_lo[rows, dim] = mid
            c_lo, c_hi = np.concatenate([s_lo, right_lo]), np.concatenate([left_hi, s_hi])
            if inner is not None:
                inside = np.all((c_lo >= inner[0]) & (c_hi <= inner[1]), axis=1)
                done_vol += float(frac_volume(c_lo[inside], c_hi[inside]).sum())
                c_lo, c_hi = c_lo[~inside], c_hi[~inside]
            new_lo.append(c_lo)
            new_hi.append(c_hi)
        q_lo = [a for a in new_lo if a.shape[0]]
        q_hi = [a for a in new_hi if a.shape[0]]
        if config.max_counterexamples and len(cex) >= config.max_counterexamples:
            break
    if q_lo:
        unk_vol += float(frac_volume(np.concatenate(q_lo), np.concatenate(q_hi)).sum())
    seconds = time.perf_counter() - t0
    n_u = lower.shape[0]
    certified = not q_lo and fals_vol == 0.0 and unk_vol == 0.0 and not cex
    return SubsystemResult(
        result=RESULTS.successful if certified else RESULTS.not_verified,
        certified_fraction=float(min(done_vol, 1.0)),
        falsified_fraction=float(fals_vol),
        unknown_fraction=float(unk_vol),
        boxes=int(boxes),
        seconds=float(seconds),
        counterexamples=np.asarray(cex, np.float32).reshape(-1, n_u),
        violations=np.asarray(viol, np.float32),
    )


@eqx.filter_jit
def local_problems(system: InterconnectedSystem, cert: ct.Certificate, reach: ct.Reach):
    """Every subsystem's verification problem, stacked over ``N`` (leading axis).

    Args:
      system: the interconnected system.
      cert: its certificates and gains.
      reach: the reachability constants of (C2).

    Returns:
      ``(data, programs, lower, upper, limits)``: the local data of
      :func:`~.certificates.local_data`, the local dynamics programs, the local input
      boxes ``[lower_i, upper_i]`` (:func:`~.certificates.domain_box`) and the guard
      limits (:func:`~.certificates.guard_limits`).
    """
    data = ct.local_data(cert, system, reach)
    progs = jax.vmap(system.build)(system.params)
    lo, hi = jax.vmap(lambda d: ct.domain_box(system, d, cert.eta_reach))(data)
    limits = jax.vmap(lambda d: ct.guard_limits(system, d))(data)
    return data, progs, lo, hi, limits


# local_problems at the top level (compiled for every N): the fast-compile setting.
_local_problems_fast = eqx.filter_jit(local_problems.__wrapped__, compiler_options=FAST_COMPILE)


def _subsystem_fns(system, cert, reach, config):
    """One bound function per subsystem (host-side slices of the stacked data)."""
    skel = skeleton(system)
    data, progs, lo, hi, limits = jax.device_get(_local_problems_fast(system, cert, reach))
    out = []
    for i in range(system.n_sub):
        data_i = jax.tree_util.tree_map(lambda a, i=i: a[i], data)  # NumPy: no device ops
        prog_i = jax.tree_util.tree_map(lambda a, i=i: a[i], progs)
        bound_fn = _bound_fn(skel, data_i, prog_i, cert.eta, cert.eta_reach,
                             config.intermediate, config.attack_steps)
        out.append((bound_fn, np.asarray(lo[i]), np.asarray(hi[i]), np.asarray(limits[i]),
                    data_i, prog_i))
    return out


def _s_procedure(system, cert, fn, config):
    """``(result, inner)``: the subsystem's result when :mod:`.quadratic` proves the
    whole box (else ``None``) and the box it proves around 0 (else ``None``)."""
    if not config.s_procedure:
        return None, None
    _, lo, hi, _, data_i, prog_i = fn
    t0 = time.perf_counter()
    rho, _ = quadratic.local_radius(skeleton(system), data_i, prog_i, lo, hi, cert.eta,
                                    cert.eta_reach, config.s_procedure_halvings)
    if rho == 0.0:
        return None, None
    if rho < 1.0:
        inner = (np.float32(rho) * lo, np.float32(rho) * hi)
        return None, (inner, rho, time.perf_counter() - t0)
    n_u = lo.shape[0]
    return SubsystemResult(RESULTS.successful, 1.0, 0.0, 0.0, 0, time.perf_counter() - t0,
                           np.zeros((0, n_u), np.float32), np.zeros(0, np.float32),
                           "s-procedure"), None


def _bab(fn, n_cond, config, local):
    """Branch-and-bound of one subsystem, outside the S-procedure's box when there is one."""
    if local is None:
        return branch_and_bound(fn[0], fn[1], fn[2], n_cond, fn[3], config)
    inner, rho, secs = local
    r = branch_and_bound(fn[0], fn[1], fn[2], n_cond, fn[3], config, inner=inner)
    return r._replace(seconds=r.seconds + secs,
                      proof=f"s-procedure on rho = {rho:g} of the box + branch-and-bound")


def verify_subsystem(
    system: InterconnectedSystem,
    cert: ct.Certificate,
    reach: ct.Reach,
    i: int,
    config: VerifyConfig = VerifyConfig(),
    *,
    throw: bool = True,
) -> SubsystemResult:
    """Branch-and-bound on subsystem ``i``'s conditions over its delay domain.

    Args:
      system, cert, reach: as for :func:`verify`.
      i: the subsystem, ``0 <= i < N``.
      config: the branch-and-bound budget.
      throw: raise ``RESULTS.not_verified``'s message when the subsystem is not
        certified (lineax's convention); ``False`` returns the result to inspect.

    Returns:
      :class:`SubsystemResult`.
    """
    _check(system, cert, reach)
    i = check_int("i", i, min=0, max=system.n_sub - 1)
    _check_config(config)
    fn = _subsystem_fns(system, cert, reach, config)[i]
    res, local = _s_procedure(system, cert, fn, config)
    if res is None:
        res = _bab(fn, ct.n_conditions(system), config, local)
    raise_if_failed(jnp.zeros(()), res.result, throw)
    return res


def verify(
    system: InterconnectedSystem,
    cert: ct.Certificate,
    reach: ct.Reach,
    config: VerifyConfig = VerifyConfig(),
    *,
    throw: bool = True,
) -> VerificationResult:
    """Verify every subsystem and the gain condition; compile time reported apart.

    Args:
      system: the interconnected system.
      cert: its certificates and gains.
      reach: the reachability constants of (C2) (:func:`~.train.estimate_reach`).
      config: the branch-and-bound budget.
      throw: raise ``RESULTS.not_verified``'s message when the system is not certified
        (lineax's convention); ``False`` returns the result (counterexamples,
        certified fractions) to inspect or train on.

    Returns:
      :class:`VerificationResult`; ``result == RESULTS.successful`` (``certified``)
      when every subsystem and (G) are proven.
    """
    _check(system, cert, reach)
    _check_config(config)
    t0 = time.perf_counter()
    fns = _subsystem_fns(system, cert, reach, config)
    exact, local = zip(*[_s_procedure(system, cert, fn, config) for fn in fns], strict=True)
    todo = [i for i, r in enumerate(exact) if r is None]
    if todo:
        # Warm-up: compile the batched bound once (every subsystem shares the program).
        bound_fn, lo, hi = fns[todo[0]][:3]
        jax.block_until_ready(bound_fn(np.repeat(lo[None], config.batch, 0),
                                       np.repeat(hi[None], config.batch, 0)))
    compile_s = (time.perf_counter() - t0 - sum(r.seconds for r in exact if r is not None)
                 - sum(loc[2] for loc in local if loc is not None))
    results = [
        r if r is not None else _bab(fn, ct.n_conditions(system), config, loc)
        for r, fn, loc in zip(exact, fns, local, strict=True)
    ]
    rep = ct.gain_report(cert, system)
    ok = rep.ok and all(r.certified for r in results)
    out = VerificationResult(
        result=RESULTS.successful if ok else RESULTS.not_verified,
        certified_fraction=float(np.mean([r.certified_fraction for r in results])),
        seconds=float(sum(r.seconds for r in results)),
        compile_seconds=float(compile_s),
        boxes=int(sum(r.boxes for r in results)),
        subsystems=results,
        gains=rep,
    )
    raise_if_failed(jnp.zeros(()), out.result, throw)
    return out


def verify_modes(
    modes: list[InterconnectedSystem],
    cert: ct.Certificate,
    reach: ct.Reach,
    config: VerifyConfig = VerifyConfig(),
    *,
    throw: bool = True,
) -> list[VerificationResult]:
    """:func:`verify` in every mode of a switched system (:func:`~.systems.delay_modes`).

    One certificate valid in every mode proves stability under any switching between
    them (the conditions are per step). Certified when every mode is; the results are
    returned per mode.
    """
    modes = list(modes)
    if not modes:
        raise ValueError("modes must not be empty")
    out = [verify(s, cert, reach, config, throw=False) for s in modes]
    ok = all(r.certified for r in out)
    raise_if_failed(jnp.zeros(()), RESULTS.successful if ok else RESULTS.not_verified, throw)
    return out


def _check_config(config):
    if not isinstance(config, VerifyConfig):
        raise TypeError(f"config must be a VerifyConfig, got {type(config).__name__}")


def _check(system, cert, reach):
    if not isinstance(system, InterconnectedSystem):
        raise TypeError(f"system must be an InterconnectedSystem, got {type(system).__name__}")
    if not isinstance(cert, ct.Certificate):
        raise TypeError(f"cert must be a Certificate, got {type(cert).__name__}")
    if not isinstance(reach, ct.Reach):
        raise TypeError(f"reach must be a Reach, got {type(reach).__name__}")
    n_sub, n = system.n_sub, system.n
    if cert.W1.shape[0] != n_sub or cert.W1.shape[2] != n:
        raise ValueError(
            f"cert has {cert.W1.shape[0]} certificates on states of dimension "
            f"{cert.W1.shape[2]}; the system has N = {n_sub} subsystems of dimension n = {n}"
        )
    if cert.b_raw.shape != (n_sub, system.K):
        raise ValueError(
            f"cert.b_raw must have shape {(n_sub, system.K)} (one gain per neighbour slot), "
            f"got {cert.b_raw.shape}"
        )
    if reach.kappa.shape != (n_sub,) or reach.kappa_w.shape != (n_sub,):
        raise ValueError(f"reach.kappa and reach.kappa_w must have shape ({n_sub},)")
