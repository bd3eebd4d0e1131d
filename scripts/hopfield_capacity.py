"""Zero-temperature capacity beyond the quick grid: which noise floor does the MC follow?

    python scripts/hopfield_capacity.py --ns 16,20 --alphas 0.55,0.65,0.75,0.85

At loads above the experiment's 0.55 the four analytic boundaries of
:mod:`jaxsci.dynamics.hopfield` disagree: the paper's nearest-pattern noise floor with the
Gaussian overlap density (0.5 at T = 0 for both kernels), the same with the exact sphere
density (no finite capacity), and the summed floor (the whole kernel sum over the
``e^{alpha N}`` patterns; LSE 0.623 exact / 0.5 Gaussian, LSR ``alpha_th`` = 0.347 / 0.25).
For each ``N`` and load (one pattern set, ``M = e^{alpha N}`` up to ``--max-patterns``),
each kernel and temperature, ``--chains`` Metropolis chains start next to their own
target (the retrieval test: mean alignment with the target) and as many start from
uniformly random states (do they condense on some pattern? the largest overlap with any
pattern at the end). Also measured, from the patterns alone: the cross-talk at each
target, ``log10 sum_{mu != target} k(phi_mu)``, against the target's own weight
``k(1) = 1`` (the summed floor's finite-N precondition: a positive value means the other
patterns outweigh the target where it sits).

Prints one row per (N, alpha, kernel, T) with the measured values and, per theory,
``R`` (retrieval predicted: alpha below the boundary) or ``-``.
"""

from __future__ import annotations

import argparse
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core.sphere import sample_uniform
from jaxsci.dynamics import hopfield as hf

THEORIES = [("gaussian", "nearest"), ("exact", "nearest"), ("gaussian", "sum"),
            ("exact", "sum")]


def crosstalk(patterns, targets, kernel, chunk=1 << 18):
    """``log10 sum_{mu != t} k(phi_mu(xi_t))`` per target (chunked over the patterns)."""
    m, n = patterns.shape
    xi = patterns[targets]
    chunk = min(chunk, m)

    @jax.jit
    def part(block, start, valid):
        phi = xi @ block.T / n  # (targets, chunk)
        if isinstance(kernel, hf.LSE):
            w = jnp.exp(-kernel.beta * n * (1.0 - phi))
        else:
            w = jax.nn.relu(1.0 - kernel.b * (1.0 - phi))
        idx = start + jnp.arange(block.shape[0])
        keep = (idx < start + valid)[None] & (idx[None] != targets[:, None])
        return jnp.where(keep, w, 0.0).sum(1)

    total = np.zeros(len(targets))
    for i in range(0, m, chunk):
        blk = patterns[i:i + chunk]
        valid = blk.shape[0]
        if valid < chunk:  # one program for every chunk: pad the last one
            blk = jnp.concatenate([blk, jnp.zeros((chunk - valid, n), blk.dtype)])
        total += np.asarray(part(blk, i, valid), np.float64)
    with np.errstate(divide="ignore"):
        return np.log10(total)  # -inf: no other pattern weighs anything (LSR: none inside)


def _median(x):
    x = x[np.isfinite(x)]
    return f"{np.median(x):.3f}" if x.size else "stuck (outside every support)"


@eqx.filter_jit
def cells(keys, patterns, targets, x_rand, temps, kernel, cfg):
    """Per temperature: alignments of the chains started at their targets, and the
    largest overlap with any pattern reached by the chains started at random."""
    n = patterns.shape[1]

    def per_t(t, k):
        ka, kb = jax.random.split(k)
        a = jax.vmap(lambda kk, tg: hf.metropolis(kk, patterns, tg, t, kernel, cfg))(
            jax.random.split(ka, targets.shape[0]), targets)
        r = jax.vmap(lambda kk, tg, x0: hf.metropolis(kk, patterns, tg, t, kernel, cfg,
                                                      x0=x0))(
            jax.random.split(kb, targets.shape[0]), targets, x_rand)
        best = jnp.max(r.final_state @ patterns.T, axis=1) / n
        # a random start outside every LSR support has E = +inf and never moves
        return a.alignment, jnp.where(jnp.isfinite(r.final_energy), best, jnp.nan)

    return jax.vmap(per_t)(temps, keys)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ns", default="16,20")
    ap.add_argument("--alphas", default="0.55,0.65,0.75,0.85")
    ap.add_argument("--temps", default="0.05,0.2")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--n-equil", type=int, default=1000)
    ap.add_argument("--n-sample", type=int, default=500)
    ap.add_argument("--beta", type=float, default=hf.BETA_DEFAULT)
    ap.add_argument("--b", type=float, default=hf.B_DEFAULT)
    ap.add_argument("--max-patterns", type=float, default=4e6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ns = [int(x) for x in args.ns.split(",")]
    alphas = [float(x) for x in args.alphas.split(",")]
    temps = np.asarray([float(x) for x in args.temps.split(",")], np.float32)
    kernels = {"lse": hf.LSE(args.beta), "lsr": hf.LSR(args.b)}
    cfg = hf.MetropolisConfig(n_equil=args.n_equil, n_sample=args.n_sample)
    c = args.chains
    print(f"{c} chains per start and cell, {args.n_equil} + {args.n_sample} Metropolis "
          f"steps, LSE beta = {args.beta:g}, LSR b = {args.b:.4g}, seed {args.seed}")
    print("theories: " + ", ".join(f"{d}/{f}" for d, f in THEORIES)
          + " (R: retrieval predicted)")
    print("N | alpha | M | kernel | T | from target: alignment (min) | retrieved | "
          "from random: largest overlap (median) | m*(T) | cross-talk log10 (median) | "
          "theories | s")
    key = jax.random.key(args.seed)
    for n in ns:
        for alpha in alphas:
            m = hf.num_patterns(alpha, n)
            if m > args.max_patterns:
                print(f"{n} | {alpha:g} | {m} | skipped (over --max-patterns)")
                continue
            key, kp, kt, kx, kc = jax.random.split(key, 5)
            patterns = hf.sample_patterns(kp, n, m)
            targets = jax.random.choice(kt, m, (c,), replace=False)
            x_rand = jnp.sqrt(n) * sample_uniform(kx, c, n)
            for name, kernel in kernels.items():
                t0 = time.time()
                xt = crosstalk(patterns, targets, kernel)

                align, best = (np.asarray(x) for x in cells(
                    jax.random.split(kc, len(temps)), patterns, targets, x_rand,
                    jnp.asarray(temps), kernel, cfg))
                sec = time.time() - t0
                mstar = np.asarray(hf.retrieval_overlap(temps, kernel))
                for i, t in enumerate(temps):
                    pred = " ".join(
                        "R" if alpha < float(hf.retrieval_boundary(t, kernel, d, f)) else "-"
                        for d, f in THEORIES)
                    print(f"{n} | {alpha:g} | {m} | {name} | {t:g} | "
                          f"{align[i].mean():.3f} ({align[i].min():.3f}) | "
                          f"{int((align[i] > 0.5).sum())}/{c} | {_median(best[i])} | "
                          f"{mstar[i]:.3f} | {np.median(xt):+.2f} | {pred} | {sec:.0f}",
                          flush=True)


if __name__ == "__main__":
    main()
