r"""Neural vector Lyapunov-Razumikhin certificates and the discrete-time sISS condition.

Paper: "Neural Vector Lyapunov-Razumikhin Certificates for Delayed Interconnected
Systems" (Zhou, Wang, Yang; ICML 2026).
This module states and checks a sufficient condition of that kind; the paper's own
theorem is not reproduced verbatim (see ``docs/lyapunov.md``).

Certificates
------------
One function per subsystem, positive definite and radially unbounded by construction:

.. math::
    V_i(x) = x^\top D_i x + \|L_i^\top x\|^2
             + \|W_{2,i}\,(\mathrm{relu}(W_{1,i} x + b_{1,i}) - \mathrm{relu}(b_{1,i}))\|^2,
    \qquad D_i = \mathrm{diag}(1 / r_i^2),

with ``r_i`` the half-widths of the state box ``X_i``; so ``V_i(0) = 0``,
``V_i(x) >= x^T D_i x`` and the sublevel set ``{V_i <= 1}`` lies inside ``X_i``.
``(V_1, ..., V_N)`` is the vector Lyapunov-Razumikhin function. The gains are learned
with it: ``a_i`` (self), ``b_ik`` (neighbour slot ``k``), ``c_i`` (disturbance),
parametrised so that the row sums ``rho_i = a_i + sum_k b_ik < lam_max`` and
``c_i <= (1 - lam_max - eta) / w_max^2``.

The condition checked (per subsystem ``i``; ``d`` = max delay)
-------------------------------------------------------------
Arguments of ``f_i`` at step ``k``: own ``{x_i, x_i - delta_i}`` (``delta_i`` present
with own delay) and per neighbour slot ``{x_j, x_j^d}`` (the copies ``f_i`` takes).
With ``c_own``/``c_nbr`` the number of own/per-slot copies,

* ``m_i = max_own V_i``, ``m_k = max_{copies} V_{j_k}`` (windowed maxima, lower bounds),
* ``S_i = (mean_c delta_{i,c}^2 / d^2 - kw_i w_max^2 - eta_r) / kappa_i`` (how large the
  window maxima must be for the delayed own state to be reachable),
* ``beta_i = min(a_i / c_own, min_k b_ik / c_nbr)``,

**(C1) Razumikhin decrease**, for every ``u`` in the reachability-constrained delay
domain ``D_i`` (boxes, ``|w| <= w_max``, every ``V(arg) <= 1``,
``S_i <= c_own + c_nbr K_i``):

.. math::
    V_i(f_i(u)) \le a_i m_i + \sum_k b_{ik} m_k
    + \beta_i \,[S_i - c_{own} m_i - c_{nbr} \textstyle\sum_k m_k]_+
    + c_i \|w_i\|^2 + \eta

**(C2) reachability (increment) bound** (with own delay), every component ``c``:
``(f_i(u) - x_i)_c^2 <= kappa_i max_args V + kw_i ||w_i||^2 + eta_r`` on ``D_i``;

**(G) scalable small gain**: ``rho_i <= lam < 1`` and ``rho_i + c_i w_max^2 + eta <= 1``.
The gain matrix ``Gamma_ii = a_i``, ``Gamma_{i j_k} = b_ik`` then has
``||Gamma||_inf <= lam`` (so ``rho(Gamma) <= lam``, ``I - Gamma`` a non-singular
M-matrix, with the N-independent bound ``||(I - Gamma)^{-1}||_inf <= 1/(1 - lam)``);
:func:`gain_report` also gives the spectral radius.

**Claim.** Under (C1), (C2), (G), for every delay sequence with values in
``{0..d}`` (time-varying, per link), every disturbance with ``|w_i(k)| <= w_max`` and
every initial history of length ``2d + 1`` inside ``{V_i <= 1}`` whose increments
satisfy (C2) (e.g. a constant history), the windowed maximum
``W(k) = max_i max_{s in [k - 2d, k]} V_i(x_i(s))`` obeys
``W(k + 2d + 1) <= lam W(k) + e`` with ``e = max_i (c_i ||w||_inf^2 + eta)``, hence
``W(k) <= lam^{floor(k/(2d+1))} W(0) + e / (1 - lam)`` and ``x_i^T D_i x_i <= W``:
input-to-state stability with constants that do not depend on ``N`` (sISS), up to
the verification offsets ``eta``, ``eta_r``.

*Proof sketch.* By induction on ``k``: all states stay in ``{V_i <= 1}`` (by (G)), so
every local input lies in ``D_i``. (C2) bounds each increment of ``x_i`` by the
window maxima ``M`` over ``[k - 2d, k]``, and since
``delta_i = sum of <= d increments``, ``delta_{i,c}^2 <= d^2 max increment^2``: the
actual window maxima satisfy ``M_i >= m_i``, ``M_k >= m_k`` and
``c_own M_i + c_nbr sum_k M_k >= S_i``. The right side of (C1) is the minimum of
``a_i M_i + sum_k b_ik M_k`` over such ``M`` (a one-constraint LP, whose cheapest
direction has cost ``beta_i``), so ``V_i(x_i(k+1)) <= (Gamma M)_i + c_i|w|^2 + eta
<= rho_i W(k) + e``. The windowed maximum thus drops by ``lam`` every ``2d + 1`` steps
(the classical Razumikhin window is doubled because ``delta_i`` involves states up
to ``d`` steps older than the window of ``f_i``'s arguments).

The conditions are assembled as one :class:`~.bounds.Program` per subsystem
(:func:`condition_program`) whose outputs are ``[C1, C2_1..C2_n, V(args)..., S_i]``:
the verifier proves the first ``1 + n`` are ``<= 0`` and prunes boxes where a guard
(``V(arg) > 1`` or ``S_i > c_own + c_nbr K_i``) is proven, which are unreachable.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jaxtyping import Array, Float

from jaxsci.common import bounds as bd
from jaxsci.core.validation import check_array, check_int, check_key, check_scalar
from jaxsci.dynamics.lyapunov.systems import FAST_COMPILE, InterconnectedSystem, input_layout

__all__ = [
    "Certificate",
    "Reach",
    "GainReport",
    "init_certificate",
    "quadratic_certificate",
    "value",
    "values",
    "v_program",
    "gains",
    "gain_matrix",
    "gain_report",
    "relax_gains",
    "local_data",
    "condition_program",
    "condition_values",
    "domain_box",
    "n_conditions",
    "guard_limits",
    "default_reach",
]


class Certificate(eqx.Module):
    """Stacked per-subsystem certificates (leading axis ``N``) and gain parameters."""

    W1: Float[Array, "N h n"]
    b1: Float[Array, "N h"]
    W2: Float[Array, "N m h"]
    L: Float[Array, "N n r"]
    a_raw: Float[Array, " N"]
    b_raw: Float[Array, "N K"]
    c_raw: Float[Array, " N"]
    lam_max: float = eqx.field(static=True)
    eta: float = eqx.field(static=True)
    eta_reach: float = eqx.field(static=True)


class Reach(NamedTuple):
    """The reachability constants of (C2): ``kappa_i`` and ``kw_i`` (not trained)."""

    kappa: Float[Array, " N"]
    kappa_w: Float[Array, " N"]


class GainReport(NamedTuple):
    gamma: np.ndarray  # (N, N) comparison matrix
    mu: np.ndarray  # (N,) Collatz-Wielandt weights used by the guards (max 1)
    lam: float  # max_i (Gamma mu)_i / mu_i: the certified contraction factor
    spectral_radius: float
    row_sum_max: float  # max_i sum_j Gamma_ij (<= lam_max: scalable with mu ~ 1)
    invariance_margin: np.ndarray  # (1 - lam) mu_i - (c_i w_max^2 + eta) >= 0 required
    iss_gain: float  # ||(I - Gamma)^{-1}||_inf
    ok: bool


# --------------------------------------------------------------------------- construction


def _box_d(system: InterconnectedSystem) -> Float[Array, "N n"]:
    return 1.0 / jnp.square(system.state_box)


def init_certificate(
    system: InterconnectedSystem,
    key: jax.Array,
    *,
    hidden: int = 16,
    n_out: int = 4,
    lam_max: float = 0.99,
    eta: float = 1e-3,
    eta_reach: float = 1e-4,
    net_scale: float = 0.05,
) -> Certificate:
    """Certificates started from the quadratic Lyapunov function of each subsystem's
    linearisation (``x^T P x``, ``P = A^T P A + D``, scaled so ``P >= D``) plus a small
    ReLU part; self gains start at ``0.9 lam_max``, neighbour gains small."""
    check_key("key", key)
    hidden = check_int("hidden", hidden, min=1)
    n_out = check_int("n_out", n_out, min=1)
    check_scalar("lam_max", lam_max, gt=0.0, lt=1.0)
    check_scalar("eta", eta, ge=0.0, lt=1.0)
    check_scalar("eta_reach", eta_reach, ge=0.0)
    check_scalar("net_scale", net_scale, ge=0.0)
    if lam_max + eta >= 1.0:
        raise ValueError(f"lam_max + eta must be < 1, got {lam_max} + {eta}")
    n_sub = system.n_sub
    W1, b1, W2 = _init_net(key, system.state_box, hidden, n_out, float(net_scale))
    L_np, contraction = _linearised_l(system)
    L = jax.device_put(L_np.astype(np.float32))
    # Self gains start a third of the way from the linear certificate's contraction
    # rho'^2 to 1 (room for the coupling gains below lam_max).
    a0 = np.clip(contraction + (1.0 - contraction) / 3.0, 0.3, 0.98 * lam_max) / lam_max
    present = np.asarray(system.neighbors) >= 0
    return Certificate(
        W1=W1.astype(jnp.float32),
        b1=b1.astype(jnp.float32),
        W2=W2.astype(jnp.float32),
        L=L,
        a_raw=jax.device_put((np.log(a0) - np.log1p(-a0)).astype(np.float32)),
        b_raw=jax.device_put(np.where(present, _softplus_inv(0.02), -30.0).astype(np.float32)),
        c_raw=jax.device_put(np.full((n_sub,), _softplus_inv(0.1), np.float32)),
        lam_max=float(lam_max),
        eta=float(eta),
        eta_reach=float(eta_reach),
    )


@eqx.filter_jit(compiler_options=FAST_COMPILE)
def _init_net(key, box, hidden, n_out, net_scale):
    n_sub, n = box.shape
    k1, k2, k3 = jax.random.split(key, 3)
    W1 = jax.random.normal(k1, (n_sub, hidden, n)) / np.sqrt(n) / box[:, None, :]
    b1 = jax.random.uniform(k2, (n_sub, hidden), minval=-0.5, maxval=0.5)
    W2 = net_scale * jax.random.normal(k3, (n_sub, n_out, hidden)) / np.sqrt(hidden)
    return W1, b1, W2


def _softplus_inv(y):
    return float(np.log(np.expm1(y)))


def _linearised_l(system: InterconnectedSystem) -> np.ndarray:
    """``L`` with ``D + L L^T = s P``, ``P`` the Lyapunov matrix of ``A / rho'``, and ``rho'^2``.

    ``A`` is the subsystem's Jacobian at 0 (neighbours at 0, no delay offset) and
    ``rho' = (1 + 2 rho(A)) / 3``: then ``A^T P A <= rho'^2 P``, a certificate that
    contracts by ``rho'^2`` per step (the plain ``A^T P A - P = -D`` one can contract
    arbitrarily little); ``s`` scales ``P`` up until ``s P >= D``.
    """
    n = system.n
    J = np.asarray(_jacobians(system), np.float64)
    D = 1.0 / np.square(np.asarray(system.state_box, np.float64))
    out = np.zeros((system.n_sub, n, n))
    contraction = np.ones(system.n_sub)
    for i in range(system.n_sub):
        A = J[i]
        rho = np.max(np.abs(np.linalg.eigvals(A)))
        if rho >= 1.0:
            continue  # unstable linearisation: start from V = x^T D x
        scale = (1.0 + 2.0 * rho) / 3.0
        contraction[i] = scale**2
        P = scipy.linalg.solve_discrete_lyapunov((A / scale).T, np.diag(D[i]))
        P = 0.5 * (P + P.T)
        Dh = np.diag(np.sqrt(D[i]))
        s = np.max(np.linalg.eigvalsh(Dh @ np.linalg.inv(P) @ Dh))
        E = s * P - np.diag(D[i])
        w, U = np.linalg.eigh(0.5 * (E + E.T))
        out[i] = U * np.sqrt(np.clip(w, 0.0, None))
    return out, contraction


@eqx.filter_jit(compiler_options=FAST_COMPILE)
def _jacobians(system):
    lay = input_layout(system)

    def jac(p):
        prog = system.build(p)
        return jax.jacfwd(lambda u: bd.apply(prog, u))(jnp.zeros(lay.size))[:, lay.x]

    return jax.vmap(jac)(system.params)


def quadratic_certificate(
    system: InterconnectedSystem,
    P: Float[Array, "N n n"],
    a: Float[Array, " N"],
    b: Float[Array, "N K"],
    c: Float[Array, " N"],
    *,
    eta: float = 1e-3,
    eta_reach: float = 1e-4,
    lam_max: float = 0.999,
) -> Certificate:
    """A certificate with ``V_i = x^T P_i x`` (``P_i >= D_i`` required) and given gains.

    The ReLU part is switched off (``W2 = 0``) and the gain parameters are set so the
    parametrisation reproduces ``a``, ``b``, ``c`` (``sum a + b < lam_max``).
    """
    n_sub, n = system.n_sub, system.n
    P = np.asarray(P, np.float64)
    D = 1.0 / np.square(np.asarray(system.state_box, np.float64))
    if P.shape != (n_sub, n, n):
        raise ValueError(f"P must have shape {(n_sub, n, n)}, got {P.shape}")
    Ls = np.zeros((n_sub, n, n))
    for i in range(n_sub):
        E = 0.5 * (P[i] + P[i].T) - np.diag(D[i])
        w, U = np.linalg.eigh(E)
        if w.min() < -1e-9:
            raise ValueError(f"P[{i}] must satisfy P >= diag(1/r^2); min eigenvalue of "
                             f"P - D is {w.min()}")
        Ls[i] = U * np.sqrt(np.clip(w, 0.0, None))
    a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
    if np.any(a <= 0) or np.any(a >= lam_max) or np.any(b < 0) or np.any(c < 0):
        raise ValueError(f"gains must satisfy 0 < a < lam_max = {lam_max}, b >= 0, c >= 0")
    frac = a / lam_max
    h = 1
    return Certificate(
        W1=jnp.zeros((n_sub, h, n), jnp.float32),
        b1=jnp.zeros((n_sub, h), jnp.float32),
        W2=jnp.zeros((n_sub, 1, h), jnp.float32),
        L=jnp.asarray(Ls, jnp.float32),
        a_raw=jnp.asarray(np.log(frac) - np.log1p(-frac), jnp.float32),
        b_raw=jnp.asarray(np.log(np.expm1(np.maximum(b, 1e-30))), jnp.float32),
        c_raw=jnp.asarray(np.log(np.expm1(np.maximum(c, 1e-30))), jnp.float32),
        lam_max=float(lam_max),
        eta=float(eta),
        eta_reach=float(eta_reach),
    )


# --------------------------------------------------------------------------- V


def _sqrt_d(D):
    # Rounded up so that (fl(sqrt D))^2 >= D: {V <= 1} stays inside the box.
    return jnp.sqrt(D) * (1.0 + 4.0 * jnp.finfo(jnp.float32).eps)


def _v(W1, b1, W2, L, D, x):
    phi = W2 @ (jax.nn.relu(W1 @ x + b1) - jax.nn.relu(b1))
    sd = _sqrt_d(D)
    return jnp.sum(jnp.square(sd * x)) + jnp.sum(jnp.square(L.T @ x)) + jnp.sum(jnp.square(phi))


def value(cert: Certificate, system: InterconnectedSystem, i: int, x: Float[Array, " n"]):
    """``V_i(x)``, subsystem ``i``'s certificate at the state ``x``.

    Jittable, vmappable over ``x`` and over the certificate's parameters, and
    differentiable in both (reverse mode; ``V`` is piecewise quadratic: ReLU kinks).

    Args:
      cert: the stacked certificates.
      system: the system (its state boxes give ``D_i``).
      i: the subsystem, ``0 <= i < N`` (static).
      x: ``(n,)`` state (array-likes converted once).

    Returns:
      The scalar ``V_i(x) >= x^T D_i x``.
    """
    if not isinstance(cert, Certificate):
        raise TypeError(f"cert must be a Certificate, got {type(cert).__name__}")
    i = check_int("i", i, min=0, max=system.n_sub - 1)
    x = jnp.asarray(x)
    check_array("x", x, shape=(system.n,), dtype="floating")
    D = _box_d(system)
    return _v(cert.W1[i], cert.b1[i], cert.W2[i], cert.L[i], D[i], x)


@eqx.filter_jit
def values(cert: Certificate, system: InterconnectedSystem, X: Float[Array, "... N n"]):
    """``V_i(x_i)`` for every subsystem (``X[..., i, :]`` is ``x_i``)."""
    D = _box_d(system)
    f = jax.vmap(_v, in_axes=(0, 0, 0, 0, 0, -2), out_axes=-1)
    if X.ndim == 2:
        return f(cert.W1, cert.b1, cert.W2, cert.L, D, X)
    flat = X.reshape((-1,) + X.shape[-2:])
    out = jax.vmap(lambda x: f(cert.W1, cert.b1, cert.W2, cert.L, D, x))(flat)
    return out.reshape(X.shape[:-1])


def v_program(W1, b1, W2, L, D) -> bd.Program:
    """``V`` as a program: [relu units; x] -> [squares of phi, sqrt(D) x, L^T x] -> sum."""
    h, n = W1.shape
    m, r = W2.shape[0], L.shape[1]
    dtype = W1.dtype
    first = bd.Layer(
        jnp.concatenate([W1, jnp.eye(n, dtype=dtype)], 0),
        jnp.concatenate([b1, jnp.zeros(n, dtype)]),
        (bd.RELU,) * h + (bd.IDENTITY,) * n,
    )
    Wsq = jnp.concatenate([
        jnp.concatenate([W2, jnp.zeros((m, n), dtype)], 1),
        jnp.concatenate([jnp.zeros((n, h), dtype), jnp.diag(_sqrt_d(D))], 1),
        jnp.concatenate([jnp.zeros((r, h), dtype), L.T], 1),
    ], 0)
    bsq = jnp.concatenate([-W2 @ jax.nn.relu(b1), jnp.zeros(n + r, dtype)])
    second = bd.Layer(Wsq, bsq, (bd.SQUARE,) * (m + n + r))
    third = bd.Layer(jnp.ones((1, m + n + r), dtype), jnp.zeros(1, dtype), (bd.IDENTITY,))
    return bd.Program((first, second, third))


# --------------------------------------------------------------------------- gains


def gains(cert: Certificate, system: InterconnectedSystem):
    """``(a (N,), b (N, K), c (N,))``: ``a = lam_max sigmoid``, ``b, c`` softplus."""
    present = (system.neighbors >= 0).astype(cert.b_raw.dtype)
    a = cert.lam_max * jax.nn.sigmoid(cert.a_raw)
    b = jax.nn.softplus(cert.b_raw) * present
    c = jax.nn.softplus(cert.c_raw)
    return a, b, c


def gain_matrix_jnp(a, b, neighbors) -> Float[Array, "N N"]:
    """``Gamma_ii = a_i``, ``Gamma_{i j_k} += b_ik`` (traceable)."""
    n_sub = a.shape[0]
    G = jnp.diag(a)
    rows = jnp.repeat(jnp.arange(n_sub)[:, None], neighbors.shape[1], 1)
    return G.at[rows, jnp.maximum(neighbors, 0)].add(jnp.where(neighbors >= 0, b, 0.0))


def mu_weights(G: Float[Array, "N N"], lam: float) -> Float[Array, " N"]:
    """Collatz-Wielandt weights ``mu = (lam I - Gamma)^{-1} 1``, scaled to ``max mu = 1``.

    Positive exactly when ``rho(Gamma) < lam`` (``lam I - Gamma`` a non-singular
    M-matrix); then ``Gamma mu = lam mu - 1/max < lam mu``. Non-positive entries
    (``rho >= lam``) are clipped to a tiny weight, which the gain check rejects.
    """
    n_sub = G.shape[0]
    v = jnp.linalg.solve(lam * jnp.eye(n_sub, dtype=G.dtype) - G, jnp.ones(n_sub, G.dtype))
    bad = jnp.any(v <= 0) | ~jnp.all(jnp.isfinite(v))
    v = jnp.where(bad, jnp.ones_like(v) * 1e-3, v)
    return v / jnp.max(v)


def gain_matrix(cert: Certificate, system: InterconnectedSystem) -> np.ndarray:
    return np.asarray(_gain_arrays(cert, system)[0], np.float64)


def certificate_mu(cert: Certificate, system: InterconnectedSystem) -> Float[Array, " N"]:
    a, b, _ = gains(cert, system)
    return mu_weights(gain_matrix_jnp(a, b, system.neighbors), cert.lam_max)


@eqx.filter_jit(compiler_options=FAST_COMPILE)
def _gain_arrays(cert, system):
    a, b, c = gains(cert, system)
    G = gain_matrix_jnp(a, b, system.neighbors)
    return G, c, mu_weights(G, cert.lam_max)


def gain_report(cert: Certificate, system: InterconnectedSystem) -> GainReport:
    """Condition (G), checked in float64 on the float32 gains and weights (exact casts).

    ``lam = max_i (Gamma mu)_i / mu_i`` for the weights ``mu`` the guards used; (G) holds
    when ``lam < 1`` and ``c_i w_max^2 + eta <= (1 - lam) mu_i`` for every ``i``.
    """
    G, c, mu = (np.asarray(v, np.float64) for v in _gain_arrays(cert, system))
    # (G mu)_i: float64 sums of <= K + 1 products of float32 values: relative error
    # below 1e-15, covered by the 1e-12 slack.
    lam = float(np.max((G @ mu) / mu) * (1.0 + 1e-12)) if np.all(mu > 0) else np.inf
    margin = (1.0 - lam) * mu - (c * system.w_max**2 + cert.eta)
    rad = float(np.max(np.abs(np.linalg.eigvals(G)))) if G.size else 0.0
    iss = (float(np.abs(np.linalg.inv(np.eye(G.shape[0]) - G)).sum(1).max())
           if rad < 1 else float("inf"))
    ok = bool(lam < 1.0 and np.all(margin >= 0))
    return GainReport(G, mu, lam, rad, float(G.sum(1).max()), margin, iss, ok)


def relax_gains(cert: Certificate, system: InterconnectedSystem, slack: float) -> Certificate:
    """Spend part of the unused small-gain margin as slack in the decrease condition.

    Scales every ``a_i`` and ``b_ik`` by one factor ``s >= 1``, the largest with
    (G) still holding and ``lam(s) <= lam + slack (1 - lam)`` (``lam`` of
    :func:`gain_report`; bisection). The right side of (C1) grows by
    ``(s - 1)(a_i m_i + sum_k b_ik m_k)``, a margin quadratic in the state wherever the
    trained certificate was tight, so branch-and-bound needs far fewer boxes; the price
    is a larger sISS gain (``1 / (1 - lam)`` grows by up to ``1 / (1 - slack)``).
    ``slack = 0`` (or (G) failing already) returns ``cert`` unchanged.
    """
    check_scalar("slack", slack, ge=0.0, lt=1.0)
    rep = gain_report(cert, system)
    if slack == 0.0 or not rep.ok:
        return cert
    a, b, _ = (np.asarray(v, np.float64) for v in gains(cert, system))
    target = rep.lam + slack * (1.0 - rep.lam)
    lam_max = cert.lam_max

    def scaled(s):
        a2 = np.minimum(a * s, lam_max * (1.0 - 1e-6))
        b2 = b * s
        return eqx.tree_at(lambda q: (q.a_raw, q.b_raw), cert, (
            jnp.asarray(np.log(a2 / lam_max) - np.log1p(-a2 / lam_max), jnp.float32),
            jnp.asarray(np.where(b2 > 0, np.log(np.expm1(np.maximum(b2, 1e-30))),
                                 np.asarray(cert.b_raw)), jnp.float32)))

    def fits(c):
        r = gain_report(c, system)
        return r.ok and r.lam <= target

    lo, hi = 1.0, 1.0 / max(rep.lam, 1e-6)
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if fits(scaled(mid)) else (lo, mid)
    return scaled(lo) if lo > 1.0 else cert


# --------------------------------------------------------------------------- local data


@eqx.filter_jit
def local_data(cert: Certificate, system: InterconnectedSystem, reach: Reach) -> dict:
    """Everything subsystem ``i``'s conditions need, stacked over ``i`` (leading ``N``).

    Neighbour certificates are gathered per slot (slot of a missing neighbour: its
    box is ``[0, 0]`` and its gain 0).
    """
    nb = system.neighbors
    j = jnp.maximum(nb, 0)
    present = (nb >= 0).astype(jnp.float32)
    D = _box_d(system)
    a, b, c = gains(cert, system)
    mu = jax.lax.stop_gradient(certificate_mu(cert, system))

    def gather(x):
        return x[j]

    own = dict(W1=cert.W1, b1=cert.b1, W2=cert.W2, L=cert.L, D=D)
    nbr = {k: gather(v) for k, v in own.items()}
    return {
        "own": own,
        "nbr": nbr,
        "present": present,
        "r": system.state_box,
        "r_nbr": gather(system.state_box) * present[..., None],
        "dyn": system.params,
        "a": a,
        "b": b * present,
        "c": c,
        "kappa": reach.kappa,
        "kappa_w": reach.kappa_w,
        "mu": mu,
        "mu_nbr": jnp.where(nb >= 0, mu[j], 1.0),
    }


def _counts(system):
    c_own = 2 if system.own_delay else 1
    c_nbr = int(system.neighbor_current) + int(system.neighbor_delayed)
    return c_own, c_nbr


def n_conditions(system: InterconnectedSystem) -> int:
    """How many leading outputs of the condition program must be ``<= 0``."""
    return 1 + (system.n if system.own_delay else 0)


def _n_args(system):
    c_own, c_nbr = _counts(system)
    return c_own + system.K * c_nbr


def guard_limits(system: InterconnectedSystem, data_i: dict) -> Float[Array, " g"]:
    """Upper limits of the guard outputs (a box whose guard lower bound exceeds its
    limit is unreachable): ``mu`` of the argument's owner for every ``V(arg)``,
    ``max(mu_i, mu_k present)`` for ``S_i``."""
    lim = []
    for kind, k, _ in _args(system):
        lim.append(data_i["mu"] if kind == "own" else data_i["mu_nbr"][k])
    if system.own_delay:
        lim.append(_m_max(data_i))
    return jnp.stack(lim)


def _m_max(data_i):
    """The largest window maximum reachable by the arguments: ``max(mu_i, mu_k present)``."""
    return jnp.maximum(data_i["mu"], jnp.max(data_i["present"] * data_i["mu_nbr"], initial=0.0))


def _ellipse_halfwidth(p: dict, mu, r):
    """Half-widths of the bounding box of ``{x^T Q x <= mu}``, ``Q = D + L L^T <= V``.

    ``{V <= mu}`` lies inside that ellipse, so the box is a sound domain for the
    argument. Padded by 1e-3 relative (float32 inverse of a small SPD matrix) and
    capped at the state box ``r``.
    """
    sd = _sqrt_d(p["D"])
    Q = jnp.diag(jnp.square(sd)) + p["L"] @ p["L"].T
    half = jnp.sqrt(jnp.maximum(mu, 0.0) * jnp.diag(jnp.linalg.inv(Q))) * (1.0 + 1e-3)
    return jnp.minimum(half, r)


def domain_box(system: InterconnectedSystem, data_i: dict, eta_reach: float):
    """The local input box ``(lower, upper)`` of subsystem ``i``.

    States: the bounding boxes of the ellipses that contain ``{V_i <= mu_i}`` (own)
    and ``{V_j <= mu_j}`` (neighbour slots; ``[0, 0]`` for an empty slot);
    ``delta_i``: the reachability bound ``d sqrt(kappa_i max_mu + kw_i w^2 + eta_r)``;
    ``w``: ``[-w_max, w_max]``.
    """
    lay = input_layout(system)
    lo = jnp.zeros(lay.size)
    hi = jnp.zeros(lay.size)
    r = data_i["r"]
    own_half = _ellipse_halfwidth(data_i["own"], data_i["mu"], r)
    lo = lo.at[lay.x].set(-own_half)
    hi = hi.at[lay.x].set(own_half)
    if lay.delta is not None:
        inc = (data_i["kappa"] * _m_max(data_i)
               + data_i["kappa_w"] * system.w_max**2 + eta_reach)
        dmax = jnp.minimum(system.max_delay * jnp.sqrt(inc), 2.0 * own_half)
        lo = lo.at[lay.delta].set(-dmax)
        hi = hi.at[lay.delta].set(dmax)
    for k, (cur, dly) in enumerate(lay.slots):
        pk = jax.tree_util.tree_map(lambda a, k=k: a[k], data_i["nbr"])
        rk = _ellipse_halfwidth(pk, data_i["mu_nbr"][k], data_i["r_nbr"][k])
        for s in (cur, dly):
            if s is not None:
                lo = lo.at[s].set(-rk)
                hi = hi.at[s].set(rk)
    lo = lo.at[lay.w].set(-system.w_max)
    hi = hi.at[lay.w].set(system.w_max)
    return lo, hi


# --------------------------------------------------------------------------- the condition


def _sel(lay_size, rows_slices, signs=None, dtype=jnp.float32):
    """Selection matrix stacking the given input slices (optionally with signs)."""
    mats = []
    for idx, s in enumerate(rows_slices):
        n = s.stop - s.start
        M = np.zeros((n, lay_size), np.float32)
        M[:, s] = np.eye(n) * (1.0 if signs is None else signs[idx])
        mats.append(M)
    return np.sum(mats, 0) if len(mats) > 1 else mats[0]


def _args(system):
    """The argument list: (kind, slot, selection matrix) in output order."""
    lay = input_layout(system)
    out = [("own", -1, _sel(lay.size, [lay.x]))]
    if lay.delta is not None:
        out.append(("own", -1, _sel(lay.size, [lay.x, lay.delta], [1.0, -1.0])))
    for k, (cur, dly) in enumerate(lay.slots):
        for s in (cur, dly):
            if s is not None:
                out.append(("nbr", k, _sel(lay.size, [s])))
    return out


def condition_program(
    system: InterconnectedSystem,
    data_i: dict,
    dyn_program: bd.Program,
    *,
    eta: float,
    eta_reach: float,
    rhs_scale: float | Array = 1.0,
) -> bd.Program:
    """Outputs ``[C1, C2_1..C2_n, V(arg_1)..., S_i]`` of subsystem ``i`` (see module doc).

    ``C1 = V_i(f_i(u)) - rhs_scale * (RHS without eta) - eta``; ``rhs_scale < 1`` asks
    for a margin (training).
    """
    lay = input_layout(system)
    n = system.n
    d = system.max_delay
    c_own, c_nbr = _counts(system)
    own, nbr = data_i["own"], data_i["nbr"]

    def vprog(p):
        return v_program(p["W1"], p["b1"], p["W2"], p["L"], p["D"])

    vi = vprog(own)
    branches = [bd.compose(dyn_program, vi)]  # V_i(f_i(u)), unfused: the exact composition
    args = _args(system)
    for kind, k, S in args:
        p = own if kind == "own" else jax.tree_util.tree_map(lambda a, k=k: a[k], nbr)
        # Selection/sign matrices: the fused product W1 S is exact.
        branches.append(bd.compose(bd.affine(jnp.asarray(S)), vprog(p), fuse=True))
    if system.own_delay:
        Sx = _sel(lay.size, [lay.x])
        inc = bd.compose(bd.parallel(dyn_program, bd.affine(jnp.asarray(Sx))),
                         bd.affine(jnp.concatenate([jnp.eye(n), -jnp.eye(n)], 1)),
                         bd.elementwise((bd.SQUARE,) * n))
        branches.append(inc)
    Sw = _sel(lay.size, [lay.w])
    nw = system.n_w
    branches.append(bd.compose(bd.affine(jnp.asarray(Sw)), bd.elementwise((bd.SQUARE,) * nw),
                               bd.affine(jnp.ones((1, nw))), fuse=True))
    if system.own_delay:
        Sd = _sel(lay.size, [lay.delta])
        scale = 1.0 / (n * max(d, 1) ** 2)
        branches.append(bd.compose(bd.affine(jnp.asarray(Sd)), bd.elementwise((bd.SQUARE,) * n),
                                   bd.affine(jnp.full((1, n), scale)), fuse=True))
    Q = bd.parallel(*branches)
    return bd.compose(Q, _combine(system, data_i, eta, eta_reach, rhs_scale))


def _q_index(system):
    """Positions in the stacked vector Q = [Vf, args..., inc^2 (n), |w|^2, dsq]."""
    n_args = _n_args(system)
    pos = {"vf": 0, "args": list(range(1, 1 + n_args))}
    p = 1 + n_args
    if system.own_delay:
        pos["inc"] = list(range(p, p + system.n))
        p += system.n
    pos["w2"] = p
    p += 1
    if system.own_delay:
        pos["dsq"] = p
        p += 1
    pos["size"] = p
    return pos


class _Builder:
    """Layers that pass every unit through and append ReLU units; quantities are
    affine rows over the current units (old rows stay valid, padded with zeros)."""

    def __init__(self, width, dtype):
        self.width, self.dtype, self.layers = width, dtype, []

    def unit(self, t):
        return (jnp.zeros(self.width, self.dtype).at[t].set(1.0), jnp.zeros((), self.dtype))

    def pad(self, q):
        row, c = q
        return jnp.concatenate([row, jnp.zeros(self.width - row.shape[0], self.dtype)]), c

    def relus(self, qs):
        """Append ``relu(q)`` for each quantity; return them as quantities."""
        if not qs:
            return []
        qs = [self.pad(q) for q in qs]
        W = jnp.concatenate([jnp.eye(self.width, dtype=self.dtype),
                             jnp.stack([r for r, _ in qs])], 0)
        b = jnp.concatenate([jnp.zeros(self.width, self.dtype), jnp.stack([c for _, c in qs])])
        self.layers.append(bd.Layer(W, b, (bd.IDENTITY,) * self.width + (bd.RELU,) * len(qs)))
        start = self.width
        self.width += len(qs)
        return [self.unit(start + t) for t in range(len(qs))]

    def add(self, p, q, scale=1.0):
        p, q = self.pad(p), self.pad(q)
        return p[0] + scale * q[0], p[1] + scale * q[1]

    def reduce(self, qs, kind):
        """max (or min) of quantities by a tree of ``p + relu(q - p)`` (``p - relu(p - q)``)."""
        qs = list(qs)
        while len(qs) > 1:
            pairs = [(qs[t], qs[t + 1]) for t in range(0, len(qs) - 1, 2)]
            diffs = [self.add(q, p, -1.0) if kind == "max" else self.add(p, q, -1.0)
                     for p, q in pairs]
            r = self.relus(diffs)
            out = [self.add(p, rr, 1.0 if kind == "max" else -1.0)
                   for (p, _), rr in zip(pairs, r, strict=True)]
            if len(qs) % 2:
                out.append(qs[-1])
            qs = out
        return qs[0]


def _groups_of_args(system, pos):
    args = _args(system)
    own = [pos["args"][t] for t, (kind, _, _) in enumerate(args) if kind == "own"]
    slots = {}
    for t, (kind, k, _) in enumerate(args):
        if kind == "nbr":
            slots.setdefault(k, []).append(pos["args"][t])
    return own, [slots[k] for k in sorted(slots)]


def _combine(system, data_i, eta, eta_reach, rhs_scale) -> bd.Program:
    """Q -> [C1, C2..., guards]: windowed maxima, the LP term and the gains."""
    pos = _q_index(system)
    dtype = jnp.float32
    bld = _Builder(pos["size"], dtype)
    own_idx, slot_idx = _groups_of_args(system, pos)
    a, b, c = data_i["a"], data_i["b"], data_i["c"]
    present = data_i["present"]
    # Level 1: m_i and m_k (max over the copies of each group), one layer.
    groups = [own_idx] + slot_idx
    firsts = [bld.unit(g[0]) for g in groups]
    diffs = [bld.add(bld.unit(g[1]), bld.unit(g[0]), -1.0) for g in groups if len(g) == 2]
    r = iter(bld.relus(diffs))
    m = [bld.add(f, next(r)) if len(g) == 2 else f for f, g in zip(firsts, groups, strict=True)]
    rhs = (a * m[0][0], a * m[0][1])
    for k in range(len(m) - 1):
        rhs = bld.add(rhs, m[k + 1], b[k])
    if system.own_delay:
        kappa = data_i["kappa"]
        s_q = (bld.unit(pos["dsq"])[0] / kappa,
               -(data_i["kappa_w"] * system.w_max**2 + eta_reach) / kappa)
        # LP term: raise the cheapest window maximum to S: min_j g_j relu(S - m_j), with a
        # missing neighbour's term replaced by the own one (so it never wins).
        gaps = bld.relus([bld.add(s_q, mj, -1.0) for mj in m])
        terms = [(a * gaps[0][0], a * gaps[0][1])]
        for k in range(len(m) - 1):
            mine = (b[k] * gaps[k + 1][0], b[k] * gaps[k + 1][1])
            own_t = terms[0]
            terms.append((present[k] * mine[0] + (1 - present[k]) * own_t[0],
                          present[k] * mine[1] + (1 - present[k]) * own_t[1]))
        lp = bld.reduce(terms, "min")
        rhs = bld.add(rhs, lp)
        m_all = bld.reduce(m, "max")
    rhs = bld.add(rhs, bld.unit(pos["w2"]), c)
    out_rows, out_b = [], []
    vf_row, _ = bld.unit(pos["vf"])
    rhs = bld.pad(rhs)
    out_rows.append(vf_row - rhs_scale * rhs[0])
    out_b.append(-rhs_scale * rhs[1] - eta)
    if system.own_delay:
        m_all = bld.pad(m_all)
        w2 = bld.unit(pos["w2"])[0]
        for t in pos["inc"]:
            out_rows.append(bld.unit(t)[0] - kappa * m_all[0] - data_i["kappa_w"] * w2)
            out_b.append(-kappa * m_all[1] - eta_reach)
    for t in pos["args"]:
        out_rows.append(bld.unit(t)[0])
        out_b.append(jnp.zeros((), dtype))
    if system.own_delay:
        s_q = bld.pad(s_q)
        out_rows.append(s_q[0])
        out_b.append(s_q[1])
    Wf = jnp.stack(out_rows)
    bf = jnp.stack([jnp.asarray(v, dtype).reshape(()) for v in out_b])
    layers = bld.layers + [bd.Layer(Wf, bf, (bd.IDENTITY,) * Wf.shape[0])]
    return bd.Program(tuple(layers))


def condition_values(
    system: InterconnectedSystem,
    data_i: dict,
    dyn_program: bd.Program,
    u: Float[Array, "... nu"],
    *,
    eta: float,
    eta_reach: float,
    rhs_scale: float | Array = 1.0,
) -> Float[Array, "... o"]:
    """The condition program's outputs evaluated directly (cheaper; equal up to
    rounding to ``condition_program(...)(u)``): used by training and sampling.

    Jittable; vmappable over ``u``, ``eta``, ``eta_reach``, ``rhs_scale`` and the
    arrays of ``data_i`` (gains, certificates: traced numbers); differentiable in
    ``u`` and in ``data_i`` (how training learns the certificate and its gains).

    Args:
      system: the system (structure; :func:`~.systems.skeleton` suffices).
      data_i: subsystem ``i``'s slice of :func:`local_data`.
      dyn_program: subsystem ``i``'s local map ``f_i``.
      u: ``(..., n_u)`` local inputs (:func:`~.systems.input_layout`).
      eta, eta_reach: the offsets of (C1) and (C2).
      rhs_scale: scales the right side of (C1) (``1 - margin`` in training).

    Returns:
      ``(..., 1 + n + n_args + 1)`` (own delay) or ``(..., 1 + n_args)``: (C1), the (C2)
      components, the certificate values of the arguments, and ``S_i``.
    """
    lay = input_layout(system)
    u = jnp.asarray(u)
    check_array("u", u, shape=(None,) * (u.ndim - 1) + (lay.size,), dtype="floating")
    n = system.n
    d = system.max_delay
    own, nbr = data_i["own"], data_i["nbr"]

    def V(p, x):
        return jax.vmap(lambda z: _v(p["W1"], p["b1"], p["W2"], p["L"], p["D"], z))(
            x.reshape(-1, n)).reshape(x.shape[:-1])

    x = u[..., lay.x]
    fx = bd.apply(dyn_program, u)
    vf = V(own, fx)
    own_vals = [V(own, x)]
    if lay.delta is not None:
        own_vals.append(V(own, x - u[..., lay.delta]))
    slot_vals = []
    for k, (cur, dly) in enumerate(lay.slots):
        pk = jax.tree_util.tree_map(lambda a, k=k: a[k], nbr)
        slot_vals.append([V(pk, u[..., s]) for s in (cur, dly) if s is not None])
    a, b, c = data_i["a"], data_i["b"], data_i["c"]
    present = data_i["present"]
    m = [own_vals[0] if len(own_vals) == 1 else jnp.maximum(*own_vals)]
    m += [sv[0] if len(sv) == 1 else jnp.maximum(*sv) for sv in slot_vals]
    w2 = jnp.sum(jnp.square(u[..., lay.w]), -1)
    rhs = a * m[0] + c * w2
    for k in range(system.K):
        rhs = rhs + b[k] * m[k + 1]
    if system.own_delay:
        kappa, kw = data_i["kappa"], data_i["kappa_w"]
        dsq = jnp.sum(jnp.square(u[..., lay.delta]), -1) / (n * max(d, 1) ** 2)
        s_val = (dsq - kw * system.w_max**2 - eta_reach) / kappa
        terms = [a * jax.nn.relu(s_val - m[0])]
        for k in range(system.K):
            mine = b[k] * jax.nn.relu(s_val - m[k + 1])
            terms.append(present[k] * mine + (1 - present[k]) * terms[0])
        rhs = rhs + jnp.min(jnp.stack(terms), 0)
        m_all = jnp.max(jnp.stack(m), 0)
    outs = [vf - rhs_scale * rhs - eta]
    if system.own_delay:
        inc2 = jnp.square(fx - x)
        for t in range(n):
            outs.append(inc2[..., t] - kappa * m_all - kw * w2 - eta_reach)
    outs.extend(own_vals + [v for sv in slot_vals for v in sv])
    if system.own_delay:
        outs.append(s_val)
    return jnp.stack(outs, -1)


def default_reach(system: InterconnectedSystem) -> Reach:
    """Placeholder reachability constants (``kappa = 1``): set them with
    :func:`jaxsci.dynamics.lyapunov.train.estimate_reach` before verifying."""
    return Reach(jnp.ones(system.n_sub), jnp.ones(system.n_sub))
