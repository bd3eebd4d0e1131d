"""Property cases for flowsmc and the shared flow matching it is built on."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.common import flow_matching as fm
from jaxsci.generative import flowsmc as fs


class AffineVelocity(eqx.Module):
    """A tiny differentiable velocity field v(t, x) = x A + b + t c (its arrays are leaves)."""

    a: jax.Array
    b: jax.Array
    c: jax.Array

    def __call__(self, t, x):
        return x @ self.a + self.b + t[:, None] * self.c


def _velocity():
    rng = np.random.default_rng(0)
    return AffineVelocity(jnp.asarray(0.3 * rng.standard_normal((2, 2))),
                          jnp.asarray(rng.standard_normal(2)), jnp.asarray(rng.standard_normal(2)))


def _x(seed, n=4):
    return jnp.asarray(np.random.default_rng(seed).standard_normal((n, 2)))


def loglik(x):
    return -0.5 * (x[:, 1] - 0.5) ** 2 / 0.3**2


def nan_loglik(x):
    return jnp.where(x[:, 0] > -10.0, jnp.nan, 0.0)


def _smc_kwargs():
    return dict(key=jax.random.key(0), velocity_fn=_velocity(), log_likelihood=loglik, n=4,
                dim=2, stage_times=(0.0, 0.5), noise=jnp.asarray(0.7), steps_per_stage=1,
                final_steps=1, ess_threshold=jnp.asarray(0.9), temper=jnp.asarray(1.5))


def _smc_out(r):
    return r.x, r.logw, r.log_z, r.ess_trace


CASES = [
    Case(
        name="flowsmc.flow_matching.cfm_loss",
        fn=fm.cfm_loss,
        make=lambda: dict(velocity_fn=_velocity(), x0=_x(1), x1=_x(2),
                          t=jnp.asarray([0.1, 0.4, 0.6, 0.9])),
        vmap=("t",),
        grad=("velocity_fn", "x1"),
        bad=(Bad({"x1": jnp.zeros((4, 3))}, ValueError, "x1"),),
    ),
    Case(
        name="flowsmc.flow_matching.sample_ode",
        fn=fm.sample_ode,
        make=lambda: dict(velocity_fn=_velocity(), x0=_x(3), t0=jnp.asarray(0.1),
                          t1=jnp.asarray(0.9), steps=3),
        vmap=("t0", "t1"),
        grad=("velocity_fn", "x0"),
        bad=(Bad({"solver": "heun"}, TypeError, "solver must be a diffrax solver"),),
    ),
    Case(
        name="flowsmc.flow_matching.sample_sde",
        fn=fm.sample_sde,
        make=lambda: dict(velocity_fn=_velocity(), x0=_x(4), key=jax.random.key(1),
                          noise=jnp.asarray(0.8), t0=jnp.asarray(0.2), t1=jnp.asarray(0.7),
                          steps=3),
        vmap=("noise", "t1"),
        key="key",
        bad=(Bad({"noise": -1.0}, ValueError, "noise must be >= 0"),),
    ),
    Case(
        name="flowsmc.smc_sample",
        fn=fs.smc_sample,
        make=_smc_kwargs,
        out=_smc_out,
        vmap=("noise", "ess_threshold", "temper"),
        key="key",
        bad=(
            Bad({"log_likelihood": nan_loglik}, Exception, "log-likelihood returned NaN",
                jit=True),
            Bad({"stage_times": (0.0, 1.0)}, ValueError, "stage_times must increase"),
            Bad({"noise": jnp.asarray(-1.0)}, Exception, "noise must be finite and >= 0",
                jit=True),
        ),
        rtol=1e-4, atol=1e-5,
    ),
    Case(
        name="flowsmc.importance_sample",
        fn=fs.importance_sample,
        make=lambda: dict(key=jax.random.key(2), velocity_fn=_velocity(),
                          log_likelihood=loglik, n=4, dim=2, steps=2),
        out=_smc_out,
        key="key",
        bad=(Bad({"log_likelihood": nan_loglik}, Exception, "importance_sample: the "
                 "log-likelihood returned NaN", jit=True),),
    ),
    Case(
        name="flowsmc.resample",
        fn=fs.resample,
        make=lambda: dict(key=jax.random.key(3), logw=jnp.log(jnp.asarray(
            [0.05, 0.5, 0.15, 0.3, 0.2, 0.1, 0.4, 0.25])), resampler=fs.Multinomial()),
        vmap=("logw",),
        key="key",
        bad=(Bad({"resampler": "systematic"}, TypeError, "resampler must be an "
                 "AbstractResampler"),),
    ),
    Case(
        name="flowsmc.ess",
        fn=fs.ess,
        make=lambda: dict(logw=jnp.asarray([0.1, -0.4, 0.9, -1.2])),
        vmap=("logw",),
        grad=("logw",),
        bad=(Bad({"logw": jnp.zeros((0,))}, ValueError, "empty particle set"),),
    ),
    Case(
        name="flowsmc.gmm_posterior",
        fn=fs.gmm_posterior,
        make=lambda: dict(weights=jnp.asarray([0.6, 0.4]),
                          means=jnp.asarray([[-1.0, 0.0], [1.5, 1.0]]),
                          covs=jnp.stack([jnp.asarray([[0.5, 0.2], [0.2, 0.3]]),
                                          0.4 * jnp.eye(2)]),
                          obs_matrix=jnp.asarray([[0.0, 1.0]]), y=jnp.asarray([0.7]),
                          obs_std=jnp.asarray(0.25)),
        vmap=("obs_std",),
        grad=("y", "obs_std"),
        bad=(Bad({"y": jnp.zeros(2)}, ValueError, "y"),),
    ),
    Case(
        name="flowsmc.mmd",
        fn=fs.mmd,
        make=lambda: dict(x=_x(5, 6), y=_x(6, 5), x_logw=jnp.asarray(
            [0.1, -0.2, 0.3, 0.0, -0.5, 0.2])),
        grad=("x",),
        bad=(Bad({"y": jnp.zeros((5, 3))}, ValueError, "y"),),
    ),
]
