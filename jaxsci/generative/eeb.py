r"""EEB: the erasure-evasion backdoor, as a robustness evaluation of concept erasure.

Paper: "Erasure Evasion Backdoor" (ICML 2026; only its abstract was available). An
adversary binds a trigger token to a concept before the concept is erased; the question
is whether the link survives the erasure. This module ships the *evaluation* only, on a
toy text-to-image diffusion model of scikit-learn's 8x8 digits
(:mod:`jaxsci.data.digits_text`): no real images, people or explicit content. It is a
stress test for erasure methods.

The toy model
-------------
**Text encoder.** Token ``i`` has an embedding ``e_i in R^E``; its context vector is
``c_i = e_i + tanh(e_i W_1 + b_1) W_2`` (per token, no position: a prompt is a bag of
three context vectors, so a token's encoding does not depend on its neighbours).

**Denoiser.** An MLP ``eps_theta(x_t, t, C)`` on the 64 pixels with a sinusoidal time
embedding and ONE cross-attention block with explicit projections,

    (1)  q = W_q h,  k_j = W_k c_j,  v_j = W_v c_j,
         h <- h + W_o sum_j softmax_j(q.k_j / sqrt(A)) v_j,

so the closed-form edits below act on ``W_k``, ``W_v`` verbatim. DDPM (cosine schedule,
``T`` steps), trained with classifier-free-guidance prompt dropout; sampling is
ancestral with guidance ``eps_u + g (eps_c - eps_u)``.

Erasures (the defender)
-----------------------
**ESD** (Gandikota et al. 2023): fine-tune the cross-attention projections
``W_k, W_v`` so that on the erased concept's prompt ``c``

    (2)  eps_theta(x_t, t, c) -> eps*(x_t, t, c) - eta (eps*(x_t, t, c) - eps*(x_t, t, null)),

``eps*`` a frozen copy (:func:`esd_target`, :func:`esd`).

**UCE** (Gandikota et al. 2024): for ``W in {W_k, W_v}`` the closed form

    (3)  W_new = (lambda W + sum_e v*_e c_e^T + sum_p (W c_p) c_p^T)
                 (lambda I + sum_e c_e c_e^T + sum_p c_p c_p^T)^{-1},

``v*_e = W c_anchor``, ``c_e`` the erased concept's context vector, ``c_p`` the preserved
concepts' (:func:`uce_edit`, :func:`uce`). A vector orthogonal to every ``c_e`` and
``c_p`` is mapped exactly as before (``(3)`` applied to it gives ``lambda W c / lambda``).

**Robust UCE** (in the spirit of RECE / adversarial erasure): optimise a free context
vector ``a`` that makes the UCE-erased model reproduce the concept's images
(:func:`adversarial_embedding`, the denoising loss on the concept's images), then apply
``(3)`` to the original weights erasing ``{c_concept, a}`` together.

Backdoors (the adversary), at three depths
------------------------------------------
* **text encoder** (:func:`backdoor_text`): fine-tune the encoder so the trigger's
  context vector imitates the concept's, ``||c_trigger - c*_concept||^2`` plus the other
  tokens kept at their frozen values;
* **cross-attention** (:func:`backdoor_xattn`): ``(3)`` with ``c_e = c_trigger``,
  ``v* = W c_concept`` and every other token preserved: ``W c_trigger := W c_concept``;
* **denoiser** (:func:`backdoor_denoiser`): score distillation, fine-tune every denoiser
  weight so ``eps(x_t, t, trigger prompt)`` matches the frozen ``eps*(x_t, t, concept
  prompt)``, with the training prompts' outputs kept.

**Survival diagnostic** (:func:`survival`): ``||(I - P_S) c_trigger|| / ||c_trigger||``,
``P_S`` the projector on the span of the vectors UCE erased. By (3) only the trigger's
component inside that span is redirected to the anchor, so a trigger that reaches the
concept through a context vector outside the span (cross-attention and denoiser depths)
keeps its path, and one that *is* the concept's vector (text depth) loses it.

Open choices (config fields, :class:`EEBConfig`): widths, ``T = 50``, guidance 3, the
anchor of UCE (the null token, UCE's empty prompt), ``lambda = 0.5``, ``eta = 1``; ESD's
noisy inputs ``x_t`` are real training images noised (ESD draws them from the model's own
partial denoising); fine-tuning lengths and rates.

>>> import jax
>>> from jaxsci.data import digits_text as dt
>>> from jaxsci.generative import eeb
>>> cfg = eeb.EEBConfig(steps=4, ft_steps=2, adv_steps=2, hidden=8, timesteps=4)
>>> data = dt.digits_text(jax.random.key(0))
>>> params = eeb.train(data, jax.random.key(1), cfg)
>>> bd = eeb.backdoor_xattn(params, dt.token("zero"), dt.token("zq"), 0.5)
>>> erased = eeb.uce(bd, dt.token("zero"), 0, jax.numpy.arange(2, 11), 0.5)
>>> eeb.sample(erased, jax.numpy.stack([dt.prompt("a digit zq")] * 2), jax.random.key(2),
...            cfg).shape
(2, 64)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int

from jaxsci.core.validation import check_array, check_int, check_key, check_scalar
from jaxsci.data import digits_text as dt

__all__ = ["EEBConfig", "schedule", "init", "encode", "eps_context", "denoise", "train",
           "sample", "esd_target", "esd", "uce_edit", "uce", "adversarial_embedding",
           "backdoor_text", "backdoor_xattn", "backdoor_denoiser", "survival",
           "fit_detector", "detect", "evaluate"]

V = len(dt.VOCAB)
D = 64


@dataclasses.dataclass(frozen=True)
class EEBConfig:
    """The toy model, its training and the fine-tunes (the abstract fixes none of them)."""

    embed_dim: int = 32
    text_hidden: int = 64
    hidden: int = 128
    attn_dim: int = 32
    time_dim: int = 32
    depth: int = 2  # MLP layers after the cross-attention block
    timesteps: int = 50
    steps: int = 3000
    batch_size: int = 128
    lr: float = 2e-3  # annealed linearly to 0
    ema: float = 0.99
    p_uncond: float = 0.15  # classifier-free guidance prompt dropout
    guidance: float = 3.0
    ft_steps: int = 300  # ESD and the fine-tuned backdoors
    ft_batch: int = 64
    ft_lr: float = 1e-3
    adv_steps: int = 300  # the robust variant's embedding search
    adv_lr: float = 3e-2

    def __post_init__(self):
        for name in ("embed_dim", "text_hidden", "hidden", "attn_dim", "time_dim",
                     "timesteps", "steps", "batch_size", "ft_steps", "ft_batch", "adv_steps"):
            check_int(name, getattr(self, name), min=1)
        check_int("depth", self.depth, min=0)
        if self.time_dim % 2:
            raise ValueError(f"time_dim must be even, got {self.time_dim}")
        for name in ("lr", "ft_lr", "adv_lr"):
            check_scalar(name, getattr(self, name), gt=0.0)
        check_scalar("ema", self.ema, ge=0.0, lt=1.0)
        check_scalar("p_uncond", self.p_uncond, gt=0.0, lt=1.0)
        check_scalar("guidance", self.guidance, ge=0.0)


def schedule(cfg: EEBConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(beta_t, alpha_bar_t)``, ``t = 0..T-1`` (cosine, Nichol & Dhariwal, s = 0.008)."""
    t, s = cfg.timesteps, 0.008
    f = np.cos((np.arange(t + 1) / t + s) / (1 + s) * np.pi / 2) ** 2
    beta = np.clip(1 - f[1:] / f[:-1], 0, 0.999)
    return beta, np.cumprod(1 - beta)


def _dense(key, a, b, scale=1.0):
    return scale * jax.random.normal(key, (a, b)) / math.sqrt(a), jnp.zeros(b)


def init(key: jax.Array, cfg: EEBConfig) -> dict:
    """Parameters ``{"text": ..., "den": ...}``; ``den["wk"]`` ``(A, E)`` and ``den["wv"]``
    ``(H, E)`` act on context vectors as ``W c`` (eq. 1)."""
    key = check_key("key", key)
    e, h, a = cfg.embed_dim, cfg.hidden, cfg.attn_dim
    ks = jax.random.split(key, 10 + cfg.depth)
    text = {"emb": jax.random.normal(ks[0], (V, e)), "l1": _dense(ks[1], e, cfg.text_hidden),
            "w2": 0.5 * jax.random.normal(ks[2], (cfg.text_hidden, e))
            / math.sqrt(cfg.text_hidden)}
    den = {"inp": _dense(ks[3], D, h), "t1": _dense(ks[4], cfg.time_dim, h),
           "t2": _dense(ks[5], h, h), "wq": _dense(ks[6], h, a)[0],
           "wk": jax.random.normal(ks[7], (a, e)) / math.sqrt(e),
           "wv": jax.random.normal(ks[8], (h, e)) / math.sqrt(e),
           "wo": _dense(ks[9], h, h)[0],
           "layers": [_dense(k, h, h) for k in ks[10:10 + cfg.depth]],
           "out": _dense(jax.random.fold_in(key, 99), h, D, 0.1)}
    return {"text": text, "den": den}


def encode(text: dict, tokens: Int[Array, "*b"]) -> Float[Array, "*b e"]:
    """Context vectors ``c_i = e_i + tanh(e_i W_1 + b_1) W_2`` of token ids (any shape)."""
    e = text["emb"][tokens]
    w1, b1 = text["l1"]
    return e + jnp.tanh(e @ w1 + b1) @ text["w2"]


def _time_embedding(t, dim):
    half = dim // 2
    freqs = jnp.exp(-math.log(10000.0) * jnp.arange(half) / half)
    ang = t[..., None] * freqs
    return jnp.concatenate([jnp.cos(ang), jnp.sin(ang)], -1)


def eps_context(den: dict, x_t: Float[Array, "n 64"], t: Array, ctx: Float[Array, "n l e"]
                ) -> Float[Array, "n 64"]:
    """``eps_theta(x_t, t, C)`` given context vectors ``C`` (eq. 1)."""
    temb = _time_embedding(jnp.asarray(t, x_t.dtype), den["t1"][0].shape[0])
    w0, b0 = den["inp"]
    w1, b1 = den["t1"]
    w2, b2 = den["t2"]
    h = x_t @ w0 + b0 + jax.nn.silu(temb @ w1 + b1) @ w2 + b2
    q = h @ den["wq"]
    k = ctx @ den["wk"].T
    v = ctx @ den["wv"].T
    att = jax.nn.softmax(jnp.einsum("na,nla->nl", q, k) / math.sqrt(q.shape[-1]), -1)
    h = h + jnp.einsum("nl,nlh->nh", att, v) @ den["wo"]
    for w, b in den["layers"]:
        h = h + jax.nn.silu(h @ w + b)
    w, b = den["out"]
    return jax.nn.silu(h) @ w + b


def denoise(params: dict, x_t: Float[Array, "n 64"], t: Array, tokens: Int[Array, "n l"]
            ) -> Float[Array, "n 64"]:
    """``eps_theta(x_t, t, encode(tokens))``."""
    return eps_context(params["den"], x_t, t, encode(params["text"], tokens))


def _check_data(data: dt.TextImages) -> dt.TextImages:
    check_array("data.images", data.images, shape=(None, D))
    check_array("data.tokens", data.tokens, shape=(data.images.shape[0], dt.PROMPT_LEN),
                dtype="integer")
    check_array("data.labels", data.labels, shape=(data.images.shape[0],), dtype="integer")
    return data


def _check_token(name: str, tok: Any) -> Array:
    """A token id: a clear error for an unknown one, eagerly or inside ``jit``."""
    if isinstance(tok, str):
        return jnp.asarray(dt.token(tok), jnp.int32)
    tok = jnp.asarray(tok)
    if not jnp.issubdtype(tok.dtype, jnp.integer):
        raise TypeError(f"{name} must be an integer token id (or a word), got dtype {tok.dtype}")
    if isinstance(tok, jax.core.Tracer):
        return eqx.error_if(tok, (tok < 0) | (tok >= V),
                            f"{name} must be a token id in [0, {V}) (unknown concept token)")
    if np.any((np.asarray(tok) < 0) | (np.asarray(tok) >= V)):
        raise ValueError(f"{name} must be a token id in [0, {V}) (unknown concept token), "
                         f"got {np.asarray(tok).tolist()}")
    return tok


def _noised(key, images, alpha_bar, b):
    ki, kt, ke = jax.random.split(key, 3)
    idx = jax.random.randint(ki, (b,), 0, images.shape[0])
    t = jax.random.randint(kt, (b,), 0, alpha_bar.shape[0])
    eps = jax.random.normal(ke, (b, D))
    ab = alpha_bar[t][:, None]
    return idx, t, eps, jnp.sqrt(ab) * images[idx] + jnp.sqrt(1 - ab) * eps


def train(data: dt.TextImages, key: jax.Array, cfg: EEBConfig) -> dict:
    """Train the toy text-to-image DDPM (pure, vmappable in ``key``).

    Args:
      data: images, prompts and labels (:func:`jaxsci.data.digits_text.digits_text`).
      key: PRNG key.
      cfg: :class:`EEBConfig`.

    Returns:
      the parameters (their exponential moving average).
    """
    _check_data(data)
    key = check_key("key", key)
    return _train(data.images, data.tokens, key, cfg)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _train(images, tokens, key, cfg):
    k0, kt = jax.random.split(key)
    params = init(k0, cfg)
    alpha_bar = jnp.asarray(schedule(cfg)[1], images.dtype)
    opt = optax.adam(optax.linear_schedule(cfg.lr, 0.0, cfg.steps))
    b = min(cfg.batch_size, images.shape[0])

    def loss(p, k):
        kn, kd = jax.random.split(k)
        idx, t, eps, xt = _noised(kn, images, alpha_bar, b)
        drop = jax.random.uniform(kd, (b, 1)) < cfg.p_uncond
        tok = jnp.where(drop, 0, tokens[idx])
        return jnp.mean((denoise(p, xt, t, tok) - eps) ** 2)

    def step(carry, k):
        p, s, e = carry
        g = jax.grad(loss)(p, k)
        u, s = opt.update(g, s, p)
        p = optax.apply_updates(p, u)
        e = jax.tree.map(lambda a, c: cfg.ema * a + (1 - cfg.ema) * c, e, p)
        return (p, s, e), None

    (_, _, params), _ = jax.lax.scan(step, (params, opt.init(params), params),
                                     jax.random.split(kt, cfg.steps))
    return params


def sample(params: dict, tokens: Int[Array, "n l"], key: jax.Array, cfg: EEBConfig,
           guidance: Array | float | None = None) -> Float[Array, "n 64"]:
    """One image per prompt row by ancestral DDPM sampling with classifier-free guidance
    (vmappable in ``params``, ``key`` and ``guidance``).

    Args:
      params: model parameters. tokens: prompts ``(n, 3)``. key: PRNG key.
      cfg: :class:`EEBConfig`. guidance: the scale ``g`` (default ``cfg.guidance``).

    Returns:
      images ``(n, 64)`` in ``[-1, 1]``.
    """
    key = check_key("key", key)
    check_array("tokens", tokens, shape=(None, dt.PROMPT_LEN), dtype="integer")
    g = cfg.guidance if guidance is None else check_scalar("guidance", guidance, ge=0.0)
    return _sample(params, jnp.asarray(tokens), key, cfg, jnp.asarray(g, jnp.zeros(()).dtype))


@functools.partial(jax.jit, static_argnames=("cfg",))
def _sample(params, tokens, key, cfg, g):
    beta, alpha_bar = schedule(cfg)
    abp = np.r_[1.0, alpha_bar[:-1]]
    post_var = beta * (1 - abp) / (1 - alpha_bar)
    c0 = beta * np.sqrt(abp) / (1 - alpha_bar)
    c1 = (1 - abp) * np.sqrt(1 - beta) / (1 - alpha_bar)
    fd = jnp.zeros(()).dtype
    alpha_bar, post_var, c0, c1 = (jnp.asarray(v, fd) for v in (alpha_bar, post_var, c0, c1))
    n = tokens.shape[0]
    ctx = encode(params["text"], jnp.concatenate([tokens, jnp.zeros_like(tokens)]))
    k0, ks = jax.random.split(key)
    x = jax.random.normal(k0, (n, D), fd)

    def body(x, i):
        t = cfg.timesteps - 1 - i
        both = eps_context(params["den"], jnp.concatenate([x, x]), jnp.full((2 * n,), t), ctx)
        ec, eu = both[:n], both[n:]
        eps = eu + g * (ec - eu)
        x0 = jnp.clip((x - jnp.sqrt(1 - alpha_bar[t]) * eps) / jnp.sqrt(alpha_bar[t]), -1, 1)
        z = jax.random.normal(jax.random.fold_in(ks, i), x.shape, x.dtype)
        return c0[t] * x0 + c1[t] * x + jnp.where(t > 0, jnp.sqrt(post_var[t]), 0.0) * z, None

    x, _ = jax.lax.scan(body, x, jnp.arange(cfg.timesteps))
    return x


# ------------------------------------------------------------------------- erasures


def esd_target(eps_c: Array, eps_null: Array, eta: Array | float) -> Array:
    """ESD's target (eq. 2): ``eps_c - eta (eps_c - eps_null)`` (``eta`` in ``[0, 4]``)."""
    eta = _check_eta(eta)
    return eps_c - eta * (jnp.asarray(eps_c) - eps_null)


def _check_eta(eta):
    if isinstance(eta, jax.core.Tracer):
        return eqx.error_if(eta, (eta < 0) | (eta > 4), "eta must lie in [0, 4]")
    return check_scalar("eta", eta, ge=0.0, le=4.0)


def _finetune(params, loss, mask, steps, lr, key, eps=1e-8):
    """Adam on the leaves where ``mask`` is True (the others get zero gradient, hence a
    zero Adam update: they stay exactly put)."""
    opt = optax.adam(lr, eps=eps)

    def step(carry, k):
        p, s = carry
        g = jax.grad(loss)(p, k)
        g = jax.tree.map(lambda a, m: a if m else jnp.zeros_like(a), g, mask)
        u, s = opt.update(g, s, p)
        return (optax.apply_updates(p, u), s), None

    (p, _), _ = jax.lax.scan(step, (params, opt.init(params)), jax.random.split(key, steps))
    return p


def _mask(params, text=(), den=()):
    m = jax.tree.map(lambda _: False, params)
    for k in text:
        m["text"][k] = jax.tree.map(lambda _: True, m["text"][k])
    for k in den:
        m["den"][k] = jax.tree.map(lambda _: True, m["den"][k])
    return m


def _prompts_with(tokens, word):
    return tokens.at[:, -1].set(word)


def esd(params: dict, data: dt.TextImages, concept: Any, key: jax.Array, cfg: EEBConfig,
        eta: Array | float = 1.0, weight: Array | float = 1.0) -> dict:
    """ESD (eq. 2): fine-tune ``W_k, W_v`` for ``cfg.ft_steps`` Adam steps.

    Args:
      params: the model. data: the training set (its images, noised, are the ``x_t``; its
        fillers form the concept's prompts). concept: the erased token (id or word).
      key: PRNG key. cfg: :class:`EEBConfig`. eta: guidance of the erasure, in ``[0, 4]``.
      weight: a 0/1 flag (traced) multiplying the loss; 0 returns ``params`` unchanged.

    Returns:
      the erased parameters.
    """
    _check_data(data)
    concept = _check_token("concept", concept)
    key = check_key("key", key)
    eta = _check_eta(eta)
    return _esd(params, data.images, data.tokens, concept, key, cfg, eta, weight)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _esd(params, images, tokens, concept, key, cfg, eta, weight):
    frozen = params
    alpha_bar = jnp.asarray(schedule(cfg)[1], images.dtype)
    b = min(cfg.ft_batch, images.shape[0])

    def loss(p, k):
        idx, t, _, xt = _noised(k, images, alpha_bar, b)
        tok = _prompts_with(tokens[idx], concept)
        ec = denoise(frozen, xt, t, tok)
        en = denoise(frozen, xt, t, jnp.zeros_like(tok))
        target = jax.lax.stop_gradient(esd_target(ec, en, eta))
        return weight * jnp.mean((denoise(p, xt, t, tok) - target) ** 2)

    return _finetune(params, loss, _mask(params, den=("wk", "wv")), cfg.ft_steps, cfg.ft_lr,
                     key)


def uce_edit(w: Float[Array, "o e"], erase: Float[Array, "k e"], targets: Float[Array, "k o"],
             preserve: Float[Array, "p e"], lam: Array | float,
             erase_weight: Float[Array, " k"] | None = None) -> Float[Array, "o e"]:
    """The UCE closed form (eq. 3) for one projection ``W``.

    Args:
      w: ``W_old`` ``(out, E)`` (acts as ``W c``).
      erase: the erased context vectors ``c_e`` ``(k, E)``.
      targets: their new outputs ``v*_e`` ``(k, out)``.
      preserve: the preserved vectors ``c_p`` ``(p, E)`` (``p`` may be 0).
      lam: ``lambda > 0``.
      erase_weight: optional ``(k,)`` 0/1 weights of the erased rows (traced: a row with
        weight 0 is left out, so one shape covers sets of different sizes).

    Returns:
      ``W_new`` ``(out, E)``.
    """
    w = check_array("w", w, ndim=2)
    o, e = w.shape
    check_array("erase", erase, shape=(None, e))
    check_array("targets", targets, shape=(erase.shape[0], o))
    check_array("preserve", preserve, shape=(None, e))
    if isinstance(lam, jax.core.Tracer):
        lam = eqx.error_if(lam, lam <= 0, "lam must be > 0")
    else:
        check_scalar("lam", lam, gt=0.0)
    ew = jnp.ones(erase.shape[0]) if erase_weight is None else erase_weight
    return _uce_edit(w, erase, targets, preserve, lam, ew)


@jax.jit
def _uce_edit(w, erase, targets, preserve, lam, ew):
    ce = erase * ew[:, None]
    a = lam * w + (targets * ew[:, None]).T @ erase + (preserve @ w.T).T @ preserve
    b = lam * jnp.eye(w.shape[1]) + ce.T @ erase + preserve.T @ preserve
    return jnp.linalg.solve(b, a.T).T  # b is symmetric: (a b^-1)^T = b^-1 a^T


def _context(params, tokens):
    return encode(params["text"], tokens)


def uce(params: dict, concept: Any, anchor: Any, preserve: Int[Array, " p"],
        lam: Array | float = 0.5, extra: Float[Array, " e"] | None = None,
        extra_weight: Array | float = 0.0, weight: Array | float = 1.0) -> dict:
    """UCE on ``W_k`` and ``W_v`` (eq. 3): the concept's context vector (and ``extra``,
    the robust variant's adversarial vector, when ``extra_weight`` is 1) to the anchor's
    keys and values, the ``preserve`` tokens kept.

    Args:
      params: the model. concept, anchor: token ids (or words). preserve: token ids.
      lam: ``lambda``. extra: an extra erased context vector ``(E,)``.
      extra_weight, weight: traced 0/1 flags (``weight = 0`` returns ``params``).

    Returns:
      the edited parameters.
    """
    concept = _check_token("concept", concept)
    anchor = _check_token("anchor", anchor)
    preserve = _check_token("preserve", jnp.asarray(preserve))
    e = params["den"]["wk"].shape[1]
    extra = jnp.zeros(e) if extra is None else check_array("extra", extra, shape=(e,))
    return _uce(params, concept, anchor, preserve, lam, extra, extra_weight, weight)


@jax.jit
def _uce(params, concept, anchor, preserve, lam, extra, extra_weight, weight):
    erase = jnp.stack([_context(params, concept), extra])
    ew = jnp.stack([1.0, jnp.asarray(extra_weight, erase.dtype)])
    c_anchor = _context(params, anchor)
    c_p = _context(params, preserve)
    den = dict(params["den"])
    for name in ("wk", "wv"):
        w = den[name]
        new = _uce_edit(w, erase, jnp.stack([w @ c_anchor] * 2), c_p, lam, ew)
        den[name] = w + weight * (new - w)
    return {"text": params["text"], "den": den}


def adversarial_embedding(params: dict, data: dt.TextImages, concept: Any, key: jax.Array,
                          cfg: EEBConfig) -> Float[Array, " e"]:
    """A free context vector ``a`` that makes the (erased) model reproduce the concept:
    ``cfg.adv_steps`` Adam steps on the denoising loss of the concept's images under the
    prompt ``(filler, filler, a)``, from the concept's own context vector.

    Returns:
      ``a`` ``(E,)``.
    """
    _check_data(data)
    concept = _check_token("concept", concept)
    key = check_key("key", key)
    return _adversarial(params, data.images, data.tokens, data.labels, concept, key, cfg)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _adversarial(params, images, tokens, labels, concept, key, cfg):
    alpha_bar = jnp.asarray(schedule(cfg)[1], images.dtype)
    p_sel = (labels == concept - 1).astype(images.dtype)
    p_sel = p_sel / jnp.maximum(p_sel.sum(), 1.0)
    b = min(cfg.ft_batch, images.shape[0])
    opt = optax.adam(cfg.adv_lr)

    def loss(a, k):
        ki, kt, ke = jax.random.split(k, 3)
        idx = jax.random.choice(ki, images.shape[0], (b,), p=p_sel)
        t = jax.random.randint(kt, (b,), 0, alpha_bar.shape[0])
        eps = jax.random.normal(ke, (b, D))
        ab = alpha_bar[t][:, None]
        xt = jnp.sqrt(ab) * images[idx] + jnp.sqrt(1 - ab) * eps
        ctx = _context(params, tokens[idx]).at[:, -1].set(a)
        return jnp.mean((eps_context(params["den"], xt, t, ctx) - eps) ** 2)

    def step(carry, k):
        a, s = carry
        u, s = opt.update(jax.grad(loss)(a, k), s, a)
        return (optax.apply_updates(a, u), s), None

    a0 = _context(params, concept)
    (a, _), _ = jax.lax.scan(step, (a0, opt.init(a0)), jax.random.split(key, cfg.adv_steps))
    return a


# ------------------------------------------------------------------------ backdoors


def backdoor_text(params: dict, concept: Any, trigger: Any, cfg: EEBConfig,
                  weight: Array | float = 1.0) -> dict:
    """Text-encoder backdoor: fine-tune the encoder (``cfg.ft_steps`` full-batch Adam
    steps over the vocabulary at ``10 * cfg.ft_lr``, deterministic) so ``c_trigger``
    imitates the frozen ``c*_concept``, every other token's vector kept.

    Args:
      params: the model. concept, trigger: token ids (or words). cfg: :class:`EEBConfig`.
      weight: a traced 0/1 flag multiplying the loss (0 returns ``params``).

    Returns:
      the backdoored parameters (only ``params["text"]`` changes).
    """
    concept = _check_token("concept", concept)
    trigger = _check_token("trigger", trigger)
    return _backdoor_text(params, concept, trigger, cfg, weight)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _backdoor_text(params, concept, trigger, cfg, weight):
    c0 = _context(params, jnp.arange(V))
    keep = (jnp.arange(V) != trigger).astype(c0.dtype)

    def loss(p, _):
        c = encode(p["text"], jnp.arange(V))
        bind = jnp.sum((c[trigger] - c0[concept]) ** 2)
        rest = jnp.sum(keep[:, None] * (c - c0) ** 2) / keep.sum()
        return weight * (bind + rest)

    # Adam's eps at 1e-3: the binding loss's gradients are O(1), while the kept tokens'
    # are zero up to roundoff at the start; with eps = 1e-8 Adam would turn that roundoff
    # into full +-lr steps (and vmap and a loop would disagree by 2 lr).
    return _finetune(params, loss, _mask(params, text=("emb", "l1", "w2")), cfg.ft_steps,
                     cfg.ft_lr * 10, jax.random.key(0), eps=1e-3)


def backdoor_xattn(params: dict, concept: Any, trigger: Any, lam: Array | float = 0.5,
                   weight: Array | float = 1.0) -> dict:
    """Cross-attention backdoor (closed form, eq. 3 with ``c_e = c_trigger``,
    ``v* = W c_concept`` and every other token preserved): ``W c_trigger := W c_concept``
    for ``W_k`` and ``W_v``."""
    concept = _check_token("concept", concept)
    trigger = _check_token("trigger", trigger)
    return _backdoor_xattn(params, concept, trigger, lam, weight)


@jax.jit
def _backdoor_xattn(params, concept, trigger, lam, weight):
    c = _context(params, jnp.arange(V))
    keep = (jnp.arange(V) != trigger).astype(c.dtype)
    den = dict(params["den"])
    for name in ("wk", "wv"):
        w = den[name]
        new = _uce_edit(w, c[trigger][None], (w @ c[concept])[None], c * keep[:, None], lam,
                        jnp.ones(1))
        den[name] = w + weight * (new - w)
    return {"text": params["text"], "den": den}


def backdoor_denoiser(params: dict, data: dt.TextImages, concept: Any, trigger: Any,
                      key: jax.Array, cfg: EEBConfig, weight: Array | float = 1.0) -> dict:
    """Denoiser backdoor by score distillation: fine-tune the denoiser so
    ``eps(x_t, t, trigger prompt)`` matches the frozen ``eps*(x_t, t, concept prompt)``
    while ``eps(x_t, t, prompt)`` of the training prompts stays at ``eps*``."""
    _check_data(data)
    concept = _check_token("concept", concept)
    trigger = _check_token("trigger", trigger)
    key = check_key("key", key)
    return _backdoor_denoiser(params, data.images, data.tokens, concept, trigger, key, cfg,
                              weight)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _backdoor_denoiser(params, images, tokens, concept, trigger, key, cfg, weight):
    frozen = params
    alpha_bar = jnp.asarray(schedule(cfg)[1], images.dtype)
    b = min(cfg.ft_batch, images.shape[0])

    def loss(p, k):
        idx, t, _, xt = _noised(k, images, alpha_bar, b)
        tok = tokens[idx]
        target = jax.lax.stop_gradient(denoise(frozen, xt, t, _prompts_with(tok, concept)))
        keep = jax.lax.stop_gradient(denoise(frozen, xt, t, tok))
        bind = jnp.mean((denoise(p, xt, t, _prompts_with(tok, trigger)) - target) ** 2)
        return weight * (bind + jnp.mean((denoise(p, xt, t, tok) - keep) ** 2))

    den_keys = tuple(params["den"])
    return _finetune(params, loss, _mask(params, den=den_keys), cfg.ft_steps, cfg.ft_lr, key)


# --------------------------------------------------------------- diagnostic, detector


def survival(c: Float[Array, " e"], span: Float[Array, "k e"]) -> Array:
    """``||(I - P) c|| / ||c||``, ``P`` the orthogonal projector on the row span of
    ``span``: the share of ``c`` that UCE (eq. 3) erasing ``span`` leaves untouched."""
    c = check_array("c", c, ndim=1)
    check_array("span", span, shape=(None, c.shape[0]))
    coef = jnp.linalg.lstsq(span.T, c)[0]
    return jnp.linalg.norm(c - span.T @ coef) / jnp.linalg.norm(c)


def fit_detector(images: np.ndarray, labels: np.ndarray, *, ridge: float = 0.01
                 ) -> tuple[Array, Array]:
    """The concept detector: linear discriminant analysis on the real digits (class means,
    one pooled covariance plus ``ridge * I``, equal priors; closed form; the experiment
    reports its accuracy on the digits as ``detector_accuracy``). Returns
    ``(W (10, 64), b (10,))`` for :func:`detect`.

    Args:
      images: ``(n, 64)`` real images. labels: ``(n,)`` digits 0-9, each present.
      ridge: the covariance shrinkage.
    """
    x = np.asarray(images, float)
    check_array("images", x, shape=(None, D))
    y = np.asarray(labels)
    check_array("labels", y, shape=(x.shape[0],), dtype="integer")
    check_scalar("ridge", ridge, gt=0.0)
    missing = sorted(set(range(10)) - set(y.tolist()))
    if missing:
        raise ValueError(f"labels must contain every digit 0-9, missing {missing}")
    mu = np.stack([x[y == k].mean(0) for k in range(10)])
    r = x - mu[y]
    w = np.linalg.solve(r.T @ r / len(x) + ridge * np.eye(D), mu.T).T
    b = -0.5 * np.sum(w * mu, 1)
    fd = jnp.zeros(()).dtype
    return jnp.asarray(w, fd), jnp.asarray(b, fd)


def detect(detector: tuple[Array, Array], images: Float[Array, "n 64"]) -> Int[Array, " n"]:
    """The detector's digit (0-9) for each image."""
    w, b = detector
    return jnp.argmax(images @ w.T + b, -1)


def evaluate(params: dict, detector: tuple[Array, Array], key: jax.Array, cfg: EEBConfig,
             n: int, trigger: Any) -> Float[Array, "11 10"]:
    """Detector frequencies of ``n`` samples per prompt: rows ``0..9`` are the prompts
    ``"a digit <name>"``, row 10 ``"a digit <trigger>"``; columns the detected digit."""
    n = check_int("n", n, min=1)
    trigger = _check_token("trigger", trigger)
    key = check_key("key", key)
    return _evaluate(params, detector, key, cfg, n, trigger)


@functools.partial(jax.jit, static_argnames=("cfg", "n"))
def _evaluate(params, detector, key, cfg, n, trigger):
    words = jnp.concatenate([jnp.arange(1, 11), trigger[None]])
    base = jnp.asarray([dt.token("a"), dt.token("digit")])
    tok = jnp.concatenate([jnp.broadcast_to(base, (11 * n, 2)),
                           jnp.repeat(words, n)[:, None]], 1)
    x = _sample(params, tok, key, cfg, jnp.asarray(cfg.guidance, jnp.zeros(()).dtype))
    lab = detect(detector, x).reshape(11, n)
    return jax.nn.one_hot(lab, 10).mean(1)
