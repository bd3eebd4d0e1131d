"""Benchmark: SCR over many retention tables, and DFA-MoE training over seeds, batched.

1. **SCR.** A researcher scoring every (method, seed, checkpoint) cell of a continual-
   learning study has thousands of retention tables. The peer is the NumPy loop one
   would write from the definition (softmax of ``-s / tau``, weighted mean, per table);
   jaxsci scores all tables in one jitted ``vmap`` of :func:`jaxsci.llm.continual.scr`.
   The values agree to float32 rounding (printed).
2. **Training over seeds.** :func:`jaxsci.llm.continual.train_task` for DFA-MoE on one
   task of rotated digits, ``--seeds`` minibatch streams: one ``vmap`` over the keys (one
   program) against a Python loop of the same call.

After warm-up, compile time apart, best of three.

    python scripts/bench/continual.py [--tables 20000] [--domains 9] [--seeds 8] [--steps 200]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _timing import timed

from jaxsci.data import digit_domains as dd
from jaxsci.llm import continual as cl


def numpy_scr(r: np.ndarray, s: np.ndarray, tau: float) -> float:
    w = np.exp(-(s - s.min()) / tau)
    return float((w * r).sum() / w.sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", type=int, default=20000)
    ap.add_argument("--domains", type=int, default=9)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    r = rng.uniform(0.1, 3.0, (a.tables, a.domains)).astype(np.float32)
    s = rng.uniform(-0.3, 1.0, (a.tables, a.domains)).astype(np.float32)
    tau = cl.SCR_TEMPERATURE

    batched = jax.jit(jax.vmap(lambda x, y: cl.scr(x, y, temperature=tau)))
    rj, sj = jnp.asarray(r), jnp.asarray(s)
    ours, compile_s, ours_s = timed(lambda: np.asarray(jax.block_until_ready(batched(rj, sj))))
    peer, _, peer_s = timed(lambda: np.asarray([numpy_scr(x, y, tau)
                                                for x, y in zip(r, s, strict=True)]), reps=1)
    err = float(np.max(np.abs(ours - peer) / np.abs(peer)))

    x, y = dd.digits()
    x = dd.domain(x, "rot90")
    pick = y < 2
    text = jnp.asarray(rng.standard_normal((10, 32)), jnp.float32)
    model = cl.init(jax.random.key(0), hidden=64, rank=8, text_dim=32)
    seen = np.arange(10) < 2
    method = cl.dfa_moe()
    keys = jax.random.split(jax.random.key(1), a.seeds)

    def one(k):
        return cl.train_task(model, method, x[pick], y[pick], seen, x, y, text, k,
                             steps=a.steps)[1]

    vm = jax.jit(jax.vmap(one))
    _, t_compile, t_vmap = timed(lambda: jax.block_until_ready(vm(keys)))
    _, _, t_loop = timed(lambda: [jax.block_until_ready(one(k)) for k in keys])

    print(f"continual (jax {jax.__version__}, {jax.devices()[0].platform})")
    print("| task | jaxsci (s) | peer (s) | peer / jaxsci | jaxsci compile (s) |")
    print("|---|---|---|---|---|")
    print(f"| SCR, {a.tables} tables x {a.domains} domains (peer: NumPy loop) | {ours_s:.4f} "
          f"| {peer_s:.4f} | {peer_s / ours_s:.1f}x | {compile_s:.2f} |")
    print(f"| DFA-MoE task, {a.seeds} seeds x {a.steps} steps (peer: loop of train_task) "
          f"| {t_vmap:.3f} | {t_loop:.3f} | {t_loop / t_vmap:.1f}x | {t_compile:.2f} |")
    print(f"largest relative |jaxsci - NumPy| SCR difference: {err:.2e}")


if __name__ == "__main__":
    main()
