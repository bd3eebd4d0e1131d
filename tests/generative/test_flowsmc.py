import math

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.common import flow_matching as fm
from jaxsci.core import RESULTS
from jaxsci.generative import flowsmc as fs

# One Gaussian "mixture" N(M, S^2 I) in 2-D: its exact velocity is closed form, and so is
# the posterior under y = x[1] + N(0, OBS^2).
M, S, OBS, Y = jnp.array([1.0, -0.5]), 0.7, 0.3, 0.8
W1, MU1, COV1 = jnp.ones(1), M[None], (S**2 * jnp.eye(2))[None]
H = jnp.array([[0.0, 1.0]])


def loglik(x):
    return -0.5 * (x[:, 1] - Y) ** 2 / OBS**2 - 0.5 * math.log(2 * math.pi * OBS**2)


def exact_log_z():
    var = S**2 + OBS**2
    return float(-0.5 * (Y - M[1]) ** 2 / var - 0.5 * math.log(2 * math.pi * var))


@pytest.fixture(scope="module")
def velocity():
    return fs.gmm_velocity(W1, MU1, COV1)


@pytest.fixture(scope="module")
def smc_batch(velocity):
    """SMC over 16 keys and 2 noise levels, compiled once."""

    def one(k, eta):
        return fs.smc_sample(k, velocity, loglik, 128, 2, noise=eta, stage_times=(0.0, 0.3, 0.6),
                             steps_per_stage=8, final_steps=8, ess_threshold=0.5)

    keys = jax.random.split(jax.random.key(7), 16)
    f = jax.jit(jax.vmap(jax.vmap(one, (None, 0)), (0, None)))
    return f(keys, jnp.array([0.0, 1.0]))


def test_gmm_velocity_single_gaussian_matches_closed_form(velocity):
    t = jnp.array([0.0, 0.3, 0.9])
    x = jnp.array([[0.1, 0.2], [1.0, -1.0], [2.0, 0.5]])
    tt = t[:, None]
    var = (1 - tt) ** 2 + tt**2 * S**2
    want = M + (tt * S**2 - (1 - tt)) / var * (x - tt * M)
    np.testing.assert_allclose(velocity(t, x), want, rtol=1e-5, atol=1e-6)


def test_gmm_velocity_transports_to_the_mixture():
    w = jnp.array([0.3, 0.7])
    mu = jnp.array([[-2.0, 0.0], [2.0, 1.0]])
    cov = jnp.stack([0.2 * jnp.eye(2), 0.1 * jnp.eye(2)])
    x0 = jax.random.normal(jax.random.key(0), (4000, 2))
    x1 = fm.sample_ode(fs.gmm_velocity(w, mu, cov), x0, steps=60, solver=diffrax.Heun())
    ref = fs.gmm_sample(jax.random.key(1), w, mu, cov, 4000)
    np.testing.assert_allclose(x1.mean(0), ref.mean(0), atol=0.1)
    assert float((x1[:, 0] > 0).mean()) == pytest.approx(0.7, abs=0.03)
    assert float(fs.mmd(x1, ref)) < 0.01


def test_gmm_posterior_matches_numerical_integration():
    w = jnp.array([0.6, 0.4])
    mu = jnp.array([[-1.0, 0.0], [1.5, 1.0]])
    cov = jnp.stack([jnp.array([[0.5, 0.2], [0.2, 0.3]]), 0.4 * jnp.eye(2)])
    pw, pm, pc, log_z = fs.gmm_posterior(w, mu, cov, H, jnp.array([0.7]), 0.25)
    g = jnp.linspace(-6, 6, 601)
    xx, yy = jnp.meshgrid(g, g, indexing="ij")
    pts = jnp.stack([xx.ravel(), yy.ravel()], -1)

    def mix_logpdf(x, w, mu, cov):
        def comp(m, c):
            r = x - m
            return (-0.5 * jnp.einsum("ni,ij,nj->n", r, jnp.linalg.inv(c), r)
                    - 0.5 * jnp.linalg.slogdet(c)[1] - math.log(2 * math.pi))
        lp = jax.vmap(comp)(mu, cov)
        return jax.nn.logsumexp(lp + jnp.log(w)[:, None], 0)

    lik = -0.5 * (pts[:, 1] - 0.7) ** 2 / 0.25**2 - 0.5 * math.log(2 * math.pi * 0.0625)
    dx = float(g[1] - g[0])
    joint = jnp.exp(mix_logpdf(pts, w, mu, cov) + lik)
    assert float(jnp.log(joint.sum() * dx * dx)) == pytest.approx(float(log_z), abs=1e-3)
    post = jnp.exp(mix_logpdf(pts, pw, pm, pc))
    np.testing.assert_allclose(post, joint / jnp.exp(log_z), atol=2e-3)


def test_resampling_is_unbiased():
    logw = jnp.log(jnp.array([0.05, 0.5, 0.15, 0.3]))
    keys = jax.random.split(jax.random.key(0), 4000)
    for method in (fs.Systematic(), fs.Multinomial()):
        idx = jax.vmap(lambda k, m=method: fs.resample(k, logw, m))(keys)
        counts = jax.vmap(lambda i: jnp.bincount(i, length=4))(idx).mean(0)
        np.testing.assert_allclose(counts, 4 * jnp.exp(logw), atol=0.05)
    # Systematic resampling keeps every count within one of n w_i.
    idx = jax.vmap(lambda k: fs.resample(k, logw))(keys)
    counts = jax.vmap(lambda i: jnp.bincount(i, length=4))(idx)
    assert bool(jnp.all(jnp.abs(counts - 4 * jnp.exp(logw)) < 1.0))


def test_ess_values():
    assert float(fs.ess(jnp.zeros(10))) == pytest.approx(10.0, rel=1e-5)
    assert float(fs.ess(jnp.array([0.0, -1e4, -1e4]))) == pytest.approx(1.0, rel=1e-5)
    # Invariant to a common shift of the log-weights.
    lw = jax.random.normal(jax.random.key(0), (50,))
    assert float(fs.ess(lw + 300.0)) == pytest.approx(float(fs.ess(lw)), rel=1e-4)


def test_importance_weights_exact_with_known_normaliser(velocity):
    run = jax.jit(jax.vmap(lambda k: fs.importance_sample(k, velocity, loglik, 512, 2,
                                                          steps=30, solver=diffrax.Heun())))
    res = run(jax.random.split(jax.random.key(3), 16))
    # The weights are exactly the likelihood of the final samples...
    np.testing.assert_allclose(res.logw, jax.vmap(loglik)(res.x), rtol=1e-6, atol=1e-5)
    # ... and the normaliser estimate is unbiased for Z = p(y): its mean over repeats
    # matches the exact evidence.
    z_hat = jnp.exp(res.log_z).mean()
    assert float(jnp.log(z_hat)) == pytest.approx(exact_log_z(), abs=0.03)


def test_smc_targets_the_exact_conditional(smc_batch):
    pw, pm, pc, log_z = fs.gmm_posterior(W1, MU1, COV1, H, jnp.array([Y]), OBS)
    res = jax.tree_util.tree_map(lambda a: a[:, 1], smc_batch)  # noise = 1
    w = jax.nn.softmax(res.logw, axis=-1)
    mean = jnp.einsum("rn,rnd->d", w, res.x) / w.shape[0]
    np.testing.assert_allclose(mean, pm[0], atol=0.05)
    var = jnp.einsum("rn,rnd->d", w, (res.x - mean) ** 2) / w.shape[0]
    np.testing.assert_allclose(var, jnp.diag(pc[0]), rtol=0.2)
    assert float(jnp.log(jnp.exp(res.log_z).mean())) == pytest.approx(float(log_z), abs=0.1)


def test_smc_resamples_and_noise_diversifies(smc_batch):
    det, sto = (jax.tree_util.tree_map(lambda a, i=i: a[:, i], smc_batch) for i in (0, 1))
    assert bool(sto.resampled.any())
    # After resampling, the noiseless flow keeps duplicates identical; the stochastic
    # flow makes them distinct.
    def n_unique(x):
        return np.mean([len(np.unique(np.round(np.asarray(xi), 5), axis=0)) for xi in x])

    assert n_unique(sto.x) == 128
    assert n_unique(det.x) < 128
    assert det.ess_trace.shape == (16, 4) and np.allclose(det.times[0], [0, 0.3, 0.6, 1.0])


def test_guidance_moves_samples_towards_the_observation(velocity):
    g = fs.guided_sample(jax.random.key(0), velocity, loglik, 256, 2, scale=1.0, steps=30)
    u = fm.sample_ode(velocity, jax.random.normal(jax.random.key(0), (256, 2)), steps=30)
    assert abs(float(g[:, 1].mean()) - Y) < abs(float(u[:, 1].mean()) - Y) - 0.2


def test_mmd_properties():
    x = jax.random.normal(jax.random.key(0), (50, 2))
    assert float(fs.mmd(x, x)) < 1e-5
    # A weighted sample equals the sample with duplicated points.
    lw = jnp.log(jnp.array([2.0] * 25 + [1.0] * 25))
    dup = jnp.concatenate([x[:25], x[:25], x[25:]])
    assert float(fs.mmd(x, dup, lw)) < 1e-5
    assert float(fs.mmd(x, x + 2.0)) > 0.5


def test_trained_flow_learns_a_gaussian():
    data = jnp.array([2.0, -1.0]) + 0.5 * jax.random.normal(jax.random.key(0), (2000, 2))
    model, losses = fs.train_flow(jax.random.key(1), data, fs.FlowTrainConfig(
        hidden=32, depth=2, steps=400, batch_size=128, learning_rate=3e-3))
    assert losses[-50:].mean() < losses[:50].mean()
    x = fm.sample_ode(model, jax.random.normal(jax.random.key(2), (1000, 2)), steps=20)
    np.testing.assert_allclose(x.mean(0), [2.0, -1.0], atol=0.15)
    np.testing.assert_allclose(x.std(0), [0.5, 0.5], atol=0.15)


def test_errors_name_the_argument(velocity):
    with pytest.raises(ValueError, match="empty particle set"):
        fs.ess(jnp.zeros((0,)))
    with pytest.raises(ValueError, match="empty particle set"):
        fs.resample(jax.random.key(0), jnp.zeros((0,)))
    with pytest.raises(ValueError, match="n must be >= 1"):
        fs.smc_sample(jax.random.key(0), velocity, loglik, 0, 2)
    with pytest.raises(ValueError, match="stage_times"):
        fs.smc_sample(jax.random.key(0), velocity, loglik, 8, 2, stage_times=(0.0, 1.0))
    with pytest.raises(TypeError, match="resampler must be an AbstractResampler"):
        fs.resample(jax.random.key(0), jnp.zeros(3), "systematic")
    with pytest.raises(ValueError, match="ess_threshold"):
        fs.smc_sample(jax.random.key(0), velocity, loglik, 8, 2, ess_threshold=2.0)
    with pytest.raises(ValueError, match="data must be finite"):
        fs.train_flow(jax.random.key(0), jnp.full((4, 2), jnp.nan), fs.FlowTrainConfig(steps=1))
    with pytest.raises(ValueError, match="learning_rate must be > 0"):
        fs.FlowTrainConfig(learning_rate=0.0)
    with pytest.raises(ValueError, match="stage_times"):
        fs.SMCConfig(stage_times=(0.1, 0.5))


def nan_loglik(x):
    return jnp.where(x[:, 0] > 0, jnp.nan, loglik(x))


def test_nan_log_likelihood_raises_inside_jit_or_reports_status(velocity):
    kw = dict(stage_times=(0.0, 0.5), steps_per_stage=2, final_steps=2)
    f = eqx.filter_jit(lambda k, throw: fs.smc_sample(k, velocity, nan_loglik, 8, 2,
                                                      throw=throw, **kw))
    with pytest.raises(eqx.EquinoxRuntimeError,
                       match="smc_sample: the log-likelihood returned NaN"):
        jax.block_until_ready(f(jax.random.key(0), True))
    r = f(jax.random.key(0), False)
    assert bool(r.result == RESULTS.nonfinite) and np.isnan(float(r.log_z))
    good = jax.jit(lambda k: fs.smc_sample(k, velocity, loglik, 8, 2, **kw))(jax.random.key(0))
    assert bool(good.result == RESULTS.successful)
    with pytest.raises(eqx.EquinoxRuntimeError, match="importance_sample"):
        jax.block_until_ready(eqx.filter_jit(lambda k: fs.importance_sample(
            k, velocity, nan_loglik, 8, 2, steps=2))(jax.random.key(0)))


def test_init_step_finish_equal_the_driver(velocity):
    kw = dict(noise=0.5, ess_threshold=0.9, temper=2.0)

    @jax.jit
    def by_hand(key):
        k0, k_loop = jax.random.split(key)
        state = fs.smc_init(k0, velocity, loglik, 16, 2, temper=2.0)
        (k1,) = jax.random.split(k_loop, 1)
        state, info = fs.smc_step(k1, state, velocity, loglik, 0.5, steps=3, **kw)
        state, _ = fs.smc_finish(state, velocity, loglik, steps=3)
        return state, info, fs.log_evidence(state)

    state, info, log_z = by_hand(jax.random.key(4))
    r = jax.jit(lambda k: fs.smc_sample(k, velocity, loglik, 16, 2, stage_times=(0.0, 0.5),
                                        steps_per_stage=3, final_steps=3, **kw))(jax.random.key(4))
    np.testing.assert_allclose(state.x, r.x, rtol=1e-6)
    np.testing.assert_allclose(log_z, r.log_z, rtol=1e-6)
    assert bool(info.resampled) == bool(r.resampled[0]) and float(state.t) == 1.0
