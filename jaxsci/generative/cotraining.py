r"""Mechanisms of sim-and-real co-training: reweighting, alignment, CFG-ADDA.

A policy is an encoder ``z = E(x)`` and a conditional flow-matching velocity
``v(t, y_t | z, c)`` over actions (:mod:`jaxsci.common.flow_matching`'s linear path,
``y_t = (1 - t) y_0 + t y``, ``y_0 ~ N(0, I)``), trained on a mixture of ``N`` real and
``M`` sim samples with mixing ratio ``w``: each batch element is real with probability
``w``. ``w = 1`` is **real-only**, ``w = 0`` sim-only.

**Importance reweighting.** The mixture is the weighted empirical measure with
``w_k = w / N`` on a real sample and ``(1 - w) / M`` on a sim one. Its optimal
denoiser is ``E[y | y_t] = sum_k g_k y_k`` with the exact posterior

    g_k = softmax_k(ln w_k - r_k^2 d / 2),  r_k^2 = ||y_t - t y_k||^2 / (d (1 - t)^2),

(:func:`reweighting`, :func:`optimal_denoiser`). Conditioning on an observation adds
``-||z - z_k||^2 / (2 h^2)`` to the logits (a Gaussian kernel of bandwidth ``h`` on the
latents, :func:`conditional_optimal_denoiser`): the analytic co-trained policy, used as
a training-free diagnostic of the regime (how much posterior mass real queries put on
sim samples, and the action error it implies).

**Structured representation alignment.** Arms add, to the CFM loss, an entropic OT
(Sinkhorn) cost between batch latents of the two domains (:func:`sinkhorn_cost`), or an
ADDA-style domain discriminator trained through a gradient-reversal layer
(:func:`gradient_reversal`); classifier-free guidance (CFG) feeds the domain label
(dropped to a null label with probability ``label_drop``) and samples with
``v_null + guidance (v_real - v_null)``; CFG-ADDA uses both (alignment *and*
discernibility). Every arm is a value of :class:`Arm` (traced floats), so one
``vmap`` covers w, arms and seeds.

Diagnostics: sliced Wasserstein distance between real and sim latents
(:func:`sliced_wasserstein`) and the domain accuracy of a logistic probe
(:func:`probe_accuracy`).

Where the abstract is silent (choices, all fields of :class:`PolicyConfig` or of
:class:`Arm`): the guideline range of ``w`` (:func:`guideline_range`: from the natural
proportion ``N / (N + M)``, where a real sample weighs as much as a sim one, to 1/2),
the networks' widths, the Sinkhorn ``epsilon`` and iterations, the guidance scale.

>>> import jax.numpy as jnp
>>> from jaxsci.generative import cotraining as C
>>> lw = C.mixture_log_weights(0.5, 2, 2)
>>> g = C.reweighting(jnp.zeros(1), 0.5, jnp.array([[1.0], [-1.0], [1.0], [-1.0]]), lw)
>>> [round(float(v), 3) for v in g]
[0.25, 0.25, 0.25, 0.25]
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Float

from jaxsci.core.validation import as_array, check_array, check_int, check_scalar
from jaxsci.data.cotraining import CotrainData

__all__ = [
    "guideline_range", "mixture_log_weights", "reweighting", "optimal_denoiser",
    "conditional_optimal_denoiser", "sinkhorn_cost", "sliced_wasserstein",
    "gradient_reversal", "probe_accuracy", "PolicyConfig", "Arm", "arm", "init_params",
    "encode", "velocity", "sample_actions", "loss", "TrainState", "train_init",
    "train_step", "evaluate", "train",
]


def _is_tracer(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


# ---------------------------------------------------------------- reweighting (pure)


def guideline_range(n_real: int, n_sim: int) -> tuple[float, float]:
    """Our reading of the mixing-ratio guideline: ``[N / (N + M), 1 / 2]``.

    Below the natural proportion a real sample weighs less than a sim one in the optimal
    denoiser (``w / N < (1 - w) / M``); above 1/2 the sim data stop dominating the
    batches. The abstract gives no formula; this is a choice (docs/cotraining.md).
    """
    n = check_int("n_real", n_real, min=1)
    m = check_int("n_sim", n_sim, min=1)
    return n / (n + m), 0.5


def _check_w(w):
    if isinstance(w, int | float) and not isinstance(w, bool):
        w = jnp.asarray(float(w))  # a Python number: JAX's default float, no warning
    w = as_array("w", w)
    if w.ndim != 0:
        raise ValueError(f"w must be a scalar mixing ratio, got shape {w.shape}")
    if _is_tracer(w):
        return eqx.error_if(w, (w < 0) | (w > 1), "w must lie in [0, 1]")
    check_scalar("w", w, ge=0.0, le=1.0)
    return w


def mixture_log_weights(w: float | Float[ArrayLike, ""], n_real: int, n_sim: int
                        ) -> Float[Array, " n_plus_m"]:
    """``ln w_k``: ``w / N`` on the ``N`` real samples (first), ``(1 - w) / M`` on the sim.

    Args:
      w: mixing ratio in ``[0, 1]`` (traced; checked when concrete, ``error_if`` inside jit).
      n_real, n_sim: sample counts (static).

    Returns:
      log weights ``(N + M,)``; ``-inf`` on a domain of weight 0.
    """
    w = _check_w(w)
    n = check_int("n_real", n_real, min=1)
    m = check_int("n_sim", n_sim, min=1)
    return jnp.concatenate([jnp.full((n,), jnp.log(w) - jnp.log(n)),
                            jnp.full((m,), jnp.log1p(-w) - jnp.log(m))])


def _check_denoise(x, t, data, log_weights):
    x = as_array("x", x)
    data = as_array("data", data)
    log_weights = as_array("log_weights", log_weights)
    check_array("data", data, ndim=2, finite=False)
    check_array("x", x, shape=(data.shape[1],), finite=False)
    check_array("log_weights", log_weights, shape=(data.shape[0],), finite=False)
    if isinstance(t, int | float) and not isinstance(t, bool):
        t = jnp.asarray(float(t))
    t = as_array("t", t)
    if t.ndim != 0:
        raise ValueError(f"t must be a scalar time, got shape {t.shape}")
    if _is_tracer(t):
        t = eqx.error_if(t, (t < 0) | (t >= 1), "t must lie in [0, 1)")
    else:
        check_scalar("t", t, ge=0.0, lt=1.0)
    return x, t, data, log_weights


def _logits(x, t, data, log_weights):
    d = data.shape[1]
    r2 = jnp.sum((x - t * data) ** 2, -1) / (d * (1.0 - t) ** 2)
    return log_weights - 0.5 * d * r2


def reweighting(x: Float[ArrayLike, " d"], t: float | Float[ArrayLike, ""],
                data: Float[ArrayLike, "k d"], log_weights: Float[ArrayLike, " k"]
                ) -> Float[Array, " k"]:
    """``g_k = softmax(ln w_k - r_k^2 d / 2)``: the posterior of sample ``k`` given ``y_t = x``.

    Exact for the path ``y_t = t y_k + (1 - t) eps`` with ``y_k`` drawn from the weighted
    empirical mixture; ``r_k^2 = ||x - t y_k||^2 / (d (1 - t)^2)``.

    Args:
      x: the noised action ``(d,)``.
      t: time in ``[0, 1)``.
      data: the mixture's actions ``(k, d)``.
      log_weights: ``ln w_k`` ``(k,)`` (e.g. :func:`mixture_log_weights`).

    Returns:
      posterior weights ``(k,)``, summing to 1; differentiable in ``x``, ``t`` and the
      weights.
    """
    x, t, data, log_weights = _check_denoise(x, t, data, log_weights)
    return jax.nn.softmax(_logits(x, t, data, log_weights))


def optimal_denoiser(x: Float[ArrayLike, " d"], t: float | Float[ArrayLike, ""],
                     data: Float[ArrayLike, "k d"], log_weights: Float[ArrayLike, " k"]
                     ) -> Float[Array, " d"]:
    """``E[y | y_t = x] = sum_k g_k y_k`` of the weighted empirical mixture.

    The CFM minimiser's velocity is ``(E[y | y_t] - x) / (1 - t)``. Args as
    :func:`reweighting`. Returns the denoised action ``(d,)``.
    """
    x, t, data, log_weights = _check_denoise(x, t, data, log_weights)
    return jax.nn.softmax(_logits(x, t, data, log_weights)) @ data


def conditional_optimal_denoiser(
    z: Float[ArrayLike, " p"], x: Float[ArrayLike, " d"], t: float | Float[ArrayLike, ""],
    latents: Float[ArrayLike, "k p"], data: Float[ArrayLike, "k d"],
    log_weights: Float[ArrayLike, " k"], bandwidth: float | Float[ArrayLike, ""],
) -> tuple[Float[Array, " d"], Float[Array, " k"]]:
    """The optimal co-trained denoiser given a latent ``z`` (Gaussian kernel on latents).

    ``g_k ∝ w_k exp(-||z - z_k||^2 / (2 h^2)) N(x; t y_k, (1 - t)^2 I)``.

    Args:
      z: the query latent ``(p,)``; latents: the samples' latents ``(k, p)``.
      x, t, data, log_weights: as :func:`reweighting`.
      bandwidth: kernel bandwidth ``h > 0`` (traced).

    Returns:
      ``(E[y | y_t = x, z], g)``.
    """
    x, t, data, log_weights = _check_denoise(x, t, data, log_weights)
    z = as_array("z", z)
    latents = as_array("latents", latents)
    check_array("latents", latents, shape=(data.shape[0], None), finite=False)
    check_array("z", z, shape=(latents.shape[1],), finite=False)
    h = check_scalar("bandwidth", bandwidth, gt=0.0)
    logits = (_logits(x, t, data, log_weights)
              - jnp.sum((z - latents) ** 2, -1) / (2.0 * jnp.asarray(h) ** 2))
    g = jax.nn.softmax(logits)
    return g @ data, g


# ------------------------------------------------------------- alignment diagnostics


def sinkhorn_cost(a: Float[ArrayLike, "n p"], b: Float[ArrayLike, "m p"],
                  epsilon: float | Float[ArrayLike, ""] = 0.1, iters: int = 50
                  ) -> Float[Array, ""]:
    """Entropic OT cost ``<P, C>`` between two point clouds with uniform weights.

    Log-domain Sinkhorn on ``C_ij = ||a_i - b_j||^2`` (``iters`` fixed sweeps, so it is
    differentiable by unrolling; ``epsilon`` traced).

    Args:
      a, b: point clouds ``(n, p)``, ``(m, p)``.
      epsilon: entropic regularisation ``> 0``.
      iters: Sinkhorn iterations (static).

    Returns:
      the transport cost of the (approximate) entropic plan.
    """
    a = as_array("a", a)
    b = as_array("b", b)
    check_array("a", a, ndim=2, finite=False)
    check_array("b", b, shape=(None, a.shape[1]), finite=False)
    check_scalar("epsilon", epsilon, gt=0.0)
    check_int("iters", iters, min=1)
    return _sinkhorn_cost(a, b, epsilon, iters)


@functools.partial(jax.jit, static_argnames="iters")
def _sinkhorn_cost(a, b, epsilon, iters):
    # Module-level jit: a second call compiles nothing (the scan's closure).
    cost = jnp.sum((a[:, None] - b[None]) ** 2, -1)
    n, m = cost.shape
    la, lb = -jnp.log(n) * jnp.ones(n), -jnp.log(m) * jnp.ones(m)
    eps = jnp.asarray(epsilon, cost.dtype)

    def body(fg, _):
        f, g = fg
        f = -eps * jax.nn.logsumexp((g[None] - cost) / eps + lb[None], 1)
        g = -eps * jax.nn.logsumexp((f[:, None] - cost) / eps + la[:, None], 0)
        return (f, g), None

    (f, g), _ = jax.lax.scan(body, (jnp.zeros(n), jnp.zeros(m)), None, length=iters)
    logp = (f[:, None] + g[None] - cost) / eps + la[:, None] + lb[None]
    return jnp.sum(jnp.exp(logp) * cost)


def sliced_wasserstein(a: Float[Array, "n p"], b: Float[Array, "n p"], key: jax.Array,
                       n_proj: int = 64) -> Float[Array, ""]:
    """Sliced 2-Wasserstein distance between equal-size clouds (random directions)."""
    check_array("b", b, shape=tuple(a.shape), finite=False)
    dirs = jax.random.normal(key, (n_proj, a.shape[1]))
    dirs = dirs / jnp.linalg.norm(dirs, axis=1, keepdims=True)
    pa, pb = jnp.sort(a @ dirs.T, 0), jnp.sort(b @ dirs.T, 0)
    return jnp.sqrt(jnp.mean((pa - pb) ** 2))


@jax.custom_vjp
def gradient_reversal(x: Array, scale: Array) -> Array:
    """Identity forward; the backward pass multiplies the cotangent by ``-scale``.

    The gradient with respect to ``scale`` is zero by construction.
    """
    return x


def _grl_fwd(x, scale):
    return x, scale


def _grl_bwd(scale, ct):
    return -scale * ct, jnp.zeros_like(scale)


gradient_reversal.defvjp(_grl_fwd, _grl_bwd)


def probe_accuracy(za: Float[Array, "n p"], zb: Float[Array, "n p"], steps: int = 100,
                   lr: float = 0.5) -> Float[Array, ""]:
    """Domain accuracy of a logistic probe (standardised latents, gradient descent).

    Trained on the first half of each cloud, scored on the second half: 0.5 means the
    domains are indistinguishable, 1 fully discernible.
    """
    x = jnp.concatenate([za, zb])
    mu, sd = x.mean(0), x.std(0) + 1e-6
    h = za.shape[0] // 2
    xa, xb = (za - mu) / sd, (zb - mu) / sd
    xtr = jnp.concatenate([xa[:h], xb[:h]])
    ytr = jnp.concatenate([jnp.ones(h), jnp.zeros(h)])
    xte = jnp.concatenate([xa[h:], xb[h:]])
    yte = jnp.concatenate([jnp.ones(za.shape[0] - h), jnp.zeros(zb.shape[0] - h)])

    def nll(p):
        return optax.sigmoid_binary_cross_entropy(xtr @ p[:-1] + p[-1], ytr).mean()

    def body(p, _):
        return p - lr * jax.grad(nll)(p), None

    p, _ = jax.lax.scan(body, jnp.zeros(x.shape[1] + 1), None, length=steps)
    return jnp.mean(((xte @ p[:-1] + p[-1]) > 0) == (yte > 0.5))


# ----------------------------------------------------------------------- the policy


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    """Networks, optimiser and evaluation (our choices; the paper's robot policies are
    diffusion policies on images)."""

    latent_dim: int = 4
    hidden: int = 64
    steps: int = 1500
    batch_size: int = 128
    align_batch: int = 64  # per-domain latents for the OT / discriminator losses
    lr: float = 3e-3
    n_evals: int = 3  # evaluations during training (the last at the end)
    ode_steps: int = 10  # Euler steps of the action sampler
    sinkhorn_epsilon: float = 0.1
    sinkhorn_iters: int = 30
    success_radius: float = 0.2
    probe_steps: int = 100

    def __post_init__(self):
        for name in ("latent_dim", "hidden", "batch_size", "align_batch", "n_evals",
                     "ode_steps", "sinkhorn_iters", "probe_steps"):
            check_int(name, getattr(self, name), min=1)
        check_int("steps", self.steps, min=self.n_evals)
        if self.steps % self.n_evals:
            raise ValueError(f"steps ({self.steps}) must be a multiple of n_evals "
                             f"({self.n_evals})")
        check_scalar("lr", self.lr, gt=0.0)
        check_scalar("sinkhorn_epsilon", self.sinkhorn_epsilon, gt=0.0)
        check_scalar("success_radius", self.success_radius, gt=0.0)


class Arm(NamedTuple):
    """One training recipe, all traced floats (stack them to vmap).

    ``w``: mixing ratio (1 = real-only); ``ot_weight``: Sinkhorn alignment weight;
    ``adv_weight``: ADDA discriminator weight (through gradient reversal);
    ``label_drop``: probability of the null domain label (1 = no CFG);
    ``guidance``: CFG scale at sampling (0 = the null-label velocity).
    """

    w: Array
    ot_weight: Array
    adv_weight: Array
    label_drop: Array
    guidance: Array


def arm(w: float, ot_weight: float = 0.0, adv_weight: float = 0.0,
        label_drop: float = 1.0, guidance: float = 0.0) -> Arm:
    """A validated :class:`Arm` from numbers (``label_drop = 1``: no domain labels)."""
    check_scalar("w", w, ge=0.0, le=1.0)
    check_scalar("ot_weight", ot_weight, ge=0.0)
    check_scalar("adv_weight", adv_weight, ge=0.0)
    check_scalar("label_drop", label_drop, ge=0.0, le=1.0)
    check_scalar("guidance", guidance, ge=0.0)
    return Arm(*(jnp.asarray(v, jnp.float32)
                 for v in (w, ot_weight, adv_weight, label_drop, guidance)))


def _mlp_init(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (a, b)) / jnp.sqrt(a), jnp.zeros(b))
            for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)]


def _mlp(params, x):
    for w, b in params[:-1]:
        x = jax.nn.gelu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def init_params(key: jax.Array, cfg: PolicyConfig, obs_dim: int = 3, act_dim: int = 2
                ) -> dict:
    """Encoder, velocity net and domain discriminator parameters (a dict of arrays)."""
    ke, kv, kd = jax.random.split(key, 3)
    h, p = cfg.hidden, cfg.latent_dim
    return {"enc": _mlp_init(ke, (obs_dim, h, h, p)),
            "vel": _mlp_init(kv, (act_dim + 1 + p + 3, h, h, act_dim)),
            "disc": _mlp_init(kd, (p, h, 1))}


def encode(params: dict, obs: Float[Array, "n o"]) -> Float[Array, "n p"]:
    """Latents ``E(x)``."""
    return _mlp(params["enc"], obs)


def velocity(params: dict, t: Float[Array, " n"], y: Float[Array, "n a"],
             z: Float[Array, "n p"], label: Array) -> Float[Array, "n a"]:
    """``v(t, y | z, c)``, ``label`` 0 = real, 1 = sim, 2 = null (int array ``(n,)``)."""
    onehot = jax.nn.one_hot(label, 3)
    return _mlp(params["vel"], jnp.concatenate([y, t[:, None], z, onehot], -1))


def sample_actions(params: dict, z: Float[Array, "n p"], key: jax.Array,
                   guidance: Array, ode_steps: int, act_dim: int = 2) -> Float[Array, "n a"]:
    """Euler samples of the real-domain policy: ``v_null + guidance (v_real - v_null)``."""
    n = z.shape[0]
    y0 = jax.random.normal(key, (n, act_dim))
    dt = 1.0 / ode_steps

    def body(y, i):
        t = jnp.full((n,), i * dt)
        vn = velocity(params, t, y, z, jnp.full((n,), 2))
        vr = velocity(params, t, y, z, jnp.zeros((n,), int))
        return y + dt * (vn + guidance * (vr - vn)), None

    y, _ = jax.lax.scan(body, y0, jnp.arange(ode_steps))
    return y


def loss(params: dict, data: CotrainData, a: Arm, key: jax.Array, cfg: PolicyConfig
         ) -> Array:
    """CFM on a ``w``-mixture batch + OT and adversarial alignment terms of the arm."""
    kd, kr, ks, kt, k0, kl, kar, kas = jax.random.split(key, 8)
    b = cfg.batch_size
    n, m = data.obs_real.shape[0], data.obs_sim.shape[0]
    is_real = jax.random.uniform(kd, (b,)) < a.w
    ir = jax.random.randint(kr, (b,), 0, n)
    i_s = jax.random.randint(ks, (b,), 0, m)
    obs = jnp.where(is_real[:, None], data.obs_real[ir], data.obs_sim[i_s])
    act = jnp.where(is_real[:, None], data.act_real[ir], data.act_sim[i_s])
    z = encode(params, obs)
    drop = jax.random.uniform(kl, (b,)) < a.label_drop
    label = jnp.where(drop, 2, jnp.where(is_real, 0, 1))
    t = jax.random.uniform(kt, (b,))
    y0 = jax.random.normal(k0, act.shape)
    yt = (1.0 - t[:, None]) * y0 + t[:, None] * act
    cfm = jnp.mean((velocity(params, t, yt, z, label) - (act - y0)) ** 2)
    q = cfg.align_batch
    zr = encode(params, data.obs_real[jax.random.randint(kar, (q,), 0, n)])
    zs = encode(params, data.obs_sim[jax.random.randint(kas, (q,), 0, m)])
    ot = sinkhorn_cost(zr, zs, cfg.sinkhorn_epsilon, cfg.sinkhorn_iters)
    zz = gradient_reversal(jnp.concatenate([zr, zs]), a.adv_weight)
    logit = _mlp(params["disc"], zz)[:, 0]
    dom = jnp.concatenate([jnp.ones(q), jnp.zeros(q)])
    adv = optax.sigmoid_binary_cross_entropy(logit, dom).mean()
    # The discriminator minimises ``adv``; the reversal makes the encoder maximise it
    # with weight ``adv_weight`` (the reversal carries the weight, so the discriminator
    # keeps learning even when it is 0).
    return cfm + a.ot_weight * ot + adv


class TrainState(NamedTuple):
    params: dict
    opt_state: Any
    key: jax.Array
    step: Array


def _optimizer(cfg):
    return optax.adam(cfg.lr)


def train_init(params: dict, key: jax.Array, cfg: PolicyConfig) -> TrainState:
    """The state before the first step."""
    return TrainState(params, _optimizer(cfg).init(params), key, jnp.zeros((), int))


def train_step(state: TrainState, data: CotrainData, a: Arm, cfg: PolicyConfig
               ) -> tuple[TrainState, Array]:
    """One Adam step on :func:`loss`; returns the new state and the loss."""
    key, sub = jax.random.split(state.key)
    val, g = jax.value_and_grad(loss)(state.params, data, a, sub, cfg)
    upd, opt = _optimizer(cfg).update(g, state.opt_state, state.params)
    return TrainState(optax.apply_updates(state.params, upd), opt, key, state.step + 1), val


def evaluate(params: dict, data: CotrainData, a: Arm, key: jax.Array, cfg: PolicyConfig
             ) -> dict[str, Array]:
    """Real-domain metrics of the policy.

    Returns a dict: ``err_in`` / ``err_oos`` (mean action error inside / outside the real
    support), ``success_in`` / ``success_oos`` (share within ``success_radius``),
    ``conflict_oos`` / ``conflict_in`` (share of sampled actions nearer the sim sample's
    action at the same observation than the true one), ``alignment`` (sliced
    Wasserstein, real vs sim latents) and ``discernibility`` (probe accuracy).
    """
    ks, kw, kr, kq = jax.random.split(key, 4)
    z = encode(params, data.test_obs)
    y = sample_actions(params, z, ks, a.guidance, cfg.ode_steps, data.test_act.shape[1])
    err = jnp.linalg.norm(y - data.test_act, axis=-1)
    conflict = jnp.linalg.norm(y - data.test_conflict, axis=-1) < err
    ins = data.test_in_support.astype(err.dtype)
    out = 1.0 - ins

    def mean(v, mask):
        return jnp.sum(v * mask) / jnp.maximum(jnp.sum(mask), 1.0)

    q = min(data.obs_real.shape[0], 256)
    zr = encode(params, data.obs_real[jax.random.permutation(kr, data.obs_real.shape[0])[:q]])
    zs = encode(params, data.obs_sim[jax.random.permutation(kq, data.obs_sim.shape[0])[:q]])
    return {"err_in": mean(err, ins), "err_oos": mean(err, out),
            "success_in": mean(err < cfg.success_radius, ins),
            "success_oos": mean(err < cfg.success_radius, out),
            "conflict_in": mean(conflict, ins), "conflict_oos": mean(conflict, out),
            "alignment": sliced_wasserstein(zr, zs, kw),
            "discernibility": probe_accuracy(zr, zs, cfg.probe_steps)}


def train(data: CotrainData, a: Arm, key: jax.Array, cfg: PolicyConfig
          ) -> tuple[dict, dict[str, Array]]:
    """Train one policy; evaluate ``cfg.n_evals`` times during training.

    A ``lax.scan`` over :func:`train_step` (vmappable in ``data``, ``a`` and ``key``).

    Returns:
      ``(params, history)``: history maps each :func:`evaluate` metric to an array
      ``(n_evals,)`` (the last entry is the trained policy), plus ``loss`` (the mean
      training loss of each chunk).
    """
    a = a._replace(w=_check_w(a.w))
    kp, kt, ke = jax.random.split(key, 3)
    state = train_init(init_params(kp, cfg, data.obs_real.shape[1], data.act_real.shape[1]),
                       kt, cfg)
    chunk = cfg.steps // cfg.n_evals

    def inner(s, _):
        return train_step(s, data, a, cfg)

    def outer(s, i):
        s, losses = jax.lax.scan(inner, s, None, length=chunk)
        ev = evaluate(s.params, data, a, jax.random.fold_in(ke, i), cfg)
        return s, {**ev, "loss": losses.mean()}

    state, hist = jax.lax.scan(outer, state, jnp.arange(cfg.n_evals))
    return state.params, hist
