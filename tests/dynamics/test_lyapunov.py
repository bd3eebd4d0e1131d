import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.common import bounds as bd
from jaxsci.core import RESULTS
from jaxsci.dynamics import lyapunov as ly
from jaxsci.dynamics.lyapunov import certificates as ct
from jaxsci.dynamics.lyapunov import systems as sysm
from jaxsci.dynamics.lyapunov import train as tr
from jaxsci.dynamics.lyapunov import verify as vf

# --------------------------------------------------------------------------- bounds

ACTS = (bd.IDENTITY, bd.RELU, bd.SQUARE, bd.TANH, bd.SIN, bd.ABS)
WIDTHS = (4, 8, 8, 3)
FAST = {"xla_backend_optimization_level": 0}  # compile time dominates these tiny programs


def _random_program(key, acts_pool=ACTS):
    """A 3-layer program with a fixed activation pattern and random weights."""
    rng = np.random.default_rng(0)
    layers = []
    ks = jax.random.split(key, 2 * len(WIDTHS))
    for i in range(1, len(WIDTHS)):
        W = jax.random.normal(ks[2 * i], (WIDTHS[i], WIDTHS[i - 1])) / np.sqrt(WIDTHS[i - 1])
        b = 0.3 * jax.random.normal(ks[2 * i + 1], (WIDTHS[i],))
        last = i == len(WIDTHS) - 1
        act = (bd.IDENTITY,) * WIDTHS[i] if last else tuple(
            int(a) for a in rng.choice(acts_pool, WIDTHS[i]))
        layers.append(bd.Layer(W, b, act))
    return bd.Program(tuple(layers))


def _stack(programs):
    return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *programs)


@pytest.fixture(scope="module")
def random_cases():
    """20 random programs (one structure) and boxes, bounded by one compiled call."""
    progs = _stack([_random_program(jax.random.key(s)) for s in range(20)])
    k1, k2, k3 = jax.random.split(jax.random.key(99), 3)
    c = jax.random.normal(k1, (20, WIDTHS[0]))
    r = jax.random.uniform(k2, (20, WIDTHS[0]), minval=0.05, maxval=1.5)
    lo, hi = c - r, c + r

    @jax.jit(compiler_options=FAST)
    def bounds(progs, lo, hi):
        def one(p, lo, hi):
            ib = bd.ibp(p, lo, hi)
            cr = bd.crown(p, lo, hi)
            return ib.lower, ib.upper, cr.lower, cr.upper

        return jax.vmap(one)(progs, lo, hi)

    u = lo[:, None] + (hi - lo)[:, None] * jax.random.uniform(k3, (20, 4000, WIDTHS[0]))
    u = jnp.concatenate([u, lo[:, None], hi[:, None]], 1)  # corners of the box too
    y = jax.vmap(bd.apply)(progs, u)
    return progs, lo, hi, bounds, bounds(progs, lo, hi), y


def test_ibp_and_crown_contain_sampled_outputs(random_cases):
    *_, (il, iu, cl, cu), y = random_cases
    for lower, upper in ((il, iu), (cl, cu)):
        assert bool(jnp.all(y >= lower[:, None])), "a sampled output is below the bound"
        assert bool(jnp.all(y <= upper[:, None])), "a sampled output is above the bound"


def test_crown_at_least_as_tight_as_ibp(random_cases):
    *_, (il, iu, cl, cu), _ = random_cases
    assert bool(jnp.all(cl >= il)) and bool(jnp.all(cu <= iu))
    # And strictly tighter on average: linear relaxation keeps correlations IBP loses.
    ratio = float(jnp.mean((cu - cl) / (iu - il)))
    assert ratio < 0.8, ratio


# jit == eager and vmap == loop of ibp/crown/simulate: tests/cases/lyapunov.py.


def test_degenerate_box_contains_float64_value():
    """Rounding pads: a point box must contain the float64 value of the real function."""
    p = _random_program(jax.random.key(3))
    x = np.array([0.3, -1.2, 0.7, 2.1], np.float32)
    h = x.astype(np.float64)
    fns = {bd.IDENTITY: lambda z: z, bd.RELU: lambda z: np.maximum(z, 0), bd.SQUARE: np.square,
           bd.TANH: np.tanh, bd.SIN: np.sin, bd.ABS: np.abs}
    for layer in p.layers:
        z = np.asarray(layer.W, np.float64) @ h + np.asarray(layer.b, np.float64)
        h = np.array([fns[a](v) for a, v in zip(layer.act, z, strict=True)])
    for b in (bd.ibp(p, jnp.asarray(x), jnp.asarray(x)), bd.crown(p, jnp.asarray(x),
                                                                   jnp.asarray(x))):
        assert np.all(np.asarray(b.lower, np.float64) <= h)
        assert np.all(np.asarray(b.upper, np.float64) >= h)


def test_periodic_and_saturating_relaxations_on_wide_intervals():
    prog = bd.compose(bd.affine(jnp.eye(2)), bd.elementwise(("sin", "tanh")))
    lo, hi = jnp.array([-9.0, -30.0]), jnp.array([4.0, 25.0])
    b = jax.jit(bd.crown, compiler_options=FAST)(prog, lo, hi)
    u = lo + (hi - lo) * jax.random.uniform(jax.random.key(0), (20000, 2))
    y = prog(u)
    assert bool(jnp.all(y >= b.lower)) and bool(jnp.all(y <= b.upper))
    np.testing.assert_allclose(np.asarray(b.upper), [1.0, 1.0], atol=1e-5)


def test_program_combinators():
    A = bd.affine(jnp.array([[1.0, 2.0], [0.0, -1.0]]), jnp.array([0.5, 0.0]))
    sq = bd.elementwise(("square", "relu"))
    p = bd.parallel(bd.compose(A, sq), bd.identity(2))
    x = jnp.array([0.3, -0.4])
    z = np.array([0.3 - 0.8 + 0.5, 0.4])
    np.testing.assert_allclose(np.asarray(p(x)), [z[0] ** 2, z[1], 0.3, -0.4], rtol=1e-6)
    with pytest.raises(ValueError, match="takes"):
        bd.compose(A, bd.identity(3))


def test_box_errors_name_the_argument():
    p = bd.identity(2)
    with pytest.raises(ValueError, match="empty domain"):
        bd.crown(p, jnp.array([0.0, 1.0]), jnp.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="lower must have shape"):
        bd.ibp(p, jnp.zeros(3), jnp.ones(3))
    with pytest.raises(ValueError, match="empty domain"):
        vf.branch_and_bound(None, np.array([1.0]), np.array([0.0]), 1, np.zeros(0),
                            vf.VerifyConfig())


def test_bab_splits_other_coordinates_when_the_steepest_is_exhausted():
    """A box is unknown only when no coordinate can be halved: here the linear bound is
    steepest along x0 (always the top split score), but only narrowing x1 proves the
    condition; once x0 reaches the minimum width, x1 must be split instead."""
    def bound_fn(lo, hi):
        B, n = lo.shape
        ub = ((hi[:, 1] - lo[:, 1]) - 0.3)[:, None]  # proven once x1 is <= 0.3 wide
        coef = np.tile(np.array([1e6, 0.0], np.float32), (B, 1))
        pts = np.stack([0.5 * (lo + hi), lo], 1)
        vals = -np.ones((B, 2, 1), np.float32)  # no point violates: nothing is falsified
        empty = np.zeros((B, 0), np.float32)
        return ub, empty, empty, coef, np.zeros((B, 0, n), np.float32), pts, vals

    cfg = vf.VerifyConfig(batch=64, max_boxes=10_000, min_width=0.05)
    r = vf.branch_and_bound(bound_fn, -np.ones(2), np.ones(2), 1, np.zeros(0), cfg)
    assert r.certified and r.unknown_fraction == 0.0
    assert r.certified_fraction == pytest.approx(1.0)
    # x0 halved 5 times (2 -> 0.0625 < 0.1), then x1 3 times (2 -> 0.25): 2^8 leaves.
    assert r.boxes == 2 ** 9 - 1


# --------------------------------------------------------------------------- systems


@pytest.mark.parametrize("make", [ly.platoon, ly.drone_formation, ly.microgrid])
def test_systems_simulate_stably(make):
    s = make(3)
    od, ld = ly.random_delays(jax.random.key(0), 200, s)
    x0 = 0.5 * s.state_box
    traj = ly.simulate(s, x0, jnp.zeros((200, 3, 1)), od, ld)
    assert float(jnp.abs(traj[-1]).max()) < 1e-2 * float(jnp.abs(x0).max()), s.name


def test_monolithic_matches_compositional_under_a_common_delay():
    for make in (ly.platoon,):  # delayed own and neighbour states: every slot kind
        s = make(3)
        od, _ = ly.random_delays(jax.random.key(0), 40, s)
        x0 = 0.5 * s.state_box
        # One certificate over all states sees the same system under a common delay.
        mono = ly.monolithic(s)
        common = jnp.broadcast_to(od[:, :1], od.shape)
        w = 0.05 * jnp.ones((40, 3, 1))
        a = ly.simulate(s, x0, w, common[:40], jnp.broadcast_to(common[:40, :, None],
                                                              (40, 3, s.K)))
        b = ly.simulate(mono, x0.reshape(1, -1), w.reshape(40, 1, 3), common[:40, :1],
                        jnp.zeros((40, 1, 0), jnp.int32))
        np.testing.assert_allclose(np.asarray(a).reshape(41, -1), np.asarray(b).reshape(41, -1),
                                   atol=1e-5)


def test_platoon_closed_loop_matches_hand_written_model():
    """The ridge program encodes e+ = e + T (eps - t_h a_i), eps+ = eps + T (a_{i-1} - a_i + w)."""
    s = ly.platoon(2, dt=0.2, heterogeneity=0.0)
    T, th, s0 = 0.2, 1.5, 3.0
    u = jnp.array([0.7, -0.3, 0.2, 0.1, -1.1, 0.4, 0.05])
    e, eps, de, deps, ep, epsp, w = (float(v) for v in u)
    a_hdv = 0.2 * s0 * np.tanh((e - de) / s0) + 0.8 * (eps - deps)  # vehicle 1: HDV
    a_cav = 0.5 * ep + 0.7 * epsp  # predecessor (vehicle 0): CAV on its delayed state
    want = [e + T * (eps - th * a_hdv), eps + T * (a_cav - a_hdv + w)]
    prog = s.build(jax.tree_util.tree_map(lambda a: a[1], s.params))
    np.testing.assert_allclose(np.asarray(prog(u)), want, rtol=1e-5)


def test_system_errors_name_the_argument():
    s = ly.linear_chain(2)
    with pytest.raises(ValueError, match="max_delay must be >= 0"):
        ly.linear_chain(2, max_delay=-1)
    with pytest.raises(ValueError, match="own_delay must be >= 0"):
        ly.simulate(s, jnp.zeros((2, 1)), jnp.zeros((5, 2, 1)), -jnp.ones((5, 2), jnp.int32),
                    jnp.zeros((5, 2, 1), jnp.int32))
    with pytest.raises(ValueError, match="link_delay must be <= max_delay"):
        ly.simulate(s, jnp.zeros((2, 1)), jnp.zeros((5, 2, 1)), jnp.zeros((5, 2), jnp.int32),
                    jnp.full((5, 2, 1), 3, jnp.int32))
    with pytest.raises(ValueError, match="x0 must have shape"):
        ly.simulate(s, jnp.zeros((2, 3)), jnp.zeros((5, 2, 1)), jnp.zeros((5, 2), jnp.int32),
                    jnp.zeros((5, 2, 1), jnp.int32))
    with pytest.raises(ValueError, match="state_box must have one row per subsystem"):
        ly.InterconnectedSystem(params={}, neighbors=jnp.zeros((3, 1), jnp.int32) - 1,
                                state_box=jnp.ones((2, 2)), build=lambda p: None, w_max=0.1,
                                max_delay=1, n_w=1)
    with pytest.raises(ValueError, match="empty domain"):
        ly.InterconnectedSystem(params={}, neighbors=-jnp.ones((2, 1), jnp.int32),
                                state_box=jnp.array([[1.0], [0.0]]), build=lambda p: None,
                                w_max=0.1, max_delay=1, n_w=1)
    bad = ly.InterconnectedSystem(params=s.params, neighbors=s.neighbors, state_box=s.state_box,
                                  build=lambda p: bd.identity(2), w_max=0.1, max_delay=1, n_w=1,
                                  own_delay=False)
    with pytest.raises(ValueError, match="build\\(params_i\\) maps"):
        sysm.local_programs(bad)
    cert = ct.init_certificate(ly.linear_chain(3), jax.random.key(0))
    with pytest.raises(ValueError, match="cert has 3 certificates"):
        ly.verify.verify(s, cert, ct.default_reach(s))


# --------------------------------------------------------------------------- certificates


CHAIN = dict(a=0.5, q=0.2, s=0.1)  # x_i+ = 0.5 x_i + 0.2 x_{i-1}^d + 0.1 w_i, |w| <= 0.1


@pytest.fixture(scope="module")
def chain():
    return ly.linear_chain(3, **CHAIN, max_delay=2)


def _quadratic(chain, a, b, c):
    n = chain.n_sub
    return ct.quadratic_certificate(chain, np.ones((n, 1, 1)), np.full(n, a), np.full((n, 1), b),
                                    np.full(n, c), lam_max=0.8)


@pytest.fixture(scope="module")
def verified(chain):
    # Cauchy-Schwarz: V_i+ <= 0.8 (0.5 V_i + 0.2 V_{i-1}^d + 0.1 w^2); with slack:
    cert = _quadratic(chain, 0.45, 0.2, 0.1)
    return cert, ly.verify.verify(chain, cert, ct.default_reach(chain),
                                  ly.VerifyConfig(batch=64))


def test_quadratic_certificate_parametrisation_round_trip(chain):
    cert = _quadratic(chain, 0.45, 0.2, 0.1)
    a, b, c = ct.gains(cert, chain)
    np.testing.assert_allclose(np.asarray(a), 0.45, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(b)[1:], 0.2, rtol=1e-5)
    assert float(b[0, 0]) == 0.0  # vehicle 0 has no neighbour
    np.testing.assert_allclose(np.asarray(c), 0.1, rtol=1e-4)
    x = jnp.array([[0.3], [-0.5], [0.9]])
    np.testing.assert_allclose(np.asarray(ct.values(cert, chain, x)), np.square(x[:, 0]),
                               rtol=1e-5)


def test_verifier_accepts_known_quadratic_certificate(verified):
    cert, res = verified
    assert res.certified and res.result == RESULTS.successful
    assert res.certified_fraction == pytest.approx(1.0)
    assert all(r.counterexamples.shape[0] == 0 for r in res.subsystems)
    # (G): Gamma = 0.45 I + 0.2 (subdiagonal): rho = 0.45, and mu certifies it.
    assert res.gains.spectral_radius == pytest.approx(0.45, abs=1e-5)
    assert res.gains.ok and res.gains.lam < 1.0


def test_verifier_rejects_non_certificate_with_true_counterexamples(chain):
    # Gains too small: at y = w = 0, V+ = 0.25 x^2 > 0.2 x^2 + eta for |x| > 0.1.
    cert = _quadratic(chain, 0.2, 0.05, 0.1)
    reach = ct.default_reach(chain)
    res = ly.verify.verify(chain, cert, reach, ly.VerifyConfig(batch=64), throw=False)
    assert not res.certified and res.result == RESULTS.not_verified
    # throw=True (the default, lineax's convention) raises the failure's message.
    with pytest.raises(Exception, match="Verification did not succeed"):  # noqa: PT011
        ly.verify.verify(chain, cert, reach, ly.VerifyConfig(batch=64))
    data = ct.local_data(cert, chain, reach)
    progs = sysm.local_programs(chain)
    found = 0
    for i, r in enumerate(res.subsystems):
        if r.counterexamples.shape[0]:
            d = jax.tree_util.tree_map(lambda a, i=i: a[i], data)
            p = jax.tree_util.tree_map(lambda a, i=i: a[i], progs)
            vals = ct.condition_values(chain, d, p, jnp.asarray(r.counterexamples),
                                       eta=cert.eta, eta_reach=cert.eta_reach)
            assert bool(jnp.all(vals[:, 0] > 0)), "reported counterexample does not violate"
            # ... at a reachable point (the falsifier's points: centre, worst vertex and
            # their projected-gradient ascents, kept only when every guard holds).
            assert bool(jnp.all(vals[:, 1:] <= ct.guard_limits(chain, d) + 1e-6))
            found += r.counterexamples.shape[0]
    assert found > 0


def test_trajectories_from_certified_set_satisfy_the_decrease(chain, verified):
    """Along closed-loop runs from {V_i <= mu_i}, V_i(x_i(k+1)) <= (Gamma M(k))_i +
    c_i w^2 + eta, with M the window maxima over [k - 2d, k], and the ISS bound holds."""
    cert, res = verified
    G, mu = res.gains.gamma, res.gains.mu
    _, _, c = ct.gains(cert, chain)
    c = np.asarray(c)
    d, steps = chain.max_delay, 60
    win = 2 * d + 1
    for seed in range(3):
        k = jax.random.key(seed)
        od, ld = ly.random_delays(k, steps, chain)
        w = chain.w_max * jax.random.uniform(jax.random.fold_in(k, 1), (steps, 3, 1),
                                             minval=-1.0, maxval=1.0)
        x0 = jnp.sqrt(jnp.asarray(mu))[:, None] * jnp.array([[0.99], [-0.99], [0.99]])
        traj = np.asarray(ly.simulate(chain, x0, w, od, ld))
        V = np.asarray(ct.values(cert, chain, jnp.asarray(traj)))  # (T+1, N)
        padded = np.concatenate([np.repeat(V[:1], 2 * d, 0), V], 0)  # constant history
        for t in range(steps):
            M = padded[t:t + win].max(0)
            rhs = G @ M + c * np.asarray(w[t, :, 0]) ** 2 + cert.eta
            assert np.all(V[t + 1] <= rhs + 1e-6), (seed, t)
        W = np.array([(padded[t:t + win] / mu).max() for t in range(steps + 1)])
        e = np.max((c * chain.w_max**2 + cert.eta) / mu)
        bound = res.gains.lam ** np.floor(np.arange(steps + 1) / win) * W[0] + e / (
            1 - res.gains.lam)
        assert np.all(W <= bound + 1e-6)
        assert np.all(V <= mu + 1e-6)  # the certified set is invariant


@eqx.filter_jit(compiler_options=FAST)
def _program_vs_direct(s, cert, reach, key):
    data = ct.local_data(cert, s, reach)
    progs = jax.vmap(s.build)(s.params)
    d = jax.tree_util.tree_map(lambda a: a[1], data)
    p = jax.tree_util.tree_map(lambda a: a[1], progs)
    u = tr.sample_domain(s, d, key, 256, cert.eta_reach)
    prog = ct.condition_program(s, d, p, eta=cert.eta, eta_reach=cert.eta_reach)
    return prog(u), ct.condition_values(s, d, p, u, eta=cert.eta, eta_reach=cert.eta_reach)


@pytest.mark.parametrize("make", [ly.platoon, ly.microgrid])
def test_condition_program_matches_direct_evaluation(make):
    """The bounded program and the training's direct evaluation are the same function
    (platoon: own delay, LP term, neighbour delayed copies; microgrid: current copies,
    two slots, sine units)."""
    s = make(3)
    cert = ct.init_certificate(s, jax.random.key(0), hidden=4, net_scale=0.5)
    reach = ct.Reach(jnp.full(3, 0.2), jnp.full(3, 0.05))
    prog, direct = _program_vs_direct(s, cert, reach, jax.random.key(1))
    np.testing.assert_allclose(np.asarray(prog), np.asarray(direct), rtol=1e-4, atol=1e-5)


def test_gain_report_collatz_wielandt():
    s = ly.drone_formation(4, bidirectional=True)
    cert = ct.init_certificate(s, jax.random.key(0))
    rep = ct.gain_report(cert, s)
    G, mu = rep.gamma, rep.mu
    assert np.all(mu > 0) and mu.max() == pytest.approx(1.0)
    assert np.all(G @ mu <= rep.lam * mu * (1 + 1e-9))
    assert rep.spectral_radius <= rep.lam + 1e-9  # rho(Gamma) <= any Collatz-Wielandt bound


def test_determinism_under_key():
    s = ly.platoon(3)
    a = ct.init_certificate(s, jax.random.key(5))
    b = ct.init_certificate(s, jax.random.key(5))
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    r1 = tr.estimate_reach(s, a, jax.random.key(1), samples=256)
    r2 = tr.estimate_reach(s, b, jax.random.key(1), samples=256)
    np.testing.assert_array_equal(np.asarray(r1.kappa), np.asarray(r2.kappa))
    d1, d2 = (ly.random_delays(jax.random.key(2), 10, s) for _ in range(2))
    np.testing.assert_array_equal(np.asarray(d1[0]), np.asarray(d2[0]))


def test_verification_is_deterministic(chain, verified):
    cert, res = verified
    again = ly.verify.verify(chain, cert, ct.default_reach(chain), ly.VerifyConfig(batch=64))
    assert [r.boxes for r in again.subsystems] == [r.boxes for r in res.subsystems]


# --------------------------------------------------------------------------- delay models


def _oscillator():
    """x(k+1) = -0.3 x(k) - 0.9 x(k - tau) + 0.1 w: poles 0.949 (complex) at tau = 1,
    -1.2 at tau = 0. Stable under the constant delay 1, not under delays in {0, 1}."""
    # u = [x, delta = x - x(k - tau), w]: -0.3 x - 0.9 (x - delta) + 0.1 w.
    return ly.InterconnectedSystem(
        params={"M": jnp.array([[[-1.2, 0.9, 0.1]]])}, neighbors=jnp.zeros((1, 0), jnp.int32),
        state_box=jnp.ones((1, 1)), build=lambda p: bd.affine(p["M"]), w_max=0.1,
        max_delay=1, n_w=1, own_delay=True, neighbor_delayed=False, name="oscillator")


@pytest.fixture(scope="module")
def oscillator_at_delay_one():
    """The oscillator under the constant delay 1 (a delay-free system on histories) and
    its quadratic certificate: P solves A^T P A = s^2 P - I for the companion matrix A
    scaled by s = (1 + 2 rho) / 3, so V(Az) <= s^2 V(z); Young's inequality for w."""
    import scipy.linalg

    s = _oscillator()
    aug = ly.constant_delay(s)
    A = np.array([[-0.3, -0.9], [1.0, 0.0]])
    sc = (1.0 + 2.0 * np.max(np.abs(np.linalg.eigvals(A)))) / 3.0
    P = scipy.linalg.solve_discrete_lyapunov((A / sc).T, np.eye(2))
    P = P / np.linalg.eigvalsh(P).min()  # P >= I = diag(1 / r^2)
    E, young = np.array([0.1, 0.0]), 0.02
    cert = ct.quadratic_certificate(aug, P[None], np.array([sc**2 * (1 + young)]),
                                    np.zeros((1, 0)), np.array([(1 + 1 / young) * E @ P @ E]))
    return s, aug, cert


def test_constant_delay_simulates_the_original_at_that_delay():
    s = ly.drone_formation(3, bidirectional=True)
    aug = ly.constant_delay(s)
    assert aug.max_delay == 0 and aug.n == (s.max_delay + 1) * s.n
    T = 12
    k1, k2 = jax.random.split(jax.random.key(0))
    w = s.w_max * jax.random.uniform(k1, (T, 3, s.n_w), minval=-1.0, maxval=1.0)
    x0 = 0.3 * jax.random.normal(k2, (3, s.n))
    d = s.max_delay
    ref = ly.simulate(s, x0, w, jnp.full((T, 3), d, jnp.int32),
                      jnp.full((T, 3, s.K), d, jnp.int32))
    got = ly.simulate(aug, jnp.tile(x0, (1, d + 1)), w, jnp.zeros((T, 3), jnp.int32),
                      jnp.zeros((T, 3, s.K), jnp.int32))
    np.testing.assert_allclose(np.asarray(got[..., :s.n]), np.asarray(ref), atol=1e-6)
    with pytest.raises(ValueError, match="delay"):
        ly.constant_delay(s, delay=d + 1)


def test_stable_only_at_delay_one_is_certified_there_and_refuted_under_switching(
        oscillator_at_delay_one):
    s, aug, cert = oscillator_at_delay_one
    res = ly.verify.verify(aug, cert, ct.default_reach(aug), ly.VerifyConfig(batch=256))
    assert res.certified and res.certified_fraction == pytest.approx(1.0)
    # Under delays switching in {0, 1} the claim is false: a run leaves the box.
    cx = ly.falsify.falsify(s, jax.random.key(1))
    assert cx.found and cx.criterion == "leaves_box" and cx.violation > 0
    replay = np.asarray(ly.simulate(s, cx.x0, cx.w, cx.own_delay, cx.link_delay))
    np.testing.assert_allclose(replay, cx.states, rtol=1e-6)
    assert np.abs(cx.x0).max() <= 0.5 + 1e-6  # started inside init_scale x the box
    assert np.abs(cx.states[cx.step]).max() > 1.0
    assert np.all(np.abs(cx.w) <= s.w_max + 1e-7)
    # At the certified delay the search finds no run breaking the certified bound.
    sound = ly.falsify.falsify(aug, jax.random.key(1), cert=cert)
    assert sound.criterion == "iss_bound" and not sound.found


def test_falsifier_refutes_an_invalid_certificate_by_a_trajectory(oscillator_at_delay_one):
    _, aug, cert = oscillator_at_delay_one
    # The identity is no Lyapunov function of this oscillator at any gain below 1
    # (the companion map stretches some directions): its sISS bound must break.
    bad = ct.quadratic_certificate(aug, np.eye(2)[None], np.array([0.9]), np.zeros((1, 0)),
                                   np.array([0.5]))
    cx = ly.falsify.falsify(aug, jax.random.key(0), cert=bad)
    assert cx.found and cx.violation > 0
    mu = np.asarray(ct.gain_report(bad, aug).mu)
    assert np.all(np.asarray(ct.values(bad, aug, cx.x0)) <= 0.99 * mu + 1e-6)


# --------------------------------------------------------------------------- S-procedure

_NET = dict(A=[[0.5, 0.1], [-0.1, 0.4]], A_delayed=[[0.1, 0.0], [0.05, 0.1]],
            B=[[0.08, 0.0], [0.0, 0.08]], E=[[0.0], [0.2]])


def _network_certificate(N, a_scale=1.05):
    s = ly.linear_network(N, **_NET, max_delay=1)
    return (s, *ly.quadratic.cauchy_schwarz_certificate(s, gain_scale=a_scale))


@pytest.mark.parametrize("N", [2, 8])
def test_quadratic_certificate_of_linear_network_verifies_fully(N):
    """Branch-and-bound proves a quarter of these 7-dimensional local domains after
    300k boxes per subsystem (docs/lyapunov.md); the S-procedure proves them all."""
    s, cert, reach = _network_certificate(N)
    res = ly.verify.verify(s, cert, reach, ly.VerifyConfig(max_boxes=64, batch=64))
    assert res.certified and res.certified_fraction == 1.0 and res.boxes == 0
    assert all(r.proof == "s-procedure" for r in res.subsystems)


def test_s_procedure_never_proves_a_sampled_violation():
    """Over a grid of gains, every subsystem the S-procedure proves has no sampled
    violation of (C1) or (C2) on its domain; gains too small are refuted by samples and
    left to branch-and-bound."""
    N = 3
    outcomes = []
    for a_scale in (0.5, 0.7, 0.9, 1.0, 1.05):
        s, cert, reach = _network_certificate(N, a_scale=a_scale)
        data, progs, lo, hi, lim = jax.device_get(vf._local_problems_fast(s, cert, reach))
        nc = ct.n_conditions(s)
        for i in range(N):
            d = jax.tree_util.tree_map(lambda a, i=i: a[i], data)
            p = jax.tree_util.tree_map(lambda a, i=i: a[i], progs)
            proven, _ = ly.quadratic.prove_subsystem(sysm.skeleton(s), d, p, lo[i], hi[i],
                                                     cert.eta, cert.eta_reach)
            u = np.random.default_rng(i).uniform(lo[i], hi[i], (20000, lo.shape[1]))
            v = np.asarray(ct.condition_values(s, d, p, jnp.asarray(u, jnp.float32),
                                               eta=cert.eta, eta_reach=cert.eta_reach))
            reachable = np.all(v[:, nc:] <= lim[i], 1)
            violated = bool(np.any((v[:, :nc].max(1) > 0) & reachable))
            assert not (proven and violated), (a_scale, i)
            outcomes.append((proven, violated))
    assert any(p for p, _ in outcomes) and any(v for _, v in outcomes)


# --------------------------------------------------------------------------- sectors


def test_sector_bounds_contain_sampled_secant_slopes():
    """(sigma(b + s) - sigma(b)) / s lies in sector(code, b, lo, hi) for every sampled s
    of the interval (tanh at b = 0 and b != 0, sin at offsets, wide and narrow)."""
    rng = np.random.default_rng(0)
    fns = {bd.TANH: np.tanh, bd.SIN: np.sin}
    for _ in range(300):
        code = bd.TANH if rng.random() < 0.5 else bd.SIN
        b = 0.0 if rng.random() < 0.3 else float(rng.uniform(-2.0, 2.0))
        lo, hi = np.sort(rng.uniform(-4.0, 4.0, 2) * rng.choice([0.05, 1.0]))
        al, be = ly.quadratic.sector(code, b, float(lo), float(hi))
        s = rng.uniform(lo, hi, 2000)
        s = s[np.abs(s) > 1e-6]
        r = (fns[code](b + s) - fns[code](b)) / s
        assert np.all(r >= al - 1e-9) and np.all(r <= be + 1e-9), (code, b, lo, hi)
        assert al <= be
    # The tanh sector at 0 is the exact one: tanh(Z)/Z at Z = max |s|.
    al, be = ly.quadratic.sector(bd.TANH, 0.0, -0.5, 2.0)
    assert al == pytest.approx(np.tanh(2.0) / 2.0, abs=1e-8) and be == pytest.approx(1.0)


@pytest.mark.parametrize("make", [
    ly.drone_formation, ly.microgrid,
    # a history mode: selection -> ridge -> shift, one layer of activations
    lambda n: ly.delay_modes(ly.platoon(n))[5],
])
def test_ridge_form_reproduces_the_program(make):
    s = make(3)
    prog = jax.tree_util.tree_map(lambda a: np.asarray(a)[1], sysm.local_programs(s))
    F, c0, units = ly.quadratic.ridge_form(prog)
    fns = {bd.TANH: np.tanh, bd.SIN: np.sin}
    u = np.random.default_rng(0).uniform(-1.0, 1.0, (64, sysm.input_layout(s).size))
    psi = np.stack([fns[c](u @ w + b) - fns[c](b) for c, w, b in units], 1)
    want = np.asarray(bd.apply(prog, jnp.asarray(u, jnp.float32)), np.float64)
    np.testing.assert_allclose(np.concatenate([u, psi], 1) @ F.T + c0, want, atol=1e-5)
    assert np.abs(c0).max() < 1e-6  # the equilibrium is the origin


@pytest.mark.parametrize("make", [ly.drone_formation, ly.platoon])
def test_local_s_procedure_never_proves_a_sampled_violation(make):
    """Quadratic certificates (the linearisation's P) with self gains from too small to
    ample: on the box local_radius proves, no sampled local input violates (C1) or (C2);
    some gains are proven on part of the box and some are violated on the whole box.
    (The microgrid's linearisation certificate is proven at no radius: not tested here.)"""
    s = make(3, dt=0.5, max_delay=1)
    cert0 = ct.init_certificate(s, jax.random.key(0), net_scale=0.0)
    D = 1.0 / np.square(np.asarray(s.state_box, np.float64))
    L = np.asarray(cert0.L, np.float64)
    P = np.stack([np.diag(D[i]) + L[i] @ L[i].T for i in range(3)])
    proven_any = violated_any = False
    for a in (0.3, 0.7, 0.95):
        cert = ct.quadratic_certificate(s, P, np.full(3, a), np.full((3, s.K), 0.1),
                                        np.full(3, 1.0), lam_max=0.99)
        reach = ct.Reach(jnp.full(3, 0.5), jnp.full(3, 0.5))
        data, progs, lo, hi, _ = jax.device_get(vf._local_problems_fast(s, cert, reach))
        nc = ct.n_conditions(s)
        for i in range(3):
            d = jax.tree_util.tree_map(lambda x, i=i: x[i], data)
            p = jax.tree_util.tree_map(lambda x, i=i: x[i], progs)
            rho, _ = ly.quadratic.local_radius(sysm.skeleton(s), d, p, lo[i], hi[i],
                                               cert.eta, cert.eta_reach)
            scale = rho if rho > 0 else 1.0
            u = np.random.default_rng(i).uniform(scale * lo[i], scale * hi[i],
                                                 (20000, lo.shape[1]))
            v = np.asarray(ct.condition_values(s, d, p, jnp.asarray(u, jnp.float32),
                                               eta=cert.eta, eta_reach=cert.eta_reach))
            bad = bool(np.any(v[:, :nc].max(1) > 0))
            assert not (rho > 0 and bad), (a, i, rho)
            proven_any |= rho > 0
            violated_any |= rho == 0 and bad
    assert proven_any and violated_any


def test_bab_counts_boxes_inside_the_proven_inner_box():
    """A bound that proves only boxes clear of [-1/4, 1/4]^2 leaves the centre unknown;
    given that box as already proven, branch-and-bound certifies with fewer boxes."""
    def bound_fn(lo, hi):
        B, n = lo.shape
        clear = np.any((lo >= 0.25) | (hi <= -0.25), axis=1)
        ub = np.where(clear, -1.0, 1.0)[:, None].astype(np.float32)
        pts = np.stack([0.5 * (lo + hi)], 1)
        vals = -np.ones((B, 1, 1), np.float32)
        empty = np.zeros((B, 0), np.float32)
        return ub, empty, empty, np.ones((B, n), np.float32), np.zeros((B, 0, n)), pts, vals

    cfg = vf.VerifyConfig(batch=64, max_boxes=2_000, min_width=0.01)
    plain = vf.branch_and_bound(bound_fn, -np.ones(2), np.ones(2), 1, np.zeros(0), cfg)
    inner = (np.full(2, -0.25, np.float32), np.full(2, 0.25, np.float32))
    helped = vf.branch_and_bound(bound_fn, -np.ones(2), np.ones(2), 1, np.zeros(0), cfg,
                                 inner=inner)
    assert not plain.certified
    assert helped.certified and helped.certified_fraction == pytest.approx(1.0)
    assert helped.boxes < plain.boxes


def test_relax_gains_spends_the_small_gain_margin():
    s = ly.drone_formation(4)
    cert = ct.init_certificate(s, jax.random.key(0), net_scale=0.0)
    before = ct.gain_report(cert, s)
    assert before.ok
    out = ct.relax_gains(cert, s, 0.5)
    after = ct.gain_report(out, s)
    target = before.lam + 0.5 * (1.0 - before.lam)
    assert after.ok and before.lam < after.lam <= target
    assert after.lam == pytest.approx(target, abs=1e-3)
    a0, b0, c0 = (np.asarray(v) for v in ct.gains(cert, s))
    a1, b1, c1 = (np.asarray(v) for v in ct.gains(out, s))
    ratio = a1 / a0
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-4)  # one common factor
    np.testing.assert_allclose(b1[b0 > 0] / b0[b0 > 0], ratio[0], rtol=1e-3)
    np.testing.assert_array_equal(c1, c0)
    assert ct.relax_gains(cert, s, 0.0) is cert
    with pytest.raises(ValueError, match="slack"):
        ct.relax_gains(cert, s, 1.0)


def test_delay_modes_simulate_the_original_at_their_delays():
    """Mode (1, 0) of a bidirectional drone line reads slot 0 one step back and slot 1
    now: its simulation on histories is the original's with those link delays."""
    s = ly.drone_formation(3, bidirectional=True, max_delay=1)
    modes = ly.delay_modes(s)
    assert len(modes) == 4 and all(m.max_delay == 0 for m in modes)  # (d + 1)^K, K = 2
    mode = modes[2]
    assert mode.name.endswith("(1, 0)") and mode.n == 2 * s.n
    T = 12
    k1, k2 = jax.random.split(jax.random.key(1))
    w = s.w_max * jax.random.uniform(k1, (T, 3, s.n_w), minval=-1.0, maxval=1.0)
    x0 = 0.3 * jax.random.normal(k2, (3, s.n))
    link = jnp.stack([jnp.ones((T, 3), jnp.int32), jnp.zeros((T, 3), jnp.int32)], -1)
    ref = ly.simulate(s, x0, w, jnp.zeros((T, 3), jnp.int32), link)
    got = ly.simulate(mode, jnp.tile(x0, (1, 2)), w, jnp.zeros((T, 3), jnp.int32),
                      jnp.zeros((T, 3, s.K), jnp.int32))
    np.testing.assert_allclose(np.asarray(got[..., :s.n]), np.asarray(ref), atol=1e-6)


def test_switched_certificate_certifies_two_drones_and_never_on_a_violation():
    """LMI-designed quadratic certificates of the drones' delay modes (the experiment's
    dt and delay, N = 2): the S-procedure proves every subsystem in every mode, no
    sampled local input violates (C1) there, (G) holds, so every mode is certified;
    halved gains are not proven."""
    s = ly.drone_formation(2, dt=0.5, max_delay=1)
    modes = ly.delay_modes(s)
    cert, reach, rep = ly.quadratic.switched_certificate(modes)
    assert np.all(rep.lam_star < 1.0) and np.all(rep.decay >= rep.lam_star)
    res = ly.verify_modes(modes, cert, reach, ly.VerifyConfig(max_boxes=256), throw=False)
    assert all(r.proof == "s-procedure" for v in res for r in v.subsystems)
    assert all(v.gains.ok and v.certified for v in res)
    for mode in modes:
        data, progs, lo, hi, _ = jax.device_get(vf._local_problems_fast(mode, cert, reach))
        for i in range(2):
            d = jax.tree_util.tree_map(lambda x, i=i: x[i], data)
            p = jax.tree_util.tree_map(lambda x, i=i: x[i], progs)
            u = np.random.default_rng(i).uniform(lo[i], hi[i], (20000, lo.shape[1]))
            v = np.asarray(ct.condition_values(mode, d, p, jnp.asarray(u, jnp.float32),
                                               eta=cert.eta, eta_reach=cert.eta_reach))
            assert v[:, 0].max() <= 0.0
    a, b, c = (np.asarray(g, np.float64) for g in ct.gains(cert, modes[0]))
    D = 1.0 / np.square(np.asarray(modes[0].state_box, np.float64))
    L = np.asarray(cert.L, np.float64)
    P = np.stack([np.diag(D[i]) + L[i] @ L[i].T for i in range(2)])
    half = ct.quadratic_certificate(modes[0], P, 0.5 * a, 0.5 * b, 0.5 * c,
                                    lam_max=cert.lam_max)
    data, progs, lo, hi, _ = jax.device_get(vf._local_problems_fast(modes[0], half, reach))
    proven = [ly.quadratic.prove_subsystem(
        sysm.skeleton(modes[0]), jax.tree_util.tree_map(lambda x, i=i: x[i], data),
        jax.tree_util.tree_map(lambda x, i=i: x[i], progs), lo[i], hi[i], half.eta,
        half.eta_reach)[0] for i in range(2)]
    assert not any(proven)
