"""MERLIN on your own irregular data: scattered sensors, missing readings, any-grid output.

The "data" here is an advected, decaying pattern on the unit torus read by 300
sensors at random positions, 30% of the readings missing at random in every
snapshot (NaN). MERLIN encodes whatever is observed, evolves the latent linearly
(plus memory) and decodes the forecast on a regular 32 x 32 grid.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.dynamics import koopman as kp

n_traj, n_time, n_sensors = 24, 30, 300
sensors = jax.random.uniform(jax.random.key(0), (n_sensors, 2))  # your coordinates


def field(xy, t, phase):  # stands in for your measurements
    a = 2 * jnp.pi * (xy[..., 0] - 0.02 * t) + phase
    return jnp.exp(-0.01 * t) * (jnp.sin(a) + 0.5 * jnp.cos(2 * jnp.pi * xy[..., 1] + a))


phases = jax.random.uniform(jax.random.key(1), (n_traj, 1, 1), maxval=2 * jnp.pi)
t = jnp.arange(n_time)[None, :, None]
values = field(sensors[None, None], t, phases)[..., None]  # [traj, time, sensors, 1]
observed = jax.random.bernoulli(jax.random.key(2), 0.7, values.shape[:3])
values = jnp.where(observed[..., None], values, jnp.nan)  # missing readings

config = kp.MerlinConfig(  # the model's sizes, in one place
    n_cond=2,
    encoder=kp.EncoderConfig(n_tokens=4, token_dim=4, width=32, heads=2),
    decoder=kp.DecoderConfig(hidden=32, n_layers=2, input_scale=16.0),
)
model = kp.Merlin(2, 1, config, key=jax.random.key(3))
train, test = slice(0, 20), slice(20, None)
model, _ = kp.train_phase1(model, sensors, values[train], jax.random.key(4),
                           kp.Phase1Config(steps=300, batch_size=4, window=6, lr=3e-3),
                           mask=observed[train])
latents = kp.encode_dataset(model, sensors, values[train], observed[train])
backbone = kp.fit_global_backbone(latents)
memory, _ = kp.train_memory(backbone, latents, jax.random.key(5),
                            kp.MemoryConfig(memory_dim=16, hidden=32, steps=300, horizon=10))
print("spectral radius of A:", round(kp.spectral_radius(backbone), 4))

# Forecast 20 steps of a held-out trajectory from its first 2 (partial) snapshots,
# decoded on a regular grid the model never saw.
grid = jnp.stack(jnp.meshgrid(jnp.arange(32) / 32, jnp.arange(32) / 32, indexing="ij"), -1)
grid = grid.reshape(-1, 2)
frames, mask = values[20, :2], observed[20, :2]
for name, mem in (("linear", None), ("memory", memory)):
    pred = kp.forecast(model, backbone, sensors, frames, 20, mask=mask, memory=mem, query=grid)
    truth = field(grid[None], jnp.arange(1, 22)[:, None], phases[20])
    err = np.linalg.norm(pred[..., 0] - truth, axis=-1) / np.linalg.norm(truth, axis=-1)
    print(f"{name:6s} relative error at horizons 1, 10, 20:", np.round(err[[1, 10, 20]], 3))
