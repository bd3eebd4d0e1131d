"""Benchmark: jaxsci's l2-norm estimator (IRLS, jitted) vs cvxpy on the same problems.

cvxpy is what a user would pick for ``min_Theta sum_t ||y_t - Theta phi_t||_2`` (an
SOCP). Both solve identical data, simulated with attack probability p = 0.2 and, near
the break-down point, p = 0.45. jaxsci runs twice: float32 with its default certified
tolerance (relative duality gap <= 1e-4) and float64 with its default (<= 1e-6); the
comparison at matched accuracy is the float64 row against cvxpy + Clarabel (an
interior-point method, float64, its default tolerances ~1e-8).

Reported per solve: time (jaxsci median after warm-up, its compile time separately;
cvxpy ``prob.solve`` including canonicalisation and Clarabel's own time), IRLS steps,
the status, jaxsci's certified gap (an upper bound on its relative suboptimality),
the true relative gap to cvxpy's optimum (computed in float64), and the relative
prediction error on clean data.

    python scripts/bench/sysid.py [--repeats 5] [--solver CLARABEL]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import numpy as np

# (T, L, p) with m = 8 features per lag, n_y = 3
SIZES = [(500, 2, 0.2), (2000, 4, 0.2), (5000, 8, 0.2), (2000, 4, 0.45), (5000, 8, 0.45)]


def problem(t_len, L, p, seed=0):
    import jax
    import jax.numpy as jnp

    from jaxsci.dynamics import sysid as sid

    system = sid.make_system(jax.random.key(seed), n_x=6, n_y=3, n_u=2, m=8, rho=0.6)
    attack = sid.Attack(3.0 * jax.random.normal(jax.random.key(seed + 1), (3, 8)),
                        jnp.array([3.0, -2.0, 2.0]), 2.0, 0.8)
    u = sid.ar_inputs(jax.random.key(seed + 2), t_len + L, 2)
    phi, y, y_clean, _ = sid.simulate(jax.random.key(seed + 3), system, u, L, p, attack, 0.05)
    return np.asarray(phi), np.asarray(y), np.asarray(y_clean)


def jaxsci_worker(x64: bool, repeats: int, data: str) -> None:
    """One precision in its own process (x64 must be set before jax is imported), on the
    problems the parent generated (the same numbers in both precisions)."""
    import jax

    jax.config.update("jax_enable_x64", x64)
    import jax.numpy as jnp

    from jaxsci.dynamics import sysid as sid

    dtype = jnp.float64 if x64 else jnp.float32
    problems = np.load(data)
    for i, (t_len, L, p) in enumerate(SIZES):
        phi, y, y_clean = (problems[f"{k}{i}"] for k in ("phi", "y", "y_clean"))
        phi_j, y_j = jnp.asarray(phi, dtype), jnp.asarray(y, dtype)
        t0 = time.perf_counter()
        est = sid.l2_norm_estimator(phi_j, y_j, throw=False)
        jax.block_until_ready(est.theta)
        first = time.perf_counter() - t0
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            est = sid.l2_norm_estimator(phi_j, y_j, throw=False)
            jax.block_until_ready(est.theta)
            times.append(time.perf_counter() - t0)
        t = float(np.median(times))
        theta = np.asarray(est.theta, np.float64)
        status = "ok" if bool(est.result == sid.RESULTS.successful) else str(est.result)
        err = float(np.sqrt(np.sum((phi @ theta.T - y_clean) ** 2) / np.sum(y_clean ** 2)))
        print("ROW", t_len, L, p, t, first - t, int(est.iterations), status,
              float(est.gap), " ".join(map(repr, theta.ravel().tolist())), err, flush=True)


def run_jaxsci(x64: bool, repeats: int, data: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", "64" if x64 else "32",
                          "--repeats", str(repeats), "--data", data], capture_output=True,
                         text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        if line.startswith("ROW "):
            f = line.split()
            t_len, L, p = int(f[1]), int(f[2]), float(f[3])
            rows[(t_len, L, p)] = dict(t=float(f[4]), compile=float(f[5]), iters=int(f[6]),
                                       status=f[7], gap=float(f[8]),
                                       theta=np.asarray([float(v) for v in f[9:-1]]),
                                       err=float(f[-1]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--solver", default="CLARABEL")
    ap.add_argument("--worker", choices=("32", "64"), help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        jaxsci_worker(args.worker == "64", args.repeats, args.data)
        return
    import tempfile

    import cvxpy as cp
    import jax

    problems = [problem(*size) for size in SIZES]
    with tempfile.TemporaryDirectory() as tmp:
        data = f"{tmp}/problems.npz"
        np.savez(data, **{f"{k}{i}": a for i, pr in enumerate(problems)
                          for k, a in zip(("phi", "y", "y_clean"), pr, strict=True)})
        runs = {"f32": run_jaxsci(False, args.repeats, data),
                "f64": run_jaxsci(True, args.repeats, data)}
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, cvxpy {cp.__version__} "
          f"({args.solver}); jaxsci IRLS float32 (certified gap <= 1e-4) and float64 "
          f"(<= 1e-6) vs cvxpy's float64 interior point")
    hdr = (f"{'T':>5} {'d':>3} {'p':>4} | {'prec':>4} {'ms':>8} {'compile s':>9} {'iters':>5} "
           f"{'status':>18} {'cert. gap':>9} {'true gap':>9} {'err':>7} | {'cvxpy ms':>8} "
           f"{'solver ms':>9} {'err':>7} | {'ratio':>6}")
    print(hdr)
    print("-" * len(hdr))
    for (t_len, L, p), (phi, y, y_clean) in zip(SIZES, problems, strict=True):
        phi, y, y_clean = (np.asarray(a, np.float64) for a in (phi, y, y_clean))
        var = cp.Variable((y.shape[1], phi.shape[1]))
        prob = cp.Problem(cp.Minimize(cp.sum(cp.norm(y - phi @ var.T, 2, axis=1))))
        times = []
        for _ in range(max(1, args.repeats // 2)):
            t0 = time.perf_counter()
            prob.solve(solver=args.solver)
            times.append(time.perf_counter() - t0)
        t_cvx = float(np.median(times))
        t_core = float(prob.solver_stats.solve_time)
        err_c = float(np.sqrt(np.sum((phi @ var.value.T - y_clean) ** 2) / np.sum(y_clean ** 2)))
        for prec in ("f32", "f64"):
            r = runs[prec][(t_len, L, p)]
            theta = r["theta"].reshape(var.value.shape)
            obj = float(np.sum(np.linalg.norm(y - phi @ theta.T, axis=1)))
            true_gap = (obj - prob.value) / prob.value
            print(f"{phi.shape[0]:>5} {phi.shape[1]:>3} {p:>4} | {prec:>4} {1e3 * r['t']:>8.2f} "
                  f"{r['compile']:>9.2f} {r['iters']:>5} {r['status'][:18]:>18} "
                  f"{r['gap']:>9.1e} {true_gap:>9.1e} {r['err']:>7.4f} | {1e3 * t_cvx:>8.1f} "
                  f"{1e3 * t_core:>9.1f} {err_c:>7.4f} | {t_cvx / r['t']:>6.1f}")
    print("ratio = cvxpy time (prob.solve, incl. canonicalisation) / jaxsci time (higher: "
          "jaxsci faster); cert. gap = jaxsci's certified relative duality gap (a bound on "
          "its suboptimality); true gap = (jaxsci objective - cvxpy's optimum) / optimum in "
          "float64 (negative: below cvxpy's, within cvxpy's own tolerance); err = relative "
          "prediction error on the clean outputs")


if __name__ == "__main__":
    main()
