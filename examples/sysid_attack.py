"""Learn an input-output map under sparse adversarial attacks: l2-norm vs least squares.

    python examples/sysid_attack.py
"""

import jax
import jax.numpy as jnp

from jaxsci.dynamics import sysid

L, p = 6, 0.3  # memory length, attack probability
system = sysid.make_system(jax.random.key(0), n_x=6, n_y=3, n_u=2, m=8, rho=0.6)
attack = sysid.Attack(delta=3.0 * jax.random.normal(jax.random.key(1), (3, 8)),
                      mean=jnp.array([3.0, -2.0, 2.0]), scale=2.0, corr=0.8)
u = sysid.ar_inputs(jax.random.key(2), 2000, 2)  # correlated, mean 0.5, uniform innovations
phi, y, y_clean, attacked = sysid.simulate(jax.random.key(3), system, u, L, p, attack,
                                           noise=0.05)

theta_ls = sysid.least_squares(phi, y)
est = sysid.l2_norm_estimator(phi, y)  # IRLS for sum_t ||y_t - Theta phi_t||_2
assert est.result == sysid.RESULTS.successful  # throw=True would have raised otherwise
print(f"{int(attacked.sum())} of {len(attacked)} outputs attacked")
print(f"least squares  error {float(sysid.prediction_error(theta_ls, phi, y_clean)):.3f}")
print(f"l2-norm        error {float(sysid.prediction_error(est.theta, phi, y_clean)):.3f} "
      f"({int(est.iterations)} IRLS iterations)")
