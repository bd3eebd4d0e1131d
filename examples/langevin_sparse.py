"""Drift of a noisy Van der Pol oscillator from observations every tau = 2 time units.

Compares the direct (Kramers-Moyal) estimate with path augmentation (bridges between
the observations, then kernel ridge regression on their fine increments).
"""

import math

import jax
import jax.numpy as jnp

from jaxsci.dynamics import langevin as lg

D, tau, dt = 0.5, 2.0, 0.01
system = lg.VanDerPol(mu=1.0)
x0 = jax.random.normal(jax.random.key(0), (100, 2))
obs = lg.simulate(jax.random.key(1), system, x0, D, tau, 11, steps_per_obs=round(tau / dt),
                  burn_in=5.0, burn_in_steps=round(5.0 / dt))
pts = obs.reshape(-1, 2)

feats = lg.random_features(jax.random.key(2), 2, 200, 0.7)
direct = lg.direct_estimator(feats, obs, tau, D)
init = lg.fit_function(feats, pts, lg.geometric_drift(pts, obs, D))
# Monte-Carlo EM with a budget of 10 iterations; the returned iterate is the one with
# the highest estimated observed-data log posterior (chosen from the data alone).
config = lg.EMConfig(n_iter=10, n_steps=math.ceil(tau / 0.2), n_bridges=8, n_score_bridges=32)
aug = lg.path_augmentation(jax.random.key(3), init, obs, tau, D, config)
print("EM iterate selected:", int(aug.selected), "of", aug.history.shape[0] - 1)

w = lg.kde_density(pts, pts, lg.scott_bandwidth(pts))
f_true = jax.vmap(system)(pts)
for name, model in (("direct", direct), ("augmented", aug.model)):
    err = lg.weighted_rmse(lg.predict(model, pts), f_true, w)
    print(f"{name:10s} weighted drift RMSE {float(err):.3f}")
print("RMS of the true drift", float(lg.weighted_rmse(jnp.zeros_like(f_true), f_true, w)))
