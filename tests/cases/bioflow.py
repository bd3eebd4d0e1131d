"""Property cases for bioflow: the regime prior, the conditional CFM loss and sampler,
the ODE benchmark simulator, CRPS and the regime labels."""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.dynamics import bioflow as bf

# Cheap rules (no frequency search) keep each check's compile short.
RULES = ("persistence", "damped_trend", "saturating")


def _context(m=3, c=10, seed=0):
    rng = np.random.default_rng(seed)
    tau = np.arange(c)
    return jnp.asarray(np.sin(0.5 * tau[None] + rng.uniform(0, 6, (m, 1)))
                       + 0.1 * tau[None] * rng.standard_normal((m, 1)))


def _prior(context, temperature, sigma_scale):
    spec = bf.RegimePrior(candidates=RULES, backtest=4, temperature=temperature,
                          sigma_scale=sigma_scale)
    return bf.regime_prior(context, 4, spec)


def _model():
    return bf.ConditionalVelocity(4, 10, 8, 1, key=jax.random.key(1))


def _prior_arrays():
    p = _prior(_context(), 0.5, 1.0)
    return p.mean, p.sigma


CASES = [
    Case(
        name="bioflow.regime_prior",
        fn=_prior,
        make=lambda: dict(context=_context(), temperature=jnp.asarray(0.5),
                          sigma_scale=jnp.asarray(1.2)),
        out=lambda p: (p.mean, p.sigma, p.weights),
        vmap=("context", "temperature", "sigma_scale"),
        grad=("context", "temperature"),
        bad=(Bad({"context": jnp.zeros((3, 3))}, ValueError, "context must have at least 4"),),
        rtol=1e-4, atol=1e-5, fd_rtol=1e-3,
    ),
    Case(
        name="bioflow.cfm_loss",
        fn=bf.cfm_loss,
        make=lambda: dict(model=_model(), key=jax.random.key(2), context=_context(),
                          future=_context(3, 4, 1), source=bf.RegimeSource(
                              bf.RegimePrior(candidates=RULES, backtest=4)),
                          prior=_prior_arrays()),
        vmap=("future",),
        grad=("model", "future", "prior"),
        key="key",
        bad=(Bad({"source": "gaussian"}, TypeError, "source must be an AbstractSource"),),
    ),
    Case(
        name="bioflow.sample_forecast",
        fn=bf.sample_forecast,
        make=lambda: dict(model=_model(), key=jax.random.key(3), context=_context(),
                          horizon=4, n_samples=2, source=bf.GaussianSource(), steps=2),
        vmap=("context",),
        grad=("model", "context"),
        key="key",
        bad=(Bad({"n_samples": 0}, ValueError, "n_samples must be >= 1"),),
    ),
    Case(
        name="bioflow.simulate",
        fn=bf.simulate,
        make=lambda: dict(family=jnp.asarray([0, 12], jnp.int32),
                          params=jnp.asarray([[1.0, 10.0, 0, 0, 0, 0], [1.0, 0.2, 0, 0, 0, 0]]),
                          y0=jnp.asarray([[0.5, 0, 0], [1.0, 0.0, 0]]), n_times=4),
        bad=(Bad({"params": jnp.zeros((2, 5))}, ValueError, "params"),),
        rtol=1e-4, atol=1e-5,
    ),
    Case(
        name="bioflow.crps",
        fn=bf.crps,
        make=lambda: dict(samples=jnp.asarray(np.random.default_rng(4).standard_normal(
            (5, 2, 3))), y=jnp.asarray(np.random.default_rng(5).standard_normal((2, 3)))),
        vmap=("y",),
        grad=("samples", "y"),
        bad=(Bad({"y": jnp.zeros((3, 3))}, ValueError, "y"),),
    ),
    Case(
        name="bioflow.label_regime",
        fn=bf.label_regime,
        make=lambda: dict(traj=jnp.sin(0.4 * jnp.arange(40.0)) * jnp.exp(-0.02 * jnp.arange(40.0))),
        vmap=("traj",),
        bad=(Bad({"traj": jnp.zeros((4, 4))}, ValueError, "traj must have 1 dimension"),),
    ),
]
