r"""Exact proofs for quadratic certificates of linear subsystems (the S-procedure).

When subsystem ``i``'s local map is linear, ``f_i(u) = M u`` (every layer of its
program affine with zero bias), and the certificates it involves are quadratic,
``V(x) = x^T Q x`` (no ReLU part: ``W_2 = 0``), every term of the conditions is a
quadratic form of the local input ``u``. Branch-and-bound on boxes handles such
conditions poorly: the relaxations of squares lose ``O(h^2)`` on a box of width
``h`` while the slack of a valid certificate is ``O(|u|^2)``, so in the 7-9
dimensional local domains millions of boxes are needed (``docs/lyapunov.md``).
Instead the conditions are proven on all of ``R^{n_u}`` at once:

* the windowed maxima are bounded below by convex combinations,
  ``max(V(x), V(x^d)) >= theta V(x) + (1 - theta) V(x^d)`` for any
  ``theta in [0, 1]`` (one per argument group), the reachability term
  ``beta_i [S_i - ...]_+ >= 0`` by zero;
* then (C1) ``<= u^T H_theta u - eta`` with
  ``H_theta = M^T Q_i M - a_i (theta_0 A_x + (1 - theta_0) A_{x^d}) - sum_k b_ik
  (theta_k A_k + (1 - theta_k) A_k^d) - c_i S_w^T S_w`` (``A_arg = S_arg^T Q S_arg``
  for the selection ``S_arg`` of each argument), and each (C2) component
  ``<= u^T (r_c r_c^T - kappa_i sum_t theta_t A_t - kw_i S_w^T S_w) u - eta_r`` with
  ``theta`` in the simplex over all arguments (``max_args V >= sum_t theta_t V(arg_t)``);
* a condition is proven when ``lambda_max(H_theta)_+ R^2 <= eta`` for some
  ``theta``, with ``R^2 = max |u|^2`` over the local domain box (``lambda_max <= 0``:
  on every ``u``; a small positive ``lambda_max`` uses the offset ``eta`` on the
  bounded domain). ``theta`` minimises the convex function ``lambda_max(H_theta)``
  (scipy, a few starts); the check itself is the float64 eigenvalue plus a bound on
  its error (Weyl's inequality with the backward error of the symmetric eigensolver
  and of forming ``H`` from the float32 weights).

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

__all__ = ["linear_map", "quadratic_form", "prove_subsystem", "cauchy_schwarz_certificate"]

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


def _minimise(build, k, simplex, scale, starts=4):
    """``min_theta lambda_max(build(theta))`` over ``[0, 1]^k`` or the simplex."""
    if k == 0:
        return _lam_max(build(np.zeros(0)), scale), np.zeros(0)

    def to_theta(z):
        if simplex:
            e = np.exp(z - z.max())
            return e / e.sum()
        return 1.0 / (1.0 + np.exp(-z))

    def obj(z):
        return float(np.linalg.eigvalsh(build(to_theta(z)))[-1])

    rng = np.random.default_rng(0)
    best = (np.inf, None)
    for s in range(starts):
        z0 = np.zeros(k) if s == 0 else rng.normal(0.0, 2.0, k)
        r = scipy.optimize.minimize(obj, z0, method="Nelder-Mead",
                                    options={"xatol": 1e-6, "fatol": 1e-12, "maxiter": 400 * k})
        th = to_theta(r.x)
        lam = _lam_max(build(th), scale)
        if lam < best[0]:
            best = (lam, th)
        if lam <= 0:
            break
    return best


def prove_subsystem(system: InterconnectedSystem, data_i: dict, prog_i: bd.Program,
                    lower: np.ndarray, upper: np.ndarray, eta: float,
                    eta_reach: float) -> tuple[bool, str]:
    """Try to prove subsystem ``i``'s conditions by the S-procedure.

    Args:
      system: the system (structure).
      data_i, prog_i: subsystem ``i``'s slices of :func:`~.certificates.local_data` and
        of the local programs (host arrays).
      lower, upper: its local domain box (the bound ``R^2`` on ``|u|^2``).
      eta, eta_reach: the offsets of (C1) and (C2).

    Returns:
      ``(proven, reason)``: ``reason`` says which precondition or condition failed.
    """
    M = linear_map(prog_i)
    if M is None:
        return False, "the local map is not linear"
    lay = input_layout(system)
    lower, upper = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    fixed = upper <= lower
    if np.any(fixed & ((lower != 0) | (upper != 0))):
        return False, "a fixed input coordinate is not zero"
    live = ~fixed
    R2 = float(np.sum(np.maximum(lower**2, upper**2)))
    own = data_i["own"]
    Qi = quadratic_form(own)
    if Qi is None:
        return False, "the certificate has a ReLU part"
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
        forms.append(S.T @ Q @ S)
    a = float(data_i["a"])
    b = np.asarray(data_i["b"], np.float64)
    c = float(data_i["c"])
    Sw = np.zeros((system.n_w, lay.size))
    Sw[:, lay.w] = np.eye(system.n_w)
    W2 = Sw.T @ Sw
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

    Vf = M.T @ Qi @ M
    absM = np.abs(M)
    nf = [np.linalg.norm(f) for f in forms]
    scale = float(np.linalg.norm(absM.T @ np.abs(Qi) @ absM) + (a + b.sum()) * max(nf, default=0.0)
                  + c + 1.0)
    # The program's offsets are float32 numbers: never rely on more than they give.
    eta_c1, eta_c2 = eta * (1.0 - 1e-6), eta_reach * (1.0 - 1e-6)

    def h_c1(theta):
        H = Vf - c * W2
        it = iter(theta)
        for g, gain in zip(groups, gains, strict=True):
            if len(g) == 2:
                th = next(it)
                H = H - gain * (th * forms[g[0]] + (1.0 - th) * forms[g[1]])
            else:
                H = H - gain * forms[g[0]]
        return restrict(H)

    lam, _ = _minimise(h_c1, len(pairs), simplex=False, scale=scale)
    if max(lam, 0.0) * R2 > eta_c1:
        return False, f"(C1): min over theta of lambda_max = {lam:.3g} > 0"
    if system.own_delay:
        kappa, kw = float(data_i["kappa"]), float(data_i["kappa_w"])
        Sx = np.zeros((system.n, lay.size))
        Sx[:, lay.x] = np.eye(system.n)
        inc = M - Sx
        for comp in range(system.n):
            r = inc[comp]

            def h_c2(theta, r=r):
                H = np.outer(r, r) - kw * W2
                for t, th in enumerate(theta):
                    H = H - kappa * th * forms[t]
                return restrict(H)

            sc2 = float(np.sum(np.abs(r)) ** 2 + kappa * max(nf, default=0.0) + kw + 1.0)
            lam, _ = _minimise(h_c2, len(forms), simplex=True, scale=sc2)
            if max(lam, 0.0) * R2 > eta_c2:
                return False, f"(C2) component {comp}: min over theta of lambda_max = {lam:.3g} > 0"
    return True, "proven by the S-procedure"


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
