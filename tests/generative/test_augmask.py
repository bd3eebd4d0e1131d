import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.data import tabular
from jaxsci.generative import augmask as A

LAYOUT = A.Layout((0, 0, 3))  # two numeric columns and one 3-category block: D = 5
TINY = A.AugMaskConfig(hidden=8, depth=1, time_dim=4, steps=6, batch_size=8, aux_hidden=4,
                       aux_steps=3, aux_rounds=1, timesteps=5)


def _rows(n=6, seed=0):
    rng = np.random.default_rng(seed)
    x = np.c_[rng.standard_normal((n, 2)), np.eye(3)[rng.integers(0, 3, n)]]
    obs = (rng.uniform(size=(n, 3)) > 0.4).astype(np.float32)
    return jnp.asarray(x, jnp.float32), jnp.asarray(obs)


# ------------------------------------------------------------ the Rao-Blackwell penalty


def test_penalty_equals_the_monte_carlo_expectation_for_a_linear_denoiser():
    # For eps_theta(x_t) = W x_t + c and x_m ~ N(mu, diag(var)) on the missing coordinates,
    # E ||w * (eps - eps_theta(x_t))||^2 = ||.||^2 at mu + alpha_bar tr(Sigma J^T J) exactly,
    # with x_t = sqrt(alpha_bar) x_0 + sqrt(1 - alpha_bar) e.
    rng = np.random.default_rng(0)
    d, ab = 5, 0.6
    wmat = rng.standard_normal((d, d))
    cvec = rng.standard_normal(d)
    eps, e = rng.standard_normal(d), rng.standard_normal(d)
    weight = np.array([1.0, 1.0, 0.0, 1.0, 0.0])  # coordinates 2 and 4 missing
    var = np.array([0.0, 0.0, 0.7, 0.0, 1.3])
    mu = rng.standard_normal(d)

    def residual(x0):
        xt = np.sqrt(ab) * x0 + np.sqrt(1 - ab) * e
        return np.sum((weight * (eps - (xt @ wmat.T + cvec))) ** 2, -1)

    draws = mu + np.sqrt(var) * rng.standard_normal((400_000, d))
    mc = residual(draws).mean()
    f = lambda z: z @ jnp.asarray(wmat.T) + jnp.asarray(cvec)  # noqa: E731
    xt_mu = jnp.asarray(np.sqrt(ab) * mu + np.sqrt(1 - ab) * e)
    pen = A.sensitivity_penalty(f, xt_mu, jnp.asarray(weight), jnp.asarray(var), ab)
    assert float(pen) > 0.1
    assert residual(mu) + float(pen) == pytest.approx(mc, rel=5e-3)


def test_hutchinson_probes_average_to_the_exact_penalty():
    rng = np.random.default_rng(1)
    wmat = jnp.asarray(rng.standard_normal((4, 4)), jnp.float32)
    f = lambda z: jnp.tanh(z @ wmat)  # noqa: E731
    x = jnp.asarray(rng.standard_normal(4), jnp.float32)
    weight = jnp.array([1.0, 0.0, 1.0, 1.0])
    var = jnp.array([0.0, 2.0, 0.0, 0.5])
    exact = A.sensitivity_penalty(f, x, weight, var, 0.8)
    probes = A.sensitivity_penalty(f, x, weight, var, 0.8, jax.random.key(0), probes=20000)
    assert float(probes) == pytest.approx(float(exact), rel=3e-2)
    # Observed inputs carry no variance: no penalty at all.
    assert float(A.sensitivity_penalty(f, x, weight, jnp.zeros(4), 0.8)) == 0.0


# ------------------------------------------------------------------- masked loss


def test_masked_loss_never_supervises_a_missing_coordinate():
    x, _ = _rows(8)
    obs = jnp.ones((8, 3)).at[:, 1].set(0.0)  # column 1 (coordinate 1) missing everywhere
    params = A.denoiser_init(jax.random.key(0), LAYOUT, TINY)
    ab = jnp.asarray(A.schedule(TINY)[1], jnp.float32)

    def grad_out_bias(name):
        g = jax.grad(A.loss)(params, x, obs, A.arm(name), jax.random.key(1), LAYOUT, ab, TINY)
        return np.asarray(g["out"][1])

    masked, full = grad_out_bias("augmask"), grad_out_bias("aug_full")
    assert masked[1] == 0.0 and np.all(masked[[0, 2, 3, 4]] != 0.0)
    assert full[1] != 0.0


# -------------------------------------------------------------- auxiliary models


def test_aux_draw_writes_only_missing_entries_and_one_hot_blocks():
    x, obs = _rows(32)
    params = A.aux_init(jax.random.key(0), LAYOUT, 4)
    z, var = A.aux_draw(params, x, obs, LAYOUT, jax.random.key(1))
    z, var, x, obs = map(np.asarray, (z, var, x, obs))
    obs_c = obs[:, LAYOUT.column_of] > 0
    np.testing.assert_array_equal(z[obs_c], x[obs_c])
    assert np.all(var[obs_c] == 0) and np.all(var[~obs_c] > 0)
    block = z[:, 2:]
    assert np.all(np.isin(block, (0.0, 1.0))) and np.all(block.sum(1) == 1)
    zm, _ = A.aux_draw(params, jnp.asarray(x), jnp.asarray(obs), LAYOUT, jax.random.key(1),
                       mean=True)
    np.testing.assert_allclose(np.asarray(zm)[:, 2:].sum(1), 1.0, rtol=1e-5)


def test_conditional_heads_learn_the_dependence_the_marginal_ones_cannot():
    # c1 = 2 c0 + small noise: the conditional head for c1 is sharp, the marginal one not.
    rng = np.random.default_rng(0)
    c0 = rng.standard_normal(400)
    x = np.c_[c0, 2 * c0 + 0.1 * rng.standard_normal(400)]
    x[rng.uniform(size=400) < 0.3, 1] = np.nan
    enc = A.fit_encoder(x)
    z, obs = enc.encode(x)
    data = A.TabularData(jnp.asarray(z, jnp.float32), jnp.asarray(obs, jnp.float32))
    cfg = A.AugMaskConfig(aux_hidden=16, aux_steps=300, aux_rounds=1, batch_size=128)
    nll = {}
    for cond in (1.0, 0.0):
        params, _ = A.aux_fit(data, enc.layout, jax.random.key(0), cfg, cond)
        out = A.aux_heads(params, data.x, data.observed, enc.layout, cond)
        nll[cond] = float(np.mean(np.asarray(A.aux_nll(out, data.x, enc.layout))[obs[:, 1], 1]))
    assert nll[1.0] < nll[0.0] - 1.0


# --------------------------------------------------------- encoder, masks, the API


def test_encoder_round_trip_and_mean_fill():
    rng = np.random.default_rng(0)
    x = np.c_[rng.exponential(size=50), rng.integers(0, 3, 50)].astype(float)
    x[::7, 0] = np.nan
    x[::5, 1] = np.nan
    enc = A.fit_encoder(x, (0, 3))
    z, obs = enc.encode(x)
    back = enc.decode(z)
    ok = ~np.isnan(x)
    np.testing.assert_allclose(back[ok], x[ok], rtol=1e-6, atol=1e-6)
    freq = np.bincount(x[~np.isnan(x[:, 1]), 1].astype(int), minlength=3) / ok[:, 1].sum()
    np.testing.assert_allclose(z[~ok[:, 1], 1:], np.broadcast_to(freq, (10, 3)), rtol=1e-6)


@pytest.mark.parametrize("mech", tabular.MECHANISMS)
def test_masks_hit_their_rate_and_mechanism(mech):
    x = tabular.planted_table(jax.random.key(0), 4000)
    m = np.asarray(tabular.missing_mask(jax.random.key(1), x, mech, 0.3))
    assert 1 - m.mean() == pytest.approx(0.3, abs=0.02)
    xs = np.asarray(x)
    if mech == "mar":
        assert m[:, 0].all()
    if mech == "mnar":  # self-masking: large values go missing
        assert xs[~m[:, 1], 1].mean() > xs[m[:, 1], 1].mean() + 0.3


def test_sklearn_tables_carry_their_label_as_a_categorical_last_column():
    x, cards, cols, target = tabular.sklearn_table("wine")
    assert x.shape == (178, 14) and cards == (0,) * 13 + (3,) and target == 13
    assert cols[-1] == "target" and set(np.unique(x[:, target])) == {0.0, 1.0, 2.0}
    enc = A.fit_encoder(x, cards)  # codes 0..2 accepted as a 3-category block
    assert enc.layout.dim == 16


def test_bad_inputs_are_named():
    x = np.random.default_rng(0).standard_normal((10, 3))
    x[:, 2] = np.nan
    with pytest.raises(ValueError, match=r"column\(s\) \[2\] are entirely missing"):
        A.fit_encoder(x)
    with pytest.raises(ValueError, match="cardinalities must have one entry per column"):
        A.fit_encoder(x[:, :2], (0,))
    with pytest.raises(ValueError, match="categorical column 1 must hold codes 0..1"):
        A.fit_encoder(np.c_[x[:, 0], np.full(10, 3.0)], (0, 2))
    with pytest.raises(ValueError, match="mask must have shape"):
        tabular.with_nans(jnp.zeros((4, 3)), jnp.ones((4, 2), bool))
    with pytest.raises(ValueError, match="mechanism must be one of"):
        tabular.missing_mask(jax.random.key(0), jnp.zeros((4, 3)), "random", 0.3)
    with pytest.raises(ValueError, match="too high for MAR"):
        tabular.missing_mask(jax.random.key(0), jnp.zeros((4, 3)), "mar", 0.7)
    with pytest.raises(ValueError, match="arm must be one of"):
        A.arm("impute")
    xo, obs = _rows(8)
    data = A.TabularData(xo, obs)
    with pytest.raises(ValueError, match="arm fields must lie in"):
        A.train(data, A.arm("augmask")._replace(masked=jnp.asarray(2.0)), jax.random.key(0),
                LAYOUT, TINY)
    with pytest.raises(ValueError, match="data.observed must have shape"):
        A.train(A.TabularData(xo, obs[:, :2]), A.arm("augmask"), jax.random.key(0),
                LAYOUT, TINY)
    with pytest.raises(ValueError, match="needs config.penalty_weight"):
        A.fit(np.asarray(xo[:, :2]), key=jax.random.key(0), arm="rb", config=TINY)


def test_fit_takes_nans_and_samples_in_table_units():
    rng = np.random.default_rng(0)
    x = np.c_[rng.standard_normal(40) * 3 + 10, rng.integers(0, 2, 40)].astype(float)
    x[::4, 0] = np.nan
    model = A.fit(x, (0, 2), key=jax.random.key(0), config=TINY)
    s = model.sample(30, jax.random.key(1))
    assert s.shape == (30, 2) and np.all(np.isfinite(s))
    assert set(np.unique(s[:, 1])) <= {0.0, 1.0}
    # The quantile map's range: samples stay within the observed values' range.
    assert s[:, 0].min() >= np.nanmin(x[:, 0]) - 1e-6 and s[:, 0].max() <= np.nanmax(x[:, 0]) + 1e-6
