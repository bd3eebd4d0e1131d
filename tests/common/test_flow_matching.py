import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.common import flow_matching as fm

M0, S0, M1, S1 = 0.0, 1.0, 2.0, 0.5


def ot_velocity(t, x):
    """Exact velocity of the OT (deterministic) coupling N(M0, S0^2) -> N(M1, S1^2)."""
    t = t[:, None]
    mu = (1 - t) * M0 + t * M1
    scale = (1 - t) + t * S1 / S0
    return (M1 - M0) + (S1 / S0 - 1) / scale * (x - mu)


def indep_velocity(t, x):
    """Exact marginal velocity of the independent coupling N(M0, S0^2) x N(M1, S1^2)."""
    t = t[:, None]
    mu = (1 - t) * M0 + t * M1
    var = (1 - t) ** 2 * S0**2 + t**2 * S1**2
    return (M1 - M0) + (t * S1**2 - (1 - t) * S0**2) / var * (x - mu)


def test_cfm_loss_zero_for_exact_velocity_of_gaussian_path():
    k0, kt = jax.random.split(jax.random.key(0))
    x0 = M0 + S0 * jax.random.normal(k0, (512, 3))
    x1 = M1 + (S1 / S0) * (x0 - M0)  # the OT map: x1 - x0 is a function of x_t
    t = fm.sample_time(kt, 512)
    assert float(fm.cfm_loss(ot_velocity, x0, x1, t)) < 1e-10
    # A wrong field pays: the loss is its mean squared deviation.
    wrong = lambda t, x: ot_velocity(t, x) + 0.3
    assert float(fm.cfm_loss(wrong, x0, x1, t)) == pytest.approx(0.09, rel=1e-4)


def test_interpolate_endpoints_and_target():
    x0, x1 = jnp.ones((2, 2)), 3 * jnp.ones((2, 2))
    np.testing.assert_allclose(fm.interpolate(x0, x1, jnp.array([0.0, 1.0])),
                               jnp.array([[1.0, 1.0], [3.0, 3.0]]))
    np.testing.assert_allclose(fm.target_velocity(x0, x1), 2 * jnp.ones((2, 2)))


@pytest.mark.parametrize("solver", ["euler", "heun", "tsit5"])
def test_ode_sampler_transports_gaussian_to_gaussian(solver):
    # The OT path is linear in x0: every particle must land on M1 + (S1/S0)(x0 - M0).
    x0 = jax.random.normal(jax.random.key(1), (64, 2))
    x1 = fm.sample_ode(ot_velocity, x0, steps=40, solver=fm.solver_from_name(solver))
    tol = 2e-2 if solver == "euler" else 1e-4
    np.testing.assert_allclose(x1, M1 + S1 / S0 * (x0 - M0), atol=tol)


def test_ode_save_ts_and_nfe():
    x0 = jnp.zeros((3, 1))
    ts = jnp.array([0.0, 0.5, 1.0])
    xs = fm.sample_ode(lambda t, x: jnp.ones_like(x), x0, steps=4, save_ts=ts)
    np.testing.assert_allclose(xs[:, 0, 0], ts, atol=1e-6)
    assert fm.nfe(diffrax.Heun(), 10) == 20 and fm.nfe(diffrax.Euler(), 10) == 10
    assert isinstance(fm.solver_from_name("tsit5"), diffrax.Tsit5)


def test_sde_keeps_the_ode_marginals():
    # Independent coupling: x_t ~ N(mu_t, var_t) exactly. The stochastic flow (eta = 1)
    # must reproduce the marginal moments at t = 0.5 and t = 1, like the ODE does.
    n = 8000
    x0 = jax.random.normal(jax.random.key(2), (n, 2))
    run = jax.jit(lambda k, t1: fm.sample_sde(indep_velocity, x0, k, noise=1.0, t1=t1,
                                              steps=100))
    for t1 in (0.5, 1.0):
        xs = run(jax.random.key(3), t1)
        mu = (1 - t1) * M0 + t1 * M1
        var = (1 - t1) ** 2 * S0**2 + t1**2 * S1**2
        se_mean = np.sqrt(var / n)
        assert abs(float(xs.mean()) - mu) < 5 * se_mean + 0.01
        assert float(xs.var()) == pytest.approx(var, rel=0.05)
        xo = fm.sample_ode(indep_velocity, x0, t1=t1, steps=100)
        assert float(xo.var()) == pytest.approx(var, rel=0.05)
    # The noise really acts: the SDE endpoint is not the ODE endpoint of the same x0.
    assert float(jnp.abs(run(jax.random.key(3), 1.0) - xo).mean()) > 0.05


def test_sde_zero_noise_is_euler_ode():
    x0 = jax.random.normal(jax.random.key(4), (16, 2))
    a = fm.sample_sde(indep_velocity, x0, jax.random.key(0), noise=0.0, steps=20)
    b = fm.sample_ode(indep_velocity, x0, steps=20, solver=diffrax.Euler())
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_score_from_velocity_matches_gaussian_score():
    t = jnp.full((5,), 0.3)
    x = jnp.linspace(-2, 3, 10).reshape(5, 2)
    mu = 0.3 * M1
    var = 0.7**2 + 0.09 * S1**2
    s = fm.score_from_velocity(indep_velocity(t, x), x, t)
    np.testing.assert_allclose(s, -(x - mu) / var, rtol=1e-5)


def test_errors_name_the_argument():
    x = jnp.zeros((4, 2))
    with pytest.raises(ValueError, match="x1"):
        fm.cfm_loss(ot_velocity, x, jnp.zeros((4, 3)), jnp.zeros(4))
    with pytest.raises(ValueError, match="x0 must have 2 dimensions"):
        fm.sample_ode(ot_velocity, jnp.zeros(4))
    with pytest.raises(TypeError, match="solver must be a diffrax solver object"):
        fm.sample_ode(ot_velocity, x, solver="heun")
    with pytest.raises(ValueError, match="solver"):
        fm.solver_from_name("rk99")
    with pytest.raises(ValueError, match="noise"):
        fm.sample_sde(ot_velocity, x, jax.random.key(0), noise=-1.0)
    with pytest.raises(ValueError, match="x0 must be finite"):
        fm.sample_ode(ot_velocity, x.at[0, 0].set(jnp.nan))
    with pytest.raises(TypeError, match="key"):
        fm.sample_sde(ot_velocity, x, 0, noise=1.0)
