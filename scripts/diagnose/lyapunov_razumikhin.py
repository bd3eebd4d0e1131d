"""Does a quadratic certificate of the Razumikhin conditions exist for a benchmark's
first subsystem, and does a common quadratic Lyapunov function of its switched
history system exist?

    python scripts/diagnose/lyapunov_razumikhin.py --system platoon

Both on the linearisation at the equilibrium (slopes of ``tanh`` / ``sin`` at 0), with
the first subsystem's neighbour inputs and the disturbance at zero (so both questions
are easier than the real ones):

* **Razumikhin** (the conditions ``ly.certificates`` checks, with ``own_delay``): the
  smallest over ``V(x) = x^T P x`` of the worst ratio
  ``V(x+) / max(V(x), V(x - delta), S)`` with ``S = mean(delta^2) / (d^2 kappa)`` and
  ``kappa`` the smallest constant of the reachability condition (C2) for that ``P``:
  (C1) needs a ratio below 1. The worst ratio is a maximum over 400,000 random
  directions ``(x, delta)`` (a lower bound of the true supremum), minimised over ``P``
  by Nelder-Mead from 20 starts: a best ratio above 1 means no quadratic ``P`` meets
  (C1), up to the sampling and the search.
* **Krasovskii** (``ly.delay_modes``): the smallest ``lam`` with a ``P`` common to the
  ``d + 1`` modes of the history system (``A_m^T P A_m <= lam^2 P``, bisection on
  semidefinite programs, cvxpy).
"""

from __future__ import annotations

import argparse
import warnings

import jax
import numpy as np
import scipy.optimize

from jaxsci.dynamics import lyapunov as ly
from jaxsci.dynamics.lyapunov import quadratic as q
from jaxsci.dynamics.lyapunov.systems import input_layout, local_programs
from jaxsci.experiments import lyapunov as m


def _jacobian(system, i=0):
    lay = input_layout(system)
    prog = jax.tree_util.tree_map(lambda a: np.asarray(a)[i], local_programs(system))
    return q._vertex_maps(prog, lay.size, None, None, False)[0], lay


def razumikhin_ratio(system, samples=400_000, starts=20, seed=0):
    J, lay = _jacobian(system)
    n, d = system.n, system.max_delay
    Fl = np.concatenate([J[:, lay.x], J[:, lay.delta]], 1)  # u = [x, delta]
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(samples, 2 * n))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    X, Dl = U[:, :n], U[:, n:]
    Xd = X - Dl
    Fu = U @ Fl.T
    inc = Fu - X

    def ratio(z):
        L = np.zeros((n, n))
        L[np.tril_indices(n)] = z
        L[np.diag_indices(n)] = np.exp(np.diag(L))
        P = L @ L.T

        def V(Y):
            return np.einsum("ij,jk,ik->i", Y, P, Y)

        mv = np.maximum(V(X), V(Xd))
        kappa = np.max(inc**2 / mv[:, None])
        S = np.sum(Dl**2, 1) / (n * d * d) / kappa
        return float(np.max(V(Fu) / np.maximum(mv, S)))

    best = np.inf
    for _ in range(starts):
        r = scipy.optimize.minimize(ratio, rng.normal(size=n * (n + 1) // 2),
                                    method="Nelder-Mead", options={"maxiter": 600})
        best = min(best, r.fun)
    return best


def krasovskii_decay(system):
    import cvxpy as cp

    modes = ly.delay_modes(system)
    As = []
    for mode in modes:
        J, lay = _jacobian(mode)
        As.append(J[:, lay.x])
    k = As[0].shape[0]
    P = cp.Variable((k, k), symmetric=True)
    l2 = cp.Parameter(nonneg=True)
    prob = cp.Problem(cp.Minimize(cp.trace(P)),
                      [P >> np.eye(k)] + [l2 * P - A.T @ P @ A >> 0 for A in As])
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        l2.value = mid**2
        try:
            prob.solve(solver=cp.CLARABEL)
            ok = prob.status == cp.OPTIMAL
        except cp.error.SolverError:
            ok = False
        lo, hi = (lo, mid) if ok else (mid, hi)
    return hi, len(modes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", default="platoon", choices=["platoon", "microgrid"])
    args = ap.parse_args()
    cfg = m.LyapunovConfig()
    print("| system | dt | d | best Razumikhin ratio (quadratic P) | Krasovskii common decay "
          "| modes |")
    print("|---|---|---|---|---|---|")
    for dt, d in ((cfg.dt, cfg.max_delay), (0.2, 2)):
        s = m.SYSTEMS[args.system](2, dt=dt, max_delay=d, w_max=cfg.w_max)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lam, n_modes = krasovskii_decay(s)
        print(f"| {args.system} | {dt} | {d} | {razumikhin_ratio(s):.3f} | {lam:.4f} | "
              f"{n_modes} |", flush=True)


if __name__ == "__main__":
    main()
