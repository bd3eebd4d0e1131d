import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.dynamics import koopman as kp

# One tiny model for the whole module: d = 2 tokens x 4 = 8.
CONFIG = kp.MerlinConfig(
    n_cond=2,
    encoder=kp.EncoderConfig(n_tokens=2, token_dim=4, width=8, heads=1, n_self_layers=1,
                             n_cross_layers=1, n_freqs=4, freq_scale=1.0, rope=(2.0, 1.0)),
    decoder=kp.DecoderConfig(hidden=8, n_layers=1, input_scale=8.0),
)


def grid(n):
    x = jnp.arange(n, dtype=jnp.float32) / n
    return jnp.stack(jnp.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)


def smooth_field(xy, phase=0.0):
    return jnp.sin(2 * jnp.pi * xy[:, 0] + phase) * jnp.cos(2 * jnp.pi * xy[:, 1])


@pytest.fixture(scope="module")
def model():
    return kp.Merlin(2, 1, CONFIG, key=jax.random.key(0))


@pytest.fixture(scope="module")
def encode(model):
    """The encoder jitted once; masks are passed per channel so that point masks,
    channel masks and no mask share one compiled program per point count."""
    jitted = eqx.filter_jit(lambda c, v, m: model.encoder(c, v, m))

    def call(c, v, m=None):
        return jitted(c, v, kp.point_mask(m, c.shape[0], v.shape[1]))

    return call


def frames_on(xy, phase=0.0):
    """Two delay frames of a smooth field at points ``xy``: values ``[n, 2]``."""
    return jnp.stack([smooth_field(xy, phase), smooth_field(xy, phase + 0.1)], -1)


# --------------------------------------------------------------------------- encoder


def test_encoder_is_invariant_to_point_order(encode):
    xy = jax.random.uniform(jax.random.key(1), (64, 2))
    v = frames_on(xy)
    mask = jax.random.bernoulli(jax.random.key(2), 0.7, (64,))
    perm = jax.random.permutation(jax.random.key(3), 64)
    z = encode(xy, v, mask)
    zp = encode(xy[perm], v[perm], mask[perm])
    np.testing.assert_allclose(np.asarray(zp), np.asarray(z), atol=2e-5)


def test_encoder_accepts_any_number_of_points_and_converges_with_resolution(encode):
    # The Galerkin mean is a quadrature of an integral over the domain: on finer
    # grids of the same smooth field the latent converges.
    zs = {}
    for n in (8, 16, 32):  # 64, 256 and 1024 points
        xy = grid(n)
        zs[n] = np.asarray(encode(xy, frames_on(xy)))
        assert zs[n].shape == (8,) and np.isfinite(zs[n]).all()
    err8, err16 = (np.linalg.norm(zs[n] - zs[32]) for n in (8, 16))
    assert err16 < 0.5 * err8
    assert err16 < 0.05 * np.linalg.norm(zs[32])


def test_masked_points_have_no_effect(encode):
    xy = jax.random.uniform(jax.random.key(5), (64, 2))
    v = frames_on(xy)
    mask = jnp.arange(64) % 4 != 0  # 48 observed points
    # Garbage (NaN, huge) at masked points changes nothing ...
    garbage = jnp.where(mask[:, None], v, jnp.nan)
    z_nan = encode(xy, garbage, mask)
    z_big = encode(xy, jnp.where(mask[:, None], v, 1e6), mask)
    # ... and equals encoding the observed subset alone.
    z_sub = encode(xy[mask], v[mask])
    np.testing.assert_allclose(np.asarray(z_nan), np.asarray(z_sub), atol=2e-5)
    np.testing.assert_allclose(np.asarray(z_big), np.asarray(z_sub), atol=2e-5)
    # A per-channel mask that drops every channel of a point is the same as a point mask.
    z_ch = encode(xy, garbage, jnp.broadcast_to(mask[:, None], (64, 2)))
    np.testing.assert_allclose(np.asarray(z_ch), np.asarray(z_sub), atol=2e-5)


def test_encoder_errors_name_the_argument(model):
    enc = model.encoder
    xy = grid(4)
    v = frames_on(xy)
    with pytest.raises(ValueError, match="values must have shape"):
        enc(xy, v[:-1], None)
    with pytest.raises(ValueError, match="values must have shape"):
        enc(xy, v[:, :1], None)
    with pytest.raises(ValueError, match="coords must have shape"):
        enc(jnp.zeros((16, 3)), v, None)
    with pytest.raises(ValueError, match="mask must have shape"):
        enc(xy, v, jnp.ones((15,), bool))
    with pytest.raises(ValueError, match="mask must have shape"):
        enc(xy, v, jnp.ones((16, 3), bool))
    with pytest.raises(TypeError, match="mask must have a bool dtype"):
        enc(xy, v, jnp.ones((16,)))
    with pytest.raises(ValueError, match="empty observation set"):
        enc(jnp.zeros((0, 2)), jnp.zeros((0, 2)), None)
    with pytest.raises(ValueError, match="empty observation set"):
        enc(xy, v, jnp.zeros((16,), bool))
    with pytest.raises(ValueError, match="finite at observed points"):
        enc(xy, v.at[0, 0].set(jnp.nan), None)
    # Inside jit the mask is not known before tracing: the error comes at run time.
    jitted = eqx.filter_jit(lambda m: enc(xy, v, m))
    with pytest.raises(Exception, match="empty observation set"):
        jax.block_until_ready(jitted(jnp.zeros((16,), bool)))


# --------------------------------------------------------------------------- decoder


def test_decoder_at_any_resolution(model):
    z = jax.random.normal(jax.random.key(6), (8,))
    dec = eqx.filter_jit(lambda c: model.decode(z, c))
    coarse, fine = dec(grid(8)), dec(grid(16))
    assert coarse.shape == (64, 1) and fine.shape == (256, 1)
    # The 16-grid contains the 8-grid: the decoder gives the same values there.
    fine_on_coarse = fine.reshape(16, 16, 1)[::2, ::2].reshape(64, 1)
    np.testing.assert_allclose(np.asarray(fine_on_coarse), np.asarray(coarse), atol=1e-5)
    # Any single scattered point evaluates to the same as inside a batch.
    xy = jax.random.uniform(jax.random.key(7), (5, 2))
    one = jnp.concatenate([dec(xy[i : i + 1]) for i in range(5)])
    np.testing.assert_allclose(np.asarray(one), np.asarray(dec(xy)), atol=1e-5)
    with pytest.raises(ValueError, match="z must have shape"):
        model.decode(jnp.zeros(7), xy)
    with pytest.raises(ValueError, match="coords must have shape"):
        model.decode(z, jnp.zeros((5, 3)))


# --------------------------------------------------------------------------- backbone


def _linear_latents(key, n=200, d=5, noise=0.0):
    ka, kb, kz, kn = jax.random.split(key, 4)
    q, _ = jnp.linalg.qr(jax.random.normal(ka, (d, d)))
    A = 0.9 * q @ jnp.diag(jnp.linspace(0.5, 1.0, d)) @ q.T
    b = jax.random.normal(kb, (d,))
    z0 = jax.random.normal(kz, (n, d))
    z1 = z0 @ A.T + b + noise * jax.random.normal(kn, (n, d))
    return A, b, z0, z1


# Jitted with a static ridge: one compiled solve per ridge (ridge = 0 takes the SVD path).
fit_jit = jax.jit(kp.fit_backbone, static_argnums=2)


def test_closed_form_equals_least_squares_and_ridge_formula():
    with jax.enable_x64(True):
        _, _, z0, z1 = _linear_latents(jax.random.key(8), noise=0.3)
        z0, z1 = z0.astype(jnp.float64), z1.astype(jnp.float64)
        x = np.concatenate([np.asarray(z0), np.ones((z0.shape[0], 1))], 1)
        theta = np.linalg.lstsq(x, np.asarray(z1), rcond=None)[0].T
        bb = fit_jit(z0, z1, 0.0)
        np.testing.assert_allclose(np.asarray(bb.A), theta[:, :-1], atol=1e-10)
        np.testing.assert_allclose(np.asarray(bb.b), theta[:, -1], atol=1e-10)
        # Ridge on the mean statistics: (X^T X / N + r I)^{-1} X^T Y / N.
        n, r = x.shape[0], 0.1
        ridge = np.linalg.solve(x.T @ x / n + r * np.eye(x.shape[1]), x.T @ np.asarray(z1) / n).T
        bb = fit_jit(z0, z1, r)
        np.testing.assert_allclose(np.asarray(bb.A), ridge[:, :-1], atol=1e-10)
        np.testing.assert_allclose(np.asarray(bb.b), ridge[:, -1], atol=1e-10)
        # Statistics accumulate over batches: two halves give the one-shot answer.
        stats = kp.init_stats(5, jnp.float64)
        stats = kp.update_stats(stats, z0[:77], z1[:77])
        stats = kp.update_stats(stats, z0[77:], z1[77:])
        bb2 = kp.solve_backbone(stats, ridge=r)
        np.testing.assert_allclose(np.asarray(bb2.A), ridge[:, :-1], atol=1e-10)


def test_linear_system_is_recovered_exactly_with_its_spectrum():
    with jax.enable_x64(True):
        A, b, z0, z1 = _linear_latents(jax.random.key(9))
        bb = fit_jit(z0.astype(jnp.float64), z1.astype(jnp.float64), 0.0)
        np.testing.assert_allclose(np.asarray(bb.A), np.asarray(A), atol=1e-9)
        np.testing.assert_allclose(np.asarray(bb.b), np.asarray(b), atol=1e-9)
        want = np.sort(np.abs(np.linalg.eigvals(np.asarray(A, np.float64))))[::-1]
        np.testing.assert_allclose(np.abs(kp.spectrum(bb)), want, atol=1e-9)
        assert kp.spectral_radius(bb) == pytest.approx(0.9, abs=1e-9)
    with pytest.raises(ValueError, match="z0 and z1 must have the same shape"):
        kp.fit_backbone(jnp.zeros((4, 3)), jnp.zeros((4, 2)))
    with pytest.raises(ValueError, match="ridge must be >= 0"):
        kp.fit_backbone(jnp.zeros((4, 3)), jnp.zeros((4, 3)), ridge=-1.0)


def test_rom_with_the_full_basis_is_the_full_model_and_pod_is_orthonormal():
    A, b, z0, _ = _linear_latents(jax.random.key(10), d=6)
    bb = kp.KoopmanBackbone(A, b)
    lat = jax.vmap(lambda z: kp.rollout_linear(bb, z, 5))(z0[:20])  # [20, 6, 6]
    basis, centre, s = kp.pod_basis(lat, 6)
    np.testing.assert_allclose(np.asarray(basis.T @ basis), np.eye(6), atol=1e-5)
    assert np.all(np.diff(np.asarray(s)) <= 1e-6)
    red = kp.reduce(bb, basis, centre)
    w = kp.rollout_linear(red, kp.project(z0[0], basis, centre), 10)
    full = kp.rollout_linear(bb, z0[0], 10)
    np.testing.assert_allclose(np.asarray(kp.lift(w, basis, centre)), np.asarray(full), atol=1e-4)
    # Fewer modes: a reduced (different) model of the right size.
    basis2, centre2, _ = kp.pod_basis(lat, 2)
    assert kp.reduce(bb, basis2, centre2).A.shape == (2, 2)


# --------------------------------------------------------------------------- memory


@pytest.fixture(scope="module")
def memories():
    d = 4
    A, b, _, _ = _linear_latents(jax.random.key(11), d=d)
    bb = kp.KoopmanBackbone(A, b)
    leaky = kp.LeakyMemory(d, 6, hidden=8, key=jax.random.key(12))
    window = kp.WindowMemory(d, 3, hidden=8, key=jax.random.key(13))
    return bb, leaky, window


def test_memory_at_init_is_the_linear_model(memories):
    bb, leaky, window = memories
    z0 = jnp.array([0.3, -1.0, 0.5, 2.0])
    lin = kp.rollout_linear(bb, z0, 12)
    for mem in (leaky, window):
        out = kp.rollout(bb, z0, 12, mem)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(lin))
    # The leaky memory's gamma is in (0, 1): a finite memory time (tau = 1/log 2 at init).
    np.testing.assert_allclose(np.asarray(leaky.memory_time), 1 / np.log(2.0), rtol=1e-6)


def _perturbed(mem, key):
    """The memory with every float leaf nudged (a non-trivial correction)."""
    leaves, tree = jax.tree_util.tree_flatten(eqx.filter(mem, eqx.is_inexact_array))
    keys = jax.random.split(key, len(leaves))
    leaves = [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    return eqx.combine(jax.tree_util.tree_unflatten(tree, leaves), mem)


class _Drift(kp.AbstractMemory):
    """A user's memory: a constant drift ``c`` and a step counter as state."""

    c: jax.Array
    centre: jax.Array
    scale: jax.Array

    def __init__(self, c):
        self.c = jnp.asarray(c)
        self.centre, self.scale = jnp.zeros_like(self.c), jnp.ones_like(self.c)

    def init(self, z0):
        return jnp.zeros((), jnp.int32)

    def correction(self, z, state):
        return self.c, state + 1


def test_a_user_memory_runs_through_the_shared_step(memories):
    bb, leaky, window = memories
    # One concrete step for every memory (the documented pattern).
    assert kp.LeakyMemory.step is kp.AbstractMemory.step is kp.WindowMemory.step
    c = jnp.array([0.1, 0.0, -0.2, 0.3])
    drift = _Drift(c)
    z0 = jnp.array([0.3, -1.0, 0.5, 2.0])
    out = kp.rollout(bb, z0, 5, drift)
    want = [z0]
    for _ in range(5):
        want.append(bb(want[-1]) + c)
    np.testing.assert_allclose(np.asarray(out), np.asarray(jnp.stack(want)), atol=1e-5)
    z1, state, info = drift.step(bb, z0, drift.init(z0))
    assert int(state) == 1 and np.allclose(np.asarray(info.correction), np.asarray(c))
    assert isinstance(leaky.init(z0), kp.LeakyState)
    assert isinstance(window.init(z0), kp.WindowState)
    with pytest.raises(TypeError, match="abstract"):
        kp.AbstractMemory()


def test_memory_loss_is_zero_for_an_exact_linear_path_and_warm_state(memories):
    bb, leaky, window = memories
    z0 = jnp.array([[0.1, 0.2, -0.3, 0.4], [1.0, 0.0, 0.5, -0.5]])
    paths = jax.vmap(lambda z: kp.rollout_linear(bb, z, 6))(z0)
    # At init the correction is zero and the path is exactly linear: every term is 0.
    for mem in (leaky, window):
        assert float(kp.memory_loss(mem, bb, paths)) == pytest.approx(0.0, abs=1e-10)
    # Reading a history and continuing equals rolling out through it (teacher forcing
    # on a path the model itself produced).
    mem = _perturbed(window, jax.random.key(16))
    path = kp.rollout(bb, z0[0], 8, mem)
    state = kp.warm_state(mem, bb, path[:4])
    cont = kp.rollout(bb, path[3], 5, mem, state=state)
    np.testing.assert_allclose(np.asarray(cont), np.asarray(path[3:]), atol=1e-5)


# --------------------------------------------------------------------------- model


def test_delay_embed_orders_channels_and_carries_the_mask():
    vals = jnp.arange(4 * 3 * 1, dtype=jnp.float32).reshape(4, 3, 1)  # t=4, n=3, c=1
    mask = jnp.ones((4, 3), bool).at[2, 1].set(False)
    v, m = kp.delay_embed(vals, mask, 2)
    assert v.shape == (3, 3, 2)
    np.testing.assert_array_equal(np.asarray(v[1, 2]), [vals[1, 2, 0], vals[2, 2, 0]])
    assert not bool(m[1, 1, 1]) and bool(m[1, 1, 0]) and not bool(m[2, 1, 0])
    with pytest.raises(ValueError, match="mask must have shape"):
        kp.delay_embed(vals, jnp.ones((4, 2), bool), 2)


def test_phase1_loss_ignores_masked_values_and_is_deterministic(model):
    xy = grid(4)
    key = jax.random.key(17)
    vals = jax.random.normal(key, (2, 4, 16, 1))
    mask = jax.random.bernoulli(jax.random.key(18), 0.6, (2, 4, 16)).at[:, :, 0].set(True)
    f = eqx.filter_jit(lambda m, v: kp.phase1_loss(m, xy, v, mask))
    loss_a, aux = f(model, vals)
    loss_b, _ = f(model, jnp.where(mask[..., None], vals, 1e3))
    assert np.isfinite(float(loss_a)) and set(aux) == {"rec", "dyn", "pred"}
    assert float(loss_b) == pytest.approx(float(loss_a), rel=1e-5)
    # Same key, same model; another key, another model.
    again = kp.Merlin(2, 1, CONFIG, key=jax.random.key(0))
    for x, y in zip(jax.tree_util.tree_leaves(model), jax.tree_util.tree_leaves(again),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    other = kp.Merlin(2, 1, CONFIG, key=jax.random.key(1))
    assert not np.allclose(np.asarray(other.decoder.latent_w), np.asarray(model.decoder.latent_w))


def test_train_memory_is_deterministic_and_lowers_its_loss(memories):
    bb, _, _ = memories
    # Latent paths of a nonlinear map: the linear backbone alone cannot follow them.
    def step(z, _):
        z = bb(z) + 0.3 * jnp.sin(z[::-1])
        return z, z

    z0 = jax.random.normal(jax.random.key(19), (6, 4))
    paths = jax.vmap(lambda z: jnp.concatenate([z[None], jax.lax.scan(step, z, None, 9)[1]]))(z0)
    cfg = kp.MemoryConfig(memory_dim=8, hidden=16, steps=60, batch_size=6, horizon=6, lr=3e-3)
    m1, l1 = kp.train_memory(bb, paths, jax.random.key(20), cfg)
    m2, l2 = kp.train_memory(bb, paths, jax.random.key(20), cfg)
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_array_equal(np.asarray(m1.raw_gate), np.asarray(m2.raw_gate))
    assert l1[-5:].mean() < 0.7 * l1[:5].mean()
    with pytest.raises(ValueError, match="horizon 20 needs 21 latents"):
        kp.train_memory(bb, paths, jax.random.key(0), kp.MemoryConfig(horizon=20))
    with pytest.raises(ValueError, match="kind must be one of"):
        kp.MemoryConfig(kind="lstm")
    # Any AbstractMemory trains: here a given (non-default) initial module.
    win = kp.WindowMemory(4, 2, hidden=8, depth=1, key=jax.random.key(21))
    m3, l3 = kp.train_memory(bb, paths, jax.random.key(20), cfg, memory=win)
    assert isinstance(m3, kp.WindowMemory) and l3[-5:].mean() < l3[:5].mean()
    with pytest.raises(TypeError, match="memory must be an AbstractMemory"):
        kp.train_memory(bb, paths, jax.random.key(20), cfg, memory=bb)


def test_training_helpers_validate_data(model):
    xy = grid(4)
    vals = jnp.zeros((3, 6, 16, 1))
    with pytest.raises(ValueError, match="n = 16 points to match coords"):
        kp.train_phase1(model, xy, vals[:, :, :8], jax.random.key(0))
    with pytest.raises(ValueError, match="mask must have shape"):
        kp.encode_dataset(model, xy, vals, jnp.ones((3, 6, 15), bool))
    with pytest.raises(ValueError, match="empty observation set"):
        kp.encode_dataset(model, xy, vals, jnp.zeros((3, 6, 16), bool))
    with pytest.raises(ValueError, match="exceeds the 6 snapshots"):
        kp.train_phase1(model, xy, vals, jax.random.key(0), kp.Phase1Config(window=8))
    with pytest.raises(ValueError, match="frames must have shape"):
        model.encode(xy, jnp.zeros((3, 16, 1)))


def test_array_likes_are_accepted(model):
    xy = grid(2)
    frames = np.stack([np.sin(np.arange(4.0)), np.cos(np.arange(4.0))])[..., None]  # [2, 4, 1]
    z = model.encode(xy.tolist(), frames.astype(np.float32).tolist())
    np.testing.assert_allclose(np.asarray(z), np.asarray(model.encode(xy, jnp.asarray(
        frames, jnp.float32))), atol=1e-6)
    out = model.decode(np.asarray(z).tolist(), xy.tolist())
    np.testing.assert_allclose(np.asarray(out), np.asarray(model.decode(z, xy)), atol=1e-6)


# The optional design choices of issue 25 (diagonal RoPE, the authors' anchor-distance
# position features, the linear function-encoder basis path, the decoder's modulation
# MLP) keep the encoder a functional of the observed points.
OPTIONS = kp.MerlinConfig(
    n_cond=2,
    encoder=kp.EncoderConfig(n_tokens=2, token_dim=4, width=16, heads=2, n_self_layers=0,
                             n_cross_layers=1, n_freqs=4, freq_scale=1.0, rope=(1.0, 2.0),
                             rope_mode="diagonal", pos_ref=3, basis=5),
    decoder=kp.DecoderConfig(hidden=8, n_layers=1, input_scale=8.0, mod_hidden=6, basis=3),
)


def test_design_options_keep_the_encoder_a_functional_of_the_observed_points():
    model = kp.Merlin(2, 1, OPTIONS, key=jax.random.key(0))
    enc = eqx.filter_jit(lambda c, v, m: model.encoder(c, v, m))
    xy = jax.random.uniform(jax.random.key(1), (64, 2))
    v = frames_on(xy)
    mask = jnp.arange(64) % 4 != 0
    full = jnp.ones((64, 2), bool)
    z = enc(xy, jnp.where(mask[:, None], v, jnp.nan), jnp.broadcast_to(mask[:, None], (64, 2)))
    z_sub = enc(xy[mask], v[mask], jnp.ones((48, 2), bool))
    np.testing.assert_allclose(np.asarray(z), np.asarray(z_sub), atol=2e-5)
    perm = jax.random.permutation(jax.random.key(3), 64)
    np.testing.assert_allclose(np.asarray(enc(xy[perm], v[perm], full)),
                               np.asarray(enc(xy, v, full)), atol=2e-5)
    out = model.decode(z, xy)
    assert out.shape == (64, 1) and np.isfinite(np.asarray(out)).all()
    # The modulation MLP and the basis path are zero at initialisation: the decoder is
    # the linear-modulation MFN.
    plain = kp.Merlin(2, 1, dataclasses.replace(
        OPTIONS, decoder=dataclasses.replace(OPTIONS.decoder, mod_hidden=0, basis=0)),
        key=jax.random.key(0))
    np.testing.assert_allclose(np.asarray(out), np.asarray(plain.decode(z, xy)), atol=1e-6)


def test_pod_init_starts_as_the_linear_pod_model_of_an_oscillation(model):
    """A standing wave ``cos(wt) cos(2 pi x) + sin(wt) sin(2 pi y)`` lies in the lowest
    Fourier modes: after ``pod_init`` the model decodes every training frame from its
    latent exactly, the nonlinear paths are silent, and the least-squares backbone of
    the latents (ridge 0) propagates them with eigenvalues on the unit circle."""
    cfg = dataclasses.replace(
        OPTIONS, encoder=dataclasses.replace(OPTIONS.encoder, n_tokens=1, token_dim=2,
                                             basis=5))
    pod_model = kp.Merlin(2, 1, cfg, key=jax.random.key(0))
    xy = grid(8)
    t = jnp.arange(12, dtype=jnp.float32)[:, None]
    traj = [jnp.cos(w * t) * jnp.cos(2 * jnp.pi * xy[:, 0]) + jnp.sin(w * t) * jnp.sin(
        2 * jnp.pi * xy[:, 1]) for w in (0.3, 0.3)]
    vals = jnp.stack(traj)[..., None]  # [2, 12, 64, 1]
    vals = vals.at[1].multiply(0.5)  # a second amplitude
    init = kp.pod_init(pod_model, xy, vals)
    assert not np.any(np.asarray(init.encoder.out_proj.weight))
    assert not np.any(np.asarray(init.decoder.out_w))
    lat = kp.encode_dataset(init, xy, vals, np.ones(vals.shape[:3], bool))
    rec = np.asarray(eqx.filter_jit(kp.decode_latents)(init, lat, xy))[..., 0]
    np.testing.assert_allclose(rec, np.asarray(vals[:, 1:, :, 0]), atol=2e-4)
    eig = np.abs(np.asarray(kp.spectrum(kp.fit_global_backbone(lat, 0.0, bias=False))))
    top = np.sort(eig)[-2:]
    np.testing.assert_allclose(top, 1.0, atol=1e-3)
    with pytest.raises(ValueError, match="Fourier linear paths"):
        kp.pod_init(model, xy, vals)  # no linear paths


def test_rope_vectors_are_relative_and_dealt_to_the_heads():
    vec = kp.rope_vectors((1.0, 2.0), 2, 3)  # 8 vectors over 3 heads -> 3 per head
    assert vec.shape == (3, 3, 2)
    assert {tuple(v) for v in vec.reshape(-1, 2)} >= {(1, 0), (0, 1), (1, 1), (1, -1),
                                                      (2, 0), (2, 2), (2, -2)}
    attn = kp.GalerkinAttention(12, 3, 6, rope=(1.0, 2.0), rope_mode="diagonal",
                                coord_dim=2, key=jax.random.key(0))
    q = jax.random.normal(jax.random.key(1), (4, 12))
    pts = jax.random.normal(jax.random.key(2), (16, 12))
    qp, kp_ = jax.random.uniform(jax.random.key(3), (4, 2)), jax.random.uniform(
        jax.random.key(4), (16, 2))
    w = jnp.ones(16)
    shift = jnp.array([0.3, -0.2])  # a common shift of every position changes nothing
    np.testing.assert_allclose(np.asarray(attn(q, pts, w, qp + shift, kp_ + shift)),
                               np.asarray(attn(q, pts, w, qp, kp_)), atol=2e-5)
    np.testing.assert_array_equal(kp.lattice_frequencies(5, 2),
                                  [[0, 0], [0, 1], [1, 0], [1, -1], [1, 1]])
    d = kp.anchor_distances(jnp.array([[0.0, 0.0], [1.0, 1.0]]), 2)
    np.testing.assert_allclose(np.asarray(d), [[0, 1, 1, np.sqrt(2)], [np.sqrt(2), 1, 1, 0]],
                               atol=1e-6)


def test_phase1_warmup_is_validated():
    assert kp.Phase1Config(steps=10, warmup=3).warmup == 3
    with pytest.raises(ValueError, match="warmup"):
        kp.Phase1Config(steps=10, warmup=10)
    with pytest.raises(ValueError, match="rope_mode"):
        kp.EncoderConfig(rope_mode="spiral")
    with pytest.raises(ValueError, match="basis_kind"):
        kp.EncoderConfig(basis_kind="wavelet")
