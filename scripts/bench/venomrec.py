"""Benchmark: VenomRec's evaluation grid, one vmapped program vs a loop over members.

A robustness evaluation fine-tunes the victim once per (target, arm, ratio, budget). The
authors' scripts run one fine-tune per process invocation; the loop a user writes in JAX
calls one compiled single-member program per member. jaxsci runs the whole grid as one
program (:func:`jaxsci.recsys.venomrec.poison_and_evaluate`, ``vmap`` over members), and
crafts every target's edit in every variant in one call
(:func:`jaxsci.recsys.venomrec.poison_items`).

Both sides use the same compiled computation per member (compile time reported apart)
and must give the same ER (checked). Prints members/s and the ratio. A PyTorch port of
the victim (the authors' framework) is not included: torch is not part of the install.

    python scripts/bench/venomrec.py [--members 32] [--loop-members 8] [--steps 100]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.data import recsys
from jaxsci.recsys import venomrec as V


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=32)
    ap.add_argument("--loop-members", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--fusion", default="gated", choices=V.FUSIONS)
    a = ap.parse_args()
    d = recsys.clustered_sequences(jax.random.key(0), n_users=400, n_items=200, n_clusters=8,
                                   max_length=20)
    pop = np.bincount(d.train[d.train >= 0], minlength=d.n_items).astype(np.float32)
    items = recsys.multimodal_items(jax.random.key(1), d.cluster, pop)
    P, T = jnp.asarray(items.patches), jnp.asarray(items.tokens)
    cfg = V.VictimConfig(fusion=a.fusion, finetune_steps=a.steps)
    model, _ = V.train_victim(jax.random.key(2), V.init_victim(
        jax.random.key(3), d.n_items, items.vocab, items.patches.shape[-1], cfg), P, T,
        d.train, cfg)
    rng = np.random.default_rng(0)
    targets = rng.choice(np.argsort(pop)[:50], a.members).astype(np.int32)
    modes = np.arange(a.members) % len(V.MODES)

    def timed(fn):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        return out, time.perf_counter() - t0

    craft = lambda: V.poison_items(model, P, T, pop, targets, mode=modes)  # noqa: E731
    _, c_first = timed(craft)
    (xp, xt, _), c_grid = timed(craft)
    one = lambda i: V.poison_items(model, P, T, pop, targets[i:i + 1],  # noqa: E731
                                   mode=modes[i:i + 1])
    timed(lambda: one(0))
    _, c_loop = timed(lambda: [one(i) for i in range(a.loop_members)])

    width = d.train.shape[1]
    fakes = np.stack([np.asarray(V.pad_fake(V.fake_users(jax.random.key(int(t)), int(t),
                                                         d.n_items, 8, pop), width))
                      for t in targets])
    keys = np.stack([np.asarray(jax.random.key_data(jax.random.key(i)))
                     for i in range(a.members)])
    members = V.Poisoned(jnp.asarray(targets), xp, xt, jnp.asarray(fakes),
                         jnp.ones((a.members, 8)), jnp.asarray(keys))
    train, lengths, test = (jnp.asarray(x) for x in (d.train, d.lengths, d.test))
    def ev(mem, member_batch=None):
        return V.poison_and_evaluate(model, P, T, train, lengths, test, mem,
                                     jax.random.key(5), cfg, member_batch=member_batch)

    _, e_first = timed(lambda: ev(members))
    out, e_grid = timed(lambda: ev(members))
    chunked = {}
    for b in (1, 4):
        timed(lambda b=b: ev(members, b))
        res, t = timed(lambda b=b: ev(members, b))
        chunked[b] = (t, np.allclose(np.asarray(res["er"]), np.asarray(out["er"]), atol=1e-6))
    sub = lambda i: jax.tree.map(lambda x: x[i:i + 1], members)  # noqa: E731
    _, e_first_one = timed(lambda: ev(sub(0)))
    loop, e_loop = timed(lambda: [ev(sub(i)) for i in range(a.loop_members)])
    same = np.allclose(np.concatenate([np.asarray(o["er"]) for o in loop]),
                       np.asarray(out["er"])[:a.loop_members], atol=1e-6)

    print(f"fusion {a.fusion}, 400 users, 200 items, {a.steps} fine-tuning steps per member\n")
    print("| stage | members | vmapped s | compile + first s | vmapped members/s | loop "
          "members | loop s | loop members/s | vmapped / loop | same ER |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| craft (poison_items) | {a.members} | {c_grid:.3f} | {c_first:.2f} | "
          f"{a.members / c_grid:.0f} | {a.loop_members} | {c_loop:.3f} | "
          f"{a.loop_members / c_loop:.0f} | "
          f"{(a.members / c_grid) / (a.loop_members / c_loop):.1f}x | - |")
    print(f"| fine-tune + evaluate | {a.members} | {e_grid:.2f} | {e_first:.2f} | "
          f"{a.members / e_grid:.2f} | {a.loop_members} | {e_loop:.2f} | "
          f"{a.loop_members / e_loop:.2f} | "
          f"{(a.members / e_grid) / (a.loop_members / e_loop):.1f}x | {same} |")
    for b, (t, ok) in chunked.items():
        print(f"| fine-tune + evaluate, member_batch={b} (lax.map) | {a.members} | {t:.2f} | - | "
              f"{a.members / t:.2f} | {a.loop_members} | {e_loop:.2f} | "
              f"{a.loop_members / e_loop:.2f} | "
              f"{(a.members / t) / (a.loop_members / e_loop):.1f}x | {ok} |")
    print(f"\n(single-member program: compile + first call {e_first_one:.2f} s)")


if __name__ == "__main__":
    main()
