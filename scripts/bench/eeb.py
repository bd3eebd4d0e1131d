"""Benchmark: the erasure-evasion stress test, vmapped grid vs a loop, and UCE vs ESD.

The toy digits model of ``jaxsci.generative.eeb`` (trained for ``--steps`` steps: the
timings do not depend on the model's quality). Three rows, each after warm-up (compile
time reported apart, best of three):

* **evaluation grid**: ``--grid`` erased models (the experiment's attack x erasure x
  seed grid; here copies of one model with different keys), each scored with ``--n``
  samples per prompt, as one ``core.sweep`` against a Python loop of the same jitted
  :func:`eeb.evaluate` per model (what a user writes without ``vmap``);
* **UCE** (closed form, both projections) against **ESD** (``--ft-steps`` Adam steps on
  the cross-attention projections): the time of one erasure each;
* **UCE in NumPy**: the same closed form (eq. 3) in NumPy (``numpy.linalg.solve``), the
  peer a user would write by hand, against jaxsci's jitted edit.

There is no installable peer for concept erasure (the ESD and UCE reference code is
research PyTorch for Stable Diffusion, not a package), so the loop and NumPy rows are
the comparisons.

    python scripts/bench/eeb.py [--steps 300] [--grid 16] [--n 32] [--ft-steps 200]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core.sweep import sweep
from jaxsci.data import digits_text as dt
from jaxsci.generative import eeb


def best(fn, reps=3):
    """(compile estimate, best time of ``reps`` calls after the first)."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn(0))
    first = time.perf_counter() - t0
    ts = []
    for r in range(1, reps + 1):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(r))
        ts.append(time.perf_counter() - t0)
    return max(first - min(ts), 0.0), min(ts)


def uce_numpy(w, erase, targets, preserve, lam):
    a = lam * w + targets.T @ erase + (preserve @ w.T).T @ preserve
    b = lam * np.eye(w.shape[1]) + erase.T @ erase + preserve.T @ preserve
    return np.linalg.solve(b, a.T).T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--grid", type=int, default=16)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--ft-steps", type=int, default=200)
    args = ap.parse_args()
    cfg = eeb.EEBConfig(steps=args.steps, ft_steps=args.ft_steps)
    data = dt.digits_text(jax.random.key(0))
    det = eeb.fit_detector(np.asarray(data.images), np.asarray(data.labels))
    params = jax.block_until_ready(eeb.train(data, jax.random.key(1), cfg))
    zero, zq = dt.token("zero"), dt.token("zq")
    others = jnp.asarray([dt.token(d) for d in dt.DIGITS[1:]])
    rows = []

    stacked = jax.tree.map(lambda v: jnp.stack([v] * args.grid), params)

    def point(p):
        return eeb.evaluate(p["params"], det, jax.random.wrap_key_data(p["key"]), cfg,
                            args.n, zq)

    def grid_keys(r):
        return jax.random.key_data(jax.random.split(jax.random.key(10 + r), args.grid))

    c_v, t_v = best(lambda r: sweep(point, {"params": stacked, "key": grid_keys(r)}))
    c_l, t_l = best(lambda r: [eeb.evaluate(params, det, k, cfg, args.n, zq)
                               for k in jax.random.split(jax.random.key(10 + r), args.grid)])
    rows.append((f"evaluation grid ({args.grid} models)", "core.sweep (vmap)", t_v, c_v,
                 "Python loop of jit", t_l, c_l))

    c_u, t_u = best(lambda r: eeb.uce(params, zero, 0, others, 0.5 + 0.01 * r))
    c_e, t_e = best(lambda r: eeb.esd(params, data, zero, jax.random.key(r), cfg, 1.0))
    rows.append(("one erasure", "UCE (closed form)", t_u, c_u, f"ESD ({args.ft_steps} steps)",
                 t_e, c_e))

    c = np.asarray(eeb.encode(params["text"], jnp.arange(len(dt.VOCAB))), np.float64)
    w = np.asarray(params["den"]["wv"], np.float64)
    target = (w @ c[0])[None]
    wj, ej, tj, pj = (jnp.asarray(v, jnp.float32) for v in (w, c[[zero]], target,
                                                            c[np.asarray(others)]))
    c_j, t_j = best(lambda r: eeb.uce_edit(wj, ej, tj, pj, 0.5 + 0.01 * r))
    t0 = time.perf_counter()
    for r in range(100):
        uce_numpy(w, c[[zero]], target, c[np.asarray(others)], 0.5 + 0.01 * r)
    t_np = (time.perf_counter() - t0) / 100
    rows.append(("UCE edit of W_v", "jaxsci uce_edit (jit)", t_j, c_j, "NumPy closed form",
                 t_np, 0.0))

    print(f"eeb benchmark (devices: {jax.devices()}; model trained {args.steps} steps)\n")
    print("| task | jaxsci | time (s) | compile (s) | peer | time (s) | compile (s) | "
          "peer / jaxsci |")
    print("|---|---|---|---|---|---|---|---|")
    for task, a, ta, ca, b, tb, cb in rows:
        print(f"| {task} | {a} | {ta:.4f} | {ca:.2f} | {b} | {tb:.4f} | {cb:.2f} | "
              f"{tb / ta:.2f}x |")


if __name__ == "__main__":
    main()
