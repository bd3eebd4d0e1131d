"""Benchmark: jaxsci's bandit simulator vs MABWiser, steps per second on one instance.

MABWiser (``mabwiser``, Fidelity) is what a user would pick to run UCB1 on a Bernoulli
bandit in Python: ``MAB.predict()`` then ``MAB.partial_fit([arm], [reward])`` each
round. Both run UCB1 (MABWiser's ``LearningPolicy.UCB1(alpha)``, index
``mean + alpha sqrt(2 log t / n)``; jaxsci's ``UCB1(width = alpha sqrt 2)``) on the same
4-arm Bernoulli instance. jaxsci runs ``--runs`` independent runs of ``--horizon``
rounds in one compiled program (``vmap`` over keys; compile time reported apart);
MABWiser plays ``--peer-horizon`` rounds of one run. We report rounds per second
(steps/s, summed over runs for jaxsci) and the ratio, and both mean regrets at the
peer's horizon as a sanity check.

    python scripts/bench/bandits.py [--horizon 100000] [--runs 256] [--peer-horizon 5000]

Setup (MABWiser 2.7.4 installs beside jaxsci's pins): ``pip install mabwiser==2.7.4``
(or ``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import math
import time

import jax
import numpy as np

from jaxsci.stats import bandits as bd

MEANS = np.array([0.7, 0.6, 0.5, 0.4], np.float32)
THRESHOLD = 0.65


def jaxsci_rate(horizon, runs, cps):
    policy = bd.UCB1(width=math.sqrt(2.0))
    arms = bd.BernoulliArms(MEANS)
    sim = jax.jit(jax.vmap(lambda k: bd.simulate(policy, arms, THRESHOLD, k, cps)))
    keys = jax.random.split(jax.random.key(0), runs)
    t0 = time.perf_counter()
    jax.block_until_ready(sim(keys))
    first = time.perf_counter() - t0
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        res = jax.block_until_ready(sim(keys))
        times.append(time.perf_counter() - t0)
    t = float(np.median(times))
    return runs * horizon / t, first - t, res


def mabwiser_rate(horizon, seed=0):
    from mabwiser.mab import MAB, LearningPolicy

    rng = np.random.default_rng(seed)
    arms = list(range(len(MEANS)))
    mab = MAB(arms, LearningPolicy.UCB1(alpha=1.0), seed=seed)
    # MABWiser needs one fit before predicting: one pull of every arm (the same
    # initialisation jaxsci's UCB1 does).
    first = [int(rng.random() < m) for m in MEANS]
    mab.fit(arms, first)
    regret = float(np.sum(MEANS.max() - MEANS))
    t0 = time.perf_counter()
    for _ in range(horizon - len(arms)):
        arm = mab.predict()
        reward = int(rng.random() < MEANS[arm])
        mab.partial_fit([arm], [reward])
        regret += float(MEANS.max() - MEANS[arm])
    t = time.perf_counter() - t0
    return (horizon - len(arms)) / t, regret


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--horizon", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=256)
    ap.add_argument("--peer-horizon", type=int, default=5_000)
    args = ap.parse_args()
    try:
        import mabwiser  # noqa: F401
    except ImportError:
        print("skipped: MABWiser is not installed. Set it up with\n"
              "    pip install mabwiser==2.7.4\n(it installs beside jaxsci's pinned "
              "packages; or pip install -e '.[bench]')")
        return
    from importlib.metadata import version

    cps = tuple(sorted({args.peer_horizon, args.horizon}))
    rate_j, compile_s, res = jaxsci_rate(args.horizon, args.runs, cps)
    rate_m, regret_m = mabwiser_rate(args.peer_horizon)
    j_peer = cps.index(args.peer_horizon)
    regret_j = float(np.mean(np.asarray(res.regret[:, j_peer])))
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; mabwiser "
          f"{version('mabwiser')}; UCB1 on Bernoulli means {MEANS.tolist()}")
    hdr = (f"{'':>22} | {'rounds':>9} {'runs':>5} | {'steps/s':>12} | {'compile s':>9} | "
           f"{'regret @ ' + str(args.peer_horizon):>16}")
    print(hdr)
    print("-" * len(hdr))
    print(f"{'jaxsci (vmap, jit)':>22} | {args.horizon:>9} {args.runs:>5} | {rate_j:>12.3g} | "
          f"{compile_s:>9.2f} | {regret_j:>16.1f}")
    print(f"{'MABWiser (per round)':>22} | {args.peer_horizon:>9} {1:>5} | {rate_m:>12.3g} | "
          f"{'-':>9} | {regret_m:>16.1f}")
    print(f"ratio (jaxsci steps/s / MABWiser steps/s): {rate_j / rate_m:.0f}x")
    # One jaxsci run alone (no vmap), for a like-for-like single-run rate.
    rate_1, _, _ = jaxsci_rate(args.horizon, 1, cps)
    print(f"single run: jaxsci {rate_1:.3g} steps/s, ratio {rate_1 / rate_m:.0f}x")


if __name__ == "__main__":
    main()
