r"""MERLIN end to end: encoder + decoder + linear backbone (Phase I), memory (Phase II).

MERLIN (Lu, Ma, Lin, Zhu, ICML 2026). A trajectory of fields ``u_t`` observed at
points ``x_i`` (any set, some missing) is mapped to latent observables

    z_t = E({(x_i, [u_{t-k+1}, ..., u_t](x_i))}_i)         (delay-stacked, k = n_cond)

by the function encoder, evolved by ``z_{t+1} = A z_t + b`` (+ memory), and read
back anywhere by the function decoder ``u_t(x) = D(z_t, x)``.

Phase I, *training under linear constraints* (the authors' ``train_phase1_linear``,
ridge mode): for a batch of windows of ``L`` latents, the affine map is solved in
closed form on the batch's latent pairs with gradients stopped,
``[A* b*] = ridge_fit(sg(z_t), sg(z_{t+1}))``, and the encoder/decoder minimise

    L_I = |D(z_t) - u_t|^2  +  lambda_dyn |A* z_t + b* - z_{t+1}|^2
          +  lambda_pred |D(A* z_t + b*) - u_{t+1}|^2

(the first and last over observed points only; defaults ``lambda_dyn = 0.05``,
``lambda_pred = 0.1``, ``ridge = 5e-3``, Adam at 1e-3: the authors' NS script).
After training, the global ``A, b`` is solved once from sufficient statistics
accumulated over every latent pair of the training set (:func:`encode_dataset`,
:func:`fit_global_backbone`; the authors' "fullpass" mode).

Phase II: with the encoder, decoder and ``A, b`` frozen, a memory module is
trained on the latent trajectories (:func:`train_memory`,
:func:`jaxsci.dynamics.koopman.memory_loss`).

Both phases run through :func:`jaxsci.core.train.fit` (one jitted optax step).
The training set travels into the jitted step as an argument (an integer view of
the float data, which ``fit`` holds fixed), not as a constant compiled into the
program, so large data sets neither bloat nor slow the compilation.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Bool, Float

from jaxsci.core.train import TrainConfig, fit
from jaxsci.core.validation import check_array, check_choice, check_int, check_key, check_scalar
from jaxsci.dynamics.koopman._backbone import (
    KoopmanBackbone,
    fit_backbone,
    init_stats,
    solve_backbone,
    update_stats,
)
from jaxsci.dynamics.koopman._decoder import DecoderConfig, FunctionDecoder
from jaxsci.dynamics.koopman._encoder import EncoderConfig, FunctionEncoder
from jaxsci.dynamics.koopman._memory import (
    AbstractMemory,
    LeakyMemory,
    WindowMemory,
    latent_scale,
    memory_loss,
    rollout,
)

__all__ = [
    "Merlin",
    "MerlinConfig",
    "Phase1Config",
    "MemoryConfig",
    "delay_embed",
    "make_memory",
    "phase1_loss",
    "train_phase1",
    "pod_init",
    "encode_dataset",
    "fit_global_backbone",
    "train_memory",
    "decode_latents",
    "forecast",
]


@dataclasses.dataclass(frozen=True)
class MerlinConfig:
    """A MERLIN model's sizes: the delay ``n_cond``, the encoder's and the decoder's.

    The one owner of these numbers: :class:`Merlin` reads them from here, and an
    experiment config nests a ``MerlinConfig`` rather than re-declaring them.
    ``n_cond = 3`` is the authors' (``n_frames_cond``): three frames give the latent
    the time derivatives a second-order equation (the wave equation) needs.
    """

    n_cond: int = 3
    encoder: EncoderConfig = EncoderConfig()
    decoder: DecoderConfig = DecoderConfig()

    def __post_init__(self):
        check_int("n_cond", self.n_cond, min=1)
        if not isinstance(self.encoder, EncoderConfig):
            raise TypeError(f"encoder must be an EncoderConfig, got "
                            f"{type(self.encoder).__name__}")
        if not isinstance(self.decoder, DecoderConfig):
            raise TypeError(f"decoder must be a DecoderConfig, got "
                            f"{type(self.decoder).__name__}")

    @property
    def latent_dim(self) -> int:
        return self.encoder.latent_dim


class Merlin(eqx.Module):
    """Function encoder + function decoder over delay-stacked snapshots.

    ``encode(coords, frames, mask)`` maps the last ``n_cond`` snapshots
    (``frames`` ``[n_cond, n, c]``, oldest first) to ``z``; ``decode(z, coords)``
    evaluates the field at any query points.

    Args (construction):
      coord_dim: spatial dimension of the points.
      channels: field channels per point.
      config: the sizes, a :class:`MerlinConfig` (encoder and decoder sizes nested).
      key: PRNG key for the initial weights.

    >>> import jax
    >>> cfg = MerlinConfig(n_cond=2, encoder=EncoderConfig(n_tokens=2, token_dim=4,
    ...     width=8, heads=1, rope=(2.0, 1.0)), decoder=DecoderConfig(hidden=8, n_layers=1))
    >>> Merlin(2, 1, cfg, key=jax.random.key(0)).latent_dim
    8
    """

    encoder: FunctionEncoder
    decoder: FunctionDecoder
    n_cond: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)

    def __init__(
        self,
        coord_dim: int,
        channels: int = 1,
        config: MerlinConfig = MerlinConfig(),
        *,
        key: jax.Array,
    ):
        check_int("channels", channels, min=1)
        if not isinstance(config, MerlinConfig):
            raise TypeError(f"config must be a MerlinConfig, got {type(config).__name__}")
        check_key("key", key)
        ke, kd = jax.random.split(key)
        self.encoder = FunctionEncoder(coord_dim, channels * config.n_cond, config.encoder,
                                       key=ke)
        self.decoder = FunctionDecoder(coord_dim, self.encoder.latent_dim, channels,
                                       config.decoder, key=kd)
        self.n_cond = config.n_cond
        self.channels = channels

    @property
    def latent_dim(self) -> int:
        return self.encoder.latent_dim

    def encode(
        self,
        coords: Float[Array, "n dx"],
        frames: Float[Array, "k n c"],
        mask: Bool[Array, "k n"] | Bool[Array, "k n c"] | None = None,
    ) -> Float[Array, " d"]:
        """Latent of the last ``n_cond`` snapshots (``frames[-1]`` is the current one)."""
        coords, frames, mask = (x if x is None or hasattr(x, "shape") else jnp.asarray(x)
                                for x in (coords, frames, mask))
        check_array("frames", frames, ndim=3, dtype="floating", finite=False)
        if frames.shape[0] != self.n_cond or frames.shape[2] != self.channels:
            raise ValueError(
                f"frames must have shape (n_cond, n, c) = ({self.n_cond}, n, {self.channels}), "
                f"got {tuple(frames.shape)}"
            )
        vals, m = delay_embed(frames, mask, self.n_cond)
        return self.encoder(coords, vals[0], m[0])

    def decode(self, z: Float[Array, " d"], coords: Float[Array, "m dx"]) -> Float[Array, "m c"]:
        return self.decoder(z, coords)


def delay_embed(
    values: Float[Array, "t n c"],
    mask: Bool[Array, "t n"] | Bool[Array, "t n c"] | None,
    n_cond: int,
) -> tuple[Float[Array, "s n kc"], Bool[Array, "s n kc"]]:
    """Stack ``n_cond`` consecutive snapshots per point: ``s = t - n_cond + 1`` sets.

    Channel ``j * c + i`` of set ``s`` is channel ``i`` of snapshot ``s + j``; the
    mask is carried per channel, so a point missing in one frame of the stack is
    still used through the others.
    """
    check_array("values", values, ndim=3, dtype="floating", finite=False)
    t, n, c = values.shape
    check_int("n_cond", n_cond, min=1, max=t)
    if mask is None:
        m = jnp.ones((t, n, c), bool)
    else:
        check_array("mask", mask, dtype="bool")
        if tuple(mask.shape) == (t, n):
            m = jnp.broadcast_to(jnp.asarray(mask)[..., None], (t, n, c))
        elif tuple(mask.shape) == (t, n, c):
            m = jnp.asarray(mask)
        else:
            raise ValueError(
                f"mask must have shape ({t}, {n}) or ({t}, {n}, {c}) to match values, "
                f"got {tuple(mask.shape)}"
            )
    s = t - n_cond + 1
    idx = jnp.arange(s)[:, None] + jnp.arange(n_cond)[None, :]  # [s, k]

    def stack(a):
        return jnp.moveaxis(a[idx], 1, 2).reshape(s, n, n_cond * c)  # [s, n, k*c]

    return stack(values), stack(m)


def _masked_mse(pred, target, mask):
    err = jnp.where(mask, pred - target, 0.0)
    return jnp.sum(err**2) / jnp.maximum(jnp.sum(mask), 1.0)


def decode_latents(
    model: Merlin, zs: Float[Array, "... d"], coords: Float[Array, "m dx"]
) -> Float[Array, "... m c"]:
    """Decode latents of any leading shape at ``coords``."""
    flat = zs.reshape(-1, zs.shape[-1])
    out = jax.vmap(lambda z: model.decode(z, coords))(flat)
    return out.reshape(*zs.shape[:-1], *out.shape[1:])


def _encode_windows(model: Merlin, coords, values, mask):
    """``values`` ``[b, w, n, c]`` -> latents ``[b, w - n_cond + 1, d]``."""

    def one(v, m):
        vals, mm = delay_embed(v, m, model.n_cond)
        # Unchecked: the data were validated on the host (_check_dataset).
        return jax.vmap(model.encoder.apply, in_axes=(None, 0, 0))(coords, vals, mm)

    return jax.vmap(one)(values, mask)


def phase1_loss(
    model: Merlin,
    coords: Float[Array, "n dx"],
    values: Float[Array, "b w n c"],
    mask: Bool[Array, "b w n"] | None = None,
    query: Array | None = None,
    *,
    ridge: float = 5e-3,
    lambda_dyn: float = 0.05,
    lambda_pred: float = 0.1,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """Training under linear constraints on windows of ``w = n_cond + L - 1`` snapshots.

    Returns ``(loss, {"rec", "dyn", "pred"})`` (module docstring). ``query``
    (indices into the ``n`` points) restricts the decoder's targets to a subset
    (the decoder is resolution-free, so a random subset per step is an unbiased
    estimate of the full-field loss at a fraction of the cost).
    """
    b, w, n, c = values.shape
    if w < model.n_cond + 1:
        raise ValueError(
            f"values must hold windows of at least n_cond + 1 = {model.n_cond + 1} snapshots "
            f"(two latents), got {w}"
        )
    if mask is None:
        mask = jnp.ones((b, w, n), bool)
    zs = _encode_windows(model, coords, values, mask)  # [b, L, d]
    k = model.n_cond - 1
    q = jnp.arange(n) if query is None else query
    target = values[:, k:, q]  # [b, L, q, c]
    tmask = jnp.broadcast_to(mask[:, k:, q][..., None], target.shape)
    z0, z1 = zs[:, :-1], zs[:, 1:]
    bb = fit_backbone(jax.lax.stop_gradient(z0), jax.lax.stop_gradient(z1), ridge)
    z1_hat = bb(z0)
    dyn = jnp.mean((z1_hat - z1) ** 2)
    # One decoder pass over the encoded and the predicted latents together.
    out = decode_latents(model, jnp.concatenate([zs, z1_hat], axis=1), coords[q])
    n_lat = zs.shape[1]
    rec = _masked_mse(out[:, :n_lat], target, tmask)
    pred = _masked_mse(out[:, n_lat:], target[:, 1:], tmask[:, 1:])
    loss = rec + lambda_dyn * dyn + lambda_pred * pred
    return loss, {"rec": rec, "dyn": dyn, "pred": pred}


@dataclasses.dataclass(frozen=True)
class Phase1Config:
    """Phase-I optimisation; defaults from the authors' NS script (``demo_phase1.sh``).

    ``window`` latents per training window (``window + n_cond - 1`` snapshots);
    ``n_query`` decoder target points per step (0: all points); ``warmup`` steps of
    linear warm-up to ``lr`` before the cosine decay (or the constant ``lr``).
    """

    steps: int = 2000
    batch_size: int = 16  # authors: train_bs 16
    window: int = 8
    lr: float = 1e-3  # authors: lr_phase1 1e-3
    ridge: float = 5e-3  # authors: ridge 0.005
    lambda_dyn: float = 0.05  # authors: lambda_dyn 0.05
    lambda_pred: float = 0.1  # authors: lambda_pred 0.1
    n_query: int = 0
    cosine_decay: bool = True  # to 5% of lr; the authors offer OneCycle, cosine, step
    warmup: int = 0  # linear warm-up steps from 0 to lr before the decay (0: none)

    def __post_init__(self):
        check_int("steps", self.steps, min=1)
        check_int("batch_size", self.batch_size, min=1)
        check_int("window", self.window, min=2)
        check_scalar("lr", self.lr, gt=0.0)
        check_scalar("ridge", self.ridge, ge=0.0)
        check_scalar("lambda_dyn", self.lambda_dyn, ge=0.0)
        check_scalar("lambda_pred", self.lambda_pred, ge=0.0)
        check_int("n_query", self.n_query, min=0)
        check_int("warmup", self.warmup, min=0, max=self.steps - 1)


def _as_bits(x: Array) -> Array:
    # An integer view: core.train.fit trains only floating leaves, so the data set
    # rides along in the state as an argument of the jitted step.
    return jax.lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), jnp.uint32)


def _from_bits(x: Array) -> Array:
    return jax.lax.bitcast_convert_type(x, jnp.float32)


def _check_dataset(model_channels, coords, values, mask, name="values"):
    check_array("coords", coords, ndim=2, dtype="floating")
    check_array(name, values, ndim=4, dtype="floating", finite=mask is None)
    n_traj, t, n, c = values.shape
    if n != coords.shape[0]:
        raise ValueError(
            f"{name} must have shape (trajectories, time, n, c) with n = {coords.shape[0]} "
            f"points to match coords, got {tuple(values.shape)}"
        )
    if c != model_channels:
        raise ValueError(f"{name} must have {model_channels} channels (last axis), got {c}")
    if n == 0 or n_traj == 0:
        raise ValueError(f"{name} is an empty data set, shape {tuple(values.shape)}")
    if mask is not None:
        check_array("mask", mask, shape=(n_traj, t, n), dtype="bool")
        if not np.asarray(mask).any(axis=-1).all():
            raise ValueError(
                "mask leaves a snapshot with no observed point (empty observation set)"
            )


def train_phase1(
    model: Merlin,
    coords: Float[Array, "n dx"],
    values: Float[Array, "b t n c"],
    key: jax.Array,
    config: Phase1Config = Phase1Config(),
    *,
    mask: Bool[Array, "b t n"] | None = None,
    progress: bool = False,
    checkpoint_dir: str | None = None,
    desc: str = "encoder/decoder (Phase I)",
) -> tuple[Merlin, np.ndarray]:
    """Train the encoder/decoder under linear constraints (:func:`phase1_loss`).

    ``values`` ``[trajectories, time, n, c]`` on the points ``coords`` (``mask``
    ``[trajectories, time, n]`` marks observed points; unobserved values may be
    NaN). Each step draws ``batch_size`` windows uniformly over trajectories and
    start times, and ``n_query`` decoder target points. Returns the trained model
    and the per-step losses.
    """
    if not isinstance(config, Phase1Config):
        raise TypeError(f"config must be a Phase1Config, got {type(config).__name__}")
    check_key("key", key)
    _check_dataset(model.channels, coords, values, mask)
    n_traj, t, n, _ = values.shape
    w = config.window + model.n_cond - 1
    if w > t:
        raise ValueError(
            f"window {config.window} + n_cond {model.n_cond} - 1 = {w} snapshots exceeds the "
            f"{t} snapshots per trajectory"
        )
    n_query = n if config.n_query == 0 else min(config.n_query, n)
    coords = jnp.asarray(coords, jnp.float32)
    # Always masked (all True when no mask is given): one compiled step for both.
    mask = jnp.ones((n_traj, t, n), bool) if mask is None else jnp.asarray(mask)
    data = (_as_bits(jnp.where(mask[..., None], values, 0.0)), mask)

    def batch_fn(step, k):
        kt, ks, kq = jax.random.split(k, 3)
        traj = jax.random.randint(kt, (config.batch_size,), 0, n_traj)
        start = jax.random.randint(ks, (config.batch_size,), 0, t - w + 1)
        query = jax.random.choice(kq, n, (n_query,), replace=False) if n_query < n else None
        return traj, start, query

    def take(arr, traj, start):
        return jax.vmap(lambda i, s: jax.lax.dynamic_slice_in_dim(arr[i], s, w, axis=0))(
            traj, start
        )

    def loss_fn(params, batch, k):
        mdl, (bits, msk) = params
        traj, start, query = batch
        vals = take(_from_bits(bits), traj, start)
        return phase1_loss(
            mdl, coords, vals, take(msk, traj, start), query, ridge=config.ridge,
            lambda_dyn=config.lambda_dyn, lambda_pred=config.lambda_pred,
        )

    if config.warmup:
        after = (optax.cosine_decay_schedule(config.lr, config.steps - config.warmup, alpha=0.05)
                 if config.cosine_decay else optax.constant_schedule(config.lr))
        sched = optax.join_schedules(
            [optax.linear_schedule(0.0, config.lr, config.warmup), after], [config.warmup])
    elif config.cosine_decay:
        sched = optax.cosine_decay_schedule(config.lr, config.steps, alpha=0.05)
    else:
        sched = config.lr
    tc = TrainConfig(
        steps=config.steps, progress=progress, log_every=max(1, min(100, config.steps)),
        checkpoint_every=config.steps if checkpoint_dir else 0, checkpoint_dir=checkpoint_dir,
        desc=desc,
    )
    state, losses, _ = fit(
        loss_fn, (model, data), optax.adam(sched), key, tc, batch_fn=batch_fn, has_aux=True,
        full_history=checkpoint_dir is not None,
    )
    return state.params[0], losses


def pod_init(
    model: Merlin,
    coords: Float[Array, "n dx"],
    values: Float[Array, "b t n c"],
) -> Merlin:
    """Start the linear paths at DMD's coordinates: the POD of the delay-stacked data.

    Ours (issue 25's wave-equation gap), for a model whose encoder and decoder both
    have the Fourier linear path (``EncoderConfig(basis=m)``, ``basis_kind="fourier"``,
    and ``DecoderConfig(basis=k)``). The encoder's basis coefficients of every
    ``n_cond``-frame stack of ``values`` (fully observed) are computed exactly as the
    encoder computes them; the encoder's linear map is set to their leading
    ``latent_dim`` right singular vectors (uncentred, as in DMD), so at initialisation
    ``z`` holds the POD coordinates of the stack's coefficients, the subspace a
    delay-embedded DMD of that rank propagates. The decoder's linear path is set to the
    least-squares map from those ``z`` to the current frame's expansion in the
    decoder's basis, and the two nonlinear outputs (the encoder's token projection and
    the decoder's output layer) start at zero, so the model starts as the linear
    POD encoder/decoder; Phase I then trains every weight from there.

    Raises:
      ValueError: the model lacks the Fourier linear paths, or the shapes disagree.
    """
    enc, dec = model.encoder, model.decoder
    if enc.basis_proj is None or enc.basis_out is not None or dec.basis_w is None:
        raise ValueError(
            "pod_init needs the Fourier linear paths in the encoder and the decoder "
            "(EncoderConfig(basis=m, basis_kind='fourier') and DecoderConfig(basis=k))")
    _check_dataset(model.channels, coords, values, None)
    x = np.asarray(coords, np.float64)
    v = np.asarray(values, np.float64)  # [b, t, n, c]
    b, t, n, c = v.shape
    k = model.n_cond
    # delay stacks [b, s, n, k * c]: channel j * c + i is channel i of frame s + j
    stacks = np.concatenate([v[:, j:t - k + 1 + j] for j in range(k)], axis=-1)
    ph = 2.0 * np.pi * x @ np.asarray(enc.basis_in, np.float64).T
    psi = np.concatenate([np.cos(ph), np.sin(ph)], axis=-1)  # [n, 2m]
    coef = np.einsum("nm,bsnc->bsmc", psi, stacks) / n  # the encoder's quadrature
    feats = coef.reshape(-1, coef.shape[2] * coef.shape[3])  # [N, 2m * k c], row-major
    d = model.latent_dim
    if d > min(feats.shape):
        raise ValueError(f"latent_dim {d} exceeds the rank of the data's coefficients "
                         f"({min(feats.shape)}): fewer latent dimensions or more data")
    _, _, vt = np.linalg.svd(feats, full_matrices=False)
    proj = vt[:d]  # [d, 2m k c]
    z = feats @ proj.T  # [N, d]
    ph = 2.0 * np.pi * x @ np.asarray(dec.basis_freqs, np.float64).T
    dpsi = np.concatenate([np.cos(ph), np.sin(ph)], axis=-1)  # [n, 2k']
    current = v[:, k - 1:].reshape(-1, n, c)  # the stacks' last frames [N, n, c]
    amp = np.einsum("pn,bnc->bpc", np.linalg.pinv(dpsi), current)  # [N, 2k', c]
    w = np.stack([np.linalg.lstsq(z, amp[:, :, i], rcond=None)[0].T for i in range(c)])
    dtype = enc.basis_proj.weight.dtype
    model = eqx.tree_at(lambda m: m.encoder.basis_proj.weight, model, jnp.asarray(proj, dtype))
    model = eqx.tree_at(lambda m: m.encoder.out_proj.weight, model,
                        jnp.zeros_like(enc.out_proj.weight))
    model = eqx.tree_at(lambda m: m.decoder.basis_w, model, jnp.asarray(w, dec.basis_w.dtype))
    model = eqx.tree_at(lambda m: (m.decoder.out_w, m.decoder.out_b), model,
                        (jnp.zeros_like(dec.out_w), jnp.zeros_like(dec.out_b)))
    return model


def encode_dataset(
    model: Merlin,
    coords: Float[Array, "n dx"],
    values: Float[Array, "b t n c"],
    mask: Bool[Array, "b t n"] | None = None,
    *,
    chunk: int = 8,
) -> Float[Array, "b s d"]:
    """Latents ``[trajectories, t - n_cond + 1, d]`` of every delay stack (jitted, chunked)."""
    _check_dataset(model.channels, coords, values, mask)
    check_int("chunk", chunk, min=1)
    n_traj, t, n, _ = values.shape
    values = jnp.asarray(values, jnp.float32)
    if mask is None:
        mask = jnp.ones((n_traj, t, n), bool)
    else:
        mask = jnp.asarray(mask)
        values = jnp.where(mask[..., None], values, 0.0)
    # Fixed-size chunks (the last one padded): one compiled program per chunk shape,
    # whatever the number of trajectories.
    chunk = min(chunk, n_traj)
    pad = -n_traj % chunk
    if pad:
        values = jnp.concatenate([values, jnp.zeros((pad, *values.shape[1:]))], axis=0)
        mask = jnp.concatenate([mask, jnp.ones((pad, *mask.shape[1:]), bool)], axis=0)
    coords = jnp.asarray(coords, jnp.float32)
    out = [
        _encode_chunk(model, coords, values[i : i + chunk], mask[i : i + chunk])
        for i in range(0, values.shape[0], chunk)
    ]
    return jnp.concatenate(out, axis=0)[:n_traj]


_encode_chunk = eqx.filter_jit(_encode_windows)


def fit_global_backbone(
    latents: Float[Array, "b s d"], ridge: float = 5e-3, *, bias: bool = True
) -> KoopmanBackbone:
    """The global ``A, b`` from every consecutive latent pair of every trajectory."""
    check_array("latents", latents, ndim=3, dtype="floating")
    if latents.shape[1] < 2:
        raise ValueError(f"latents need at least 2 time steps, got shape {tuple(latents.shape)}")
    stats = update_stats(init_stats(latents.shape[-1]), latents[:, :-1], latents[:, 1:])
    return solve_backbone(stats, ridge, bias=bias)


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    """Phase-II memory and its training; defaults from the authors' scripts.

    ``kind``: ``"leaky"`` (LMM) or ``"window"`` (FMM). ``horizon``: rollout
    length of each training sample (authors: n_frames_train 10).
    """

    kind: str = "leaky"
    memory_dim: int = 128  # authors: memory_dim 128
    hidden: int = 128
    depth: int = 2  # authors: memory_enc_layers = memory_dec_layers = 2
    window: int = 4  # authors: context_window 4 (FMM)
    steps: int = 2000
    batch_size: int = 16
    horizon: int = 10
    lr: float = 5e-4  # authors: lr_dyn_mem 5e-4 (LMM)
    lambda_residual: float = 1.0  # authors: lambda_residual 1.0
    lambda_corr: float = 0.01  # authors: lambda_corr 0.01

    def __post_init__(self):
        check_choice("kind", self.kind, ("leaky", "window"))
        check_int("memory_dim", self.memory_dim, min=1)
        check_int("hidden", self.hidden, min=1)
        check_int("depth", self.depth, min=1)
        check_int("window", self.window, min=1)
        check_int("steps", self.steps, min=1)
        check_int("batch_size", self.batch_size, min=1)
        check_int("horizon", self.horizon, min=1)
        check_scalar("lr", self.lr, gt=0.0)
        check_scalar("lambda_residual", self.lambda_residual, ge=0.0)
        check_scalar("lambda_corr", self.lambda_corr, ge=0.0)


def make_memory(
    config: MemoryConfig, latents: Float[Array, "... d"], key: jax.Array
) -> AbstractMemory:
    """The memory module ``config.kind`` names, standardised on ``latents``.

    ``"leaky"`` gives a :class:`LeakyMemory`, ``"window"`` a :class:`WindowMemory`
    (sizes from ``config``; centre and scale from :func:`latent_scale`). Build a
    memory directly (or your own :class:`AbstractMemory`) and pass it to
    :func:`train_memory` as ``memory=`` to train another one.
    """
    if not isinstance(config, MemoryConfig):
        raise TypeError(f"config must be a MemoryConfig, got {type(config).__name__}")
    check_key("key", key)
    centre, scale = latent_scale(latents)
    d = latents.shape[-1]
    if config.kind == "leaky":
        return LeakyMemory(
            d, config.memory_dim, hidden=config.hidden, depth=config.depth,
            centre=centre, scale=scale, key=key,
        )
    return WindowMemory(
        d, config.window, hidden=config.hidden, depth=config.depth,
        centre=centre, scale=scale, key=key,
    )


def train_memory(
    backbone: KoopmanBackbone,
    latents: Float[Array, "b s d"],
    key: jax.Array,
    config: MemoryConfig = MemoryConfig(),
    *,
    memory: AbstractMemory | None = None,
    progress: bool = False,
    checkpoint_dir: str | None = None,
    desc: str = "memory (Phase II)",
) -> tuple[AbstractMemory, np.ndarray]:
    """Phase II: fit a memory correction to the frozen ``backbone`` on latent trajectories.

    Each step draws ``batch_size`` segments of ``horizon + 1`` latents.

    Args:
      backbone: the frozen linear map (Phase I's global ``A, b``).
      latents: ``[trajectories, time, d]`` training latents.
      key: PRNG key (initial weights and batches).
      config: the training settings (and, without ``memory``, the module's sizes).
      memory: the initial memory to train (any :class:`AbstractMemory`); default
        :func:`make_memory` of ``config``.
      progress: show a progress bar.
      checkpoint_dir: checkpoint there (at the end) and resume from it.

    Returns:
      ``(trained memory, per-step losses)``.
    """
    if not isinstance(config, MemoryConfig):
        raise TypeError(f"config must be a MemoryConfig, got {type(config).__name__}")
    check_key("key", key)
    check_array("latents", latents, ndim=3, dtype="floating")
    n_traj, s, d = latents.shape
    if d != backbone.dim:
        raise ValueError(f"latents have size {d}, the backbone {backbone.dim}")
    h = config.horizon + 1
    if h > s:
        raise ValueError(f"horizon {config.horizon} needs {h} latents per trajectory, got {s}")
    k_init, k_fit = jax.random.split(key)
    if memory is None:
        memory = make_memory(config, latents, k_init)
    elif not isinstance(memory, AbstractMemory):
        raise TypeError(f"memory must be an AbstractMemory, got {type(memory).__name__}")
    elif memory.latent_dim != d:
        raise ValueError(f"memory has latent size {memory.latent_dim}, the latents {d}")
    bits = _as_bits(latents)
    frozen = (_as_bits(backbone.A), _as_bits(backbone.b))

    def batch_fn(step, k):
        kt, ks = jax.random.split(k)
        traj = jax.random.randint(kt, (config.batch_size,), 0, n_traj)
        start = jax.random.randint(ks, (config.batch_size,), 0, s - h + 1)
        return traj, start

    def loss_fn(params, batch, k):
        mem, (zbits, (a_bits, b_bits)) = params
        z = _from_bits(zbits)
        traj, start = batch
        seg = jax.vmap(lambda i, t0: jax.lax.dynamic_slice_in_dim(z[i], t0, h, axis=0))(
            traj, start
        )
        bb = KoopmanBackbone(_from_bits(a_bits), _from_bits(b_bits))
        return memory_loss(
            mem, bb, seg, lambda_residual=config.lambda_residual, lambda_corr=config.lambda_corr
        )

    tc = TrainConfig(
        steps=config.steps, progress=progress, log_every=max(1, min(100, config.steps)),
        checkpoint_every=config.steps if checkpoint_dir else 0, checkpoint_dir=checkpoint_dir,
        desc=desc,
    )
    sched = optax.cosine_decay_schedule(config.lr, config.steps, alpha=0.05)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(sched))
    state, losses = fit(loss_fn, (memory, (bits, frozen)), opt, k_fit, tc, batch_fn=batch_fn,
                        full_history=checkpoint_dir is not None)
    return state.params[0], losses


def forecast(
    model: Merlin,
    backbone: KoopmanBackbone,
    coords: Float[Array, "n dx"],
    frames: Float[Array, "k n c"],
    steps: int,
    *,
    mask: Bool[Array, "k n"] | None = None,
    memory: AbstractMemory | None = None,
    query: Float[Array, "m dx"] | None = None,
) -> Float[Array, "t m c"]:
    """Encode the last ``n_cond`` observed snapshots, roll out ``steps``, decode at ``query``.

    Returns ``steps + 1`` fields (the first is the reconstruction of ``frames[-1]``)
    at ``query`` (default: ``coords``). Jittable and vmappable over ``frames``.
    """
    z0 = model.encode(coords, frames, mask)
    zs = rollout(backbone, z0, steps, memory)
    return decode_latents(model, zs, coords if query is None else query)
