"""Tests for the pseudo-spectral PDE generators.

Compilation dominates on 2 cores, so the tests share a few compiled programs:
every float32 1-D solve is ``n = 32`` with 200 steps saved every 50 (Burgers and
KS share one program, their coefficients are traced), every 2-D Navier-Stokes
solve is ``16 x 16`` with 20 steps saved every 10, every wave solve 401 frames.
Checks on the outputs run in NumPy.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.data import pde

KEY = jax.random.key(0)
N1 = 32  # 1-D grid
STEPS_1D = dict(n_steps=200, save_every=50)  # 5 frames
N2 = 16  # 2-D grid
STEPS_NS = dict(n_steps=20, save_every=10)  # 3 frames


def _np(x):
    return np.asarray(x, np.float64)


def _rel(a, b):
    a, b = _np(a), _np(b)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def wave_run():
    """A random wave with non-zero initial velocity, 401 frames up to t = 100."""
    u0, v0 = pde.wave_initial_condition(jax.random.key(1), N2, velocity="bump")
    u, v = pde.wave_2d(u0, v0, n_steps=400)
    return u0, v0, u, v


@pytest.fixture(scope="module")
def ns_data():
    """256 FNO Navier-Stokes trajectories on 16 x 16, frames at t = 0, 0.25, 0.5.

    Frame 0 holds 256 samples of the initial-vorticity GRF (one compiled program
    for the GRF statistics and the dataset tests).
    """
    return pde.navier_stokes_dataset(KEY, 256, N2, 3, snapshot_dt=0.25, inner_dt=0.025)


@pytest.fixture(scope="module")
def grf_samples(ns_data):
    return _np(ns_data[:, 0])


@pytest.fixture(scope="module")
def ns_w0(ns_data):
    return ns_data[:3, 0]


def _ns(w0, **kw):
    """Navier-Stokes with an explicit forcing array (one compiled program)."""
    forcing = kw.pop("forcing", np.zeros((N2, N2), np.float32))
    return pde.navier_stokes_2d(w0, forcing=jnp.asarray(forcing, jnp.float32), **STEPS_NS, **kw)


# ---------------------------------------------------------------- grids


def test_grids_nest_and_subsample_matches_coarse_grid():
    g64 = _np(pde.grid_2d(64, 2.0, origin=-1.0))
    g32 = _np(pde.grid_2d(32, 2.0, origin=-1.0))
    assert g64.shape == (64, 64, 2)
    np.testing.assert_allclose(g64[::2, ::2], g32, atol=1e-6)
    x = _np(pde.grid_1d(12, 3.0))
    np.testing.assert_allclose(np.diff(x), 0.25, rtol=1e-6)
    assert x[0] == 0.0 and x[-1] < 3.0  # periodic: the point x = L is not stored

    def f(g):
        return np.sin(np.pi * g[..., 0]) * np.cos(2 * np.pi * g[..., 1])

    batch = np.stack([f(g64), 2 * f(g64)])  # (b, n, n)
    np.testing.assert_allclose(
        _np(pde.subsample(jnp.asarray(batch), 2)), np.stack([f(g32), 2 * f(g32)]), atol=1e-12
    )


# ---------------------------------------------------------------- wave


def test_wave_energy_conserved(wave_run):
    _, _, u, v = wave_run
    energy = _np(pde.wave_energy(u, v))
    assert u.shape == (401, N2, N2) and energy[0] > 0
    assert np.max(np.abs(energy - energy[0])) / energy[0] < 1e-5
    # Not trivially constant: energy moves between its kinetic and potential parts.
    kinetic = _np(pde.wave_energy(jnp.zeros_like(u), v))
    assert kinetic.max() - kinetic.min() > 0.1 * energy[0]


def test_wave_single_mode_exact():
    length, c = 2.0, 1.0 / 16.0
    g = _np(pde.grid_2d(N2, length))
    kx, ky = 2 * math.pi * 3 / length, 2 * math.pi * 1 / length
    phase = kx * g[..., 0] + ky * g[..., 1]
    omega = c * math.hypot(kx, ky)
    u0, v0 = np.cos(phase), 0.5 * np.sin(phase)
    u, v = pde.wave_2d(
        jnp.asarray(u0, jnp.float32),
        jnp.asarray(v0, jnp.float32),
        c=c,
        length=length,
        dt=0.25,
        n_steps=400,
    )
    t = 0.25 * np.arange(401)[:, None, None]
    u_exact = u0 * np.cos(omega * t) + v0 * np.sin(omega * t) / omega
    v_exact = -u0 * omega * np.sin(omega * t) + v0 * np.cos(omega * t)
    assert np.max(np.abs(_np(u) - u_exact)) < 2e-5
    assert np.max(np.abs(_np(v) - v_exact)) < 2e-5


def test_wave_dataset_same_trajectories_at_both_resolutions():
    # The bump is sampled from its continuous formula, so a 32-grid dataset and a
    # 16-grid one hold the same trajectories: what a super-resolution test needs.
    # Trajectory i depends on (key, i) only, so batching (lax.map) does not change it.
    fine = pde.wave_dataset(KEY, 3, 32, 6)
    coarse = pde.wave_dataset(KEY, 3, 16, 6, batch_size=2)
    assert fine.shape == (3, 6, 32, 32) and fine.dtype == jnp.float32
    assert _rel(pde.subsample(fine, 2), coarse) < 1e-5
    # Frame 0 is the bump of trajectory 1's key (its velocity is zero, MERLIN's default).
    u0, _ = pde.wave_initial_condition(jax.random.fold_in(KEY, 1), 16, velocity="bump")
    np.testing.assert_allclose(_np(coarse[1, 0]), _np(u0), atol=1e-6)


def test_wave_initial_condition_ranges_and_determinism():
    u0, v0 = pde.wave_initial_condition(jax.random.key(3), N2, velocity="bump")
    # Peak A exp(-d^2 / 2r^2) with A in [2, 4], r >= 0.25, d <= half a grid diagonal;
    # the velocity bump has amplitude 0.5 and width 0.3.
    lower = math.exp(-2 * (1.0 / N2) ** 2 / (2 * 0.25**2))
    assert 2.0 * lower <= float(u0.max()) <= 4.0 + 1e-5
    assert 0.5 * lower <= float(v0.max()) <= 0.5 + 1e-6 and float(v0.min()) > 0
    again, _ = pde.wave_initial_condition(jax.random.key(3), N2, velocity="bump")
    np.testing.assert_array_equal(_np(u0), _np(again))
    other, _ = pde.wave_initial_condition(jax.random.key(4), N2, velocity="bump")
    assert np.max(np.abs(_np(u0) - _np(other))) > 0.1


# ---------------------------------------------------------------- Burgers


def test_burgers_cole_hopf_exact_solution():
    # phi = a + e^{-nu t} cos x solves phi_t = nu phi_xx, so u = -2 nu phi_x / phi
    # solves u_t + u u_x = nu u_xx exactly (Cole-Hopf).
    nu, a = 0.1, 2.0
    x = _np(pde.grid_1d(N1))

    def exact(t):
        e = math.exp(-nu * t)
        return 2 * nu * e * np.sin(x) / (a + e * np.cos(x))

    u = pde.burgers_1d(jnp.asarray(exact(0.0), jnp.float32), nu=nu, dt=0.01, **STEPS_1D)
    assert u.shape == (5, N1)
    for i in range(5):
        assert _rel(u[i], exact(0.5 * i)) < 2e-5


def test_burgers_heat_limit_single_mode():
    nu, m, eps = 0.05, 3, 1e-4
    x = _np(pde.grid_1d(N1))
    u0 = eps * np.sin(m * x)
    u = pde.burgers_1d(jnp.asarray(u0, jnp.float32), nu=nu, dt=0.01, **STEPS_1D)
    for i in range(5):
        assert _rel(u[i], math.exp(-nu * m**2 * 0.5 * i) * u0) < 1e-3


def test_burgers_vmap_over_viscosity_equals_loop():
    x = _np(pde.grid_1d(N1))
    u0 = jnp.asarray(np.sin(x) + 0.5 * np.cos(2 * x), jnp.float32)
    nus = (0.05, 0.1, 0.2)
    swept = jax.vmap(lambda nu: pde.burgers_1d(u0, nu=nu, dt=0.01, **STEPS_1D))(jnp.array(nus))
    for i, nu in enumerate(nus):
        np.testing.assert_allclose(
            _np(swept[i]), _np(pde.burgers_1d(u0, nu=nu, dt=0.01, **STEPS_1D)), atol=1e-6
        )


def test_blow_up_raises_instead_of_returning_nan():
    x = _np(pde.grid_1d(N1))
    u0 = jnp.asarray(50.0 * np.sin(x), jnp.float32)
    with pytest.raises(Exception, match="non-finite"):
        pde.burgers_1d(u0, nu=0.0, dt=1.0, **STEPS_1D).block_until_ready()


# ---------------------------------------------------------------- Kuramoto-Sivashinsky


def test_ks_linear_limit_growth_and_decay_rates():
    # Small amplitude: each mode evolves as exp((k^2 - k^4) t). On [0, 16 pi),
    # k = m / 8: m = 4 grows (k = 0.5), m = 10 decays (k = 1.25).
    length, eps = 16 * math.pi, 1e-6
    x = _np(pde.grid_1d(N1, length))
    for m in (4, 10):
        k = m / 8
        u0 = eps * np.cos(k * x)
        u = pde.kuramoto_sivashinsky_1d(
            jnp.asarray(u0, jnp.float32), length=length, dt=0.01, **STEPS_1D
        )
        assert _rel(u[-1], math.exp((k**2 - k**4) * 2.0) * u0) < 1e-3


def test_ks_conserves_mean_and_stays_on_bounded_attractor():
    length = 22.0
    x = _np(pde.grid_1d(N1, length))
    u0 = np.cos(2 * np.pi * x / length) * (1 + np.sin(2 * np.pi * x / length)) + 0.3
    u = _np(
        pde.kuramoto_sivashinsky_1d(
            jnp.asarray(u0, jnp.float32), length=length, dt=0.25, **STEPS_1D
        )
    )
    np.testing.assert_allclose(u.mean(axis=1), 0.3, atol=1e-5)
    # Chaotic, neither decaying nor blowing up: |u| ~ 2-3 on the L = 22 attractor.
    assert 0.5 < np.abs(u[-1] - 0.3).max() < 10.0


def _ks16_x64(u0, dt):
    return pde.kuramoto_sivashinsky_1d(u0, length=22.0, dt=dt, n_steps=128)


def test_etdrk4_is_fourth_order_in_the_nonstiff_regime():
    # n = 16 on L = 22 keeps |L dt| small, where ETDRK4 has its classical order 4
    # (with n >= 32 the k^4 term makes it stiff and the observed order drops to
    # ~3, the order reduction Hochbruck & Ostermann 2005 analyse).
    with jax.enable_x64(True):
        x = pde.grid_1d(16, 22.0, dtype=jnp.float64)
        u0 = jnp.cos(2 * math.pi * x / 22.0) * (1 + jnp.sin(2 * math.pi * x / 22.0))
        ref = _np(_ks16_x64(u0, 1 / 64)[128])  # t = 2
        err = [np.max(np.abs(_np(_ks16_x64(u0, dt)[int(2 / dt)]) - ref)) for dt in (0.25, 0.125)]
        assert 3.7 < math.log2(err[0] / err[1]) < 4.4, err


def test_ks_gradient_matches_finite_differences():
    with jax.enable_x64(True):
        x = pde.grid_1d(16, dtype=jnp.float64)

        def loss(a):
            u = pde.kuramoto_sivashinsky_1d(a * jnp.sin(x), length=22.0, dt=0.01, n_steps=128)
            return jnp.sum(u[-1] ** 2)

        a, h = 0.7, 1e-5
        fd = (loss(a + h) - loss(a - h)) / (2 * h)
        assert float(jax.grad(loss)(a)) == pytest.approx(float(fd), rel=1e-6)


# ---------------------------------------------------------------- Navier-Stokes


def test_ns_taylor_green_vortex_decays_exactly():
    nu = 0.01
    g = _np(pde.grid_2d(N2))
    w0 = 2.0 * np.sin(2 * np.pi * g[..., 0]) * np.sin(2 * np.pi * g[..., 1])
    w = _ns(jnp.asarray(w0, jnp.float32), nu=nu, dt=0.1)
    for i, t in enumerate((0.0, 1.0, 2.0)):
        assert _rel(w[i], w0 * math.exp(-8 * math.pi**2 * nu * t)) < 1e-5


def test_ns_manufactured_steady_state_checks_advection_sign():
    # w_s = sin(2 pi x) + cos(4 pi y): psi = sin(2 pi x)/(4 pi^2) + cos(4 pi y)/(16 pi^2),
    # u = d_y psi = -sin(4 pi y)/(4 pi), v = -d_x psi = -cos(2 pi x)/(2 pi), so
    # u . grad w = 1.5 cos(2 pi x) sin(4 pi y); with f = u . grad w - nu Lap w, w_s is steady.
    nu = 1e-3
    g = _np(pde.grid_2d(N2))
    x, y = g[..., 0], g[..., 1]
    w_s = jnp.asarray(np.sin(2 * np.pi * x) + np.cos(4 * np.pi * y), jnp.float32)
    adv = 1.5 * np.cos(2 * np.pi * x) * np.sin(4 * np.pi * y)
    visc = nu * (4 * np.pi**2 * np.sin(2 * np.pi * x) + 16 * np.pi**2 * np.cos(4 * np.pi * y))
    w = _ns(w_s, nu=nu, dt=0.05, forcing=adv + visc)
    assert _rel(w[-1], w_s) < 1e-4
    # With the advection's sign flipped, the same state is far from steady.
    w_wrong = _ns(w_s, nu=nu, dt=0.05, forcing=-adv + visc)
    assert _rel(w_wrong[-1], w_s) > 0.1


def test_ns_inviscid_conserves_energy_and_enstrophy(ns_w0):
    # The 2/3-truncated 2-D Euler equations conserve energy and enstrophy of the
    # retained modes exactly in space; what remains is ETDRK4's time error.
    w = _np(_ns(10.0 * ns_w0[0], nu=0.0, dt=0.025))
    m = np.fft.fftfreq(N2, 1.0 / N2)
    k2 = (2 * np.pi) ** 2 * (m[:, None] ** 2 + m[None, :] ** 2)
    keep = (3 * np.abs(m) < N2)[:, None] & (3 * np.abs(m) < N2)[None, :]
    power = np.abs(np.fft.fft2(w) * keep) ** 2
    enstrophy = power.sum(axis=(1, 2))
    energy = np.where(k2 > 0, power / np.where(k2 > 0, k2, 1.0), 0.0).sum(axis=(1, 2))
    assert _rel(w[-1], w[0]) > 0.3  # the flow did evolve
    assert abs(energy[-1] / energy[0] - 1) < 1e-5
    assert abs(enstrophy[-1] / enstrophy[0] - 1) < 1e-5


def test_ns_basdevant_form_equals_direct_advection(grf_samples):
    with jax.enable_x64(True):
        kx, ky = pde._k2d(N2, 1.0, jnp.float64)
        k2 = kx**2 + ky**2
        inv = jnp.where(k2 > 0, 1 / jnp.where(k2 > 0, k2, 1), 0)
        mask = pde.dealias_mask(N2)[:, None] & pde.dealias_mask(N2, real=True)[None, :]

        @jax.jit
        def both(w):
            wh = jnp.fft.rfft2(w)
            return tuple(
                pde._ns_advection(wh, kx, ky, inv, mask, N2, form)
                for form in ("direct", "basdevant")
            )

        a, b = (np.asarray(z) for z in both(jnp.asarray(grf_samples[0], jnp.float64)))
        assert np.max(np.abs(a)) > 0.1
        assert np.max(np.abs(a - b)) / np.max(np.abs(a)) < 1e-12


def test_ns_mean_vorticity_conserved_with_fno_forcing(ns_w0):
    w = _np(_ns(ns_w0[1] + 0.5, forcing=pde.fno_forcing(N2)))
    np.testing.assert_allclose(w.mean(axis=(1, 2)), 0.5, atol=1e-5)
    assert _rel(w[-1], w[0]) > 1e-3


def test_ns_jit_vmap_equals_eager_loop(ns_w0):
    batched = jax.jit(jax.vmap(lambda w: pde.navier_stokes_2d(w, **STEPS_NS)))(ns_w0)
    assert batched.shape == (3, 3, N2, N2)
    for i in range(3):  # eagerly, with the FNO forcing spelled out (what None means)
        np.testing.assert_allclose(
            _np(batched[i]), _np(_ns(ns_w0[i], forcing=pde.fno_forcing(N2))), atol=1e-5
        )


def test_ns_dataset_keys_and_frames(ns_data):
    d = ns_data
    assert d.shape == (256, 3, N2, N2) and d.dtype == jnp.float32
    # Frame 0 is the GRF of trajectory i's own key; frame j is that field at t = 0.25 j
    # under the FNO forcing (what forcing=None means).
    w0 = pde.gaussian_random_field_2d(jax.random.fold_in(KEY, 1), N2)
    np.testing.assert_allclose(_np(d[1, 0]), _np(w0), atol=1e-6)
    np.testing.assert_allclose(
        _np(d[1]), _np(_ns(w0, dt=0.025, forcing=pde.fno_forcing(N2))), atol=1e-5
    )
    assert _rel(d[1, -1], d[1, 0]) > 1e-3


def test_1d_datasets_match_the_solvers_after_burn_in():
    # Both datasets skip t in [0, 0.5) and then save every 0.5 (one compiled program).
    kw = dict(snapshot_dt=0.5, inner_dt=0.01, n_modes=4, amplitude=0.5)
    ks = pde.ks_dataset(KEY, 2, N1, 4, length=22.0, burn_in=0.5, **kw)
    burgers = pde.burgers_dataset(KEY, 2, N1, 4, nu=0.1, t_start=0.5, **kw)
    assert ks.shape == burgers.shape == (2, 4, N1)
    u0 = pde.random_field_1d(jax.random.fold_in(KEY, 1), N1, n_modes=4, amplitude=0.5)
    # Frames t = 0, 0.5, ..., 2 of trajectory 1 from its own initial condition.
    ref_ks = pde.kuramoto_sivashinsky_1d(u0, length=22.0, dt=0.01, **STEPS_1D)
    ref_burgers = pde.burgers_1d(u0, nu=0.1, dt=0.01, **STEPS_1D)
    np.testing.assert_allclose(_np(ks[1]), _np(ref_ks[1:]), atol=1e-5)
    np.testing.assert_allclose(_np(burgers[1]), _np(ref_burgers[1:]), atol=1e-5)
    assert _rel(ks[0, 0], ks[1, 0]) > 0.1  # different keys, different trajectories


# ---------------------------------------------------------------- random fields


def test_grf_mean_zero_variance_determinism_and_periodicity(grf_samples):
    fields = grf_samples
    alpha, tau = 2.5, 7.0
    sd = fields.std()
    assert np.max(np.abs(fields.mean(axis=(1, 2)))) < 1e-5 * sd
    # Pointwise variance sum_{k != 0} 2 sigma^2 (|k|^2 + tau^2)^(-alpha), sigma = tau^(alpha-1).
    m = np.fft.fftfreq(N2, 1.0 / N2)
    k2 = (2 * np.pi) ** 2 * (m[:, None] ** 2 + m[None, :] ** 2)
    var = np.sum(np.where(k2 > 0, 2 * tau ** (2 * alpha - 2) * (k2 + tau**2) ** (-alpha), 0))
    assert np.mean(fields**2) == pytest.approx(var, rel=0.1)
    assert np.max(np.abs(fields[0] - fields[1])) > 0.1 * sd
    # Periodic: across the wrap the field jumps no more than between interior neighbours.
    for axis in (1, 2):
        interior = np.abs(np.diff(fields, axis=axis)).max(axis=(1, 2))
        wrap = np.abs(np.take(fields, 0, axis) - np.take(fields, -1, axis)).max(axis=1)
        assert np.mean(wrap <= interior) > 0.9


def test_random_field_1d_modes_mean_and_amplitude():
    u = _np(pde.random_field_1d(jax.random.key(8), N1, n_modes=4, amplitude=0.5))
    assert abs(u.mean()) < 1e-6
    assert np.sqrt(np.mean(u**2)) == pytest.approx(0.5, rel=1e-5)
    spec = np.abs(np.fft.rfft(u))
    assert spec[5:].max() < 1e-5 * spec.max() and spec[4] > 0


# ---------------------------------------------------------------- errors


def test_clear_errors_naming_the_argument():
    w = jnp.zeros((N2, N2))
    with pytest.raises(ValueError, match="w0 must be a square"):
        pde.navier_stokes_2d(jnp.zeros((N2, 8)), n_steps=1)
    with pytest.raises(ValueError, match="nu must be >= 0"):
        pde.navier_stokes_2d(w, nu=-1e-3, n_steps=1)
    with pytest.raises(ValueError, match="dt must be > 0"):
        pde.burgers_1d(jnp.zeros(N1), dt=-0.1, n_steps=1)
    with pytest.raises(ValueError, match="n_steps must be >= 1"):
        pde.kuramoto_sivashinsky_1d(jnp.zeros(N1), n_steps=0)
    with pytest.raises(ValueError, match="save_every must divide n_steps"):
        pde.burgers_1d(jnp.zeros(N1), n_steps=10, save_every=3)
    with pytest.raises(ValueError, match="u0 must be finite"):
        pde.wave_2d(w.at[3, 4].set(jnp.nan), n_steps=1)
    with pytest.raises(ValueError, match="w0 must be finite"):
        pde.navier_stokes_2d(w.at[0, 0].set(jnp.inf), n_steps=1)
    with pytest.raises(TypeError, match="u0 must have a floating dtype"):
        pde.burgers_1d(jnp.zeros(N1, jnp.int32), n_steps=1)
    with pytest.raises(ValueError, match="v0 must have the shape of u0"):
        pde.wave_2d(w, jnp.zeros((8, 8)), n_steps=1)
    with pytest.raises(ValueError, match="forcing must be"):
        pde.navier_stokes_2d(w, forcing=jnp.zeros((8, 8)), n_steps=1)
    with pytest.raises(ValueError, match="inner_dt must divide snapshot_dt"):
        pde.navier_stokes_dataset(KEY, 1, N2, 2, snapshot_dt=1.0, inner_dt=0.3)
    with pytest.raises(ValueError, match="factor must divide"):
        pde.subsample(jnp.zeros((2, 6, 6)), 4)
    with pytest.raises(TypeError, match="key must be a jax.random key"):
        pde.gaussian_random_field_2d(0, N2)
    with pytest.raises(ValueError, match="n_modes must be <= 15"):
        pde.random_field_1d(KEY, N1, n_modes=16)
