"""Benchmark: bound quality vs time of learned Lagrangian multipliers.

On held-out instances of one distribution (:func:`jaxsci.stats.lagrangian.random_scenarios`,
``K`` scenarios, dense covering rows), three ways to get a lower bound on each
instance's optimum, all against the LP relaxation's value ``LP(P)`` (which, for this
box family, is also the best Lagrangian bound ``max_pi u(pi, P)``):

* **learned**: one multiplier vector learned once by averaged SGA on ``--train``
  instances (its learning time reported apart), then ``u(pi_hat, P)`` per instance: one
  closed-form evaluation, ``vmap``-ed over the held-out batch;
* **learned warm start**: the mean of the training instances' LP multipliers
  (:func:`~jaxsci.stats.lagrangian.fit_warm_start`), evaluated the same way;
* **per-instance subgradient** (jaxsci, jitted, vmapped over the batch) for ``T`` steps
  from 0 and from the learned warm start, each with its training estimate of the
  distance to the per-instance optimum as the step scale;
* **LP relaxation by HiGHS** (``scipy.optimize.linprog``), one instance at a time: the
  peer a user would call.

Printed: per method, the mean bound as a share of ``LP(P)`` and the time per instance
(after warm-up; compile time apart), and the ratio of HiGHS's time to each.

    python scripts/bench/lagrangian.py [--instances 512] [--scenarios 64] [--n 40] [--s 10]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.stats import lagrangian as lr


def timed(fn, *args, repeat=3):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    t = float(np.median(times))
    return out, t, max(first - t, 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=512, help="held-out instances")
    ap.add_argument("--scenarios", type=int, default=64, help="K of the distribution")
    ap.add_argument("--n", type=int, default=40, help="variables")
    ap.add_argument("--s", type=int, default=10, help="coupling rows")
    ap.add_argument("--train", type=int, default=4096, help="SGA samples")
    ap.add_argument("--steps", type=int, nargs="+", default=[10, 100, 1000])
    args = ap.parse_args()

    dist = lr.random_scenarios(jax.random.key(0), args.scenarios, args.n, args.s)
    _, pi_star = lr.best_constant_multiplier(dist)
    radius = 2.0 * float(np.linalg.norm(pi_star))
    learn = jax.jit(lambda k: lr.learn_sga(dist, k, args.train, radius).multipliers)
    pi_hat, t_learn, c_learn = timed(learn, jax.random.key(1))

    # Held-out instances: draws from the distribution (scenario index per instance).
    idx = np.asarray(jax.random.randint(jax.random.key(2), (args.instances,), 0, args.scenarios))
    insts = dist.instances[jnp.asarray(idx)]
    t0 = time.perf_counter()
    lps = [lr.lp_relaxation(dist.instances[k]) for k in range(args.scenarios)]
    t_lp = (time.perf_counter() - t0) / args.scenarios
    lp = np.array([r.value for r in lps])[idx]
    # The warm-start learner: the mean of the per-instance LP multipliers of the training
    # draws; each start's step scale is its training estimate of the distance to pi*(P).
    train = np.asarray(jax.random.randint(jax.random.key(3), (args.train,), 0, args.scenarios))
    targets = jnp.asarray(np.stack([r.multipliers for r in lps])[train], jnp.float32)
    warm = lr.fit_warm_start(targets)()
    d_warm = float(jnp.sqrt(lr.warm_start_risk(warm, targets)))
    d_cold = float(jnp.sqrt(lr.warm_start_risk(jnp.zeros(args.s), targets)))

    rows = []
    bound = jax.jit(jax.vmap(lr.dual, (None, 0)))
    vals, t, comp = timed(bound, pi_hat, insts)
    rows.append(("learned pi (1 evaluation)", np.asarray(vals), t, comp))
    vals, t, comp = timed(bound, warm, insts)
    rows.append(("learned warm start (1 evaluation)", np.asarray(vals), t, comp))
    zeros = jnp.zeros(args.s)
    for steps in args.steps:
        for tag, start, a in (("from 0", zeros, d_cold), ("warm start", warm, d_warm)):
            run = jax.jit(jax.vmap(lambda inst, p0=start, a=a, T=steps: lr.subgradient(
                inst, p0, T, a).value))
            vals, t, comp = timed(run, insts)
            rows.append((f"subgradient {tag}, T = {steps}", np.asarray(vals), t, comp))

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; {args.instances} held-out "
          f"instances, n = {args.n}, s = {args.s}, K = {args.scenarios}; SGA on {args.train} "
          f"samples: {t_learn * 1e3:.1f} ms (+{c_learn:.2f} s compile)")
    hdr = (f"{'method':>34} | {'bound / LP':>10} | {'us / instance':>13} | {'compile s':>9} | "
           f"{'HiGHS time / this':>17}")
    print(hdr)
    print("-" * len(hdr))
    for name, vals, t, comp in rows:
        per = t / args.instances
        print(f"{name:>34} | {np.mean(vals / lp):>10.4f} | {per * 1e6:>13.2f} | {comp:>9.2f} | "
              f"{t_lp / per:>16.0f}x")
    print(f"{'LP relaxation (HiGHS, linprog)':>34} | {1.0:>10.4f} | {t_lp * 1e6:>13.2f} | "
          f"{'-':>9} | {1:>16}x")


if __name__ == "__main__":
    main()
