"""Which training stage made the model do that? Stage attribution without retraining.

A linear regressor is trained in three stages (SGD with momentum, weight decay and a
schedule); the middle stage's data pull one weight towards a spurious value. The jvp
estimator recovers each stage's effect on the final weights; retraining checks it.
"""

import jax
import jax.numpy as jnp
import optax

from jaxsci.llm import attribution as A

steps, batch, d = 30, 16, 4
kx, kn = jax.random.split(jax.random.key(0))
x = jax.random.normal(kx, (steps, batch, d))
w_true = jnp.asarray([1.0, -2.0, 0.5, 0.0])
y = x @ w_true + 0.1 * jax.random.normal(kn, (steps, batch))
y = y.at[10:20].add(3.0 * x[10:20, :, 3])  # stage 1 couples feature 3 with the target
stages = jnp.repeat(jnp.arange(3), 10)


def loss(w, ex):
    return 0.5 * (ex["x"] @ w - ex["y"]) ** 2


opt = optax.chain(optax.add_decayed_weights(1e-2),
                  optax.sgd(optax.cosine_decay_schedule(0.1, steps), momentum=0.9))
data = {"x": x, "y": y}
w0 = jnp.zeros(d)
final = A.replay(loss, opt, w0, data).params
true = A.retrain_effects(loss, opt, w0, data, stages, 3)
print("final weights", jnp.round(final, 3))
for mode in A.MODES:
    est = A.stage_effects(loss, opt, w0, data, stages, 3, mode=mode)
    print(f"{mode:>9}: effect on the spurious weight per stage {jnp.round(est[:, 3], 3)}")
print(f"retrained: effect on the spurious weight per stage {jnp.round(true[:, 3], 3)}")
