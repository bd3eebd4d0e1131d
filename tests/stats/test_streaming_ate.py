import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.stats import streaming_ate as S


def _paired_stream(n_pairs, tau, key):
    # A randomised paired stream: each x arrives once treated and once as control.
    x = jax.random.normal(key, (n_pairs, 3))
    xs = jnp.repeat(x, 2, axis=0)
    t = jnp.tile(jnp.asarray([True, False]), n_pairs)
    g = jnp.sin(3.0 * xs[:, 0]) + xs[:, 1] ** 2 - 2.0 * xs[:, 2]  # any outcome function
    return xs, t, g + tau * t


@pytest.fixture(scope="module")
def insert_many():
    """One compiled scan of ``coreset_insert`` (m = 8, 5 levels), reused by the tests."""

    def go(xs, vals, key, halving, levels):
        st = S.coreset_init(8, levels, xs.shape[1])

        def body(st, u):
            return S.coreset_insert(st, u[0], u[1], S.Gaussian(1.0), halving, key), None

        return jax.lax.scan(body, st, (xs, vals))[0]

    return jax.jit(go, static_argnums=(4,))


def test_known_ate_exact_in_paired_randomised_stream():
    # Both arms see the same points in the same order, so their coresets (same key)
    # and balancing weights are identical and (2) returns tau for any outcome function.
    xs, t, y = _paired_stream(100, 2.5, jax.random.key(0))
    est = S.StreamingATE(S.Gaussian(1.0), m=8, levels=S.levels_for(200, 8), max_steps=200)
    res = S.run(est, xs, t, y, jax.random.key(3), checkpoints=(100, 200))
    assert np.all(np.asarray(res.state.treated.halvings)[:3] > 0)  # compression happened
    np.testing.assert_allclose(np.asarray(res.ate), 2.5, atol=2e-5)
    # The naive estimate is exact here too; the shifted stream's is not (a contrast).
    s = S.make_shifting_stream(jax.random.key(0), 400)
    naive = float(s.y[s.treat].mean() - s.y[~s.treat].mean())
    assert abs(naive - 1.0) > 0.3


def test_mass_exact_memory_bounded_and_capacity(insert_many):
    m = 8
    n = S.capacity(m, 5)  # 3 m 2^3 - 1 = 191
    assert n == 191 and S.levels_for(n, m) == 5 and S.levels_for(n + 1, m) == 6
    xs = jax.random.normal(jax.random.key(1), (n + 8, 2))
    vals = jnp.arange(n + 8, dtype=float)
    st = insert_many(xs[:n], vals[:n], jax.random.key(0), S.KernelHalving(), 5)
    _, _, mass = S.coreset_measure(st)
    assert int(st.n) == n and float(mass.sum()) == n and not bool(st.overflow)
    assert int(st.counts.sum()) <= m * 5
    # Every stored value is one of the inserted ones, each at most once.
    stored = np.asarray(st.values)[np.arange(m)[None, :] < np.asarray(st.counts)[:, None]]
    assert len(set(stored.tolist())) == stored.size
    # One unit more: its cascade pushes into the full top level, flagged as overflow.
    st = insert_many(xs[:n + 1], vals[:n + 1], jax.random.key(0), S.KernelHalving(), 5)
    assert bool(st.overflow)


def test_kernel_halving_beats_random_halving():
    # Discrepancy theory: the kept half's kernel mean is closer to the whole's.
    k = S.Gaussian(1.0)
    pts = jax.random.normal(jax.random.key(2), (64, 2))
    kk = k.gram(pts, pts)

    def mmd2(idx):
        w = jnp.full(64, -1.0 / 64).at[idx].add(1.0 / 32)
        return w @ kk @ w

    keys = jax.random.split(jax.random.key(0), 32)
    kh = jax.vmap(lambda kk_: mmd2(S.KernelHalving().halve(k, pts, kk_)))(keys)
    rh = jax.vmap(lambda kk_: mmd2(S.RandomHalving().halve(k, pts, kk_)))(keys)
    gh = mmd2(S.GreedyHalving().halve(k, pts, keys[0]))
    # Measured (m = 64, 2-D): randomised kernel halving ~0.8x random's mean MMD^2 at
    # delta = 1/2 (its guarantee is a high-probability bound), the greedy sign ~0.25x.
    assert float(kh.mean()) < float(rh.mean())
    assert float(gh) < 0.5 * float(rh.mean())
    idx = np.asarray(S.KernelHalving().halve(k, pts, keys[0]))
    assert np.all(idx // 2 == np.arange(32))  # one point of each consecutive pair


def test_no_compression_equals_offline():
    s = S.make_shifting_stream(jax.random.key(4), 40)
    est = S.StreamingATE(S.Gaussian(1.0), m=64, levels=1, ridge=1e-2, max_steps=300)
    res = S.run(est, s.x, s.treat, s.y, jax.random.key(0))
    off = S.offline_ate(S.Gaussian(1.0), s.x, s.treat, s.y, 1e-2, max_steps=300)
    np.testing.assert_allclose(float(res.ate[-1]), float(off.ate), rtol=1e-4, atol=1e-5)
    assert float(res.mmd2_treated[-1]) == pytest.approx(float(off.treated.mmd2), rel=1e-3,
                                                         abs=1e-7)


def test_balance_weights_of_the_target_itself_are_its_shares():
    # Arm = target: w = pi has MMD 0, and the ridge sum w^2/pi is minimised there too.
    x = jax.random.normal(jax.random.key(5), (10, 2))
    share = jnp.arange(1.0, 11.0) / 55.0
    for ridge in (0.0, 1e-2, 1.0):
        sol = S.balance_weights(S.Gaussian(1.0), x, share, x, share, ridge, max_steps=400,
                                tol=1e-3)
        np.testing.assert_allclose(np.asarray(sol.weights), np.asarray(share), atol=2e-4)
        assert float(sol.mmd2) < 1e-6 and bool(sol.result == S.RESULTS.successful)
    # Empty slots (share 0) get weight 0; weights are on the simplex.
    sol = S.balance_weights(S.Gaussian(1.0), x, share.at[:3].set(0.0), x, share, 1e-2)
    w = np.asarray(sol.weights)
    assert np.all(w[:3] == 0) and np.all(w >= 0) and w.sum() == pytest.approx(1.0, abs=1e-5)


def test_naive_and_ipw_running_sums():
    s = S.make_shifting_stream(jax.random.key(6), 300, randomised=True)

    def body(st, i):
        return S.online_ipw_step(st, s.x[i], s.treat[i], s.y[i]), None

    st, _ = jax.lax.scan(body, S.online_ipw_init(3), jnp.arange(300))
    ipw, naive = S.online_ipw_estimate(st)
    assert float(naive) == pytest.approx(float(s.y[s.treat].mean() - s.y[~s.treat].mean()),
                                         rel=1e-5)
    assert np.isfinite(float(ipw)) and int(st.n) == 300


def test_clear_errors():
    s = S.make_shifting_stream(jax.random.key(0), 32)
    est = S.StreamingATE(m=4, levels=4)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="m must be >= 2"):
        S.StreamingATE(m=0)
    with pytest.raises(ValueError, match="m must be an even int"):
        S.StreamingATE(m=5)
    with pytest.raises(ValueError, match="treat must have shape \\(32\\)"):
        S.run(est, s.x, s.treat[:-1], s.y, key)
    with pytest.raises(ValueError, match="y must be finite, got 1 NaN"):
        S.run(est, s.x, s.treat, s.y.at[3].set(jnp.nan), key)
    with pytest.raises(ValueError, match="x must have 2 dimensions"):
        S.run(est, s.x[:, 0], s.treat, s.y, key)
    with pytest.raises(ValueError, match="lengthscale must be finite and > 0"):
        S.Gaussian(-1.0)
    with pytest.raises(ValueError, match="delta must be in \\(0, 1\\]"):
        S.KernelHalving(2.0)
    with pytest.raises(TypeError, match="estimator must be a StreamingATE"):
        S.run("coreset", s.x, s.treat, s.y, key)
    with pytest.raises(TypeError, match="key must be a jax.random key"):
        S.run(est, s.x, s.treat, s.y, 0)
    st = S.init(est, 3, key)
    with pytest.raises(ValueError, match="x must have shape \\(3,\\)"):
        S.step(est, st, jnp.zeros(2), True, 1.0)
    with pytest.raises(ValueError, match="m must be an even int"):
        S.levels_for(10, 3)
    # Overflow: a stream longer than the buffers' capacity raises (throw=True).
    small = S.StreamingATE(m=4, levels=2)
    with pytest.raises(Exception, match="overflowed the coreset buffers"):
        jax.block_until_ready(S.run(small, s.x, s.treat, s.y, key).ate)


def test_experiment_config_validation():
    from jaxsci.experiments import streaming_ate as E

    with pytest.raises(ValueError, match="ms must be at least two strictly increasing"):
        E.StreamingATEConfig(ms=(32, 8))
    with pytest.raises(ValueError, match="halving must be one of"):
        E.StreamingATEConfig(halving="fancy")
    with pytest.raises(ValueError, match="ms\\[i\\] must be even"):
        E.StreamingATEConfig(ms=(8, 9))
    assert E.rmse([1.0, 3.0]) == pytest.approx(np.sqrt(2.0))
