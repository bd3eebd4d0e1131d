"""Benchmark: semantic isotropy and its baselines over many prompts, jitted vmap vs NumPy.

The authors' code scores one prompt at a time in NumPy: normalise the embeddings, build
the Gram matrix, one eigendecomposition, the entropy. The peer here is that loop,
written in NumPy from the paper's description (``numpy.linalg.eigvalsh`` per prompt);
jaxsci scores all prompts (and every sample size of the curve ``N = 2..n``) in one
jitted ``vmap`` of :func:`jaxsci.llm.isotropy.trust_signals`. Random unit embeddings of
MiniLM's width stand in for responses (the timing does not depend on their content);
the values agree to float32 rounding (printed). After warm-up, compile time apart, best
of three.

    python scripts/bench/isotropy.py [--prompts 2000] [--n 10] [--dim 384]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _timing import timed

from jaxsci.llm import isotropy as iso


def numpy_isotropy(x: np.ndarray, jitter: float = iso.JITTER) -> float:
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    lam = np.linalg.eigvalsh(u @ u.T + jitter * np.eye(len(u)))
    p = np.clip(lam, 0, None) / len(u)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum() / np.log(len(u)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--dim", type=int, default=384)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((a.prompts, a.n, a.dim)).astype(np.float32)

    batched = jax.jit(jax.vmap(iso.semantic_isotropy))
    x = jnp.asarray(emb)
    ours, compile_s, ours_s = timed(lambda: np.asarray(jax.block_until_ready(batched(x))))
    peer, _, peer_s = timed(lambda: np.asarray([numpy_isotropy(e) for e in emb]))
    err = float(np.max(np.abs(ours - peer)))

    masks = np.arange(a.n)[None, :] < np.arange(2, a.n + 1)[:, None]
    curve = jax.jit(jax.vmap(jax.vmap(iso.semantic_isotropy, in_axes=(0, None)),
                             in_axes=(None, 0)))
    m = jnp.asarray(masks)
    _, curve_compile, curve_s = timed(lambda: jax.block_until_ready(curve(x, m)))
    _, _, peer_curve_s = timed(lambda: [numpy_isotropy(e[:k]) for k in range(2, a.n + 1)
                                        for e in emb], reps=1)

    print(f"semantic isotropy, {a.prompts} prompts x {a.n} responses x {a.dim} dims "
          f"(jax {jax.__version__}, {jax.devices()[0].platform})")
    print("| task | jaxsci (s) | NumPy loop (s) | NumPy / jaxsci | jaxsci compile (s) |")
    print("|---|---|---|---|---|")
    print(f"| isotropy, all prompts | {ours_s:.4f} | {peer_s:.4f} | {peer_s / ours_s:.1f}x "
          f"| {compile_s:.2f} |")
    print(f"| sample-size curve N = 2..{a.n} | {curve_s:.4f} | {peer_curve_s:.4f} | "
          f"{peer_curve_s / curve_s:.1f}x | {curve_compile:.2f} |")
    print(f"largest |jaxsci - NumPy| over prompts: {err:.2e}")


if __name__ == "__main__":
    main()
