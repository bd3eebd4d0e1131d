"""Estimate an ATE over a shifting stream in bounded memory, next to the naive estimate."""

import jax

from jaxsci.stats import streaming_ate as sa

n, m = 4000, 32
s = sa.make_shifting_stream(jax.random.key(0), n)  # true ATE 1; shift at n/2
est = sa.StreamingATE(sa.Gaussian(1.0), sa.KernelHalving(), m=m, levels=sa.levels_for(n, m))
res = sa.run(est, s.x, s.treat, s.y, jax.random.key(1), checkpoints=(1000, 2000, 3000, 4000))
naive = s.y[s.treat].mean() - s.y[~s.treat].mean()
for t, ate, stored in zip(res.times, res.ate, res.stored, strict=True):
    print(f"after {int(t):>5} units: ATE {float(ate):.3f}  ({int(stored)} points stored)")
print(f"naive difference of means over all {n}: {float(naive):.3f}; "
      f"peak stored {int(res.peak_stored)} points")
