"""Benchmark: RSIR trajectory generation, one jitted program vs a per-trajectory loop.

The same generation rule (argmax over unmasked items, the local restriction, the
fidelity top-k stop) on the same trained SASRec:

* jaxsci: :func:`jaxsci.recsys.rsir.generate`, ``lax.scan`` over steps and ``vmap`` over
  all trajectories, one compiled program (compile time reported apart);
* the loop a user would write: a Python/NumPy loop over trajectories and steps, the
  model's scores from a jitted single-context forward, the rule in NumPy.

Both must give the same trajectories (checked; the coin flips of the local restriction
are drawn from the same keys). It prints trajectories/s and the ratio. SASRec training
steps/s against RecBole's SASRec would need RecBole 1.2.1, which does not install beside
NumPy 2 (it uses removed NumPy aliases and pins ray <= 2.6.3); that comparison is skipped.

    python scripts/bench/rsir.py [--users 200] [--m 5] [--loop-seeds 20]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.data import recsys
from jaxsci.recsys import rsir as rs


def loop_generate(model, seeds, lengths, key, cfg, n_items, n_seeds):
    """The rule in NumPy, one trajectory at a time (scores from a jitted forward)."""
    scores_of = jax.jit(lambda ctx, n: rs.user_scores(model, ctx[None], n[None])[0])
    keys = jax.random.split(key, len(seeds) * cfg.m)
    out = []
    for i in range(n_seeds):
        own = set(int(x) for x in seeds[i] if x >= 0)
        for j in range(cfg.m):
            k = keys[i * cfg.m + j]
            ctx = np.full(seeds.shape[1], -1, np.int32)
            ctx[0] = seeds[i, 0]
            gen = {int(seeds[i, 0])}
            n = 1
            s = np.asarray(scores_of(jnp.asarray(ctx), jnp.asarray(1)))
            for _ in range(seeds.shape[1] - 1):
                k, kc = jax.random.split(k)
                local = bool(jax.random.bernoulli(kc, cfg.local_prob))
                if n >= lengths[i]:
                    continue
                cand = [x for x in range(n_items) if x not in gen]
                restricted = [x for x in cand if x in own]
                allowed = restricted if (local and restricted) else cand
                if not allowed:
                    continue
                nxt = max(allowed, key=lambda x: (s[x], -x))
                ctx2 = ctx.copy()
                ctx2[n] = nxt
                s2 = np.asarray(scores_of(jnp.asarray(ctx2), jnp.asarray(n + 1)))
                rem = own - gen - {nxt}
                masked = np.array([s2[x] if (x not in gen and x != nxt) else -np.inf
                                   for x in range(n_items)])
                thr = np.sort(masked)[::-1][min(cfg.k, n_items) - 1]
                if rem and not any(masked[x] >= thr for x in rem):
                    break
                ctx, s, n = ctx2, s2, n + 1
                gen.add(nxt)
                if not rem:
                    break
            out.append(ctx)
    return np.stack(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=200)
    ap.add_argument("--m", type=int, default=5)
    ap.add_argument("--loop-seeds", type=int, default=20)
    a = ap.parse_args()
    d = recsys.clustered_sequences(jax.random.key(0), n_users=a.users)
    model, _ = rs.train(jax.random.key(1), d.train, d.n_items,
                        rs.SASRecConfig(dim=48, steps=300, learning_rate=2e-3))
    cfg = rs.GenerateConfig(m=a.m)
    scorer = rs.SASRecScorer(model)
    key = jax.random.key(2)
    t0 = time.perf_counter()
    tr = rs.generate(scorer, d.train, d.lengths, key, cfg, n_items=d.n_items)
    jax.block_until_ready(tr.items)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    tr = rs.generate(scorer, d.train, d.lengths, key, cfg, n_items=d.n_items)
    jax.block_until_ready(tr.items)
    t_jax = time.perf_counter() - t0
    n_jax = d.n_users * cfg.m
    t0 = time.perf_counter()
    ref = loop_generate(model, d.train, d.lengths, key, cfg, d.n_items, a.loop_seeds)
    t_loop = time.perf_counter() - t0
    n_loop = a.loop_seeds * cfg.m
    same = np.array_equal(ref, np.asarray(tr.items)[:n_loop])
    print("RecBole SASRec: skipped (RecBole 1.2.1 does not install beside NumPy 2).\n")
    print("| trajectories | jaxsci s | compile + first call s | jaxsci traj/s | loop "
          "trajectories | loop s | loop traj/s | jaxsci / loop | same trajectories |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {n_jax} | {t_jax:.2f} | {first:.2f} | {n_jax / t_jax:.0f} | {n_loop} | "
          f"{t_loop:.2f} | {n_loop / t_loop:.1f} | {(n_jax / t_jax) / (n_loop / t_loop):.0f}x "
          f"| {same} |")


if __name__ == "__main__":
    main()
