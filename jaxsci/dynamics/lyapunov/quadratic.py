r"""Exact proofs for quadratic certificates by the S-procedure.

When subsystem ``i``'s certificates are quadratic, ``V(x) = x^T Q x`` (no ReLU part:
``W_2 = 0``), and its local map is linear, ``f_i(u) = M u``, or a ridge map
``f_i(u) = A u + B sigma(C u + d) + e`` (:func:`~.bounds.ridge`: the benchmarks'
``tanh`` saturations and ``sin`` power flows), the conditions are quadratic forms of
``v = [u; psi]``, ``psi_j = sigma_j(c_j u + d_j) - sigma_j(d_j)``, and ``psi`` obeys a
sector bound on the box: ``alpha_j s_j <= psi_j <= beta_j s_j`` (for ``s_j = c_j u >=
0``; reversed below), ``[alpha_j, beta_j]`` the range of the secant slope
(:func:`sector`), a quadratic constraint ``(psi_j - alpha_j s_j)(beta_j s_j - psi_j)
>= 0``. Branch-and-bound on boxes handles such conditions poorly: the relaxations of
squares lose ``O(h^2)`` on a box of width ``h`` while the slack of a valid
certificate is ``O(|u|^2)``, so in the 7-9 dimensional local domains millions of
boxes are needed (``docs/lyapunov.md``). Instead the conditions are proven on a whole
box at once:

* the windowed maxima are bounded below by convex combinations,
  ``max(V(x), V(x^d)) >= theta V(x) + (1 - theta) V(x^d)`` for any
  ``theta in [0, 1]`` (one per argument group), the reachability term
  ``beta_i [S_i - ...]_+ >= 0`` by zero;
* then (C1) ``<= v^T H v - eta`` with
  ``H = F^T Q_i F - a_i (theta_0 A_x + (1 - theta_0) A_{x^d}) - sum_k b_ik
  (theta_k A_k + (1 - theta_k) A_k^d) - c_i S_w^T S_w + sum_j tau_j Sigma_j``
  (``f_i = F v``; ``A_arg = S_arg^T Q S_arg`` for the selection ``S_arg`` of each
  argument; ``Sigma_j`` the sector constraints with multipliers ``tau_j >= 0``), and
  each (C2) component ``<= v^T (r_c r_c^T - kappa_i sum_t theta_t A_t - kw_i S_w^T
  S_w + sum_j tau_j Sigma_j) v - eta_r`` with ``theta`` in the simplex over all
  arguments (``max_args V >= sum_t theta_t V(arg_t)``);
* a condition is proven when ``lambda_max(H)_+ R^2 <= eta`` for some multipliers,
  with ``R^2`` a bound of ``|v|^2`` on the box (``lambda_max <= 0``: on every ``v``
  the sectors allow; a small positive ``lambda_max`` uses the offset ``eta``). The
  multipliers minimise the convex function ``lambda_max(H)`` (scipy, a few starts);
  the check itself is the float64 eigenvalue plus a bound on its error (Weyl's
  inequality with the backward error of the symmetric eigensolver and of forming
  ``H`` from the float32 weights).

A linear map has no sector constraints and is proven on all of ``R^{n_u}``. For a
ridge map the sectors of the whole box are wide (``tanh`` saturates), which can leave
the condition unproven where it holds; near the equilibrium they shrink to the
slope of the linearisation, so :func:`local_radius` finds the largest dyadic
fraction ``rho`` of the box on which the S-procedure proves the conditions, and
branch-and-bound covers only the rest (:func:`~.verify.branch_and_bound`'s
``inner`` box). The sectors and the program are those of real arithmetic on the
float32 weights.

:func:`switched_certificate` designs such certificates by linear matrix inequalities
(cvxpy) for the delay modes of :func:`~.systems.delay_modes`: one quadratic ``V_i`` per
subsystem common to every mode, its gains from the same S-procedure matrices.

This is the S-procedure (Yakubovich; Boyd et al., *Linear Matrix Inequalities in
System and Control Theory*, 1994, Sec. 2.6.3) with the multipliers restricted to the
convex combinations above: sufficient, not necessary. A subsystem it does not prove
goes to branch-and-bound as before (:func:`~.verify.verify`).
"""

from __future__ import annotations

import itertools
import time
import warnings
from typing import NamedTuple

import jax
import numpy as np
import scipy.optimize

from jaxsci.common import bounds as bd
from jaxsci.core.validation import check_int
from jaxsci.dynamics.lyapunov import certificates as ct
from jaxsci.dynamics.lyapunov.systems import InterconnectedSystem, input_layout, local_programs

__all__ = ["linear_map", "ridge_form", "sector", "quadratic_form", "prove_subsystem",
           "local_radius", "cauchy_schwarz_certificate", "switched_certificate",
           "SwitchedReport"]

_EPS = np.finfo(np.float64).eps


def linear_map(prog: bd.Program) -> np.ndarray | None:
    """``M`` with ``prog(u) = M u`` exactly in real arithmetic, or ``None`` when the
    program is not linear (a non-identity activation or a non-zero bias)."""
    M = None
    for layer in prog.layers:
        if any(a != bd.IDENTITY for a in layer.act) or np.any(np.asarray(layer.b) != 0):
            return None
        W = np.asarray(layer.W, np.float64)
        M = W if M is None else W @ M
    return M


def quadratic_form(p: dict) -> np.ndarray | None:
    """``Q`` with ``V(x) = x^T Q x`` for one certificate's data (``None`` if it has a
    non-zero ReLU part): ``Q = diag(sd^2) + L L^T``, ``sd`` the program's rounded-up
    ``sqrt(D)`` (float32, as :func:`~.certificates.v_program` uses it)."""
    if np.any(np.asarray(p["W2"]) != 0):
        return None
    sd = np.asarray(ct._sqrt_d(np.asarray(p["D"], np.float32)), np.float64)
    L = np.asarray(p["L"], np.float64)
    return np.diag(sd**2) + L @ L.T


def _lam_max(H, scale):
    """Upper bound of ``lambda_max`` of the exact matrix that ``H`` approximates.

    ``scale`` bounds the Frobenius norm of the sum of the terms' magnitudes: forming
    ``H`` in float64 from float32 data errs by at most ``~n eps scale`` per entry
    (sums of ``O(n)`` products), the symmetric eigensolver by ``O(n eps ||H||_2)``
    (backward stable); Weyl's inequality moves the eigenvalue by no more than
    their norms. The factor 64 is generous on both."""
    n = H.shape[0]
    lam = float(np.linalg.eigvalsh(0.5 * (H + H.T))[-1])
    return lam + 64.0 * n * _EPS * (scale + float(np.linalg.norm(H, 2)))


def _minimise(build, k, p, simplex, scale, starts=4):
    """``min lambda_max(build(theta, tau))`` over ``theta`` in ``[0, 1]^k`` (or the
    simplex) and sector multipliers ``tau >= 0`` (``p`` of them); convex, so a few
    Nelder-Mead starts suffice in these few dimensions."""
    if k + p == 0:
        return _lam_max(build(np.zeros(0), np.zeros(0)), scale), np.zeros(0)

    def split(z):
        zt, zs = z[:k], z[k:]
        if simplex and k:
            e = np.exp(zt - zt.max())
            th = e / e.sum()
        else:
            th = 1.0 / (1.0 + np.exp(-zt))
        return th, scale * np.exp(np.clip(zs, -60.0, 60.0))

    def obj(z):
        H = build(*split(z))
        if not np.all(np.isfinite(H)):
            return np.inf
        return float(np.linalg.eigvalsh(H)[-1])

    rng = np.random.default_rng(0)
    best = (np.inf, None)
    for s in range(starts):
        z0 = np.concatenate([np.zeros(k), np.full(p, -2.0)])
        if s:
            z0 = z0 + rng.normal(0.0, 2.0, k + p)
        simplex0 = np.vstack([z0, z0 + 1.5 * np.eye(k + p)])
        r = scipy.optimize.minimize(obj, z0, method="Nelder-Mead",
                                    options={"xatol": 1e-6, "fatol": 1e-12,
                                             "maxiter": 400 * (k + p),
                                             "initial_simplex": simplex0})
        th, tau = split(r.x)
        lam = _lam_max(build(th, tau), scale + float(np.sum(tau)))
        if lam < best[0]:
            best = (lam, np.concatenate([th, tau]))
        if lam <= 0:
            break
    return best


def ridge_form(prog: bd.Program) -> tuple[np.ndarray, np.ndarray, list] | None:
    """``prog(u) = F [u; psi] + c0`` with ``psi_j = sigma_j(w_j u + b_j) - sigma_j(b_j)``.

    Covers the affine programs (``psi`` empty) and the programs with one layer of
    scalar activations between affine maps: :func:`~.bounds.ridge` (two layers), also
    composed with affine selections before and after it (the history systems of
    :func:`~.systems.constant_delay` and :func:`~.systems.delay_modes`; identity
    activations elsewhere). Returns ``(F, c0, units)`` in float64, ``units`` a list of
    ``(code, w_j, b_j)`` per non-identity unit, or ``None`` for any other shape.
    """
    layers = prog.layers

    def affine_of(ls, n_in):
        M, c = np.eye(n_in), np.zeros(n_in)
        for layer in ls:
            W, b = np.asarray(layer.W, np.float64), np.asarray(layer.b, np.float64)
            M, c = W @ M, W @ c + b
        return M, c

    nonlin = [k for k, layer in enumerate(layers) if any(a != bd.IDENTITY for a in layer.act)]
    n_in = np.asarray(layers[0].W).shape[1]
    if not nonlin:
        M, c = affine_of(layers, n_in)
        return M, c, []
    if len(nonlin) > 1:
        return None
    k = nonlin[0]
    M0, c0 = affine_of(layers[:k], n_in)
    hid = layers[k]
    W1 = np.asarray(hid.W, np.float64) @ M0
    b1 = np.asarray(hid.W, np.float64) @ c0 + np.asarray(hid.b, np.float64)
    W2, b2 = affine_of(layers[k + 1:], W1.shape[0])
    codes = np.asarray(hid.act)
    lin = codes == bd.IDENTITY
    units, offsets = [], np.zeros(W1.shape[0])
    for j in np.flatnonzero(~lin):
        fn = _SIGMA.get(int(codes[j]))
        if fn is None:
            return None
        units.append((int(codes[j]), W1[j], float(b1[j])))
        offsets[j] = fn(b1[j])
    F = np.concatenate([W2[:, lin] @ W1[lin], W2[:, ~lin]], 1)
    c0 = W2[:, lin] @ b1[lin] + W2[:, ~lin] @ offsets[~lin] + b2
    return F, c0, units


_SIGMA = {bd.TANH: np.tanh, bd.SIN: np.sin}


def _cos_range(lo: float, hi: float) -> tuple[float, float]:
    """Range of ``cos`` on ``[lo, hi]``."""
    vals = [np.cos(lo), np.cos(hi)]
    k0, k1 = np.ceil(lo / np.pi), np.floor(hi / np.pi)
    for k in np.arange(k0, k1 + 1)[:4]:  # extrema at multiples of pi (two suffice)
        vals.append(np.cos(k * np.pi))
    return min(vals), max(vals)


def sector(code: int, b: float, slo: float, shi: float) -> tuple[float, float]:
    """Bounds ``alpha <= (sigma(b + s) - sigma(b)) / s <= beta`` for ``s`` in ``[slo, shi]``.

    ``tanh`` with ``b = 0``: the ratio ``tanh(s)/s`` falls with ``|s|``, so
    ``[tanh(Z)/Z, 1]`` with ``Z = max |s|``; ``tanh`` with ``b != 0``: the range of the
    derivative ``1 - tanh^2`` between ``b`` and ``b + s`` (mean value theorem). ``sin``:
    ``(sin(b + s) - sin b)/s = sinc(s/2) cos(b + s/2)``, the product of the two ranges.
    Both ends are widened by ``1e-9 (1 + |.|)`` (float64 evaluation).
    """
    lo, hi = min(slo, 0.0), max(shi, 0.0)
    Z = max(-lo, hi)
    if code == bd.TANH:
        if b == 0.0:
            a, c = (np.tanh(Z) / Z if Z > 0 else 1.0), 1.0
        else:
            x0, x1 = b + lo, b + hi
            near = 0.0 if x0 <= 0.0 <= x1 else min(abs(x0), abs(x1))
            far = max(abs(x0), abs(x1))
            a, c = 1.0 - np.tanh(far) ** 2, 1.0 - np.tanh(near) ** 2
    elif code == bd.SIN:
        h = Z / 2.0
        # sinc falls on [0, pi]; beyond, its global minimum -0.21723... (at x = 4.4934)
        sinc_lo = (np.sin(h) / h if h > 0 else 1.0) if h < np.pi else -0.2173
        c_lo, c_hi = _cos_range(b + lo / 2.0, b + hi / 2.0)
        prods = [x * y for x in (sinc_lo, 1.0) for y in (c_lo, c_hi)]
        a, c = min(prods), max(prods)
    else:
        raise ValueError(f"no sector bound for activation code {code}")
    return a - 1e-9 * (1.0 + abs(a)), c + 1e-9 * (1.0 + abs(c))


class _Pieces(NamedTuple):
    """Subsystem ``i``'s conditions as quadratic forms of ``v = [u; d]`` (see the
    module doc): ``F`` (the map on ``v``), ``c0``, ``Qi``, the argument ``forms``,
    the scaled sector constraints, the disturbance form ``Ww``, the argument
    ``groups`` with their ``gains``, the ``live`` coordinates and ``R2``."""

    F: np.ndarray
    c0: np.ndarray
    Qi: np.ndarray
    forms: list
    sectors: list
    Ww: np.ndarray
    groups: list
    gains: list
    live: np.ndarray
    R2: float


def _pieces(system, data_i, prog_i, lower, upper):
    """:class:`_Pieces` of subsystem ``i`` on the box, or the reason they do not exist."""
    form = ridge_form(prog_i)
    if form is None:
        return "the local map is not affine or a tanh/sin ridge map"
    F, c0, units = form
    lay = input_layout(system)
    lower, upper = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    fixed = upper <= lower
    if np.any(fixed & ((lower != 0) | (upper != 0))):
        return "a fixed input coordinate is not zero"
    m, p = lay.size, len(units)
    live = np.concatenate([~fixed, np.ones(p, bool)])
    own = data_i["own"]
    Qi = quadratic_form(own)
    if Qi is None:
        return "the certificate has a ReLU part"
    # Sector constraints alpha_j s_j <= psi_j <= beta_j s_j (times the sign of s_j),
    # s_j = w_j u, valid on the box. Centred and scaled, psi_j = m_j s_j + r_j d_j with
    # m_j, r_j the sector's mid-point and half-width: the constraint is d_j^2 <= s_j^2,
    # well conditioned however narrow the sector (near 0 it shrinks to the slope).
    # Forms act on v = [u; d]; T maps v to [u; psi].
    T = np.eye(m + p)
    sectors, psi2 = [], 0.0
    for j, (code, w, b) in enumerate(units):
        w = np.where(fixed, 0.0, w)
        slo = float(np.sum(np.minimum(w * lower, w * upper)))
        shi = float(np.sum(np.maximum(w * lower, w * upper)))
        pad = 1e-9 * float(np.sum(np.abs(w) * np.maximum(np.abs(lower), np.abs(upper))))
        al, be = sector(code, b, slo - pad, shi + pad)
        T[m + j, :m] = 0.5 * (al + be) * w
        T[m + j, m + j] = 0.5 * (be - al)
        psi2 += (max(-slo, shi, 0.0) + pad) ** 2  # |d_j| <= |s_j|
        wv = np.concatenate([w, np.zeros(p)])
        S = np.outer(wv, wv)
        S[m + j, m + j] -= 1.0
        sectors.append(S / max(float(np.linalg.norm(S, 2)), 1e-300))
    F = F @ T
    R2 = float(np.sum(np.maximum(lower**2, upper**2))) + psi2

    def pad_u(A):
        out = np.zeros((m + p, m + p))
        out[:m, :m] = A
        return out

    args = ct._args(system)
    forms = []
    for kind, k, S in args:
        if kind == "own":
            Q = Qi
        else:
            Q = quadratic_form({key: np.asarray(v)[k] for key, v in data_i["nbr"].items()})
            if Q is None:
                return "a neighbour's certificate has a ReLU part"
        S = np.asarray(S, np.float64)
        forms.append(pad_u(S.T @ Q @ S))
    b = np.asarray(data_i["b"], np.float64)
    Sw = np.zeros((system.n_w, m))
    Sw[:, lay.w] = np.eye(system.n_w)
    Ww = pad_u(Sw.T @ Sw)
    # Groups of copies (own; one per neighbour slot) with their gains.
    groups, gains = [], []
    own_t = [t for t, (kind, _, _) in enumerate(args) if kind == "own"]
    groups.append(own_t)
    gains.append(float(data_i["a"]))
    for k in range(system.K):
        ts = [t for t, (kind, kk, _) in enumerate(args) if kind == "nbr" and kk == k]
        if ts:
            groups.append(ts)
            gains.append(float(b[k]))
    return _Pieces(F, c0, Qi, forms, sectors, Ww, groups, gains, live, R2)


def prove_subsystem(system: InterconnectedSystem, data_i: dict, prog_i: bd.Program,
                    lower: np.ndarray, upper: np.ndarray, eta: float,
                    eta_reach: float) -> tuple[bool, str]:
    """Try to prove subsystem ``i``'s conditions by the S-procedure.

    Args:
      system: the system (structure).
      data_i, prog_i: subsystem ``i``'s slices of :func:`~.certificates.local_data` and
        of the local programs (host arrays).
      lower, upper: its local domain box (the sector bounds hold on it; ``R^2`` bounds
        ``|u|^2 + |psi|^2`` there).
      eta, eta_reach: the offsets of (C1) and (C2).

    Returns:
      ``(proven, reason)``: ``reason`` says which precondition or condition failed.
    """
    pc = _pieces(system, data_i, prog_i, lower, upper)
    if isinstance(pc, str):
        return False, pc
    F, c0, Qi, forms, sectors, Ww, groups, gains, live, R2 = pc
    lay = input_layout(system)
    p = len(sectors)
    m = lay.size
    a = float(data_i["a"])
    b = np.asarray(data_i["b"], np.float64)
    c = float(data_i["c"])
    pairs = [g for g in groups if len(g) == 2]

    def restrict(H):
        return H[np.ix_(live, live)]

    # The offset c0 (zero in exact arithmetic at an equilibrium; float32 rounding
    # leaves ~1e-8): V(Fv + c0) <= (1 + e) V(Fv) + (1 + 1/e) V(c0).
    off = float(c0 @ Qi @ c0)
    e_off = 0.0 if off == 0.0 else 1e-3
    Vf = (1.0 + e_off) * (F.T @ Qi @ F)
    off_c1 = 0.0 if off == 0.0 else (1.0 + 1.0 / e_off) * off
    absF = np.abs(F)
    nf = [np.linalg.norm(f) for f in forms]
    scale = float(np.linalg.norm(absF.T @ np.abs(Qi) @ absF) + (a + b.sum()) * max(nf, default=0.0)
                  + c + 1.0)
    # The program's offsets are float32 numbers: never rely on more than they give.
    eta_c1, eta_c2 = eta * (1.0 - 1e-6), eta_reach * (1.0 - 1e-6)

    def h_c1(theta, tau):
        H = Vf - c * Ww
        it = iter(theta)
        for g, gain in zip(groups, gains, strict=True):
            if len(g) == 2:
                th = next(it)
                H = H - gain * (th * forms[g[0]] + (1.0 - th) * forms[g[1]])
            else:
                H = H - gain * forms[g[0]]
        for t, S in zip(tau, sectors, strict=True):
            H = H + t * S
        return restrict(H)

    lam, _ = _minimise(h_c1, len(pairs), p, simplex=False, scale=scale)
    if max(lam, 0.0) * R2 + off_c1 > eta_c1:
        return False, f"(C1): min over the multipliers of lambda_max = {lam:.3g} > 0"
    if system.own_delay:
        kappa, kw = float(data_i["kappa"]), float(data_i["kappa_w"])
        Sx = np.zeros((system.n, m + p))
        Sx[:, lay.x] = np.eye(system.n)
        inc = F - Sx
        for comp in range(system.n):
            r = inc[comp]
            e_c = 0.0 if c0[comp] == 0.0 else 1e-3
            off_c2 = 0.0 if e_c == 0.0 else (1.0 + 1.0 / e_c) * float(c0[comp]) ** 2

            def h_c2(theta, tau, r=r, e_c=e_c):
                H = (1.0 + e_c) * np.outer(r, r) - kw * Ww
                for t, th in enumerate(theta):
                    H = H - kappa * th * forms[t]
                for t, S in zip(tau, sectors, strict=True):
                    H = H + t * S
                return restrict(H)

            sc2 = float(np.sum(np.abs(r)) ** 2 + kappa * max(nf, default=0.0) + kw + 1.0)
            lam, _ = _minimise(h_c2, len(forms), p, simplex=True, scale=sc2)
            if max(lam, 0.0) * R2 + off_c2 > eta_c2:
                return False, (f"(C2) component {comp}: min over the multipliers of "
                               f"lambda_max = {lam:.3g} > 0")
    how = "the S-procedure" if not p else f"the S-procedure with {p} sector constraint(s)"
    return True, f"proven by {how}"


def local_radius(system: InterconnectedSystem, data_i: dict, prog_i: bd.Program,
                 lower: np.ndarray, upper: np.ndarray, eta: float, eta_reach: float,
                 max_halvings: int = 6) -> tuple[float, str]:
    """The largest ``rho`` in ``{1, 1/2, ..., 2^-max_halvings}`` with the conditions
    proven on ``rho [lower, upper]`` by :func:`prove_subsystem` (``0.0`` if none).

    Near the equilibrium the sector bounds of ``tanh`` / ``sin`` tighten to the
    linearisation, so a quadratic certificate that decreases along the linearised map
    is proven there even when the whole box is out of reach; dyadic ``rho`` keeps the
    region a union of branch-and-bound boxes of a root box symmetric about 0.
    """
    reason = ""
    for k in range(max_halvings + 1):
        rho = 2.0 ** -k
        ok, reason = prove_subsystem(system, data_i, prog_i, rho * np.asarray(lower, np.float64),
                                     rho * np.asarray(upper, np.float64), eta, eta_reach)
        if ok:
            return rho, reason
        if not reason.startswith("("):
            return 0.0, reason  # a precondition failed: no radius helps
    return 0.0, reason


class SwitchedReport(NamedTuple):
    """What :func:`switched_certificate` found, per subsystem: the smallest common
    decay rate ``lam_star`` of the linearised modes (``A_m^T P A_m <= lam^2 P`` for
    every mode ``m``), the rate ``decay`` its ``P`` was solved at, and the seconds
    spent in the two kinds of semidefinite programs. ``target_met = False``: the gains
    returned are those with ``c_i`` capped at ``1 / w_max^2`` only (no target ``lam``
    admitted gains within the invariance room of (G), or none did better), certain to
    fail (G), so that the subsystem conditions can still be checked."""

    lam_star: np.ndarray
    decay: np.ndarray
    lyapunov_seconds: float
    gain_seconds: float
    target_met: bool  # the gains returned came from a target lam (c_i within its room)


def _cvxpy():
    try:
        import cvxpy
    except ImportError as e:  # pragma: no cover - cvxpy ships with the dev extra
        raise ImportError("switched_certificate solves semidefinite programs with cvxpy: "
                          "pip install 'jaxsci[lmi]'") from e
    return cvxpy


def _solve(prob, cp):
    """Clarabel, its "solution may be inaccurate" warning silenced: every candidate is
    proven afterwards by :func:`prove_subsystem` and (G), never trusted."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        prob.solve(solver=cp.CLARABEL)


_SLOPE = {bd.TANH: lambda b: 1.0 - np.tanh(b) ** 2, bd.SIN: np.cos}


def _vertex_maps(prog_i, m, lower, upper, vertices):
    """The maps ``u -> F [u; slope * s]`` of a ridge program with every unit's secant
    slope at its equilibrium (``vertices=False``: the Jacobian at ``u = 0``) or at the
    ends of its sector on the box (``vertices=True``: ``2^p`` maps, whose convex hull
    contains the map on the box, a polytopic linear differential inclusion)."""
    form = ridge_form(prog_i)
    if form is None:
        return None
    F, _, units = form
    choices = []
    for code, w, b in units:
        if not vertices:  # lower, upper unused
            choices.append((_SLOPE[code](b),))
            continue
        slo = float(np.sum(np.minimum(w * lower, w * upper)))
        shi = float(np.sum(np.maximum(w * lower, w * upper)))
        choices.append(sector(code, b, slo, shi))
    out = []
    for slopes in itertools.product(*choices):
        J = F[:, :m].copy()
        for j, (_, w, _) in enumerate(units):
            J += np.outer(F[:, m + j], slopes[j] * w)
        out.append(J)
    return out


def _at_least(Pi, Dd):
    """The solver meets ``P >= D`` to its tolerance: symmetrise and shift to meet it
    exactly (plus ``1e-7 trace P``)."""
    Pi = 0.5 * (Pi + Pi.T)
    short = -float(np.linalg.eigvalsh(Pi - Dd)[0])
    return Pi + (max(short, 0.0) + 1e-7 * float(np.trace(Pi))) * np.eye(Pi.shape[0])


def _recipe_mu(G, s):
    """The recipe of :func:`~.certificates.mu_weights` at ``lam_max = s``, in float64
    NumPy, with non-positive entries clipped one by one (``mu_weights`` then falls back
    to uniform tiny weights): a search direction for the next round, not the check's
    weights (the check recomputes those with ``mu_weights``)."""
    v = np.linalg.solve(s * np.eye(G.shape[0]) - G, np.ones(G.shape[0]))
    return np.where(v > 0, v, 1e-3) / np.max(v)


def _best_lam_max(G, need):
    """``lam_max`` in ``(rho(Gamma), 1)`` maximising ``min_i (1 - lam) mu_i - need_i``
    for the Collatz-Wielandt weights of :func:`~.certificates.mu_weights`."""
    N = G.shape[0]
    rad = float(np.max(np.abs(np.linalg.eigvals(G))))
    best = (-np.inf, 0.999)
    lo = max(rad, float(np.max(np.diag(G)))) if N else 0.0
    for t in np.linspace(0.0, 1.0, 201)[1:-1]:
        s = lo + t * (1.0 - lo)
        v = np.linalg.solve(s * np.eye(N) - G, np.ones(N))
        if np.any(v <= 0):
            continue
        mu = v / v.max()
        lam = float(np.max(G @ mu / mu))
        margin = float(np.min((1.0 - lam) * mu - need))
        if margin > best[0]:
            best = (margin, s)
    return best


def switched_certificate(
    modes: list[InterconnectedSystem],
    *,
    decay_slack: float = 0.5,
    gain_margin: float = 0.02,
    sector_vertices: bool = True,
    gain_rounds: int = 3,
    lam_grid: int = 8,
    design_rounds: int = 2,
    eta: float = 1e-3,
    lam_max: float | None = None,
) -> tuple[ct.Certificate, ct.Reach, SwitchedReport]:
    r"""Quadratic certificates common to every mode of a switched system, by LMIs.

    ``modes`` are delay-free systems on one state (:func:`~.systems.delay_modes`: the
    delays switching in ``0..d``; or any list of modes that share the state, the
    neighbours and the box). Per subsystem ``i``, with ``A_{i,m}`` the Jacobian of
    ``f_i`` at the equilibrium with respect to its own state in mode ``m``:

    1. the smallest ``lam*`` with ``A_{i,m}^T P A_{i,m} \preceq lam^2 P`` for every
       ``m`` and ``P \succeq D_i`` feasible (bisection over semidefinite programs);
       with ``sector_vertices`` (default) ``A_{i,m}`` runs over every mode's maps with
       each ``tanh`` / ``sin`` unit's secant slope at an end of its sector on the
       state boxes (:func:`sector`), so ``P_i`` is common to the polytope that contains
       the non-linear map, not only to its linearisation at 0;
       ``P_i`` minimises ``trace P`` at ``lam = lam* + decay_slack (1 - lam*)`` (the
       starting point of step 2, kept where step 2 finds nothing);
    2. the joint design for a target of (G): for ``lam_grid`` targets ``lam`` and
       weights ``mu`` (all 1, then the best target's), ``P_i`` with its neighbour and
       disturbance gains from one block LMI per vertex map,
       ``V_i(A z + sum_k B_k z_k + E w) <= a_i V_i(z) + sum_k b_ik V_jk(z_k) + c_i |w|^2``
       (linear in ``P_i, b_i, c_i`` once ``a_i`` and the neighbours' ``P`` are fixed),
       minimising the row ``a_i + sum_k b_ik mu_jk / mu_i`` with
       ``c_i w^2 + eta <= (1 - lam) mu_i``, over ``a_i = (lam* + t (1 - lam*))^2``,
       ``t`` in ``{1/4, 1/2, 3/4}``; two Gauss-Seidel sweeps over the subsystems
       (``design_rounds`` rounds of targets);
    3. with the ``P`` fixed, the gains again from the exact conditions: the matrices of
       :func:`prove_subsystem` (S-procedure of (C1) on each mode's whole domain box,
       sector multipliers free per mode), negative semidefinite, linear in the gains
       and multipliers; per target the same row objective and cap on ``c_i``, times
       ``1 + gain_margin``; the target with the best margin of (G) (as
       :func:`~.certificates.gain_report` computes it, at the best ``lam_max``) wins
       (``gain_rounds`` rounds of weights). Where no target admits gains
       (``SwitchedReport.target_met = False``) the gains returned have ``c_i`` capped
       at ``1 / w_max^2`` only: (G) fails, the subsystem conditions can be checked.

    The result is an ordinary :class:`~.certificates.Certificate` (``W_2 = 0``) for
    every mode; :func:`~.verify.verify_modes` proves it mode by mode (the
    S-procedure, then (G)). The linear-matrix-inequality synthesis of common
    quadratic Lyapunov functions for switched linear systems is standard (Boyd et al.,
    1994, Ch. 5; Daafouz, Riedinger & Iung, IEEE TAC 2002); the sector polytope, the
    targets of (G) and the per-subsystem design are this library's choices (a
    heuristic: the joint problem over all ``P_i``, gains and weights is not convex).

    Raises:
      ValueError: a mode is not delay-free or not a ridge map, the modes do not share
        their structure, or some subsystem's linearised modes have no common quadratic
        Lyapunov function (``lam* >= 1``).
    """
    cp = _cvxpy()
    modes = list(modes)
    if not modes or not all(isinstance(s, InterconnectedSystem) for s in modes):
        raise TypeError("modes must be a non-empty list of InterconnectedSystem")
    s0 = modes[0]
    for s in modes:
        if s.max_delay != 0:
            raise ValueError(f"modes must be delay-free (max_delay = 0); {s.name} has "
                             f"max_delay = {s.max_delay}: use delay_modes(system)")
        if (s.n_sub, s.n, s.K, s.n_w) != (s0.n_sub, s0.n, s0.K, s0.n_w) or not (
                np.array_equal(np.asarray(s.neighbors), np.asarray(s0.neighbors))
                and np.array_equal(np.asarray(s.state_box), np.asarray(s0.state_box))):
            raise ValueError(f"modes must share the state, neighbours and box; {s.name} "
                             f"differs from {s0.name}")
    for name, v in (("decay_slack", decay_slack), ("gain_margin", gain_margin)):
        if not 0.0 <= float(v) < 1.0:
            raise ValueError(f"{name} must lie in [0, 1), got {v}")
    for name, v in (("gain_rounds", gain_rounds), ("lam_grid", lam_grid),
                    ("design_rounds", design_rounds)):
        check_int(name, v, min=1)
    N, n, K = s0.n_sub, s0.n, s0.K
    lay = input_layout(s0)
    D = 1.0 / np.square(np.asarray(s0.state_box, np.float64))
    progs = [jax.device_get(local_programs(s)) for s in modes]

    def sub(tree, i):
        return jax.tree_util.tree_map(lambda a: np.asarray(a)[i], tree)

    # 1. P_i: a common quadratic Lyapunov function of the linearised own dynamics.
    t0 = time.perf_counter()
    P = np.zeros((N, n, n))
    lam_star, decay = np.zeros(N), np.zeros(N)
    Pv = cp.Variable((n, n), symmetric=True)
    l2 = cp.Parameter(nonneg=True)
    Dp = cp.Parameter((n, n), symmetric=True)
    # The local input box with every state at its box and |w| <= w_max.
    box = np.asarray(s0.state_box, np.float64)
    nb = np.asarray(s0.neighbors)
    u_hi = np.zeros((N, lay.size))
    for i in range(N):
        u_hi[i, lay.x] = box[i]
        if lay.delta is not None:
            u_hi[i, lay.delta] = 2.0 * box[i]
        for k, slots in enumerate(lay.slots):
            for sl in slots:
                if sl is not None and nb[i, k] >= 0:
                    u_hi[i, sl] = box[nb[i, k]]
        u_hi[i, lay.w] = s0.w_max
    full = []
    for i in range(N):
        Ms = []
        for pr in progs:
            Js = _vertex_maps(sub(pr, i), lay.size, -u_hi[i], u_hi[i], sector_vertices)
            if Js is None:
                raise ValueError(f"{s0.name}: subsystem {i}'s map is not a ridge map")
            Ms.extend(Js)
        full.append(Ms)
    maps = [[J[:, lay.x] for J in Ms] for Ms in full]
    Ap = [cp.Parameter((n, n)) for _ in maps[0]]
    cons = [Pv - Dp >> 0] + [l2 * Pv - A.T @ Pv @ A >> 0 for A in Ap]
    prob = cp.Problem(cp.Minimize(cp.trace(Pv)), cons)

    def solve(lam):
        l2.value = lam**2
        try:
            _solve(prob, cp)
        except cp.error.SolverError:
            return None
        return Pv.value if prob.status == cp.OPTIMAL else None

    for i in range(N):
        for A, M in zip(Ap, maps[i], strict=True):
            A.value = M
        Dp.value = np.diag(D[i])
        lo, hi = 0.0, 1.0
        P_hi = solve(1.0 - 1e-9)
        if P_hi is None:
            raise ValueError(f"subsystem {i}: its modes have no common quadratic Lyapunov "
                             "function (lam* >= 1)" + (" on the sector polytope: try "
                             "sector_vertices=False" if sector_vertices else ""))
        for _ in range(30):
            mid = 0.5 * (lo + hi)
            P_mid = solve(mid)
            if P_mid is not None:
                hi, P_hi = mid, P_mid
            else:
                lo = mid
        lam_star[i] = hi
        decay[i] = hi + decay_slack * (1.0 - hi)
        Pi = solve(decay[i])
        if Pi is None:  # a solver failure: the bisection's last feasible P
            Pi, decay[i] = P_hi, hi
        P[i] = _at_least(Pi, np.diag(D[i]))

    # 1b. Joint design for a target (G): at a self gain a_i, P_i with its neighbour and
    # disturbance gains, V_i(A z + sum_k B_k z_k + E w) <= a_i V_i(z) + sum_k b_ik
    # V_jk(z_k) + c_i |w|^2 on every vertex map (a block LMI, linear in P_i, b_i, c_i
    # with the neighbours' P fixed): for a target lam and weights mu, the row
    # a_i + sum_k b_ik mu_jk / mu_i is minimised with c_i w^2 + eta <= (1 - lam) mu_i,
    # over a few a_i; Gauss-Seidel over the subsystems. The target lam with the best
    # margin of the check wins; the next round's mu are its weights.
    present = np.asarray(s0.neighbors) >= 0
    slot_cols = [sl[0] for sl in lay.slots]
    w2 = max(s0.w_max**2, 1e-30)

    def gamma(a_, b_):
        G = np.diag(a_)
        for i in range(N):
            for k in range(K):
                if present[i, k]:
                    G[i, nb[i, k]] += b_[i, k]
        return G

    def design_one(i, Pcur, a_i, mu, cap):
        ks = [k for k in range(K) if present[i, k]]
        Pv = cp.Variable((n, n), symmetric=True)
        bv = cp.Variable(len(ks), nonneg=True) if ks else None
        cv = cp.Variable(nonneg=True)
        sizes = [n] + [n] * len(ks) + [s0.n_w]
        blocks = [a_i * Pv] + [bv[t] * Pcur[nb[i, k]] for t, k in enumerate(ks)]
        blocks.append(cv * np.eye(s0.n_w))
        R = cp.bmat([[blocks[r] if r == q else np.zeros((sizes[r], sizes[q]))
                      for q in range(len(sizes))] for r in range(len(sizes))])
        cons = [Pv - np.diag(D[i]) >> 0, cv <= cap]
        for J in full[i]:
            Jc = np.concatenate([J[:, lay.x]] + [J[:, slot_cols[k]] for k in ks]
                                + [J[:, lay.w]], 1)
            M = Jc.T @ Pv @ Jc - R
            cons.append(0.5 * (M + M.T) << 0)
        obj = 1e-6 * cp.trace(Pv)
        if ks:
            obj = obj + (mu[nb[i, ks]] / mu[i]) @ bv
        prob_d = cp.Problem(cp.Minimize(obj), cons)
        try:
            _solve(prob_d, cp)
        except cp.error.SolverError:
            return None
        if prob_d.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
            return None
        Pi = _at_least(Pv.value, np.diag(D[i]))
        bi = np.zeros(K)
        if ks:
            bi[ks] = np.maximum(bv.value, 0.0)
        row = a_i + float(sum(mu[nb[i, k]] / mu[i] * bi[k] for k in ks))
        return row, Pi, bi, max(float(cv.value), 0.0)

    def design(lam, mu, P_start):
        Pcur = P_start.copy()
        a_d, b_d, c_d = decay**2, np.zeros((N, K)), np.zeros(N)
        for _ in range(2):  # Gauss-Seidel sweeps
            for i in range(N):
                room = (1.0 - lam) * mu[i] - eta
                if room <= 0:
                    return None
                best_i = None
                for t in (0.25, 0.5, 0.75):
                    a_i = (lam_star[i] + t * (1.0 - lam_star[i])) ** 2
                    if a_i >= lam:
                        continue
                    r = design_one(i, Pcur, a_i, mu, room / w2)
                    if r is not None and (best_i is None or r[0] < best_i[0]):
                        best_i = (r[0], a_i) + r[1:]
                if best_i is None:
                    return None
                _, a_d[i], Pcur[i], b_d[i], c_d[i] = best_i
        margin, _ = _best_lam_max(gamma(a_d, b_d), c_d * s0.w_max**2 + eta)
        return margin, Pcur, a_d.copy(), b_d, c_d

    mu = np.ones(N)
    lam_lo = float(np.max(lam_star**2))
    best_d = None
    for _ in range(design_rounds):
        top = None
        for lam in np.linspace(lam_lo + 0.1 * (1.0 - lam_lo), 0.995, lam_grid):
            r = design(lam, mu, P)
            if r is not None and (top is None or r[0] > top[0]):
                top = r
        if top is None:
            break
        if best_d is None or top[0] > best_d[0]:
            best_d = top
        _, s_b = _best_lam_max(gamma(top[2], top[3]), top[4] * s0.w_max**2 + eta)
        mu = _recipe_mu(gamma(top[2], top[3]), s_b)
    if best_d is not None:
        P = best_d[1]
    t_lyap = time.perf_counter() - t0

    # 2. Gains on each mode's whole local domain (the box of {V <= 1}: the final,
    # smaller invariant levels give sub-boxes, on which the sectors only tighten).
    t0 = time.perf_counter()
    cert0 = ct.quadratic_certificate(s0, P, np.full(N, 0.5), np.zeros((N, K)), np.zeros(N),
                                     eta=eta)
    reach = ct.default_reach(s0)
    pieces = []
    for s, pr in zip(modes, progs, strict=True):
        data = jax.device_get(ct.local_data(cert0, s, reach))
        lo_hi = jax.device_get(jax.vmap(lambda d, s=s: ct.domain_box(s, d, cert0.eta_reach))(data))
        pieces.append([_pieces(s, sub(data, i), sub(pr, i), lo_hi[0][i], lo_hi[1][i])
                       for i in range(N)])
    args = ct._args(s0)
    problems = []
    for i in range(N):
        a = cp.Variable(nonneg=True)
        b = cp.Variable(K, nonneg=True) if K else None
        c = cp.Variable(nonneg=True)
        wb = cp.Parameter(K, nonneg=True) if K else None
        ccap = cp.Parameter(nonneg=True)
        cons = [c <= ccap]
        for pcs in pieces:
            pc = pcs[i]
            if isinstance(pc, str):
                raise ValueError(f"subsystem {i}: {pc}")
            ix = np.ix_(pc.live, pc.live)
            H = (pc.F.T @ pc.Qi @ pc.F)[ix] - c * pc.Ww[ix]
            for t, (kind, k, _) in enumerate(args):
                H = H - (a if kind == "own" else b[k]) * pc.forms[t][ix]
            if pc.sectors:
                tau = cp.Variable(len(pc.sectors), nonneg=True)
                for j, S in enumerate(pc.sectors):
                    H = H + tau[j] * S[ix]
            cons.append(0.5 * (H + H.T) << 0)
        if K and np.any(~present[i]):
            cons.append(b[np.flatnonzero(~present[i])] == 0)
        obj = a + (wb @ b if K else 0.0)
        problems.append((cp.Problem(cp.Minimize(obj), cons), a, b, c, wb, ccap))

    # (G): rows a_i + sum_k b_ik mu_jk / mu_i <= lam and c_i w^2 + eta <= (1 - lam) mu_i.
    # For a target lam and weights mu, each subsystem's gains are one semidefinite
    # program (minimise the row with c capped); candidates are scored by the margin of
    # the check itself (the weights of mu_weights at the best lam_max), and the next
    # round's mu are the best candidate's.
    best = None
    for _ in range(gain_rounds):
        cands = []
        lams = np.linspace(lam_lo + 0.1 * (1.0 - lam_lo), 0.995, lam_grid)
        # The last target leaves c uncapped: gains to report when no target is met.
        for lam in np.append(lams, np.nan):
            gains_t, ok = [], True
            for i, (prob_g, a, b, c, wb, ccap) in enumerate(problems):
                room = (1.0 - lam) * mu[i] - eta if np.isfinite(lam) else 1.0
                if room <= 0:
                    ok = False
                    break
                if K:
                    wb.value = np.where(present[i], mu[np.maximum(nb[i], 0)] / mu[i], 0.0)
                ccap.value = room / w2 / (1.0 + gain_margin)
                _solve(prob_g, cp)
                if (prob_g.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE)
                        or not np.all(np.isfinite([a.value, c.value]))
                        or (K and not np.all(np.isfinite(b.value)))):
                    ok = False
                    break
                bi = (np.where(present[i], np.maximum(b.value, 0.0), 0.0) if K
                      else np.zeros(0))
                gains_t.append((max(float(a.value), 1e-6), bi, max(float(c.value), 0.0)))
            if ok:
                a_t = np.array([g[0] for g in gains_t]) * (1.0 + gain_margin)
                b_t = np.stack([g[1] for g in gains_t]) * (1.0 + gain_margin)
                c_t = np.array([g[2] for g in gains_t]) * (1.0 + gain_margin) + 1e-9
                margin, s_best = _best_lam_max(gamma(a_t, b_t), c_t * s0.w_max**2 + eta)
                cands.append((margin, s_best, a_t, b_t, c_t, bool(np.isfinite(lam))))
        if not cands:
            break
        top = max(cands, key=lambda t: t[0])
        if best is None or top[0] > best[0]:
            best = top
        mu = _recipe_mu(gamma(top[2], top[3]), top[1])
    t_gain = time.perf_counter() - t0
    if best is None:
        raise ValueError(f"no gains meet (G) for any target lam with these P (decay rates "
                         f"{decay}): try another decay_slack")
    _, s_best, a_out, b_out, c_out, met = best
    if lam_max is None:
        lam_max = s_best
    if np.any(a_out >= lam_max):
        raise ValueError(f"the self gains {a_out} reach lam_max = {lam_max} (decay rates "
                         f"{decay}): no certificate with these P (lower decay_slack)")
    cert = ct.quadratic_certificate(s0, P, a_out, b_out, c_out, eta=eta, lam_max=lam_max)
    return cert, reach, SwitchedReport(lam_star, decay, t_lyap, t_gain, bool(met))


def cauchy_schwarz_certificate(system: InterconnectedSystem, gain_scale: float = 1.05,
                               reach_scale: float = 1.05) -> tuple[ct.Certificate, ct.Reach]:
    """The closed-form quadratic certificate of a :func:`~.systems.linear_network`.

    ``V_i = |x_i|^2 / box^2``; with the spectral norms ``n_A, n_Ad, n_B, n_E`` and
    ``s = n_A + n_Ad + K n_B + n_E``, Cauchy-Schwarz gives
    ``V(x^+) <= s (n_A V(x) + n_Ad V(x^d) + n_B sum_j V(x_j^d) + n_E |w|^2 / box^2)``,
    so ``a = s (n_A + n_Ad)`` (the max over the two own copies), ``b = s n_B``,
    ``c = s n_E / box^2``, each times ``gain_scale`` (``> 1``: slack; ``< 1`` can make
    it invalid, for tests). The reachability constants bound each increment row by
    row the same way, times ``reach_scale``.

    Returns:
      ``(cert, reach)``.
    """
    lay = input_layout(system)
    if not (system.own_delay and system.neighbor_delayed and not system.neighbor_current):
        raise ValueError("system must be built by linear_network (own delay, delayed "
                         "neighbour states only)")
    n, K = system.n, system.K
    M = linear_map(jax.tree_util.tree_map(lambda a: np.asarray(a)[0], local_programs(system)))
    if M is None:
        raise ValueError("system must be built by linear_network (a linear local map)")
    A = M[:, lay.x] + M[:, lay.delta]  # u = [x, delta = x - x^d, x_j^d..., w]
    Ad = -M[:, lay.delta]
    B = M[:, lay.slots[0][1]] if K else np.zeros((n, n))
    E = M[:, lay.w]
    box = float(np.asarray(system.state_box)[0, 0])
    nA, nAd, nB, nE = (np.linalg.norm(m, 2) for m in (A, Ad, B, E))
    s = nA + nAd + K * nB + nE
    N = system.n_sub
    cert = ct.quadratic_certificate(
        system, np.tile(np.eye(n) / box**2, (N, 1, 1)),
        np.full(N, gain_scale * s * (nA + nAd)), np.full((N, K), gain_scale * s * nB),
        np.full(N, gain_scale * s * nE / box**2), lam_max=0.999)
    kap = kw = 0.0
    for r in range(n):
        rs = [np.linalg.norm(m[r]) for m in [A - np.eye(n), Ad] + [B] * K]
        tot = sum(rs) + np.linalg.norm(E[r])
        kap = max(kap, tot * sum(rs) * box**2)
        kw = max(kw, tot * np.linalg.norm(E[r]))
    reach = ct.Reach(np.full(N, reach_scale * kap, np.float32),
                     np.full(N, reach_scale * kw, np.float32))
    return cert, reach
