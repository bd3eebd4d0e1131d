"""Sim-and-real co-training on the toy: a vmapped sweep over the mixing ratio w."""

import jax
import jax.numpy as jnp

from jaxsci.data import cotraining as toy
from jaxsci.generative import cotraining as C

data = toy.sim_real_toy(jax.random.key(0), n_real=64, n_sim=4000, n_test=256,
                        regime="aligned")
cfg = C.PolicyConfig(steps=600, n_evals=2)
ws = (0.016, 0.1, 0.3, 1.0)  # w = 1 is real-only
arms = jax.tree.map(lambda *x: jnp.stack(x), *(C.arm(w) for w in ws))
hist = jax.jit(jax.vmap(lambda a: C.train(data, a, jax.random.key(1), cfg)[1]))(arms)
for i, w in enumerate(ws):
    print(f"w = {w:<5}  action error in support {float(hist['err_in'][i, -1]):.3f}, "
          f"out of support {float(hist['err_oos'][i, -1]):.3f}")

# The training-free view: how much posterior mass a real query puts on sim samples.
lw = C.mixture_log_weights(0.3, 64, 4000)
lat = jnp.concatenate([data.obs_real, data.obs_sim])
act = jnp.concatenate([data.act_real, data.act_sim])
_, g = C.conditional_optimal_denoiser(data.test_obs[0], jnp.zeros(2), 0.0, lat, act, lw, 0.25)
print(f"analytic optimal policy: sim mass {float(g[64:].sum()):.3f} at a real query")
