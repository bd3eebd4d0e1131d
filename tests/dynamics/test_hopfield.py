import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.dynamics import hopfield as hf

N = 12


@pytest.fixture(scope="module")
def patterns():
    return hf.sample_patterns(jax.random.key(0), N, 40)


@pytest.fixture(scope="module")
def chains():
    """One compiled vmapped sampler over (key, target, T), reused by several tests."""
    pats = hf.sample_patterns(jax.random.key(1), N, 3)  # alpha = ln 3 / 12 ~ 0.09: tiny load

    cfg = hf.MetropolisConfig(n_equil=300, n_sample=200)
    kernels = {"lse": hf.LSE(), "lsr": hf.LSR()}

    def run(keys, targets, temps, kernel):
        f = jax.vmap(lambda k, t, T: hf.metropolis(k, pats, t, T, kernels[kernel], cfg))
        return jax.jit(f)(keys, targets, temps)

    return pats, run


# ---------------------------------------------------------------- energies


def test_lse_energy_hand_computed():
    # Two orthogonal patterns in N = 2 on the circle of radius sqrt 2; x = pattern 0.
    pats = jnp.array([[math.sqrt(2.0), 0.0], [0.0, math.sqrt(2.0)]])
    x = pats[0]
    # phi = (1, 0): E = -(1/beta) log(exp(0) + exp(-beta * 2 * 1))
    for beta in (0.5, 1.0, 3.0):
        want = -math.log(1.0 + math.exp(-2.0 * beta)) / beta
        assert float(hf.energy(x, pats, hf.LSE(beta))) == pytest.approx(want, abs=1e-6)


def test_lsr_energy_hand_computed_and_support():
    pats = jnp.array([[math.sqrt(2.0), 0.0], [0.0, math.sqrt(2.0)]])
    b = 2.0 + math.sqrt(2.0)
    # At pattern 0: kernel values relu(1 - b(1 - 1)) = 1 and relu(1 - b) = 0.
    assert float(hf.energy(pats[0], pats, hf.LSR(b))) == pytest.approx(0.0, abs=1e-6)
    # At 30 degrees from pattern 0: phi = (cos 30, sin 30); only pattern 0 is in support.
    th = math.radians(30.0)
    x = math.sqrt(2.0) * jnp.array([math.cos(th), math.sin(th)])
    k0 = 1.0 - b * (1.0 - math.cos(th))
    want = -(2.0 / b) * math.log(k0)
    assert float(hf.energy(x, pats, hf.LSR(b))) == pytest.approx(want, rel=1e-5)
    # Opposite pattern 0 (phi = (-1, 0)) no kernel is in support: +inf energy.
    assert math.isinf(float(hf.energy(-pats[0], pats, hf.LSR(b))))


def test_fast_lse_path_matches_logsumexp(patterns):
    x = patterns[3]
    phi = patterns @ x / N
    want = -jax.nn.logsumexp(-2.0 * N * (1.0 - phi)) / 2.0
    assert float(hf.lse_energy(x, patterns, beta=2.0)) == pytest.approx(float(want), rel=1e-5)
    # beta N > 40 takes the max-shifted path: still finite, same formula.
    want = -jax.nn.logsumexp(-10.0 * N * (1.0 - phi)) / 10.0
    assert float(hf.lse_energy(x, patterns, beta=10.0)) == pytest.approx(float(want), rel=1e-5)


# ---------------------------------------------------------------- sampler


def test_sampler_stays_on_sphere_and_retrieves_at_low_load(chains):
    pats, run = chains
    keys = jax.random.split(jax.random.key(2), 6)
    targets = jnp.array([0, 1, 2, 0, 1, 2])
    res = run(keys, targets, jnp.full(6, 0.05), "lse")
    norms = jnp.linalg.norm(res.final_state, axis=-1)
    np.testing.assert_allclose(np.asarray(norms), math.sqrt(N), rtol=1e-5)
    assert float(res.alignment.min()) > 0.9  # retrieval: alpha ~ 0.09, T = 0.05
    assert np.all((np.asarray(res.acceptance) > 0.05) & (np.asarray(res.acceptance) < 0.9))


def test_no_retrieval_at_large_load():
    n = 10
    pats = hf.sample_patterns(jax.random.key(3), n, hf.num_patterns(0.9, n))  # alpha > 1/2
    cfg = hf.MetropolisConfig(n_equil=400, n_sample=200)
    f = jax.jit(jax.vmap(lambda k, t: hf.metropolis(k, pats, t, 0.5, hf.LSE(), cfg)))
    res = f(jax.random.split(jax.random.key(4), 4), jnp.arange(4))
    assert float(jnp.abs(res.alignment).max()) < 0.4


def test_lsr_retrieves_below_threshold_at_high_temperature(chains):
    pats, run = chains  # alpha ~ 0.09 < alpha_th(gaussian) = 0.25
    keys = jax.random.split(jax.random.key(5), 4)
    res = run(keys, jnp.array([0, 1, 2, 0]), jnp.full(4, 3.0), "lsr")
    # The chain cannot leave the kernel's support: alignment stays above 1 - 1/b - noise.
    assert float(res.alignment.min()) > 0.6
    # ...whereas LSE at the same T loses the pattern (no hard support).
    res_lse = run(keys, jnp.array([0, 1, 2, 0]), jnp.full(4, 3.0), "lse")
    assert float(res_lse.alignment.max()) < 0.5


def test_jit_equals_eager_and_determinism(patterns):
    cfg = hf.MetropolisConfig(n_equil=20, n_sample=10)
    key = jax.random.key(7)
    eager = hf.metropolis(key, patterns, 2, 0.3, hf.LSE(), cfg)
    f = jax.jit(lambda k: hf.metropolis(k, patterns, 2, 0.3, hf.LSE(), cfg))
    jitted = f(key)
    np.testing.assert_allclose(np.asarray(eager.final_state), np.asarray(jitted.final_state),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(f(key).final_state), np.asarray(jitted.final_state))
    other = f(jax.random.key(8))
    assert not np.allclose(np.asarray(eager.final_state), np.asarray(other.final_state))


def test_vmap_equals_loop(patterns):
    cfg = hf.MetropolisConfig(n_equil=15, n_sample=10)
    keys = jax.random.split(jax.random.key(9), 3)
    temps = jnp.array([0.2, 0.5, 1.0])
    targets = jnp.array([0, 5, 7])
    batched = jax.vmap(lambda k, t, T: hf.metropolis(k, patterns, t, T, hf.LSR(), cfg))(
        keys, targets, temps
    )
    one = jax.jit(lambda k, t, T: hf.metropolis(k, patterns, t, T, hf.LSR(), cfg))
    for i in range(3):
        single = one(keys[i], targets[i], temps[i])
        np.testing.assert_allclose(np.asarray(batched.alignment[i]), np.asarray(single.alignment),
                                   rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- theory


def test_alpha_c_zero_temperature_is_one_half_gaussian():
    for kernel in (hf.LSE(), hf.LSR()):
        assert float(hf.alpha_c(0.0, kernel, "gaussian")) == pytest.approx(0.5, abs=1e-6)
    # The exact density has no finite zero-temperature capacity (phi_max < 1 always).
    assert math.isinf(float(hf.alpha_c(0.0, hf.LSE(), "exact")))


def test_summed_floor_is_the_maximum_of_the_kernel_sum_over_overlaps():
    # f_sg = -(1/beta) max_{0 <= phi <= phi_max} [alpha + s_rand(phi) - beta (1 - phi)],
    # evaluated on a grid, against the closed form (both densities, several beta)
    for density in ("gaussian", "exact"):
        for beta in (0.5, 1.0, 2.0):
            for alpha in (0.1, 0.3, 0.6, 0.9):
                pmax = float(hf.max_spurious_overlap(alpha, density))
                phi = np.linspace(0.0, pmax, 200001)
                s = -phi**2 / 2 if density == "gaussian" else 0.5 * np.log1p(-phi**2)
                brute = -(alpha + s - beta * (1 - phi)).max() / beta
                kern = hf.LSE(beta)
                got = float(hf.spin_glass_free_energy(alpha, kern, density, "sum"))
                assert got == pytest.approx(brute, abs=1e-6)
                # the sum's floor never lies above the nearest pattern's
                assert got <= float(hf.spin_glass_free_energy(alpha, kern, density)) + 1e-7


def test_summed_floor_capacities():
    # LSE, beta = 1, T = 0: Gaussian 0.5 (the branches meet); exact
    # alpha_* + 1 - phi* with phi* = (sqrt 5 - 1)/2 the root of phi^2 + phi - 1
    phi = (math.sqrt(5) - 1) / 2
    exact = -0.5 * math.log(1 - phi * phi) + 1 - phi
    assert exact == pytest.approx(0.6226, abs=1e-4)
    assert float(hf.alpha_c(0.0, hf.LSE(), "exact", "sum")) == pytest.approx(exact, rel=1e-6)
    assert float(hf.alpha_c(0.0, hf.LSE(), "gaussian", "sum")) == pytest.approx(0.5, rel=1e-6)
    # alpha_c is where the floor meets f_ret(T), on either branch
    for density in ("gaussian", "exact"):
        for t in (0.0, 0.05, 0.2, 0.6, 1.2):
            for beta in (0.5, 1.0, 3.0):
                kern = hf.LSE(beta)
                a = float(hf.alpha_c(t, kern, density, "sum"))
                f = float(hf.retrieval_free_energy(t, kern))
                assert float(hf.spin_glass_free_energy(a, kern, density, "sum")) == \
                    pytest.approx(f, abs=1e-5)
    # LSR: the patterns inside the support outweigh the target above alpha_th, at any T
    temps = jnp.asarray([0.0, 0.05, 0.3, 1.6])
    for density in ("gaussian", "exact"):
        bound = np.asarray(hf.retrieval_boundary(temps, hf.LSR(), density, "sum"))
        np.testing.assert_allclose(bound, float(hf.alpha_th(hf.B_DEFAULT, density)),
                                   rtol=1e-6)
        ath = float(hf.alpha_th(hf.B_DEFAULT, density))
        assert float(hf.spin_glass_free_energy(ath + 0.1, hf.LSR(), density, "sum")) < 0
        assert math.isinf(float(hf.spin_glass_free_energy(ath - 0.1, hf.LSR(), density,
                                                          "sum")))
    with pytest.raises(ValueError, match="floor"):
        hf.alpha_c(0.1, hf.LSE(), "exact", "crowd")


def test_alpha_th_values_and_reference_discrepancy():
    b = hf.B_DEFAULT
    assert float(hf.alpha_th(b, "gaussian")) == pytest.approx((1 - 1 / b) ** 2 / 2, rel=1e-6)
    assert float(hf.alpha_th(b, "gaussian")) == pytest.approx(0.25, rel=1e-5)
    assert float(hf.alpha_th(b, "exact")) == pytest.approx(-0.5 * math.log(0.5), rel=1e-5)
    # The reference README's 0.043 is (1/b)^2 / 2, not the support edge (1 - 1/b).
    assert (1 / b) ** 2 / 2 == pytest.approx(0.043, abs=5e-4)


def test_retrieval_overlap_is_the_free_energy_minimum():
    ms = np.linspace(0.3, 0.999, 20001)
    for kernel in ("lse", "lsr"):
        for t in (0.1, 0.5, 1.5):
            if kernel == "lse":
                u = 1 - ms
            else:
                arg = 1 - hf.B_DEFAULT * (1 - ms)
                u = np.where(arg > 0, -np.log(np.maximum(arg, 1e-300)) / hf.B_DEFAULT, np.inf)
            f = u - t * 0.5 * np.log1p(-ms**2)
            kern = hf.LSE() if kernel == "lse" else hf.LSR()
            m_star = float(hf.retrieval_overlap(t, kern))
            assert m_star == pytest.approx(ms[np.argmin(f)], abs=2e-3)
            assert float(hf.retrieval_free_energy(t, kern)) == pytest.approx(f.min(), abs=1e-5)


def test_boundaries_monotone_and_lsr_region_contains_alpha_th():
    temps = jnp.linspace(0.01, 3.0, 50)
    for density in ("gaussian", "exact"):
        lse = np.asarray(hf.retrieval_boundary(temps, hf.LSE(), density))
        assert np.all(np.diff(lse) <= 1e-7)  # LSE: critical line at every load, falling with T
        assert lse[-1] > 0  # ...and it exists at every T: alpha_c > 0
        lsr = np.asarray(hf.retrieval_boundary(temps, hf.LSR(), density))
        assert np.all(lsr >= float(hf.alpha_th(hf.B_DEFAULT, density)) - 1e-7)


def test_exact_tail_counts_match_direct_sampling():
    n, m = 15, 200_000
    x = hf.sample_patterns(jax.random.key(11), n, 1)[0]
    pats = hf.sample_patterns(jax.random.key(12), n, m)
    phi = np.asarray(pats @ x / n)
    for t in (0.3, 0.5, 0.7):
        count = int((phi > t).sum())
        want = float(hf.expected_tail_count(t, n, m, "exact"))
        assert abs(count - want) < 4 * math.sqrt(want) + 1, (t, count, want)
    # The Gaussian approximation is visibly off in the tail at this N.
    t = 0.7
    gauss = float(hf.expected_tail_count(t, n, m, "gaussian"))
    assert abs(int((phi > t).sum()) - gauss) > 4 * math.sqrt(gauss)


# ---------------------------------------------------------------- init / step


def test_constant_temperature_schedule_equals_metropolis(patterns):
    # init/step driven by hand with the same key splits and a (constant) annealing
    # schedule reproduce metropolis exactly; the schedule is the user's, per step.
    cfg = hf.MetropolisConfig(n_equil=12, n_sample=8)
    key, target, kern = jax.random.key(21), 4, hf.LSR()
    want = hf.metropolis(key, patterns, target, 0.4, kern, cfg)

    @jax.jit
    def chain(key, schedule):
        k_init, k_eq, k_samp = jax.random.split(key, 3)
        state = hf.init(k_init, patterns, target, kern, cfg)

        def eq(state, kt):
            k, t = kt
            return hf.step(k, state, patterns, t, kern, adapt_rate=cfg.adapt_rate,
                           target_acceptance=cfg.target_acceptance)[0], None

        def samp(state, kt):
            k, t = kt
            state, info = hf.step(k, state, patterns, t, kern)
            return state, info.is_accepted

        state, _ = jax.lax.scan(eq, state, (jax.random.split(k_eq, 12), schedule[:12]))
        state, acc = jax.lax.scan(samp, state, (jax.random.split(k_samp, 8), schedule[12:]))
        return state, acc.mean()

    state, acc = chain(key, jnp.full(20, 0.4))
    np.testing.assert_allclose(np.asarray(state.position), np.asarray(want.final_state),
                               rtol=1e-6, atol=1e-6)
    assert float(state.energy) == pytest.approx(float(want.final_energy), rel=1e-5)
    assert float(acc) == pytest.approx(float(want.acceptance))
    # An annealing schedule (hot to cold) runs through the same step and ends retrieved.
    state, _ = chain(key, jnp.geomspace(2.0, 0.05, 20))
    assert np.isfinite(float(state.energy))


def test_continued_chain_stays_on_the_sphere(patterns):
    state = hf.init(jax.random.key(0), patterns, 1, hf.LSE())
    for k in jax.random.split(jax.random.key(1), 3):
        state, info = hf.step(k, state, patterns, 0.2, hf.LSE())
        assert 0.0 <= float(info.acceptance_probability) <= 1.0
    assert float(jnp.linalg.norm(state.position)) == pytest.approx(math.sqrt(N), rel=1e-5)


# ---------------------------------------------------------------- bad input


def test_bad_input_raises_clear_errors(patterns):
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="n must be >= 2"):
        hf.sample_patterns(key, 1, 5)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        hf.num_patterns(0.0, 10)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        hf.metropolis(key, patterns, 0, -0.1)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        hf.alpha_c(-1.0)
    with pytest.raises(ValueError, match="b must be > 1"):
        hf.alpha_th(1.0)
    with pytest.raises(ValueError, match="b must be > 1"):
        hf.LSR(0.5)
    with pytest.raises(ValueError, match="beta must be > 0"):
        hf.LSE(jnp.array([1.0, -1.0]))
    bad = patterns.at[3, 2].set(jnp.nan)
    with pytest.raises(ValueError, match="patterns must be finite, got 1 NaN"):
        hf.metropolis(key, bad, 0, 0.5)
    with pytest.raises(ValueError, match="patterns must have 2 dimensions"):
        hf.metropolis(key, patterns[0], 0, 0.5)
    with pytest.raises(ValueError, match=r"patterns must have shape \(\*, 12\)"):
        hf.energy(patterns[0], patterns[:, :5])
    with pytest.raises(TypeError, match="kernel must be a hopfield kernel module"):
        hf.energy(patterns[0], patterns, "lse")
    with pytest.raises(ValueError, match="target must be <= 39"):
        hf.metropolis(key, patterns, 40, 0.5)
    with pytest.raises(TypeError, match="key must be a jax.random key"):
        hf.metropolis(0, patterns, 0, 0.5)
    with pytest.raises(TypeError, match="config must be a hf.MetropolisConfig"):
        hf.metropolis(key, patterns, 0, 0.5, hf.LSE(), {"n_equil": 3})


def test_empty_patterns_say_so(patterns):
    # Was: "target must be <= -1".
    with pytest.raises(ValueError, match=r"patterns must hold at least one pattern \(M >= 1\)"):
        hf.metropolis(jax.random.key(0), patterns[:0], 0, 0.5)


def test_patterns_off_the_sphere_are_refused(patterns):
    # Unit-norm patterns ran silently with alignment ~0.02.
    unit = patterns / math.sqrt(N)
    with pytest.raises(ValueError, match="patterns must lie on the sphere of radius sqrt"):
        hf.metropolis(jax.random.key(0), unit, 0, 0.5)
    with pytest.raises(Exception, match="patterns must lie on the sphere"):
        jax.block_until_ready(eqx.filter_jit(
            lambda p: hf.metropolis(jax.random.key(0), p, 0, 0.5,
                                    config=hf.MetropolisConfig(n_equil=2, n_sample=2)))(unit))


def test_traced_bad_values_raise_inside_jit_and_vmap(patterns):
    cfg = hf.MetropolisConfig(n_equil=2, n_sample=2)
    run = eqx.filter_jit(eqx.filter_vmap(
        lambda t, T: hf.metropolis(jax.random.key(0), patterns, t, T, hf.LSE(), cfg)))
    # A target >= M used to be clamped silently by the gather.
    with pytest.raises(Exception, match=r"target must be in 0..39"):
        jax.block_until_ready(run(jnp.array([0, 40]), jnp.array([0.5, 0.5])))
    with pytest.raises(Exception, match="temperature must be > 0"):
        jax.block_until_ready(run(jnp.array([0, 1]), jnp.array([0.5, -0.5])))
