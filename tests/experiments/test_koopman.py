import dataclasses

import jax
import numpy as np
import pytest

from jaxsci.core import apply_overrides
from jaxsci.dynamics import koopman as kp
from jaxsci.experiments import koopman as exp


@pytest.fixture(scope="module")
def smoke(smoke_run):
    out, m, _ = smoke_run("koopman")  # the protocol test's smoke run, shared
    return out, m


def test_smoke_metrics_have_every_data_set_and_horizon(smoke):
    out, m = smoke
    cfg = exp.CONFIGS["smoke"]
    for key in ("rollout_rel_l2_linear", "rollout_rel_l2_memory", "dmd_rel_l2", "ratio_to_dmd"):
        assert set(m[key]) == set(cfg.datasets), key
        for name in cfg.datasets:
            assert set(m[key][name]) == {str(h) for h in cfg.horizons}, key
    for name in cfg.datasets:
        ratio = m["rollout_rel_l2_memory"][name]["1"] / m["dmd_rel_l2"][name]["1"]
        assert m["ratio_to_dmd"][name]["1"] == pytest.approx(ratio)
        eig = np.asarray(m["eigenvalues_A"][name]["real"]) + 1j * np.asarray(
            m["eigenvalues_A"][name]["imag"]
        )
        assert eig.size == cfg.model.latent_dim
        assert m["spectral_radius_A"][name] == pytest.approx(np.abs(eig).max())
        short = exp.SHORT[name]
        h = str(max(cfg.horizons))
        assert m[f"rel_l2_memory_hmax_{short}"] == m["rollout_rel_l2_memory"][name][h]
    assert set(m["rel_l2_masked_50"]) == set(cfg.masked_datasets)
    assert set(m["rel_l2_superres"]) == set(cfg.superres_datasets)
    assert "DMD" in (out / "report.md").read_text()


def test_config_validation_and_one_owner_of_the_model_sizes():
    with pytest.raises(ValueError, match="datasets must be one of"):
        exp.KoopmanConfig(datasets=("burgers",))
    with pytest.raises(ValueError, match="not in datasets"):
        exp.KoopmanConfig(datasets=("wave",), masked_datasets=("navier_stokes",))
    with pytest.raises(ValueError, match="mask_fraction must be < 1"):
        exp.KoopmanConfig(mask_fraction=1.0)
    with pytest.raises(ValueError, match="rom_dim must be <= 64"):
        exp.KoopmanConfig(rom_dim=65)
    with pytest.raises(ValueError, match="dmd_delays must be"):
        exp.KoopmanConfig(dmd_delays=(4,))
    with pytest.raises(ValueError, match="token_dim must be >= 1"):
        exp.KoopmanConfig(model=kp.MerlinConfig(encoder=kp.EncoderConfig(token_dim=0)))
    with pytest.raises(TypeError, match="model must be a MerlinConfig"):
        exp.KoopmanConfig(model={"n_cond": 3})
    with pytest.raises(ValueError, match="init must be one of"):
        exp.KoopmanConfig(init="dmd")
    with pytest.raises(ValueError, match="init='pod' needs the Fourier linear paths"):
        exp.KoopmanConfig(init="pod", masked_datasets=())
    with pytest.raises(ValueError, match="init='pod' needs fully observed"):
        exp.KoopmanConfig(init="pod", model=kp.MerlinConfig(
            encoder=kp.EncoderConfig(basis=8), decoder=kp.DecoderConfig(basis=8)))
    # The sizes live in the library's configs only; the experiment nests them.
    names = {f.name for f in dataclasses.fields(exp.KoopmanConfig)}
    for cls in (kp.EncoderConfig, kp.DecoderConfig):
        assert not names & {f.name for f in dataclasses.fields(cls)}, cls
    model = exp.new_model(exp.CONFIGS["smoke"], jax.random.key(0))
    assert model.latent_dim == exp.CONFIGS["smoke"].model.latent_dim
    # Nested fields are set from the command line with dots.
    cfg = apply_overrides(exp.CONFIGS["smoke"], ["model.encoder.token_dim=3"])
    assert cfg.model.encoder.token_dim == 3 and cfg.model.latent_dim == 6


def test_random_masks_drop_the_fraction_in_every_snapshot():
    masks = exp.random_masks(jax.random.key(0), (3, 4, 100), 0.5)
    assert masks.shape == (3, 4, 100)
    np.testing.assert_array_equal(masks.sum(-1), 50)
    # Different snapshots miss different points.
    assert not np.array_equal(masks[0, 0], masks[0, 1])


def test_dmd_peer_forecasts_a_linear_system_exactly():
    # Snapshots of a rank-6 linear map on R^40 (oscillating, slowly decaying modes):
    # DMD on the pairs of several trajectories must forecast a new one exactly.
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(40, 6)))
    ang = np.array([0.1, 0.25, 0.4])
    blocks = [0.98 * np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]) for a in ang]
    small = np.zeros((6, 6))
    for i, b in enumerate(blocks):
        small[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = b
    M = q @ small @ q.T

    def traj(x0, t):
        xs = [x0]
        for _ in range(t - 1):
            xs.append(M @ xs[-1])
        return np.stack(xs)

    train = np.stack([traj(q @ rng.normal(size=6), 12) for _ in range(5)])
    test = traj(q @ rng.normal(size=6), 31)[None]
    fit = exp.dmd_fit(train, rank=6, delay=1, centred=False)
    pred = exp.dmd_forecast(fit, test[:, :1], 30)
    np.testing.assert_allclose(pred, test, atol=1e-8)
    # Delay vectors of this system span the same 6 dimensions; the forecast keeps the
    # last frame of each delay vector.
    fit = exp.dmd_fit(train, rank=6, delay=2, centred=False)
    pred = exp.dmd_forecast(fit, test[:, :2], 29)
    np.testing.assert_allclose(pred, test[:, 1:], atol=1e-8)


def test_dmd_in_pod_coordinates_equals_dmd_on_the_full_snapshots():
    # Random walks: a slowly decaying spectrum, so rank truncation matters.
    x = np.random.default_rng(1).normal(size=(4, 15, 30)).cumsum(1)
    for delay, centred in ((1, False), (2, True)):
        full = exp.dmd_fit(x, 5, delay, centred)
        comp = exp.dmd_fit(x, 5, delay, centred, exp.pod_compress(x, delay, centred, 8))
        a = exp.dmd_forecast(full, x[:, :delay], 10)
        b = exp.dmd_forecast(comp, x[:, :delay], 10)
        np.testing.assert_allclose(b, a, atol=1e-4 * np.abs(a).max())
