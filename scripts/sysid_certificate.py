"""How the l2-norm estimator's certified stop behaves near the break-down point.

For seeds x attack probabilities (T = 1000, L = 3, the benchmark's system and adversary)
it fits in float32 and float64 with the defaults (and any ``--eps`` override) and prints
per fit: IRLS steps, status, the certified relative duality gap and the true relative
gap to cvxpy's optimum (float64). The numbers quoted in docs/sysid.md come from:

    python scripts/sysid_certificate.py              # float32 defaults, then float64
    python scripts/sysid_certificate.py --eps 1e-8   # float32 with float64's eps
    python scripts/sysid_certificate.py --small      # the certificate's lag on a small problem
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import numpy as np

SEEDS = range(4)
PROBS = (0.1, 0.2, 0.3, 0.4, 0.45)


def worker(x64: bool, eps: float | None) -> None:
    import jax

    jax.config.update("jax_enable_x64", x64)
    import cvxpy as cp
    import jax.numpy as jnp

    from jaxsci.dynamics import sysid as sid

    dtype = jnp.float64 if x64 else jnp.float32
    steps, certified, worst = [], 0, 0.0
    for seed in SEEDS:
        for p in PROBS:
            # The data are generated in float32 in both precisions (the same numbers).
            with jax.enable_x64(False):
                system = sid.make_system(jax.random.key(seed), n_x=6, n_y=3, n_u=2, m=8,
                                         rho=0.6)
                attack = sid.Attack(3.0 * jax.random.normal(jax.random.key(seed + 1), (3, 8)),
                                    jnp.array([3.0, -2.0, 2.0]), 2.0, 0.8)
                u = sid.ar_inputs(jax.random.key(seed + 2), 1000 + 3, 2)
                phi, y, _, _ = sid.simulate(jax.random.key(seed + 3), system, u, 3, p, attack,
                                            0.05)
                phi, y = np.asarray(phi, np.float64), np.asarray(y, np.float64)
            est = sid.l2_norm_estimator(jnp.asarray(phi, dtype), jnp.asarray(y, dtype),
                                        eps=eps, throw=False)
            var = cp.Variable((y.shape[1], phi.shape[1]))
            prob = cp.Problem(cp.Minimize(cp.sum(cp.norm(y - phi @ var.T, 2, axis=1))))
            prob.solve(solver="CLARABEL")
            theta = np.asarray(est.theta, np.float64)
            true = (np.sum(np.linalg.norm(y - phi @ theta.T, axis=1)) - prob.value) / prob.value
            ok = bool(est.result == sid.RESULTS.successful)
            steps.append(int(est.iterations))
            certified += ok
            worst = max(worst, true)
            print(f"  seed {seed} p {p:<4}: {int(est.iterations):4d} steps  "
                  f"{'certified' if ok else 'not certified':<14} gap {float(est.gap):.1e}  "
                  f"true gap {true:.1e}", flush=True)
    print(f"  {certified}/{len(steps)} certified, {min(steps)}-{max(steps)} steps, "
          f"worst true gap {worst:.1e}")


def small() -> None:
    """The small problem of tests/dynamics/test_sysid.py (float64): the objective's and the
    certificate's distance to the optimum against the step budget."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import cvxpy as cp
    import jax.numpy as jnp

    from jaxsci.dynamics import sysid as sid

    rng = np.random.default_rng(0)
    phi = rng.normal(size=(60, 6))
    y = phi @ rng.normal(size=(2, 6)).T + 0.1 * rng.normal(size=(60, 2))
    y[rng.random(60) < 0.2] += rng.normal(5.0, 3.0, size=2)
    var = cp.Variable((2, 6))
    prob = cp.Problem(cp.Minimize(cp.sum(cp.norm(y - phi @ var.T, 2, axis=1))))
    prob.solve(solver="CLARABEL")
    r = np.sort(np.linalg.norm(y - phi @ var.value.T, axis=1))
    print(f"small problem (60 x 6, float64): smallest optimal residuals {r[0]:.1e}, {r[1]:.1e}")
    for steps in (10, 20, 50, 100, 200, 400, 700, 1000):
        est = sid.l2_norm_estimator(jnp.asarray(phi), jnp.asarray(y), max_iter=steps, tol=0.0,
                                    throw=False)
        true = (float(est.objective) - prob.value) / prob.value
        print(f"  {steps:5d} steps: true gap {true:+.1e}  certified gap {float(est.gap):.1e}",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", type=float, default=None, help="eps for the float32 fits")
    ap.add_argument("--small", action="store_true",
                    help="the test's small problem against the step budget instead")
    ap.add_argument("--worker", choices=("32", "64"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.small:
        small()
        return
    if args.worker:
        worker(args.worker == "64", args.eps)
        return
    for prec, eps in (("32", args.eps), ("64", None)):
        print(f"float{prec} (eps {'default' if eps is None else eps}):", flush=True)
        cmd = [sys.executable, __file__, "--worker", prec]
        if eps is not None:
            cmd += ["--eps", str(eps)]
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
