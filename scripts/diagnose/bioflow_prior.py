"""Prior-mean MAE of each regime-prior rule on the quick config's *training* systems.

    python scripts/diagnose/bioflow_prior.py

The numbers behind docs/bioflow.md's design table: each candidate rule alone, the
per-system best rule (an oracle), and the default combination; the held-out systems
are not looked at (same benchmark and split as ``jaxsci reproduce bioflow --quick``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.dynamics import bioflow as bf
from jaxsci.experiments import bioflow as exp


def main() -> None:
    cfg = exp.CONFIGS["quick"]
    k_bench, k_split, _, _ = jax.random.split(jax.random.key(0), 4)
    bench = bf.make_benchmark(k_bench, cfg.per_family, cfg.n_times)
    ctx, fut, _, _ = bf.normalize_windows(bench.trajectories, cfg.context)
    perm = np.asarray(jax.random.permutation(k_split, ctx.shape[0]))
    train = perm[max(1, int(round(cfg.test_fraction * ctx.shape[0]))):]
    ctx, fut = ctx[train], fut[train]
    spec = cfg.prior
    errs = {}
    for name in bf.PRIOR_CANDIDATES:
        one = dataclasses.replace(spec, candidates=(name,))
        errs[name] = np.asarray(jnp.abs(bf.regime_prior(ctx, fut.shape[1], one).mean - fut)
                                .mean(1))
        print(f"{name:20s} {errs[name].mean():.3f}")
    oracle = np.min(np.stack(list(errs.values())), 0).mean()
    print(f"{'oracle (best rule per system)':20s} {oracle:.3f}")
    mean = bf.regime_prior(ctx, fut.shape[1], spec).mean
    print(f"{'default combination':20s} {float(jnp.abs(mean - fut).mean()):.3f} "
          f"({', '.join(spec.candidates)}; backtest {spec.backtest}, T {spec.temperature})")


if __name__ == "__main__":
    main()
