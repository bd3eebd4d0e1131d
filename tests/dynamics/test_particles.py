import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.core.sphere import sample_uniform
from jaxsci.dynamics import particles as pt

N, D = 24, 3


@pytest.fixture(scope="module")
def x0():
    return sample_uniform(jax.random.key(0), N, D)


@pytest.fixture(scope="module")
def perceptron():
    return pt.random_perceptron(jax.random.key(1), D, 6, 2.0)


@pytest.fixture(scope="module")
def traj(x0, perceptron):
    """One trajectory of the full gradient flow (attention + perceptron), reused."""
    flow = pt.make_flow(D, 2.0, perceptron=perceptron)
    return flow, pt.solve(flow, x0, 6.0, 0.02, n_save=30)


def test_perceptron_is_gradient_of_its_potential(perceptron, x0):
    for act in pt.ACTIVATIONS:
        p = pt.Perceptron(perceptron.w, perceptron.b, perceptron.c, act)
        g = jax.vmap(jax.grad(p.potential))(x0)
        np.testing.assert_allclose(np.asarray(g), np.asarray(p(x0)), rtol=1e-5, atol=1e-5)


def test_velocity_is_projected_gradient_of_energy(x0, perceptron):
    flow = pt.make_flow(D, 1.5, perceptron=perceptron)
    g = jax.grad(lambda y: pt.energy(flow, y))(x0)
    want = g - jnp.sum(g * x0, -1, keepdims=True) * x0
    np.testing.assert_allclose(np.asarray(pt.velocity(flow, x0)), np.asarray(want),
                               rtol=1e-4, atol=1e-5)


def test_energy_hand_computed_two_particles():
    # x1 = e1, x2 = e2: E = (1/(2 beta 2)) (2 e^beta + 2) - constant n^2/(2 beta n) = ...
    x = jnp.eye(3)[:2]
    beta = 0.7
    flow = pt.make_flow(3, beta)
    want = (2 * np.expm1(beta) + 2 * np.expm1(0.0)) / (2 * beta * 2)
    assert float(pt.energy(flow, x)) == pytest.approx(want, rel=1e-6)


def test_projection_keeps_norms_and_energy_is_monotone(traj):
    _, tr = traj
    norms = jnp.linalg.norm(tr.xs, axis=-1)
    np.testing.assert_allclose(np.asarray(norms), 1.0, atol=1e-5)
    de = np.diff(np.asarray(tr.energy))
    assert de.min() >= -1e-5 * abs(float(tr.energy[-1]))
    assert float(tr.energy[-1]) > float(tr.energy[0])  # it actually moves


def test_energy_monotone_for_softmax_attention_only(x0):
    flow = pt.make_flow(D, 3.0, normalisation="softmax")
    tr = pt.solve(flow, x0, 3.0, 0.05, n_save=15)
    assert np.diff(np.asarray(tr.energy)).min() >= -1e-5 * abs(float(tr.energy[-1]))
    assert pt.is_gradient_flow(flow)
    assert not pt.is_gradient_flow(pt.make_flow(D, 1.0, value=2 * jnp.eye(D)))


def test_attention_only_collapses_to_one_cluster(x0):
    flow = pt.make_flow(D, 1.0)
    tr = pt.solve(flow, x0, 20.0, 0.1, n_save=4)
    k, labels = pt.count_clusters(tr.final, 1e-2)
    assert int(k) == 1
    assert int(pt.cluster_masses(labels).max()) == N


def test_solve_to_rest_follows_the_flow_and_stops_at_rest(x0):
    """Adaptive steps give the fixed-step states at the save times, stop by the event
    once the tokens have collapsed (one cluster), and hold the final state after it; a
    step budget too small stops it early, not at rest."""
    flow = pt.make_flow(D, 1.0)
    ts = jnp.asarray([2.0, 5.0, 1e3, 1e4])
    r = pt.solve_to_rest(flow, x0, 1e4, ts, vtol=1e-5)
    assert bool(r.at_rest) and float(r.t_stop) < 1e3
    fixed = pt.solve(flow, x0, 5.0, 0.01, n_save=5)  # t = 2 and 5 among the saves
    np.testing.assert_allclose(r.xs[0], fixed.xs[2], atol=2e-4)
    np.testing.assert_allclose(r.xs[1], fixed.xs[5], atol=2e-4)
    assert int(pt.count_clusters(r.final, 1e-2)[0]) == 1
    np.testing.assert_array_equal(r.xs[2], r.final)
    np.testing.assert_array_equal(r.xs[3], r.final)
    np.testing.assert_allclose(np.linalg.norm(r.final, axis=-1), 1.0, atol=1e-6)
    short = pt.solve_to_rest(flow, x0, 1e4, ts, vtol=1e-5, max_steps=5)
    assert not bool(short.at_rest) and int(short.n_steps) == 5
    assert float(short.t_stop) < float(r.t_stop)


def test_weighted_tokens_move_as_coincident_tokens():
    """A token of weight m/n is m coincident tokens, in both normalisations."""
    x = sample_uniform(jax.random.key(5), 4, D)
    copies = jnp.concatenate([x, x[:1], x[:1], x[2:3]])  # token 0 three times, 2 twice
    w = jnp.asarray([3.0, 1.0, 2.0, 1.0]) / 7.0
    for norm in ("mean", "softmax"):
        flow = pt.make_flow(D, 2.0, normalisation=norm)
        np.testing.assert_allclose(pt.velocity(flow, x, w), pt.velocity(flow, copies)[:4],
                                   atol=1e-6)
    m = pt.merge_clusters(copies, 1e-3, 6)
    assert int(m.n_clusters) == 4 and float(m.spread) < 1e-6
    np.testing.assert_allclose(m.weights, jnp.concatenate([w, jnp.zeros(2)]), atol=1e-7)
    np.testing.assert_allclose(m.centers[:4], x, atol=1e-6)
    np.testing.assert_allclose(m.centers[4:], jnp.stack([x[0], x[0]]), atol=1e-6)


def test_two_cluster_merging_time_closed_form_and_reduced_solve():
    """The closed form equals the quadrature of 1/|dtheta/dt|, and the reduced solve of two
    weighted (padded) tokens reaches one cluster at that time, whatever the masses."""
    from scipy.integrate import quad

    tol = 0.05
    th1 = 2 * np.arcsin(tol / 2)  # chord tol
    for beta, th0 in ((0.5, 1.0), (4.0, 2.5), (8.0, 3.1)):
        ref = quad(lambda t, b=beta: np.exp(b * (1 - np.cos(t))) / np.sin(t), th1, th0)[0]
        np.testing.assert_allclose(float(pt.merge_time_two_clusters(beta, th0, th1)), ref,
                                   rtol=1e-4)
    beta, th0 = 4.0, 2.5
    flow = pt.make_flow(D, beta, speed=np.exp(-beta))
    two = jnp.asarray([[1.0, 0.0, 0.0], [np.cos(th0), np.sin(th0), 0.0]])
    want = float(pt.merge_time_two_clusters(beta, th0, th1))
    for masses in ((1, 4), (3, 2)):
        m = pt.merge_clusters(jnp.repeat(two, np.asarray(masses), axis=0), 1e-3, 3)
        h = pt.solve_merging(flow, m.centers, 1e4, weights=m.weights, tol=tol)
        assert abs(float(h.t_one) - want) < 0.01 * want, (masses, float(h.t_one), want)
        np.testing.assert_array_equal(h.n_clusters[:1], [1])


def test_merging_cascade_matches_the_full_flow():
    """Three collapsed clusters (copies of three points): the cascade of the reduced flow
    (merge, then the merged pair) reaches one cluster when the full flow of all the
    tokens does, with fewer steps, and its staircase counts 2 then 1."""
    beta = 4.0
    flow = pt.make_flow(D, beta, speed=np.exp(-beta))
    ang = np.asarray([0.0, 2.0, 4.3])  # pairwise 2.0, 2.3 and 1.98 rad: slow merges
    c = jnp.asarray(np.stack([np.cos(ang), np.sin(ang), [0.0, 0.1, -0.1]], 1))
    c = c / jnp.linalg.norm(c, axis=1, keepdims=True)
    x = jnp.repeat(c, np.asarray([5, 3, 8]), axis=0)
    full = pt.solve_to_rest(flow, x, 1e4, jnp.asarray([1e4]), vtol=1e-30,
                            stop_diameter=0.05)
    assert bool(full.at_rest)
    m = pt.merge_clusters(x, 1e-3, 4)
    np.testing.assert_allclose(m.weights, np.asarray([5, 3, 8, 0]) / 16, atol=1e-7)
    h = pt.solve_merging(flow, m.centers, 1e4, weights=m.weights, tol=0.05)
    np.testing.assert_allclose(float(h.t_one), float(full.t_stop), rtol=0.01)
    np.testing.assert_array_equal(np.asarray(h.n_clusters[:2]), [2, 1])
    assert float(h.t_merge[0]) < float(h.t_one)
    assert int(h.n_steps) < int(full.n_steps)


def test_solver_converges_with_order():
    # Smooth (tanh) perceptron in float64: the projected Tsit5 step keeps high order,
    # the projected Heun step order 2 (halving dt divides the error by ~4).
    with jax.enable_x64(True):
        x0 = sample_uniform(jax.random.key(0), N, D, dtype=jnp.float64)
        per = pt.random_perceptron(jax.random.key(1), D, 6, 2.0, activation="tanh",
                                   dtype=jnp.float64)
        flow = pt.make_flow(D, 2.0, perceptron=per, dtype=jnp.float64)
        ref = pt.solve(flow, x0, 1.0, 0.0025, n_save=1).final

        def err(h, solver):
            out = pt.solve(flow, x0, 1.0, h, n_save=1, solver=solver).final
            return float(jnp.abs(out - ref).max())

        e1, e2 = err(0.1, diffrax.Heun()), err(0.05, diffrax.Heun())
        assert 3.0 < e1 / e2 < 5.0
        t1, t2 = err(0.1, diffrax.Tsit5()), err(0.05, diffrax.Tsit5())
        assert t1 / t2 > 20.0 and t2 < 1e-6


def test_count_clusters_hand_made():
    a, b = jnp.array([1.0, 0, 0]), jnp.array([0, 1.0, 0])
    x = jnp.stack([a, b, a, b, jnp.array([0, 0, 1.0])])
    k, labels = pt.count_clusters(x, 1e-3)
    assert int(k) == 3
    np.testing.assert_array_equal(np.asarray(labels), [0, 1, 0, 1, 4])
    # a chain of close points is one component even if its ends are far apart
    th = jnp.linspace(0, 0.5, 26)
    chain = jnp.stack([jnp.cos(th), jnp.sin(th), 0 * th], -1)
    assert int(pt.count_clusters(chain, 0.03)[0]) == 1
    assert int(pt.count_clusters(chain, 0.01)[0]) == 26


def test_step_size_sweep_is_traced_at_fixed_step_count(x0):
    # dt traced with a static n_steps: one compiled program for every step size, and
    # n_steps steps of size dt end where the classic (t1, dt) call ends.
    flow = pt.make_flow(D, 1.0)
    dts = jnp.array([0.05, 0.1])
    finals = jax.vmap(lambda h: pt.solve(flow, x0, dt=h, n_steps=10, n_save=2).final)(dts)
    for i, h in enumerate((0.05, 0.1)):
        ref = pt.solve(flow, x0, 10 * h, h, n_save=2).final
        np.testing.assert_allclose(np.asarray(finals[i]), np.asarray(ref), atol=1e-5)
    tr = pt.solve(flow, x0, 1.0, n_steps=10, n_save=2)
    assert float(tr.ts[-1]) == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(TypeError, match="pass n_steps="):
        jax.jit(lambda h: pt.solve(flow, x0, 1.0, h).final)(0.1)
    with pytest.raises(ValueError, match="exactly two of t1, dt and n_steps"):
        pt.solve(flow, x0, 1.0, 0.1, n_steps=10)


def test_value_checks_fire_inside_jit(x0):
    flow = pt.make_flow(D, 1.0)
    f = jax.jit(lambda x: pt.solve(flow, x, 0.2, 0.1, n_save=1).final)
    with pytest.raises(Exception, match="x0 must lie on the unit sphere"):
        jax.block_until_ready(f(2.0 * x0))
    g = jax.jit(lambda b: pt.make_flow(D, b).beta)
    with pytest.raises(Exception, match="beta must be >= 0"):
        jax.block_until_ready(g(-1.0))


def test_lists_are_accepted(x0):
    flow = pt.make_flow(D, 1.0)
    a = pt.solve(flow, np.asarray(x0).tolist(), 0.2, 0.1, n_save=1).final
    b = pt.solve(flow, x0, 0.2, 0.1, n_save=1).final
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    assert int(pt.count_clusters(np.asarray(b).tolist(), 1e-3)[0]) >= 1


def test_bad_inputs_raise(x0, perceptron):
    flow = pt.make_flow(D, 1.0)
    with pytest.raises(ValueError, match="x must lie on the unit sphere"):
        pt.velocity(flow, 2.0 * x0)
    with pytest.raises(ValueError, match="d must be >= 2"):
        pt.make_flow(1, 1.0)
    with pytest.raises(ValueError, match="beta must be >= 0"):
        pt.make_flow(D, -1.0)
    with pytest.raises(ValueError, match=r"x must have shape \(n, 3\)"):
        pt.velocity(flow, sample_uniform(jax.random.key(0), 4, 5))
    with pytest.raises(ValueError, match="qk must have shape"):
        pt.make_flow(D, 1.0, qk=jnp.eye(4))
    with pytest.raises(ValueError, match="perceptron must act on d = 4"):
        pt.make_flow(4, 1.0, perceptron=perceptron)
    with pytest.raises(ValueError, match="normalisation must be one of"):
        pt.make_flow(D, 1.0, normalisation="layer")
    with pytest.raises(ValueError, match="x must be finite"):
        pt.count_clusters(x0.at[0, 0].set(jnp.nan))
    with pytest.raises(TypeError, match="key must be a jax.random key"):
        pt.random_perceptron(0, D, 4)
