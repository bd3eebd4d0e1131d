"""Benchmark: the vmapped equilibrium solver vs a straightforward NumPy loop of it.

No peer installs beside jaxsci (auction-gym pins numpy 1.22 and torch 1.13), so the
comparison is the same algorithm written plainly: per instance, a Python loop over the
two-bidder candidate structures (mutual ties by bisection, caps, cuts), each checked by
exact best responses in NumPy. Both solve the same random second-price tCPA markets
(the most expensive cell) and must agree on revenue; we report instances/s and the
ratio (jaxsci's compile time apart).

    python scripts/bench/auctions.py [--instances 4096] [--peer-instances 64] [--queries 6]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.stats import auctions as au

TIE = 1e-6
BISECT = 40


def np_best_response(conv, values, budgets, alpha, i, first_price, cpa, cap_scale):
    """Bidder i's exact best response (NumPy; the algorithm of auctions.best_response)."""
    n, k = conv.shape
    w = conv[i]
    h = np.max(np.stack([alpha[j] * conv[j] for j in range(n) if j != i]), 0)
    theta = np.where(w > 0, h / np.where(w > 0, w, 1.0), np.inf)
    order = np.argsort(theta, kind="stable")
    v, bud = values[i] * (1 + TIE), budgets[i] * (1 + TIE)
    cap = cap_scale * values[i]
    c_prev = s_prev = 0.0
    for idx, c in enumerate(order):
        th, ws, hs = theta[c], w[c], h[c]
        if not (ws > 0 and th <= cap * (1 + TIE)):
            s = 0.0
        elif first_price:
            s = (bud / th - c_prev) / ws if th > 0 else np.inf
        else:
            s = (bud - s_prev) / hs if hs > 0 else np.inf
            if cpa and th > v:
                s = min(s, (v * c_prev - s_prev) / (ws * (th - v)))
        s = min(max(s, 0.0), 1.0)
        if s < 1.0:
            room = bud / c_prev if (first_price and c_prev > 0) else np.inf
            a = th if s > 0 else min(cap, th, room)
            return a, idx + s, c
        c_prev += ws
        s_prev += hs
    room = bud / c_prev if (first_price and c_prev > 0) else np.inf
    return min(cap, room), float(k), -1


def np_allocate(conv, alpha, cluster, share, first_price):
    n, k = conv.shape
    bids = alpha[:, None] * conv
    x = np.zeros((n, k))
    for c in range(k):
        top = bids[:, c].max()
        tied = [i for i in range(n) if top > 0 and conv[i, c] > 0 and bids[i, c] >= top * (1 - TIE)]
        if not tied:
            continue
        marg = [i for i in tied if cluster[i] == c]
        free = [i for i in tied if cluster[i] != c]
        claimed = sum(share[i] for i in marg)
        if free:
            for i in marg:
                x[i, c] = share[i] * min(1.0, 1.0 / max(claimed, 1e-30))
            for i in free:
                x[i, c] = max(1.0 - claimed, 0.0) / len(free)
        elif claimed > 0:
            for i in marg:
                x[i, c] = share[i] / claimed
        else:
            for i in tied:
                x[i, c] = 1.0 / len(tied)
    second = np.stack([np.max(np.stack([alpha[j] * conv[j] for j in range(n) if j != i]), 0)
                       for i in range(n)])
    price = bids if first_price else second
    return x, (x * price).sum(1), (x * conv).sum(1)


def np_verify(conv, values, budgets, alpha, cluster, share, rules):
    fp, cpa, cs = rules
    x, spend, conversions = np_allocate(conv, alpha, cluster, share, fp)
    n = conv.shape[0]
    held = np.where(conv > 0, x, 0.0).sum(1)
    bids = alpha[:, None] * conv
    for i in range(n):
        _, best, nxt = np_best_response(conv, values, budgets, alpha, i, fp, cpa, cs)
        tol = 1e-4 * (1 + best)
        if held[i] > best + tol or held[i] < np.floor(best + tol) - tol:
            return None
        at_tie = nxt >= 0 and bids[i, nxt] >= bids[:, nxt].max() * (1 - TIE)
        if held[i] < best - tol and not at_tie:
            return None
    slack = 1e-4 * (1 + np.abs(spend))
    if np.any(spend > budgets + slack) or (cpa and np.any(spend > values * conversions + slack)):
        return None
    if np.any(alpha > cs * values * (1 + 1e-5)):
        return None
    return spend


def np_solve_pair(conv, values, budgets, rules):
    """Revenue of the platform-optimal verified equilibrium (two bidders)."""
    fp, cpa, cs = rules
    k = conv.shape[1]
    cap = cs * values
    live = float(np.any(conv > 0, 0).sum())
    r = np.where(conv[1] > 0, conv[0] / np.where(conv[1] > 0, conv[1], 1.0), np.inf)
    cands = []
    for c in range(k):
        if not (conv[0, c] > 0 and conv[1, c] > 0):
            continue
        kappa = conv[0, c] / conv[1, c]
        above0 = float(((conv[0] > 0) & (r > r[c] * (1 + TIE))).sum())
        above1 = float(((conv[1] > 0) & (r < r[c] * (1 - TIE))).sum())

        def pos(la, kappa=kappa):
            prof = np.array([np.exp(la), kappa * np.exp(la)])
            return (np_best_response(conv, values, budgets, prof, 0, fp, cpa, cs)[1],
                    np_best_response(conv, values, budgets, prof, 1, fp, cpa, cs)[1])

        lo, hi = np.log(max(cap.max(), 1e-12)) - 25.0, np.log(max(cap.max(), 1e-12)) + 2.0
        for _ in range(BISECT):
            mid = 0.5 * (lo + hi)
            p0, p1 = pos(mid)
            if min(p0, above0 + 1) + min(p1, above1 + 1) >= live:
                lo = mid
            else:
                hi = mid
        s0 = min(max(pos(lo)[0] - above0, 0.0), 1.0)
        cands.append((np.array([np.exp(lo), kappa * np.exp(lo)]), [c, c], [s0, 1 - s0]))
    for i in range(2):
        resp = np_best_response(conv, values, budgets, cap, 1 - i, fp, cpa, cs)
        alpha = cap.copy()
        alpha[1 - i] = resp[0]
        th = (alpha[i] * conv[i]) / np.where(conv[1 - i] > 0, conv[1 - i], 1.0)
        tie = resp[2] >= 0 and resp[0] >= th[resp[2]] * (1 - TIE) if resp[2] >= 0 else False
        cluster, share = [-1, -1], [0.0, 0.0]
        if tie:
            cluster[1 - i] = resp[2]
            share[1 - i] = resp[1] - np.floor(resp[1])
        cands.append((alpha, cluster, share))
    cands.append((cap.copy(), [-1, -1], [0.0, 0.0]))
    order = np.argsort(-r, kind="stable")
    a_cum = np.concatenate([[0.0], np.cumsum(conv[0, order])])
    b_cum = np.concatenate([[0.0], np.cumsum(conv[1, order])])
    for t in range(k + 1):
        a0, b1 = a_cum[t], b_cum[-1] - b_cum[t]
        ratio = lambda x, y: x / y if y > 0 else np.inf  # noqa: E731
        if fp:
            m0, m1 = min(cap[0], ratio(budgets[0], a0)), min(cap[1], ratio(budgets[1], b1))
        else:
            p0, p1 = b_cum[t], a_cum[-1] - a_cum[t]
            m1, m0 = min(cap[1], ratio(budgets[0], p0)), min(cap[0], ratio(budgets[1], p1))
            if cpa:
                m1, m0 = min(m1, ratio(values[0] * a0, p0)), min(m0, ratio(values[1] * b1, p1))
        if np.isfinite(m0) and np.isfinite(m1):
            cands.append((np.array([m0, m1]), [-1, -1], [0.0, 0.0]))
    best = -np.inf
    for alpha, cluster, share in cands:
        spend = np_verify(conv, values, budgets, alpha, np.array(cluster), np.array(share), rules)
        if spend is not None:
            best = max(best, spend.sum())
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=4096)
    ap.add_argument("--peer-instances", type=int, default=64)
    ap.add_argument("--queries", type=int, default=6)
    args = ap.parse_args()
    rl = au.rules(au.SecondPrice(), au.TargetCPA())
    keys = jax.random.split(jax.random.key(0), args.instances)
    draw = jax.jit(jax.vmap(lambda k: au.random_instance(k, 2, args.queries)))
    inst = draw(keys)
    labels = jnp.arange(args.queries)  # the finest model: every query its own cluster
    solve = jax.jit(jax.vmap(lambda i: au.solve_rules(i, labels, rl).revenue))
    t0 = time.perf_counter()
    jax.block_until_ready(solve(inst))
    first = time.perf_counter() - t0
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        rev = jax.block_until_ready(solve(inst))
        times.append(time.perf_counter() - t0)
    t_j = float(np.median(times))
    rate_j = args.instances / t_j

    m = np.asarray(inst.masses, np.float64)
    p = np.asarray(inst.probs, np.float64)
    v = np.asarray(inst.values, np.float64)
    b = np.asarray(inst.budgets, np.float64)
    rules = (False, True, float(rl.cap_scale))
    t0 = time.perf_counter()
    rev_np = [np_solve_pair(p[i] * m[i][None], v[i], b[i], rules)
              for i in range(args.peer_instances)]
    t_np = time.perf_counter() - t0
    rate_np = args.peer_instances / t_np
    agree = np.max(np.abs(np.asarray(rev)[:args.peer_instances] - np.asarray(rev_np))
                   / (1 + np.abs(np.asarray(rev_np))))
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; second price, tCPA, "
          f"two bidders, {args.queries} queries, finest model")
    hdr = f"{'':>26} | {'instances':>9} | {'instances/s':>12} | {'compile s':>9}"
    print(hdr)
    print("-" * len(hdr))
    print(f"{'jaxsci (vmap, jit)':>26} | {args.instances:>9} | {rate_j:>12.4g} | "
          f"{first - t_j:>9.2f}")
    print(f"{'NumPy loop, same algorithm':>26} | {args.peer_instances:>9} | {rate_np:>12.4g} | "
          f"{'-':>9}")
    print(f"ratio (jaxsci / NumPy instances/s): {rate_j / rate_np:.0f}x; largest relative "
          f"revenue difference on the shared instances: {agree:.2e}")


if __name__ == "__main__":
    main()
