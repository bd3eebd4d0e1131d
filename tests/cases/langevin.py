"""Property cases for langevin: simulation, the drift fit, the direct estimator, the EM
step and the path-augmentation driver (see ``tests/properties.py``)."""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.dynamics import langevin as lg

N_OBS, SPO = 3, 2  # observations, Euler steps per interval: tiny programs


def _f(x):
    return jnp.asarray(x, float)


def _gammas(drift):
    return lg.RotatingWell(jnp.stack([drift.gamma, drift.gamma * 0.9, drift.gamma * 1.1]))


# --------------------------------------------------------------------------- simulate


def _simulate_args():
    return {
        "key": jax.random.key(0),
        "drift": lg.RotatingWell(_f(0.7)),
        "x0": _f([[0.3, -0.2], [-0.5, 0.4]]),
        "diffusion": _f(0.5),
        "tau": _f(0.3),
        "burn_in": _f(0.2),
    }


def _simulate(key, drift, x0, diffusion, tau, burn_in):
    return lg.simulate(key, drift, x0, diffusion, tau, N_OBS, steps_per_obs=SPO,
                       burn_in=burn_in, burn_in_steps=2)


SIMULATE = Case(
    "langevin.simulate", _simulate, _simulate_args,
    vmap=("tau", "diffusion", "drift"),
    batch={"drift": _gammas},
    grad=("drift", "diffusion"),
    key="key",
    bad=(
        Bad({"tau": 0.0}, ValueError, "tau must be > 0"),
        Bad({"drift": "double_well"}, TypeError, "drift must be a drift"),
        Bad({"diffusion": jnp.asarray(-0.5)}, Exception, "diffusion must be > 0", jit=True),
    ),
)


# --------------------------------------------------------------------------- fit_drift


def _feats():
    return lg.random_features(jax.random.key(1), 2, 6, 0.8)


def _fit_args():
    rng = np.random.default_rng(0)
    x = _f(rng.standard_normal((5, 2)))
    return {"x": x, "dx": _f(-0.1 * np.asarray(x) + 0.1 * rng.standard_normal((5, 2))),
            "dt": _f(0.1), "diffusion": _f(0.5), "prior_var": _f(3.0)}


def _fit(x, dx, dt, diffusion, prior_var):
    return lg.fit_drift(_feats(), x, dx, dt, diffusion, prior_var=prior_var).coef


POLY_FEATURES = Case(
    "langevin.feature_map[polynomial]", lg.feature_map,
    lambda: {"feats": lg.polynomial_features(2, 3, scale=_f(1.5)),
             "x": _f(np.random.default_rng(1).standard_normal((4, 2)))},
    vmap=("x",),
    grad=("feats", "x"),
    bad=(Bad({"feats": "poly3"}, TypeError, "feats must be a langevin basis"),),
)

FIT_DRIFT = Case(
    "langevin.fit_drift", _fit, _fit_args,
    vmap=("dt", "prior_var"),
    grad=("dx", "prior_var"),
    bad=(
        Bad({"dt": 0.0}, ValueError, "dt must be > 0"),  # issue 16: dt = 0 was accepted
        Bad({"dt": jnp.asarray(-0.1)}, Exception, "dt must be > 0", jit=True),
        Bad({"x": [[0.0, 0.0]] * 4}, ValueError, "dx must have shape"),
    ),
    rtol=1e-4, atol=1e-5,
)


# --------------------------------------------------------------------------- direct


def _obs():
    return _f(np.random.default_rng(2).standard_normal((3, N_OBS, 2)))


def _direct(obs, tau, diffusion):
    return lg.direct_estimator(_feats(), obs, tau, diffusion).coef


DIRECT = Case(
    "langevin.direct_estimator", _direct,
    lambda: {"obs": _obs(), "tau": _f(0.4), "diffusion": _f(0.5)},
    vmap=("tau",),
    grad=("obs",),
    bad=(Bad({"obs": _obs()[:, :1]}, ValueError, "obs needs at least 2 observation times"),),
    rtol=1e-4, atol=1e-5,
)


# --------------------------------------------------------------------------- EM


def _em_args():
    feats = _feats()
    return {"key": jax.random.key(3), "init": lg.DriftModel(feats, jnp.zeros((6, 2), float)),
            "obs": _obs(), "tau": _f(0.4), "diffusion": _f(0.5), "prior_var": _f(3.0)}


def _em_config(prior_var, n_iter=2):
    return lg.EMConfig(n_iter=n_iter, n_steps=3, n_bridges=2, n_score_bridges=2,
                       prior_var=prior_var)


def _step(key, init, obs, tau, diffusion, prior_var):
    state, info = lg.augmentation_step(key, lg.augmentation_init(init),
                                       lg.observation_pairs(obs, tau), diffusion,
                                       _em_config(prior_var))
    return state.model.coef, info.log_posterior


AUGMENTATION_STEP = Case(
    "langevin.augmentation_step", _step, _em_args,
    vmap=("prior_var",),
    grad=("diffusion",),
    key="key",
    bad=(
        Bad({"prior_var": -1.0}, ValueError, "prior_var must be > 0"),
        Bad({"prior_var": jnp.asarray(-1.0)}, Exception, "prior_var must be > 0", jit=True),
    ),
    rtol=1e-4, atol=1e-5, fd_rtol=1e-3,
)


def _augment(key, init, obs, tau, diffusion, prior_var):
    res = lg.path_augmentation(key, init, obs, tau, diffusion, _em_config(prior_var),
                               probe=obs[:, 0])
    return res.history, res.log_posterior


PATH_AUGMENTATION = Case(
    "langevin.path_augmentation", _augment, _em_args,
    vmap=("prior_var", "tau"),
    key="key",
    bad=(
        Bad({"tau": -0.4}, ValueError, "tau must be > 0"),
        Bad({"diffusion": jnp.asarray(0.0)}, Exception, "diffusion must be > 0", jit=True),
    ),
    rtol=1e-4, atol=1e-5,
)

CASES = [SIMULATE, POLY_FEATURES, FIT_DRIFT, DIRECT, AUGMENTATION_STEP, PATH_AUGMENTATION]
