import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxsci.data import vision
from jaxsci.generative import qenn as Q


def _state(d, key, dtype=jnp.complex64):
    return Q.normalize_state(jax.random.normal(key, (d,), dtype))


# --------------------------------------------------------------------- combination rule


def test_gqecr_hand_computed_two_view_case():
    # K = 2, empty last. kappa = 1 - (0.6 * 0.5 + 0.2 * 0.1) = 0.68,
    # m(empty) = 0.2 * 0.4 = 0.08, m({k}) = (1 - 0.08) * m1(k) m2(k) / 0.32.
    m = Q.gqecr(jnp.array([0.6, 0.2, 0.2]), jnp.array([0.5, 0.1, 0.4]))
    np.testing.assert_allclose(np.asarray(m), [0.8625, 0.0575, 0.08], rtol=1e-6)
    assert float(m.sum()) == pytest.approx(1.0, abs=1e-6)
    # Total conflict: all mass to the empty set (the open-world reading).
    np.testing.assert_allclose(np.asarray(Q.gqecr(jnp.array([1.0, 0, 0]),
                                                  jnp.array([0, 1.0, 0]))), [0, 0, 1])


def _dempster_on_sets(m1, m2):
    # Dempster's rule written over focal sets, as in a textbook: no shortcut.
    out = {}
    conflict = 0.0
    for (a, x), (b, y) in itertools.product(m1.items(), m2.items()):
        c = a & b
        if c:
            out[c] = out.get(c, 0.0) + x * y
        else:
            conflict += x * y
    return {k: v / (1.0 - conflict) for k, v in out.items()}


def test_gqecr_is_dempster_without_empty_mass():
    rng = np.random.default_rng(0)
    for _ in range(5):
        p1, p2 = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
        sets = _dempster_on_sets({frozenset([k]): p1[k] for k in range(4)},
                                 {frozenset([k]): p2[k] for k in range(4)})
        ref = np.array([sets.get(frozenset([k]), 0.0) for k in range(4)])
        m = Q.gqecr(jnp.asarray(np.append(p1, 0.0), jnp.float32),
                    jnp.asarray(np.append(p2, 0.0), jnp.float32))
        np.testing.assert_allclose(np.asarray(m[:-1]), ref, rtol=1e-5, atol=1e-7)
        assert float(m[-1]) == 0.0
        np.testing.assert_allclose(np.asarray(Q.dempster(p1, p2)), ref, rtol=1e-5)


def test_gqecr_commutative_associative_and_fuse_folds():
    rng = np.random.default_rng(1)
    ms = jnp.asarray(rng.dirichlet(np.ones(5), size=(3, 7)), jnp.float32)  # 3 views, K = 4
    a, b, c = ms
    np.testing.assert_allclose(np.asarray(Q.gqecr(a, b)), np.asarray(Q.gqecr(b, a)), rtol=1e-6)
    left = Q.gqecr(Q.gqecr(a, b), c)
    np.testing.assert_allclose(np.asarray(Q.gqecr(a, Q.gqecr(b, c))), np.asarray(left),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(Q.fuse(ms)), np.asarray(left), rtol=1e-6)
    # m(empty) is the product of the views' empty masses.
    np.testing.assert_allclose(np.asarray(left[:, -1]), np.asarray(ms[..., -1].prod(0)),
                               rtol=1e-5)


# --------------------------------------------------------------------- quantum evidence


def test_masses_sum_to_one_and_empty_is_the_residual():
    key = jax.random.key(0)
    states = Q.orthonormalize(jax.random.normal(key, (8, 3), jnp.complex64))
    psi = jax.vmap(lambda k: _state(8, k))(jax.random.split(key, 16))
    for n in (1.0, 2.0, 3.5):
        m = Q.quantum_masses(psi, states, n)
        np.testing.assert_allclose(np.asarray(m.sum(-1)), 1.0, atol=2e-6)
        assert np.all(np.asarray(m) >= 0)
    m = Q.quantum_masses(psi, states)
    proj = states @ jnp.conj(states).T
    resid = jnp.linalg.norm(psi - psi @ proj.T, axis=-1) ** 2
    np.testing.assert_allclose(np.asarray(m[:, -1]), np.asarray(resid), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(m[:, :-1]),
                               np.abs(np.asarray(psi @ jnp.conj(states))) ** 2, rtol=1e-5)
    # A class state has all its mass on its class; a superposition of two class states
    # has none on the empty set with one copy and half of it with two.
    np.testing.assert_allclose(np.asarray(Q.quantum_masses(states[:, 1], states)),
                               [0, 1, 0, 0], atol=1e-6)
    sup = (states[:, 0] + 1j * states[:, 2]) / np.sqrt(2)
    np.testing.assert_allclose(np.asarray(Q.quantum_masses(sup, states)), [.5, 0, .5, 0],
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(Q.quantum_masses(sup, states, 2.0)),
                               [.25, 0, .25, .5], atol=1e-6)


def test_orthonormalize_is_the_qr_factor_and_stays_orthonormal():
    v = jax.random.normal(jax.random.key(1), (10, 4), jnp.complex64)
    q = Q.orthonormalize(v)
    np.testing.assert_allclose(np.asarray(jnp.conj(q).T @ q), np.eye(4), atol=2e-6)
    qr, r = jnp.linalg.qr(v)
    ph = jnp.diagonal(r) / jnp.abs(jnp.diagonal(r))
    np.testing.assert_allclose(np.asarray(q), np.asarray(qr * ph), atol=2e-5)
    # Whatever an optimiser does to the free parameters, the class states stay
    # orthonormal: a large step along a gradient, then an ill-conditioned V.
    g = jax.grad(lambda v: jnp.sum(jnp.abs(Q.orthonormalize(v)[:3, :]) ** 3))(v)
    for w in (v - 5.0 * jnp.conj(g), v.at[:, 1].set(v[:, 0] + 1e-2 * v[:, 1])):
        q = Q.orthonormalize(w)
        np.testing.assert_allclose(np.asarray(jnp.conj(q).T @ q), np.eye(4), atol=1e-5)


def test_activations_and_phase_sensitive_similarities():
    z = jnp.array([3 + 4j, -0.3 + 0.4j, 0j], jnp.complex64)
    out = Q.modrelu(z, jnp.full(3, -1.0))
    np.testing.assert_allclose(np.asarray(out), [(4 / 5) * (3 + 4j), 0, 0], atol=1e-6)
    g = jax.grad(lambda b: jnp.abs(Q.modrelu(jnp.zeros(2, jnp.complex64), b)).sum())(
        jnp.ones(2))
    assert np.all(np.isfinite(np.asarray(g)))
    np.testing.assert_allclose(np.asarray(Q.crelu(jnp.array([1 - 2j, -1 + 2j]))), [1, 2j])
    psi = _state(6, jax.random.key(2))
    both = jnp.stack([psi, psi * jnp.exp(0.7j)])
    assert float(Q.phase_similarity(both)[0, 1]) == pytest.approx(np.cos(0.7), abs=1e-6)
    assert float(Q.amplitude_similarity(both)[0, 1]) == pytest.approx(1.0, abs=1e-5)


def test_supcon_loss_known_value():
    # Two classes, perfectly aligned within, orthogonal across: each anchor's one positive
    # has logit 1/tau against one positive and two negatives at 0.
    sim = jnp.asarray([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], jnp.float32)
    tau = 0.5
    want = -np.log(np.exp(2.0) / (np.exp(2.0) + 2.0))
    assert float(Q.supcon_loss(sim, jnp.array([0, 0, 1, 1]), tau)) == pytest.approx(want,
                                                                                   rel=1e-6)
    # An anchor without a positive is left out.
    assert float(Q.supcon_loss(sim[:3, :3], jnp.array([0, 0, 1]), tau)) == pytest.approx(
        -np.log(np.exp(2.0) / (np.exp(2.0) + 1.0)), rel=1e-6)


# --------------------------------------------------------------------- gradients, training


def test_complex_gradient_convention_is_pinned():
    # JAX: grad of a real loss in w = x + iy is dL/dx - i dL/dy = 2 conj(w - c) here,
    # the conjugate of the descent direction; optax on it unconjugated moves Im w the
    # wrong way. train_step conjugates complex gradients.
    c = jnp.asarray(1.0 + 0.5j, jnp.complex64)
    w0 = jnp.asarray(2.0 + 1.0j, jnp.complex64)
    loss = lambda w: jnp.abs(w - c) ** 2  # noqa: E731
    assert complex(jax.grad(loss)(w0)) == pytest.approx(2 * np.conj(complex(w0 - c)))
    opt = optax.sgd(0.1)
    st = Q.train_init(w0, opt, jax.random.key(0))
    raw, s_raw = w0, opt.init(w0)
    x, y = jnp.zeros((4, 1)), jnp.zeros(4, jnp.int32)
    for _ in range(40):
        st, _ = Q.train_step(st, lambda p, xb, yb, s: loss(p), opt, x, y, 2)
        u, s_raw = opt.update(jax.grad(loss)(raw), s_raw, raw)
        raw = optax.apply_updates(raw, u)
    assert abs(complex(st.params) - complex(c)) < 1e-3
    assert abs(complex(raw) - complex(c)) > 1.0


@pytest.fixture(scope="module")
def phase_only_fit():
    """A tiny QENN pair trained on two classes that differ only in phase (one program)."""
    n, d = 96, 6
    key = jax.random.key(3)
    amp = jax.random.uniform(key, (n, d), minval=0.5, maxval=1.5)
    labels = jnp.arange(n) % 2
    phase = jnp.where(labels[:, None] == 0, 0.0, jnp.pi / 2) * (jnp.arange(d) % 2)
    noise = 0.2 * jax.random.normal(jax.random.fold_in(key, 1), (n, d))
    x = (amp * jnp.exp(1j * (phase + noise))).astype(jnp.complex64)
    cfg = Q.EncoderConfig(hidden=(16,), dim=4)
    gd = nnx.graphdef(Q.QENN(d, 2, cfg, rngs=nnx.Rngs(0)))

    def fit(xv, k):
        params = nnx.state(Q.QENN(d, 2, cfg, rngs=nnx.Rngs(k)))
        p, losses = Q.train(params, lambda p, xb, yb, s: Q.qenn_loss(nnx.merge(gd, p), xb, yb),
                            xv, labels, k, Q.TrainConfig(steps=80, batch_size=32))
        model = nnx.merge(gd, p)
        return model.masses(xv), losses, model.states.raw[...]

    views = Q.amplitude_phase_views(x)
    run = jax.jit(jax.vmap(fit))
    return run(views, jax.random.split(key, 2)), run(views, jax.random.split(key, 2)), labels


def test_training_uses_phase_and_is_deterministic(phase_only_fit):
    (masses, losses, raw), again, labels = phase_only_fit
    assert np.all(np.isfinite(np.asarray(losses)))
    assert float(losses[1, -10:].mean()) < float(losses[1, :10].mean())
    acc = np.asarray((masses[..., :-1].argmax(-1) == labels).mean(-1))
    # The complex view separates the phase-only classes; the amplitude view cannot.
    assert acc[1] > 0.9 and acc[0] < 0.75, acc
    np.testing.assert_allclose(np.asarray(masses.sum(-1)), 1.0, atol=1e-5)
    for v in range(2):  # the trained class states are orthonormal
        q = Q.orthonormalize(raw[v])
        np.testing.assert_allclose(np.asarray(jnp.conj(q).T @ q), np.eye(2), atol=1e-5)
    np.testing.assert_array_equal(np.asarray(again[0]), np.asarray(masses))


# --------------------------------------------------------------------- baselines, metrics


def test_auroc_and_mahalanobis_match_sklearn():
    from sklearn.covariance import EmpiricalCovariance
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    a = np.round(rng.normal(size=50), 1)
    b = np.round(rng.normal(0.7, size=40), 1)  # rounding makes ties
    want = roc_auc_score(np.r_[np.zeros(50), np.ones(40)], np.r_[a, b])
    assert float(Q.auroc(a, b)) == pytest.approx(want, abs=1e-6)
    f = rng.normal(size=(60, 3)).astype(np.float32)
    y = np.arange(60) % 3
    means, prec = Q.mahalanobis_fit(jnp.asarray(f), jnp.asarray(y), 3, ridge=0.0)
    centred = f - np.asarray(means)[y]
    cov = EmpiricalCovariance(assume_centered=True).fit(centred)
    np.testing.assert_allclose(np.asarray(prec), cov.precision_, rtol=1e-3, atol=1e-4)
    score = Q.mahalanobis_score(jnp.asarray(f[:5]), means, prec)
    ref = np.min([cov.mahalanobis(f[:5] - np.asarray(means)[k]) for k in range(3)], 0)
    np.testing.assert_allclose(np.asarray(score), ref, rtol=1e-3)


def test_baseline_scores_order():
    confident, flat = jnp.array([10.0, 0.0, 0.0]), jnp.zeros(3)
    assert float(Q.msp_score(flat)) > float(Q.msp_score(confident))
    assert float(Q.dirichlet_uncertainty(flat)) > float(Q.dirichlet_uncertainty(confident))
    assert float(Q.energy_score(jnp.zeros(3))) == pytest.approx(-np.log(3.0), rel=1e-6)
    good = Q.dirichlet_loss(jnp.array([[10.0, -10.0]]), jnp.array([0]))
    bad = Q.dirichlet_loss(jnp.array([[-10.0, 10.0]]), jnp.array([0]))
    assert float(good) < float(bad)


# --------------------------------------------------------------------- data


def test_data_sets():
    d = vision.digits_complex(jax.random.key(0))
    assert d.num_classes == 6 and d.train.dtype == jnp.complex64
    assert set(np.unique(np.asarray(d.ood_labels))) == {6, 7, 8, 9}
    assert (len(d.train), len(d.test), len(d.ood)) == (758, 325, 714)  # 1083 ID of 1797
    # The complex input is the image's FFT: its modulus is symmetric, X(-k) = conj X(k).
    x = np.asarray(d.train[0]).reshape(8, 8)
    flipped = np.roll(x[::-1, ::-1], 1, (0, 1))
    np.testing.assert_allclose(np.abs(flipped), np.abs(x), rtol=1e-4, atol=1e-5)
    z, y = vision.sar_like(jax.random.key(0), n_classes=3, n_per_class=4, size=6)
    z2, _ = vision.sar_like(jax.random.key(0), n_classes=3, n_per_class=4, size=6)
    assert z.shape == (12, 36) and z.dtype == jnp.complex64
    np.testing.assert_array_equal(np.asarray(z), np.asarray(z2))
    np.testing.assert_array_equal(np.asarray(y), np.repeat(np.arange(3), 4))


# --------------------------------------------------------------------- errors


def test_clear_errors():
    states = Q.orthonormalize(jax.random.normal(jax.random.key(0), (4, 2), jnp.complex64))
    with pytest.raises(ValueError, match="psi must be normalised"):
        Q.quantum_masses(jnp.ones(4, jnp.complex64), states)
    with pytest.raises(Exception, match="psi must be normalised"):
        jax.block_until_ready(jax.jit(Q.quantum_masses)(jnp.ones(4, jnp.complex64), states))
    with pytest.raises(ValueError, match="states must have shape \\(D, K\\) with D = 5"):
        Q.quantum_masses(_state(5, jax.random.key(0)), states)
    with pytest.raises(ValueError, match="copies must be >= 1"):
        Q.quantum_masses(_state(4, jax.random.key(0)), states, 0.5)
    with pytest.raises(ValueError, match="m1 must be mass vectors"):
        Q.gqecr(jnp.array([0.5, 0.9, 0.1]), jnp.array([0.2, 0.3, 0.5]))
    with pytest.raises(ValueError, match="m2 must have a last axis of K \\+ 1 >= 2"):
        Q.gqecr(jnp.array([0.5, 0.5]), jnp.array([1.0]))
    with pytest.raises(Exception, match="m1 must be mass vectors"):
        jax.block_until_ready(jax.jit(Q.gqecr)(jnp.array([0.5, 0.9, 0.1]),
                                               jnp.array([0.2, 0.3, 0.5])))
    with pytest.raises(ValueError, match="activation must be one of"):
        Q.EncoderConfig(activation="relu")
    with pytest.raises(ValueError, match="num_classes must be <= 4"):
        Q.ClassStates(4, 5, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="v must have shape \\(D, K\\) with K <= D"):
        Q.orthonormalize(jnp.ones((2, 3), jnp.complex64))
    with pytest.raises(ValueError, match="id_classes must leave at least one class out"):
        vision.digits_complex(jax.random.key(0), id_classes=tuple(range(10)))
    with pytest.raises(ValueError, match="batch_size \\(64\\) must be <="):
        Q.train({}, lambda *a: 0.0, jnp.zeros((10, 2)), jnp.zeros(10, jnp.int32),
                jax.random.key(0), Q.TrainConfig(batch_size=64))
