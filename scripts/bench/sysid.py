"""Benchmark: jaxsci's l2-norm estimator (IRLS, jitted) vs cvxpy on the same problems.

cvxpy is what a user would pick for ``min_Theta sum_t ||y_t - Theta phi_t||_2`` (an
SOCP). Both solve identical data (simulated with attack probability p = 0.2); we
report solve time (jaxsci after warm-up, compile time separately), the objective
gap relative to cvxpy's optimum and the relative prediction error on clean data.

    python scripts/bench/sysid.py [--repeats 5] [--solver CLARABEL]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.dynamics import sysid as sid

SIZES = [(500, 2), (2000, 4), (5000, 8)]  # (T, L) with m = 8 features per lag, n_y = 3


def problem(t_len, L, seed=0):
    system = sid.make_system(jax.random.key(seed), n_x=6, n_y=3, n_u=2, m=8, rho=0.6)
    attack = sid.Attack(3.0 * jax.random.normal(jax.random.key(seed + 1), (3, 8)),
                        jnp.array([3.0, -2.0, 2.0]), 2.0, 0.8)
    u = sid.ar_inputs(jax.random.key(seed + 2), t_len + L, 2)
    phi, y, y_clean, _ = sid.simulate(jax.random.key(seed + 3), system, u, L, 0.2, attack, 0.05)
    return phi, y, y_clean


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--solver", default="CLARABEL")
    args = ap.parse_args()
    import cvxpy as cp

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, cvxpy {cp.__version__} "
          f"({args.solver}); float32 IRLS vs float64 interior point")
    hdr = (f"{'T':>6} {'d':>4} | {'jaxsci ms':>10} {'compile s':>9} {'iters':>5} | "
           f"{'cvxpy ms':>9} {'solver ms':>9} | {'ratio':>6} | {'obj gap':>9} | {'err jaxsci':>10} "
           f"{'err cvxpy':>10} {'err LS':>8}")
    print(hdr)
    print("-" * len(hdr))
    for t_len, L in SIZES:
        phi, y, y_clean = problem(t_len, L)
        t0 = time.perf_counter()
        est = sid.l2_norm_estimator(phi, y)
        jax.block_until_ready(est.theta)
        first = time.perf_counter() - t0
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            est = sid.l2_norm_estimator(phi, y)
            jax.block_until_ready(est.theta)
            times.append(time.perf_counter() - t0)
        t_jax = float(np.median(times))

        phi64, y64 = np.asarray(phi, np.float64), np.asarray(y, np.float64)
        var = cp.Variable((y64.shape[1], phi64.shape[1]))
        prob = cp.Problem(cp.Minimize(cp.sum(cp.norm(y64 - phi64 @ var.T, 2, axis=1))))
        times = []
        for _ in range(max(1, args.repeats // 2)):
            t0 = time.perf_counter()
            prob.solve(solver=args.solver)
            times.append(time.perf_counter() - t0)
        t_cvx = float(np.median(times))
        theta_cvx = jnp.asarray(var.value, jnp.float32)
        theta64 = np.asarray(est.theta, np.float64)
        obj_jax = float(np.sum(np.linalg.norm(y64 - phi64 @ theta64.T, axis=1)))
        t_core = float(prob.solver_stats.solve_time)
        gap = (obj_jax - prob.value) / prob.value
        err_j = float(sid.prediction_error(est.theta, phi, y_clean))
        err_c = float(sid.prediction_error(theta_cvx, phi, y_clean))
        err_ls = float(sid.prediction_error(sid.least_squares(phi, y), phi, y_clean))
        print(f"{phi.shape[0]:>6} {phi.shape[1]:>4} | {1e3 * t_jax:>10.2f} {first - t_jax:>9.2f} "
              f"{int(est.iterations):>5} | {1e3 * t_cvx:>9.1f} {1e3 * t_core:>9.1f} | "
              f"{t_cvx / t_jax:>6.1f} | "
              f"{gap:>9.2e} | {err_j:>10.4f} {err_c:>10.4f} {err_ls:>8.3f}")
    print("ratio = cvxpy time (prob.solve, incl. canonicalisation) / jaxsci time (higher: "
          "jaxsci faster); solver ms = Clarabel's own solve time; obj gap = (ours - cvxpy) / "
          "cvxpy, in float64 on our float32 estimate; err = relative prediction error on "
          "the clean outputs")


if __name__ == "__main__":
    main()
