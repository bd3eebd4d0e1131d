"""Reproduction: MERLIN on the 2-D wave and Navier-Stokes sets, against DMD.

For each data set (:mod:`jaxsci.data.pde`: the MERLIN wave set, ``c = 1/16``,
frames ``dt = 0.25`` apart on ``[-1, 1]^2``; the FNO Navier-Stokes vorticity set,
``nu = 1e-3``, frames 1 time unit apart) trajectories are split into train and
test. On the training set MERLIN is fitted in two phases
(:mod:`jaxsci.dynamics.koopman`): Phase I trains the function encoder/decoder
under linear constraints and solves the global ``A, b`` from all latent pairs;
Phase II trains the Mori-Zwanzig memory with ``A, b`` frozen. Each test
trajectory is encoded from its first ``n_cond`` frames and rolled out
``max(horizons)`` steps, linearly and with memory, and decoded on the grid.

Measured (``metrics.json``):

* ``rollout_rel_l2_linear`` / ``rollout_rel_l2_memory``: ``{dataset: {h: err}}``,
  mean over test trajectories of ``|u_pred - u|_2 / |u|_2`` at horizon ``h``;
* ``dmd_rel_l2``: the same for PyDMD (the peer a user would pick), fitted on the
  same training snapshots; its delay embedding (``dmd_delays``), centring and
  SVD rank (``dmd_ranks``) are chosen on a validation split of the training set
  (the peer's best configuration); ``ratio_to_dmd`` = memory / DMD error;
* ``rel_l2_masked_50``: a second model trained *and* tested with ``mask_fraction``
  of the points missing at random in every snapshot (errors against the full
  field, at every point);
* ``rel_l2_superres``: the model trained at ``n_grid`` decoded on the grid
  ``superres_factor`` times finer, against the truth there (the data are
  generated on the fine grid and strided, so both grids hold the same
  trajectories);
* ``spectral_radius_A``, the spectrum of ``A``; ``rom_rel_l2_*``: the
  reduced-order model on ``rom_dim`` POD modes of the latents, linear and with
  a memory trained in the reduced coordinates; ``rel_l2_reconstruction``: the
  autoencoder error (every test frame encoded and decoded, no dynamics).

The ``masked`` and ``superres`` entries have the extra horizon ``0`` (the
reconstruction of the first encoded frame). The claims read flat numbers at the
longest horizon (``rel_l2_memory_hmax_wave``, ...; NaN for a data set the config
leaves out), computed in :func:`run`.

Resume: each data set's MERLIN fit + evaluation, its DMD fit and its masked run are
cells (``ctx.cell``), and the Phase-I / Phase-II trainings checkpoint through
``core.fit`` (``ctx.checkpoint_dir``), so an interrupted
``jaxsci reproduce koopman`` continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_choice, check_int, check_scalar
from jaxsci.data import pde
from jaxsci.dynamics import koopman as kp

__all__ = [
    "KoopmanConfig", "CONFIGS", "METRICS", "CLAIMS", "EXPERIMENT", "run", "new_model",
    "fit_merlin", "evaluate", "dmd_fit", "dmd_forecast", "dmd_select", "pod_compress",
]

DATASETS = ("wave", "navier_stokes")
# Physical domain lengths of the generators (MERLIN's wave set lives on [-1, 1]^2,
# the FNO Navier-Stokes set on [0, 1)^2); coordinates are rescaled to [0, 1).
_LENGTH = {"wave": 2.0, "navier_stokes": 1.0}


@dataclasses.dataclass(frozen=True)
class KoopmanConfig:
    datasets: tuple[str, ...] = DATASETS
    n_train: int = 80
    n_test: int = 20
    n_grid: int = 32  # training resolution
    horizons: tuple[int, ...] = (1, 10, 50)
    # The model's sizes: one owner, the library's MerlinConfig (its defaults are the
    # authors' NS run: 8 tokens x 16, n_cond 3). Quick: a 64-dimensional latent, a
    # narrow encoder without self-attention, decoder bandwidth 32.
    model: kp.MerlinConfig = kp.MerlinConfig(
        n_cond=3,
        encoder=kp.EncoderConfig(token_dim=8, width=32, heads=2, n_self_layers=0,
                                 n_cross_layers=1),
        decoder=kp.DecoderConfig(input_scale=32.0),
    )
    # Phase I is most of the quick run's time (the encoder over 7 x 1024 points per
    # window). A trim to 150 Phase-I / 200 memory steps was measured and loses the
    # Navier-Stokes ROM claim (memory 0.4644 vs linear 0.4624 at h = 50), so quick
    # keeps 250 / 300 (docs/koopman.md, "Run time").
    phase1: kp.Phase1Config = kp.Phase1Config(
        steps=250, batch_size=4, window=5, lr=3e-3, n_query=256
    )
    # Memory trained on rollouts as long as the longest test horizon (the authors
    # train on 10-frame windows for their 15-step evaluation).
    memory: kp.MemoryConfig = kp.MemoryConfig(
        memory_dim=32, hidden=64, steps=300, batch_size=32, horizon=50, lr=1e-3
    )
    rom_dim: int = 8
    # Masked and super-resolution runs (the data sets they are run on).
    mask_fraction: float = 0.5
    masked_datasets: tuple[str, ...] = ("wave",)
    superres_datasets: tuple[str, ...] = ("wave",)
    superres_factor: int = 2
    # PyDMD search space (rank x delay x centring), picked on a validation split.
    # Delay 1 (plain DMD) cannot represent the second-order wave equation; the quick
    # config searches the delay of the model's own input (n_cond frames) only.
    dmd_ranks: tuple[int, ...] = (16, 64)
    dmd_delays: tuple[int, ...] = (3,)
    dmd_val_fraction: float = 0.2
    # ETDRK4 step of the NS generator at 32 x 32: frames within 1.5e-4 (relative) of
    # those with dt = 0.01 over 50 time units (measured).
    ns_inner_dt: float = 0.1
    # The model's start before Phase I: "random" (the authors') or "pod" (ours,
    # :func:`jaxsci.dynamics.koopman.pod_init`: the linear paths at the POD of the
    # delay-stacked training data, DMD's coordinates; needs model.encoder.basis and
    # model.decoder.basis, and fully observed training data: no masked runs).
    init: str = "random"

    def __post_init__(self):
        if not self.datasets:
            raise ValueError("datasets must be non-empty")
        for name in (*self.datasets, *self.masked_datasets, *self.superres_datasets):
            check_choice("datasets", name, DATASETS)
        for name in (*self.masked_datasets, *self.superres_datasets):
            if name not in self.datasets:
                raise ValueError(f"{name!r} is in masked/superres_datasets but not in datasets")
        check_int("n_train", self.n_train, min=2)
        check_int("n_test", self.n_test, min=1)
        check_int("n_grid", self.n_grid, min=4)
        if not self.horizons or min(self.horizons) < 1:
            raise ValueError(f"horizons must be non-empty and >= 1, got {self.horizons}")
        for name, cls in (("model", kp.MerlinConfig), ("phase1", kp.Phase1Config),
                          ("memory", kp.MemoryConfig)):
            if not isinstance(getattr(self, name), cls):
                raise TypeError(f"{name} must be a {cls.__name__}, got "
                                f"{type(getattr(self, name)).__name__}")
        check_int("rom_dim", self.rom_dim, min=1, max=self.model.latent_dim)
        check_scalar("mask_fraction", self.mask_fraction, ge=0.0, lt=1.0)
        check_int("superres_factor", self.superres_factor, min=1)
        check_scalar("dmd_val_fraction", self.dmd_val_fraction, gt=0.0, lt=1.0)
        check_scalar("ns_inner_dt", self.ns_inner_dt, gt=0.0)
        check_choice("init", self.init, ("random", "pod"))
        if self.init == "pod":
            if not (self.model.encoder.basis and self.model.encoder.basis_kind == "fourier"
                    and self.model.decoder.basis):
                raise ValueError("init='pod' needs the Fourier linear paths: set "
                                 "model.encoder.basis and model.decoder.basis")
            if self.masked_datasets:
                raise ValueError("init='pod' needs fully observed training data: set "
                                 "masked_datasets to ()")
        if not self.dmd_ranks or min(self.dmd_ranks) < 1:
            raise ValueError(f"dmd_ranks must be non-empty and >= 1, got {self.dmd_ranks}")
        if not self.dmd_delays or not all(1 <= d <= self.n_cond for d in self.dmd_delays):
            raise ValueError(
                f"dmd_delays must be non-empty, each in [1, n_cond={self.n_cond}], "
                f"got {self.dmd_delays}"
            )
        if self.phase1.window + self.n_cond - 1 > self.n_snapshots:
            raise ValueError("phase1.window does not fit in a trajectory")
        if self.memory.horizon > self.n_snapshots - self.n_cond:
            raise ValueError("memory.horizon does not fit in a trajectory")

    @property
    def n_cond(self) -> int:
        return self.model.n_cond

    @property
    def n_snapshots(self) -> int:
        # The first latent is at frame n_cond - 1; the longest horizon must follow it.
        return self.n_cond + max(self.horizons)


def _tiny_model() -> kp.MerlinConfig:
    return kp.MerlinConfig(
        n_cond=2,
        encoder=kp.EncoderConfig(n_tokens=2, token_dim=4, width=8, heads=1, n_self_layers=0,
                                 n_cross_layers=1, n_freqs=4, rope=(4.0, 2.0)),
        decoder=kp.DecoderConfig(hidden=8, n_layers=1, input_scale=16.0),
    )


CONFIGS = {
    # Seconds: the pipeline on both sets at 8 x 8.
    "smoke": KoopmanConfig(
        n_train=6, n_test=2, n_grid=8, horizons=(1, 3, 5), model=_tiny_model(),
        phase1=kp.Phase1Config(steps=3, batch_size=2, window=3, n_query=32),
        memory=kp.MemoryConfig(memory_dim=4, hidden=8, steps=3, batch_size=4, horizon=3),
        rom_dim=2, dmd_ranks=(4,), dmd_delays=(1, 2), ns_inner_dt=0.1,
    ),
    # A few minutes on 2 CPU cores: 32 x 32 grids, 100 trajectories per set.
    "quick": KoopmanConfig(),
    # The authors' sizes (NS script: 8 x 16 latent, decoder 128 x 4, 800 epochs over
    # 800 trajectories, memory 128): for a GPU.
    "full": KoopmanConfig(
        n_train=800, n_test=200, n_grid=32,
        model=kp.MerlinConfig(
            n_cond=3,
            encoder=kp.EncoderConfig(n_tokens=8, token_dim=16, width=128, heads=4,
                                     n_self_layers=3, n_cross_layers=2, n_freqs=32),
            decoder=kp.DecoderConfig(hidden=128, n_layers=3, input_scale=32.0),
        ),
        phase1=kp.Phase1Config(steps=40_000, batch_size=16, window=8, n_query=0),
        memory=kp.MemoryConfig(memory_dim=128, hidden=512, steps=20_000, batch_size=32,
                               horizon=10),
        rom_dim=16, masked_datasets=DATASETS, superres_datasets=DATASETS,
        dmd_ranks=(16, 32, 64, 128, 256), dmd_delays=(1, 3), ns_inner_dt=0.025,
    ),
}


# --------------------------------------------------------------------------- data


def generate(name: str, key: jax.Array, n_traj: int, n_grid: int, config: KoopmanConfig):
    """Trajectories ``[b, t, n_grid, n_grid]`` of data set ``name``."""
    t = config.n_snapshots
    if name == "wave":
        return pde.wave_dataset(key, n_traj, n_grid, t)
    return pde.navier_stokes_dataset(key, n_traj, n_grid, t, inner_dt=config.ns_inner_dt)


def grid_coords(n: int) -> jax.Array:
    """Grid points of the unit torus, ``[n * n, 2]`` (the generators' grids, rescaled)."""
    return pde.grid_2d(n, 1.0).reshape(-1, 2)


def rel_l2(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """``|pred - truth| / |truth|`` over the last axis (the flattened field)."""
    return np.linalg.norm(pred - truth, axis=-1) / np.linalg.norm(truth, axis=-1)


def random_masks(key: jax.Array, shape: tuple[int, ...], fraction: float) -> np.ndarray:
    """Boolean observation masks ``shape + (n,)`` with exactly ``round(fraction n)`` missing
    points per snapshot, chosen at random (independently per snapshot)."""
    *lead, n = shape
    n_miss = int(round(fraction * n))
    scores = jax.random.uniform(key, (*lead, n))
    ranks = jnp.argsort(jnp.argsort(scores, axis=-1), axis=-1)
    return np.asarray(ranks >= n_miss)


# --------------------------------------------------------------------------- DMD peer


def _delay_snapshots(u: np.ndarray, delay: int) -> np.ndarray:
    """``[b, t, p]`` -> delay vectors ``[b, t - delay + 1, delay * p]`` (oldest first)."""
    b, t, p = u.shape
    idx = np.arange(t - delay + 1)[:, None] + np.arange(delay)[None, :]
    return u[:, idx].reshape(b, t - delay + 1, delay * p)


def pod_compress(train: np.ndarray, delay: int, centred: bool, rank: int, seed: int = 0):
    """Delay vectors of the training trajectories and their leading POD basis.

    Returns ``(coefficients [b, s, rank], basis [p, rank], mean [p])``; the basis is
    the ``rank`` leading left singular vectors of the matrix ``X`` of the pairs'
    first snapshots (the matrix PyDMD truncates), by randomized SVD (Halko et al.
    2011, 4 power iterations).
    """
    from sklearn.utils.extmath import randomized_svd

    x = _delay_snapshots(train, delay).astype(np.float64)
    mean = x.reshape(-1, x.shape[-1]).mean(0) if centred else np.zeros(x.shape[-1])
    x = x - mean
    first = x[:, :-1].reshape(-1, x.shape[-1])
    rank = min(rank, *first.shape)
    u, _, _ = randomized_svd(first.T, rank, n_iter=4, random_state=seed)
    return x @ u, u, mean


def dmd_fit(train: np.ndarray, rank: int, delay: int, centred: bool, compressed=None):
    """PyDMD (``DMD(svd_rank=rank)``) on all consecutive snapshot pairs of ``[b, t, p]``.

    With ``compressed = pod_compress(train, delay, centred, r >= rank)`` the pairs are
    given to PyDMD in POD coordinates: PyDMD's projected DMD of rank ``rank`` on the
    coefficients, lifted by the basis, is the same operator and modes as on the full
    snapshots (its rank-``rank`` SVD of the coefficients is that of the snapshots in
    the POD frame), but each fit costs an SVD of ``r x pairs`` instead of
    ``p x pairs`` (PyDMD also takes a full SVD of both snapshot matrices for a
    condition-number warning).
    """
    from pydmd import DMD

    if compressed is None:
        x = _delay_snapshots(train, delay).astype(np.float64)
        mean = x.reshape(-1, x.shape[-1]).mean(0) if centred else np.zeros(x.shape[-1])
        x, basis = x - mean, None
    else:
        x, basis, mean = compressed
    X = x[:, :-1].reshape(-1, x.shape[-1]).T
    Y = x[:, 1:].reshape(-1, x.shape[-1]).T
    with warnings.catch_warnings():
        # PyDMD warns whenever the snapshot matrix has condition number > 1e5, which
        # every rank-deficient field data set has; the truncated SVD handles it.
        warnings.filterwarnings("ignore", message="Input data condition number")
        dmd = DMD(svd_rank=rank)
        dmd.fit(X, Y)
    modes = dmd.modes if basis is None else basis @ dmd.modes
    return {"modes": modes, "eigs": dmd.eigs, "mean": mean, "delay": delay}


def dmd_forecast(fit: dict, frames: np.ndarray, steps: int) -> np.ndarray:
    """Forecast ``[b, steps + 1, p]`` from the first frames ``[b, k, p]`` of each trajectory.

    The DMD reconstruction ``x_h = Phi diag(lambda)^h a`` with amplitudes ``a`` the
    least-squares fit of the delay vector at the last given frame.
    """
    d = fit["delay"]
    x0 = frames[:, -d:].reshape(frames.shape[0], -1) - fit["mean"]
    phi, lam = fit["modes"], fit["eigs"]
    amp = np.linalg.lstsq(phi, x0.T.astype(phi.dtype), rcond=None)[0]  # [r, b]
    powers = lam[None, :] ** np.arange(steps + 1)[:, None]  # [h, r]
    x = np.einsum("pr,hr,rb->bhp", phi, powers, amp).real + fit["mean"]
    p = frames.shape[-1]
    return x[..., -p:]


def dmd_select(train: np.ndarray, config: KoopmanConfig, horizon: int):
    """The peer's best configuration: rank, delay and centring by validation error.

    Returns the choice and, for it, the POD compression of the whole training set.
    """
    n_val = max(1, int(round(config.dmd_val_fraction * train.shape[0])))
    fit_part, val = train[:-n_val], train[-n_val:]
    k, r_max = config.n_cond, max(config.dmd_ranks)
    best = None
    for delay in config.dmd_delays:
        for centred in (False, True):
            comp = pod_compress(fit_part, delay, centred, r_max)
            for rank in config.dmd_ranks:
                fit = dmd_fit(fit_part, rank, delay, centred, comp)
                pred = dmd_forecast(fit, val[:, :k], horizon)
                err = float(rel_l2(pred[:, -1], val[:, k - 1 + horizon]).mean())
                if np.isfinite(err) and (best is None or err < best[0]):
                    best = (err, {"rank": rank, "delay": delay, "centred": centred})
    # Every candidate blew up: keep the first (its error is reported as measured).
    first = {"rank": config.dmd_ranks[0], "delay": config.dmd_delays[0], "centred": False}
    choice = best[1] if best else first
    return choice


# --------------------------------------------------------------------------- MERLIN


def new_model(config: KoopmanConfig, key: jax.Array) -> kp.Merlin:
    """A fresh MERLIN model for the 2-D scalar fields of the experiment (``config.model``)."""
    return kp.Merlin(2, 1, config.model, key=key)


@eqx.filter_jit
def _rollouts(backbone, memory, z0, steps: int):
    lin = jax.vmap(lambda z: kp.rollout(backbone, z, steps))(z0)
    mem = jax.vmap(lambda z: kp.rollout(backbone, z, steps, memory))(z0)
    return lin, mem


@eqx.filter_jit
def _decode_flat(model, flat, coords, chunk: int):
    return jax.lax.map(lambda z: model.decode(z, coords)[:, 0], flat, batch_size=chunk)


def decode_all(model, zs, coords, chunk: int = 64) -> np.ndarray:
    """Decode latents ``[..., d]`` on ``coords`` ``[n, 2]`` -> ``[..., n]`` (chunked, jitted)."""
    flat = zs.reshape(-1, zs.shape[-1])
    return np.asarray(_decode_flat(model, flat, coords, chunk)).reshape(*zs.shape[:-1], -1)


def fit_merlin(config, key, coords, train, mask=None, progress=False, ctx=None, tag=""):
    """Phase I, global backbone, Phase II. ``train`` ``[b, t, n]`` normalised.

    With a :class:`~jaxsci.core.Context` the two trainings checkpoint into
    ``ctx.checkpoint_dir`` (stages ``phase1_<tag>``, ``memory_<tag>``), so an
    interrupted CLI run resumes them.
    """
    k_model, k_p1, k_mem = jax.random.split(key, 3)
    model = new_model(config, k_model)
    vals = jnp.asarray(train)[..., None]
    if config.init == "pod":
        model = kp.pod_init(model, coords, vals)
    mask = np.ones(train.shape, bool) if mask is None else mask

    def ckpt(stage):
        return None if ctx is None else str(ctx.checkpoint_dir(f"{stage}_{tag}"))

    t0 = time.perf_counter()
    model, losses = kp.train_phase1(model, coords, vals, k_p1, config.phase1, mask=mask,
                                    progress=progress, checkpoint_dir=ckpt("phase1"),
                                    desc=f"{tag} encoder/decoder (Phase I)")
    latents = kp.encode_dataset(model, coords, vals, mask)
    backbone = kp.fit_global_backbone(latents, config.phase1.ridge)
    t1 = time.perf_counter()
    memory, mem_losses = kp.train_memory(backbone, latents, k_mem, config.memory,
                                         progress=progress, checkpoint_dir=ckpt("memory"),
                                         desc=f"{tag} memory (Phase II)")
    t2 = time.perf_counter()
    return {
        "model": model, "backbone": backbone, "memory": memory, "latents": latents,
        "phase1_losses": losses, "memory_losses": mem_losses,
        "phase1_time_s": t1 - t0, "memory_time_s": t2 - t1,
    }


def _all_latents(model, coords, test, mask=None):
    """Latents of every delay stack of the test trajectories ``[b, t - n_cond + 1, d]``."""
    mask = np.ones(test.shape, bool) if mask is None else mask
    return kp.encode_dataset(model, coords, jnp.asarray(test)[..., None], mask)


def _initial_latents(model, coords, test, mask=None):
    """The first latent of each test trajectory (frames ``0..n_cond-1``).

    Whole trajectories are encoded (the first latent kept): the same compiled
    encoder as for the training set, at the price of encoding frames not used.
    """
    return _all_latents(model, coords, test, mask)[:, 0]


def evaluate(fitted, config, coords, test, mask=None):
    """Test rollouts from the first ``n_cond`` frames of ``test`` ``[b, t, n]``.

    Returns the decoded fields ``{"linear", "memory"}`` ``[b, h + 1, n]`` (normalised
    units; index ``h`` is frame ``n_cond - 1 + h``) and the latents.
    """
    model, backbone, memory = fitted["model"], fitted["backbone"], fitted["memory"]
    hmax = max(config.horizons)
    z0 = _initial_latents(model, coords, test, mask)
    lin, mem = _rollouts(backbone, memory, z0, hmax)
    fields = {"linear": decode_all(model, lin, coords), "memory": decode_all(model, mem, coords)}
    return fields, {"linear": lin, "memory": mem}


SHORT = {"wave": "wave", "navier_stokes": "ns"}


def _merlin_cell(config, name, k_fit, k_rom, coords, data, ctx) -> dict:
    """MERLIN on one data set: fit, test rollouts, ROM, super-resolution (flat arrays)."""
    train, test, test_raw, raw_fine, mu, sd = data
    k_cond = config.n_cond
    target = test_raw[:, k_cond - 1 :]
    out: dict = {}
    fitted = fit_merlin(config, k_fit, coords, train, progress=ctx.progress, ctx=ctx, tag=name)
    out["t_phase1"], out["t_memory"] = fitted["phase1_time_s"], fitted["memory_time_s"]
    fields, zs = evaluate(fitted, config, coords, test)
    for kind, v in fields.items():
        v = v * sd + mu
        out[f"curve_{kind}"] = rel_l2(v, target).mean(0)
        out[f"ex_{kind}"] = v[0]
    out["ex_truth"] = target[0]
    # Autoencoder error: every test frame encoded (with its n_cond - 1 predecessors)
    # and decoded, no dynamics.
    recon = decode_all(fitted["model"], _all_latents(fitted["model"], coords, test), coords)
    out["recon"] = rel_l2(recon * sd + mu, target).mean()
    spec = kp.spectrum(fitted["backbone"])
    out["eig_real"], out["eig_imag"] = spec.real, spec.imag
    out["phase1_loss"] = np.mean(fitted["phase1_losses"][-20:])
    out["memory_loss"] = np.mean(fitted["memory_losses"][-20:])
    # Reduced-order model on rom_dim POD modes of the training latents.
    t0 = time.perf_counter()
    rom = _rom(config, fitted, coords, test, k_rom, ctx, name)
    for kind in ("linear", "memory"):
        out[f"curve_rom_{kind}"] = rel_l2(rom[kind] * sd + mu, target).mean(0)
    out["rom_energy"] = rom["energy"]
    out["t_rom"] = time.perf_counter() - t0
    # Super-resolution: decode the same rollouts on the fine grid.
    if raw_fine is not None:
        fine_coords = grid_coords(int(round(np.sqrt(raw_fine.shape[-1]))))
        truth_fine = raw_fine[:, k_cond - 1 :]
        sr = decode_all(fitted["model"], zs["memory"], fine_coords) * sd + mu
        out["curve_superres"] = rel_l2(sr, truth_fine).mean(0)
    return out


def _dmd_cell(config, train, test, test_raw, mu, sd) -> dict:
    """The PyDMD peer on the same normalised training snapshots (flat arrays)."""
    k_cond, hmax = config.n_cond, max(config.horizons)
    t0 = time.perf_counter()
    choice = dmd_select(train, config, min(10, hmax))
    t1 = time.perf_counter()
    comp = pod_compress(train, choice["delay"], choice["centred"], choice["rank"])
    fit = dmd_fit(train, choice["rank"], choice["delay"], choice["centred"], comp)
    t2 = time.perf_counter()
    pred = dmd_forecast(fit, test[:, :k_cond], hmax) * sd + mu
    return {
        "curve_dmd": rel_l2(pred, test_raw[:, k_cond - 1 :]).mean(0), "ex_dmd": pred[0],
        "rank": choice["rank"], "delay": choice["delay"], "centred": choice["centred"],
        "t_select": t1 - t0, "t_fit": t2 - t1,
    }


def _masked_cell(config, name, k_mask, k_fit, coords, data, shape, ctx) -> dict:
    """A second model trained and tested with ``mask_fraction`` of the points missing."""
    train, test, test_raw, _, mu, sd = data
    masks = random_masks(k_mask, shape, config.mask_fraction)
    mtrain, mtest = masks[: config.n_train], masks[config.n_train :]
    t0 = time.perf_counter()
    fm = fit_merlin(config, k_fit, coords, np.where(mtrain, train, np.nan), mtrain,
                    ctx.progress, ctx, f"{name}_masked")
    mf, _ = evaluate(fm, config, coords, np.where(mtest, test, np.nan), mtest)
    target = test_raw[:, config.n_cond - 1 :]
    out = {f"curve_{kind}": rel_l2(mf[kind] * sd + mu, target).mean(0) for kind in mf}
    out["observed"] = masks.mean()
    out["t"] = time.perf_counter() - t0
    return out


def _load(name, key, config):
    """Normalised train/test fields ``[b, t, n]`` (and the fine-grid truth for
    super-resolution), with the normalisation."""
    fine = name in config.superres_datasets and config.superres_factor > 1
    n_native = config.n_grid * (config.superres_factor if fine else 1)
    raw = np.asarray(generate(name, key, config.n_train + config.n_test, n_native, config))
    stride = n_native // config.n_grid
    data = raw[..., ::stride, ::stride]
    b, t = data.shape[:2]
    data = data.reshape(b, t, -1)
    train_raw, test_raw = data[: config.n_train], data[config.n_train :]
    mu, sd = float(train_raw.mean()), float(train_raw.std())
    raw_fine = raw[config.n_train :].reshape(config.n_test, t, -1) if fine else None
    return data.shape, ((train_raw - mu) / sd, (test_raw - mu) / sd, test_raw, raw_fine, mu, sd)


def run(config: KoopmanConfig, ctx: Context) -> dict:
    """MERLIN and the DMD peer on each data set; returns the metrics (module docstring)."""
    m: dict = {k: {} for k in ("rollout_rel_l2_linear", "rollout_rel_l2_memory", "dmd_rel_l2",
                               "ratio_to_dmd", "rel_l2_masked_50", "rel_l2_masked_50_linear",
                               "rel_l2_superres", "rel_l2_superres_coarse_reference",
                               "spectral_radius_A", "rel_l2_reconstruction",
                               "rom_rel_l2_linear", "rom_rel_l2_memory", "eigenvalues_A",
                               "phase1_final_loss", "memory_final_loss",
                               "rom_energy_fraction", "dmd_config",
                               "masked_fraction_observed", "timings_s")}
    curves: dict = {}
    spectra: dict = {}
    examples: dict = {}
    stages = len(config.datasets) * 3 + len(config.masked_datasets)
    bar = ctx.bar(total=stages, desc="koopman: data sets x stages")
    coords = grid_coords(config.n_grid)
    for i, name in enumerate(config.datasets):
        k_data, k_fit, k_mask, k_rom, k_mfit = jax.random.split(jax.random.fold_in(ctx.key, i), 5)
        bar.set_postfix(dataset=name, stage="data")
        t0 = time.perf_counter()
        shape, data = _load(name, k_data, config)
        m["timings_s"][f"data_{name}"] = time.perf_counter() - t0
        bar.update()
        bar.set_postfix(dataset=name, stage="merlin")
        c = ctx.cell(f"merlin/{name}", functools.partial(_merlin_cell, config, name, k_fit,
                                                          k_rom, coords, data, ctx))
        bar.update()
        bar.set_postfix(dataset=name, stage="dmd")
        train, test, test_raw, _, mu, sd = data
        d = ctx.cell(f"dmd/{name}", functools.partial(_dmd_cell, config, train, test,
                                                      test_raw, mu, sd))
        bar.update()
        for stage in ("phase1", "memory", "rom"):
            m["timings_s"][f"{stage}_{name}"] = float(c[f"t_{stage}"])
        m["timings_s"][f"dmd_select_{name}"] = float(d["t_select"])
        m["timings_s"][f"dmd_fit_{name}"] = float(d["t_fit"])
        curves[name] = {"linear": c["curve_linear"], "memory": c["curve_memory"],
                        "rom_linear": c["curve_rom_linear"],
                        "rom_memory": c["curve_rom_memory"], "dmd": d["curve_dmd"]}
        for kind in ("linear", "memory"):
            m[f"rollout_rel_l2_{kind}"][name] = _at(c[f"curve_{kind}"], config.horizons)
            m[f"rom_rel_l2_{kind}"][name] = _at(c[f"curve_rom_{kind}"], config.horizons)
        m["dmd_rel_l2"][name] = _at(d["curve_dmd"], config.horizons)
        m["ratio_to_dmd"][name] = {
            str(h): m["rollout_rel_l2_memory"][name][str(h)] / m["dmd_rel_l2"][name][str(h)]
            for h in config.horizons
        }
        m["dmd_config"][name] = {"rank": int(d["rank"]), "delay": int(d["delay"]),
                                 "centred": bool(d["centred"])}
        spec = c["eig_real"] + 1j * c["eig_imag"]
        spectra[name] = spec
        m["spectral_radius_A"][name] = float(np.abs(spec).max())
        m["eigenvalues_A"][name] = {"real": c["eig_real"], "imag": c["eig_imag"]}
        m["rel_l2_reconstruction"][name] = float(c["recon"])
        m["phase1_final_loss"][name] = float(c["phase1_loss"])
        m["memory_final_loss"][name] = float(c["memory_loss"])
        m["rom_energy_fraction"][name] = float(c["rom_energy"])
        if "curve_superres" in c:
            m["rel_l2_superres"][name] = _at(c["curve_superres"], (0, *config.horizons))
            # The coarse-grid error of the same rollouts, for comparison.
            m["rel_l2_superres_coarse_reference"][name] = _at(c["curve_memory"],
                                                              (0, *config.horizons))
        examples[name] = {"truth": c["ex_truth"], "linear": c["ex_linear"],
                          "memory": c["ex_memory"], "dmd": d["ex_dmd"], "n": config.n_grid}
        if name in config.masked_datasets:
            bar.set_postfix(dataset=name, stage="masked")
            mk = ctx.cell(f"masked/{name}", functools.partial(
                _masked_cell, config, name, k_mask, k_mfit, coords, data, shape, ctx))
            m["timings_s"][f"masked_{name}"] = float(mk["t"])
            m["rel_l2_masked_50"][name] = _at(mk["curve_memory"], (0, *config.horizons))
            m["rel_l2_masked_50_linear"][name] = _at(mk["curve_linear"], (0, *config.horizons))
            m["masked_fraction_observed"][name] = float(mk["observed"])
            bar.update()
    bar.close()
    m.update(_claim_metrics(config, m))
    m["horizons"] = list(config.horizons)
    m["error_curves"] = curves
    ctx.report.add_figure(
        plot_snapshots(examples, config), "snapshots.png",
        "One test trajectory per data set: truth, MERLIN linear and memory rollouts and DMD "
        "at the horizons (colour: the field, in the data set's units).",
    )
    ctx.report.add_figure(
        plot_errors(curves), "error_vs_horizon.png",
        "Mean relative L2 error over the test trajectories vs rollout horizon.",
    )
    ctx.report.add_figure(
        plot_spectra(spectra), "eigenvalues.png",
        "Eigenvalues of the learned Koopman matrix A with the unit circle.",
    )
    ctx.report.add_text(summary_markdown(config, m))
    return m


def _claim_metrics(config: KoopmanConfig, m: dict) -> dict:
    """The flat numbers the claims read, at the longest horizon (NaN: not run)."""
    h = str(max(config.horizons))
    nan = float("nan")
    out = {}
    for name, short in SHORT.items():
        ran = name in config.datasets

        def get(key, name=name, ran=ran):
            return m[key][name][h] if ran else nan

        out[f"rel_l2_linear_hmax_{short}"] = get("rollout_rel_l2_linear")
        out[f"rel_l2_memory_hmax_{short}"] = get("rollout_rel_l2_memory")
        out[f"rom_rel_l2_linear_hmax_{short}"] = get("rom_rel_l2_linear")
        out[f"rom_rel_l2_memory_hmax_{short}"] = get("rom_rel_l2_memory")
        out[f"dmd_rel_l2_hmax_{short}"] = get("dmd_rel_l2")
        out[f"spectral_radius_{short}"] = m["spectral_radius_A"][name] if ran else nan
    w = "wave"
    out["superres_over_coarse_hmax_wave"] = (
        m["rel_l2_superres"][w][h] / m["rel_l2_superres_coarse_reference"][w][h]
        if w in m["rel_l2_superres"] else nan)
    out["masked_over_full_hmax_wave"] = (
        m["rel_l2_masked_50"][w][h] / m["rollout_rel_l2_memory"][w][h]
        if w in m["rel_l2_masked_50"] else nan)
    return out


def _at(curve: np.ndarray, horizons) -> dict:
    return {str(h): float(curve[h]) for h in horizons}


def _rom(config, fitted, coords, test, key, ctx=None, tag=""):
    """ROM: roll out in the rom_dim leading POD coordinates of the training latents."""
    model, backbone, latents = fitted["model"], fitted["backbone"], fitted["latents"]
    basis, centre, s = kp.pod_basis(latents, config.rom_dim)
    red = kp.reduce(backbone, basis, centre)
    w_train = kp.project(latents, basis, centre)
    ckpt = None if ctx is None else str(ctx.checkpoint_dir(f"rom_memory_{tag}"))
    memory, _ = kp.train_memory(red, w_train, key, config.memory, progress=ctx is not None
                                and ctx.progress, checkpoint_dir=ckpt,
                                desc=f"{tag} ROM memory (Phase II, {config.rom_dim} modes)")
    hmax = max(config.horizons)
    w0 = kp.project(_initial_latents(model, coords, test), basis, centre)
    lin, mem = _rollouts(red, memory, w0, hmax)
    out = {
        kind: decode_all(model, kp.lift(w, basis, centre), coords)
        for kind, w in (("linear", lin), ("memory", mem))
    }
    energy = np.asarray(s) ** 2
    out["energy"] = float(energy[: config.rom_dim].sum() / energy.sum())
    return out


# --------------------------------------------------------------------------- figures


_FIELD = {"wave": "displacement u", "navier_stokes": "vorticity w"}
_DT = {"wave": 0.25, "navier_stokes": 1.0}  # time between frames (generators' units)
_ORIGIN = {"wave": -1.0, "navier_stokes": 0.0}


def plot_snapshots(examples: dict, config: KoopmanConfig):
    plt = pyplot()
    hs = (0, *config.horizons)
    rows = [(name, kind) for name in examples for kind in ("truth", "linear", "memory", "dmd")]
    fig, axes = plt.subplots(
        len(rows), len(hs), figsize=(2.0 * len(hs) + 1.2, 2.0 * len(rows)), squeeze=False,
        constrained_layout=True,
    )
    for r, (name, kind) in enumerate(rows):
        ex = examples[name]
        n = ex["n"]
        lo, hi = float(ex["truth"].min()), float(ex["truth"].max())
        x0, length = _ORIGIN.get(name, 0.0), _LENGTH.get(name, 1.0)
        extent = (x0, x0 + length, x0, x0 + length)
        for c, h in enumerate(hs):
            ax = axes[r, c]
            im = ax.imshow(ex[kind][h].reshape(n, n).T, origin="lower", cmap="RdBu_r",
                           vmin=lo, vmax=hi, extent=extent)
            ax.set_title(f"{name} {kind}, h={h}", fontsize=7)
            ax.set_xlabel("x", fontsize=7, labelpad=1)
            ax.set_ylabel("y", fontsize=7, labelpad=1)
            ax.tick_params(labelsize=6, length=2)
        fig.colorbar(im, ax=axes[r, :], shrink=0.9, label=_FIELD.get(name, "u"))
    return fig


def plot_errors(curves: dict):
    plt = pyplot()
    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 3.6), squeeze=False,
                             constrained_layout=True)
    style = {"linear": ("C0", "-"), "memory": ("C1", "-"), "dmd": ("k", "--"),
             "rom_linear": ("C0", ":"), "rom_memory": ("C1", ":")}
    for ax, (name, c) in zip(axes[0], curves.items(), strict=True):
        for kind, (color, ls) in style.items():
            if kind in c:
                e = np.asarray(c[kind])
                ax.semilogy(np.arange(1, e.size), e[1:], color=color, ls=ls, label=kind)
        ax.set_xlabel(f"horizon h (steps of {_DT.get(name, 1.0):g} time units)")
        ax.set_ylabel("relative L2 error (mean over test trajectories)")
        ax.set_title(f"{name}: rollout error vs horizon")
        ax.legend(fontsize=8)
    return fig


def plot_spectra(spectra: dict):
    plt = pyplot()
    fig, axes = plt.subplots(1, len(spectra), figsize=(4 * len(spectra), 4), squeeze=False,
                             constrained_layout=True)
    th = np.linspace(0, 2 * np.pi, 400)
    for ax, (name, eig) in zip(axes[0], spectra.items(), strict=True):
        ax.plot(np.cos(th), np.sin(th), "k-", lw=0.8, label="unit circle")
        ax.scatter(eig.real, eig.imag, s=14, c="C3", label="eigenvalues of A")
        ax.legend(fontsize=7, loc="lower left")
        ax.set_aspect("equal")
        ax.set_title(f"{name}: rho(A) = {np.abs(eig).max():.4f}")
        ax.set_xlabel("Re lambda (per step)")
        ax.set_ylabel("Im lambda (per step)")
    return fig


def summary_markdown(config: KoopmanConfig, m: dict) -> str:
    lines = ["| data set | h | linear | memory | DMD | memory / DMD |", "|---|---|---|---|---|---|"]
    for name in config.datasets:
        for h in config.horizons:
            h = str(h)
            lines.append(
                f"| {name} | {h} | {m['rollout_rel_l2_linear'][name][h]:.4f} | "
                f"{m['rollout_rel_l2_memory'][name][h]:.4f} | {m['dmd_rel_l2'][name][h]:.4f} | "
                f"{m['ratio_to_dmd'][name][h]:.3f} |"
            )
    out = ["Relative L2 rollout error (mean over test trajectories):", "", *lines, ""]
    for name in config.datasets:
        out.append(
            f"- {name}: spectral radius of A {m['spectral_radius_A'][name]:.4f}; "
            f"reconstruction error {m['rel_l2_reconstruction'][name]:.4f}; "
            f"ROM ({config.rom_dim} modes) at h={max(config.horizons)}: linear "
            f"{m['rom_rel_l2_linear'][name][str(max(config.horizons))]:.4f}, memory "
            f"{m['rom_rel_l2_memory'][name][str(max(config.horizons))]:.4f}; DMD config "
            f"{m['dmd_config'][name]}"
        )
    def fmt(d):
        return ", ".join(f"h={h}: {v:.4f}" for h, v in d.items())

    for name, v in m["rel_l2_masked_50"].items():
        out.append(
            f"- masked ({config.mask_fraction:.0%} missing), {name}, memory: {fmt(v)}; "
            f"linear: {fmt(m['rel_l2_masked_50_linear'][name])}"
        )
    for name, v in m["rel_l2_superres"].items():
        out.append(
            f"- super-resolution x{config.superres_factor}, {name}: {fmt(v)} "
            f"(same rollouts on the training grid: "
            f"{fmt(m['rel_l2_superres_coarse_reference'][name])})"
        )
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- protocol

_PER_SET = "{name}: mean over test trajectories at the longest horizon (NaN if not run)"

METRICS = (
    Metric("rollout_rel_l2_linear", "MERLIN linear backbone, relative L2 error "
           "{data set: {horizon: error}}", better="lower"),
    Metric("rollout_rel_l2_memory", "MERLIN with the Mori-Zwanzig memory, relative L2 error "
           "{data set: {horizon: error}}", better="lower"),
    Metric("dmd_rel_l2", "PyDMD (best validated rank/delay/centring), relative L2 error "
           "{data set: {horizon: error}}", better="lower"),
    Metric("ratio_to_dmd", "MERLIN + memory error / DMD error {data set: {horizon: ratio}}",
           better="lower"),
    # Empty when the config leaves the masked / super-resolution runs out.
    Metric("rel_l2_masked_50", "trained and tested with mask_fraction of the points missing "
           "per snapshot, with memory {data set: {horizon: error}} (horizon 0: reconstruction)",
           better="lower", finite=False),
    Metric("rel_l2_superres", "trained at n_grid, decoded superres_factor times finer vs the "
           "fine truth {data set: {horizon: error}}", better="lower", finite=False),
    Metric("spectral_radius_A", "max |eigenvalue| of the learned Koopman matrix A "
           "{data set: radius}"),
    Metric("rel_l2_reconstruction", "autoencoder error, every test frame encoded and decoded "
           "{data set: error}", better="lower"),
    Metric("rom_rel_l2_linear", "reduced-order model on rom_dim POD modes, linear "
           "{data set: {horizon: error}}", better="lower"),
    Metric("rom_rel_l2_memory", "reduced-order model with a memory in the reduced "
           "coordinates {data set: {horizon: error}}", better="lower"),
    *(Metric(f"{kind}_hmax_{short}", _PER_SET.format(name=f"{what}, {name}"), better="lower",
             finite=False)
      for name, short in SHORT.items()
      for kind, what in (("rel_l2_linear", "linear backbone"),
                         ("rel_l2_memory", "with memory"),
                         ("rom_rel_l2_linear", "ROM, linear"),
                         ("rom_rel_l2_memory", "ROM with memory"),
                         ("dmd_rel_l2", "PyDMD"))),
    *(Metric(f"spectral_radius_{short}", f"{name}: max |eigenvalue| of A (NaN if not run)",
             finite=False) for name, short in SHORT.items()),
    Metric("superres_over_coarse_hmax_wave", "wave, longest horizon: error decoded on the fine "
           "grid / error of the same rollouts on the training grid (NaN if not run)",
           finite=False),
    Metric("masked_over_full_hmax_wave", "wave, longest horizon: error of the model trained "
           "and tested with half the points missing / the full-grid model's (NaN if not run)",
           finite=False),
)

_SCALE_NOTE = (
    "Quick: 250 Phase-I steps on 80 trajectories on 2 CPU cores; the paper trains 800 "
    "epochs on 800 trajectories on a GPU (the full config has the authors' sizes).")

CLAIMS = (
    Claim("memory_lowers_long_horizon_error_wave",
          "the Mori-Zwanzig memory lowers the long-horizon rollout error of the linear "
          "backbone (wave)",
          "rel_l2_memory_hmax_wave < rel_l2_linear_hmax_wave"),
    Claim("memory_lowers_long_horizon_error_ns",
          "the Mori-Zwanzig memory lowers the long-horizon rollout error of the linear "
          "backbone (Navier-Stokes)",
          "rel_l2_memory_hmax_ns < rel_l2_linear_hmax_ns"),
    Claim("memory_lowers_rom_error_wave",
          "the memory also lowers the long-horizon error of the reduced-order model (wave)",
          "rom_rel_l2_memory_hmax_wave < rom_rel_l2_linear_hmax_wave"),
    Claim("memory_lowers_rom_error_ns",
          "the memory also lowers the long-horizon error of the reduced-order model "
          "(Navier-Stokes)",
          "rom_rel_l2_memory_hmax_ns < rom_rel_l2_linear_hmax_ns"),
    Claim("koopman_operator_stable",
          "the learned linear Koopman operator is (near-)stable: no eigenvalue far outside "
          "the unit circle",
          "max(spectral_radius_wave, spectral_radius_ns) < 1.05",
          note="1.05 is our bound (a 50-step rollout of a larger radius blows up by "
               "1.05^50 = 11x); the paper gives no number."),
    Claim("resolution_free_decoding",
          "the decoder reconstructs fields at unseen resolutions: decoded twice finer, the "
          "error against the fine truth is that on the training grid",
          "superres_over_coarse_hmax_wave < 1.1",
          note="Our 10% tolerance; the fields are smooth at this scale, so the error is the "
               "model's, not the resolution's."),
    Claim("partial_observations",
          "from partial observations (half the points missing at random in every snapshot, "
          "training and test) the forecast error stays within 1.5x of the full-grid model's",
          "masked_over_full_hmax_wave < 1.5",
          note="The 1.5x bound is ours (the paper reports robustness without this number)."),
    Claim("beats_dmd_ns",
          "MERLIN with memory beats DMD on the same data at the long horizon (Navier-Stokes)",
          "rel_l2_memory_hmax_ns < dmd_rel_l2_hmax_ns",
          note="Holds at the long horizon only: at quick (seed 0) 0.40 vs 0.58 at h = 50, "
               "a tie at h = 10 (0.24 vs 0.23) and a loss at h = 1 (0.50 vs 0.25)."),
    Claim("beats_dmd_wave",
          "MERLIN with memory beats DMD on the same data at the long horizon (wave)",
          "rel_l2_memory_hmax_wave < dmd_rel_l2_hmax_wave", scale="full",
          note=_SCALE_NOTE + " A known gap: the wave equation is linear, so delay-embedded "
               "DMD of rank 64 is close to exact (error ~0.07 at h = 50), while the "
               "encoder/decoder at this budget reconstructs with ~36% error, which bounds "
               "every MERLIN number. With the encoder's and decoder's linear basis paths "
               "and 4000 Phase-I steps (docs/koopman.md, issue 25) the reconstruction "
               "error is 3.5% but the h = 50 error still 0.70 (10x DMD's): the latent "
               "dynamics, not the reconstruction, are then the gap."),
)

EXPERIMENT = Experiment(
    name="koopman",
    title="MERLIN functional Koopman with memory, vs DMD",
    paper=("W. Lu, H. Ma, W. Lin, Q. Zhu, \"Interpretable Functional Koopman Learning with "
           "Non-Markovian Closure for Spatiotemporal Systems\" (MERLIN), ICML 2026"),
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
