"""Certify your own delayed interconnected system: a platoon of automated vehicles.

Each vehicle i keeps a time-headway spacing error e_i and relative speed eps_i to its
predecessor; its command a_i = k_e e_i^d + k_v eps_i^d uses its state delayed by up to
one step (actuation latency), and the predecessor's command reaches it through the
physics. Learn and verify one certificate per vehicle, then simulate.

    python examples/lyapunov_platoon.py
"""

import jax
import jax.numpy as jnp

from jaxsci.common import bounds
from jaxsci.dynamics import lyapunov as ly

N, T, TH = 4, 0.5, 1.5  # vehicles, sampling period [s], time headway [s]


def vehicle(p):
    # Local input u = [e, eps, de, deps, e_pred^d, eps_pred^d, w] (ly.input_layout):
    # own state, its delay offsets (x^d = x - delta), the predecessor's delayed state,
    # the disturbance. a_i = k_e (e - de) + k_v (eps - deps); the predecessor's likewise.
    ke, kv = p["gains"][0], p["gains"][1]
    a_own = jnp.array([ke, kv, -ke, -kv, 0.0, 0.0, 0.0])
    a_pred = jnp.array([0.0, 0.0, 0.0, 0.0, ke, kv, 0.0])
    e_next = jnp.array([1.0, T, 0, 0, 0, 0, 0]) - T * TH * a_own
    eps_next = jnp.array([0.0, 1.0, 0, 0, 0, 0, T]) + T * (a_pred - a_own)
    return bounds.affine(jnp.stack([e_next, eps_next]))


system = ly.InterconnectedSystem(
    params={"gains": jnp.tile(jnp.array([0.3, 0.6]), (N, 1))},
    neighbors=jnp.array([[-1], [0], [1], [2]]),  # predecessor; vehicle 0: virtual leader
    state_box=jnp.tile(jnp.array([4.0, 2.0]), (N, 1)),  # |e| <= 4 m, |eps| <= 2 m/s
    build=vehicle, w_max=0.1, max_delay=1, n_w=1,
    own_delay=True, neighbor_delayed=True, neighbor_delay_is_own=True, dt=T, name="my_platoon",
)
config = ly.SynthesisConfig(hidden=8, steps=100, rounds=2, margin=0.3,
                            verify=ly.VerifyConfig(max_boxes=1000, batch=64))
res = ly.synthesize(system, jax.random.key(0), config)
v = res.verification
print(f"certified: {v.certified}  (fraction of the delay domains proven: "
      f"{v.certified_fraction:.3f}, {v.boxes} boxes in {v.seconds:.1f} s; counterexamples "
      f"per vehicle: {[r.counterexamples.shape[0] for r in v.subsystems]})")
print(f"gain condition: lam = {v.gains.lam:.3f}, rho(Gamma) = {v.gains.spectral_radius:.3f}, "
      f"min mu = {v.gains.mu.min():.3f}")

own, link = ly.random_delays(jax.random.key(1), 100, system)
w = system.w_max * jax.random.uniform(jax.random.key(2), (100, N, 1), minval=-1, maxval=1)
traj = ly.simulate(system, jnp.zeros((N, 2)).at[0].set(jnp.array([1.0, 0.5])), w, own, link)
print("max |spacing error| per vehicle:", jnp.abs(traj[..., 0]).max(0).round(3))
