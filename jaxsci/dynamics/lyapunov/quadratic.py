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

This is the S-procedure (Yakubovich; Boyd et al., *Linear Matrix Inequalities in
System and Control Theory*, 1994, Sec. 2.6.3) with the multipliers restricted to the
convex combinations above: sufficient, not necessary. A subsystem it does not prove
goes to branch-and-bound as before (:func:`~.verify.verify`).
"""

from __future__ import annotations

import jax
import numpy as np
import scipy.optimize

from jaxsci.common import bounds as bd
from jaxsci.dynamics.lyapunov import certificates as ct
from jaxsci.dynamics.lyapunov.systems import InterconnectedSystem, input_layout, local_programs

__all__ = ["linear_map", "ridge_form", "sector", "quadratic_form", "prove_subsystem",
           "local_radius", "cauchy_schwarz_certificate"]

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
        return float(np.linalg.eigvalsh(build(*split(z)))[-1])

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

    Covers the affine programs (``psi`` empty) and the two-layer ridge programs of
    :func:`~.bounds.ridge` (one hidden layer with scalar activations, an affine output
    layer). Returns ``(F, c0, units)`` in float64, ``units`` a list of
    ``(code, w_j, b_j)`` per non-identity hidden unit, or ``None`` for any other shape.
    """
    layers = prog.layers
    if all(all(a == bd.IDENTITY for a in layer.act) for layer in layers):
        M, c = None, None
        for layer in layers:
            W, b = np.asarray(layer.W, np.float64), np.asarray(layer.b, np.float64)
            M, c = (W, b) if M is None else (W @ M, W @ c + b)
        return M, c, []
    if len(layers) != 2 or any(a != bd.IDENTITY for a in layers[1].act):
        return None
    W1, b1 = np.asarray(layers[0].W, np.float64), np.asarray(layers[0].b, np.float64)
    W2, b2 = np.asarray(layers[1].W, np.float64), np.asarray(layers[1].b, np.float64)
    codes = np.asarray(layers[0].act)
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
    form = ridge_form(prog_i)
    if form is None:
        return False, "the local map is not affine or a tanh/sin ridge map"
    F, c0, units = form
    lay = input_layout(system)
    lower, upper = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    fixed = upper <= lower
    if np.any(fixed & ((lower != 0) | (upper != 0))):
        return False, "a fixed input coordinate is not zero"
    m, p = lay.size, len(units)
    live = np.concatenate([~fixed, np.ones(p, bool)])
    own = data_i["own"]
    Qi = quadratic_form(own)
    if Qi is None:
        return False, "the certificate has a ReLU part"
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
                return False, "a neighbour's certificate has a ReLU part"
        S = np.asarray(S, np.float64)
        forms.append(pad_u(S.T @ Q @ S))
    a = float(data_i["a"])
    b = np.asarray(data_i["b"], np.float64)
    c = float(data_i["c"])
    Sw = np.zeros((system.n_w, m))
    Sw[:, lay.w] = np.eye(system.n_w)
    Ww = pad_u(Sw.T @ Sw)
    # Groups of copies (own; one per neighbour slot) with their gains.
    groups, gains = [], []
    own_t = [t for t, (kind, _, _) in enumerate(args) if kind == "own"]
    groups.append(own_t)
    gains.append(a)
    for k in range(system.K):
        ts = [t for t, (kind, kk, _) in enumerate(args) if kind == "nbr" and kk == k]
        if ts:
            groups.append(ts)
            gains.append(float(b[k]))
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
