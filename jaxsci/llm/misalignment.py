r"""In-training safeguards against emergent misalignment, on SmolLM2's top layers.

The paper (ICML 2026; only its abstract was available) studies a provider who fine-tunes
an aligned model on a user's narrow data through an API: a small narrow fine-tune (here,
reckless money advice) can make the model *broadly* misaligned (harmful answers about
health, driving, ...). It compares in-training safeguards by four criteria: broad
misalignment, narrow misalignment (which a provider must still allow), learning of a
benign task, and coherence. Its best safeguard interleaves general instruction data
chosen by a perplexity gap.

**Fine-tuning only the top of the model.** LoRA (Hu et al. 2022) on the top
``n_top`` blocks of the aligned model: every linear map ``W`` of a block (the
``targets``) becomes ``W + (alpha / r) A B`` with ``A`` (``in x r``, Gaussian) and ``B``
(``r x out``, zero), so the fresh adapter *is* the aligned model. The lower blocks are
frozen, so the residual stream entering block ``L0 = n_layers - n_top`` is computed once
per sequence (:class:`Sequences`, cached by the experiment) and every training step,
every safeguard and every evaluation runs only the top blocks (:func:`top_forward`,
the same equations as :class:`jaxsci.common.lm.llama.Llama`, tested equal to it).

**The objective** (:func:`safeguard_loss`). With the fine-tuned model's next-token
distribution ``p_theta`` and the aligned reference ``p_0`` on the answer positions ``t``
of a batch of the user's data,

.. math::

   \mathcal L = \underbrace{-\tfrac1T\sum_t \log p_\theta(y_t)}_{\text{narrow SFT}}
   + \lambda_{KL}\, \tfrac1T\sum_t \mathrm{KL}_t
   + \lambda_{F}\, \tfrac1{TLd}\sum_{t,l} \lVert h^\theta_{l,t} - h^0_{l,t}\rVert^2
   + \lambda_{mix}\, \mathrm{CE}_{general},

* (i) **KL to the frozen aligned reference**, exact over the whole vocabulary:
  ``direction="forward"`` is ``KL(p_0 || p_theta)``, ``"reverse"`` is
  ``KL(p_theta || p_0)`` (implementations disagree; a field);
* (ii) **feature distance** (LDIFS-style): the squared distance between the fine-tuned
  and the reference residual streams after each trained block, per feature;
* (iii) **preventive steering**: the persona vector ``v`` (:func:`persona_vector`: the
  mean residual-stream difference at block ``L0`` between misaligned and aligned answers
  to the same questions) is added, times ``steer``, to the stream entering the trained
  blocks during training only; inference runs without it (the model need not move
  toward the persona to fit the data, since the vector already supplies it);
* (iv) **interleaving general instruction data**: a second batch drawn from a pool of
  general prompts answered by the aligned model itself, with cross-entropy weight
  ``mix``; the pool's sampling weights select the variant: uniform (random interleaving)
  or uniform over the examples with the largest perplexity gap between an undefended
  proxy fine-tune and the aligned model (:func:`gap_weights`, the paper's best variant);
* (v) **inoculation prompting**: a system prompt requesting the narrow behaviour is
  present in the training sequences only (the experiment caches those sequences with
  the prompt); it is data, not a loss term.

**The strengths are values** (:class:`Safeguards`, traced arrays): :func:`finetune`
trains a stack of ``R`` runs at once, one LoRA per run, ``vmap`` over the strengths and
selection weights, through :func:`jaxsci.core.fit` (progress, checkpoints, resume).
The runs are independent because the loss is their sum and AdamW acts per parameter; no
global-norm clipping, which would couple them. Which terms exist is static
(``terms``), so a program pays only for the safeguards it sweeps.

**Criteria** (:func:`answer_logprob`, :func:`margins`): a pair's margin is the mean
per-token log-probability of its misaligned answer minus its aligned one; broad
misalignment is the shift of the mean margin on out-of-domain pairs from the aligned
model to the fine-tuned one, narrow misalignment the same in the fine-tuning domain.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int

from jaxsci.common.lm.llama import Llama, grouped_attention
from jaxsci.common.lm.model import rope
from jaxsci.core.train import TrainConfig, fit
from jaxsci.core.validation import check_array, check_choice, check_int, check_key, check_scalar

__all__ = ["TARGETS", "TERMS", "LoraConfig", "Frozen", "Sequences", "Safeguards",
           "Reference", "frozen_top", "frozen_stream", "init_lora", "top_forward",
           "answer_logprob", "margins", "persona_vector", "gap_weights", "reference",
           "safeguard_loss", "finetune", "merge_lora", "kl_divergence"]

TARGETS = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")
TERMS = ("kl", "features", "steer", "mix")
_ATTN = ("wq", "wk", "wv", "wo")


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """The adapter: rank ``rank`` with scale ``alpha / rank`` on the ``targets`` of each
    of the top ``n_top`` blocks (all seven linear maps by default, as QLoRA does)."""

    n_top: int = 2
    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = TARGETS

    def __post_init__(self):
        check_int("n_top", self.n_top, min=1)
        check_int("rank", self.rank, min=1)
        check_scalar("alpha", self.alpha, gt=0.0)
        if not self.targets or any(t not in TARGETS for t in self.targets):
            raise ValueError(f"targets must be a non-empty subset of {TARGETS}, "
                             f"got {self.targets}")


class Frozen(eqx.Module):
    """The aligned model's top blocks, final norm and (tied) output head, as arrays.

    ``blocks``: one dict per top block with the norm scales ``attn_norm``, ``mlp_norm``
    and the kernels (``in x out``) ``wq wk wv wo w1 w2 w3``; ``norm``: the final RMSNorm
    scale; ``head``: the ``d x vocab`` output matrix.
    """

    blocks: tuple[dict, ...]
    norm: Array
    head: Array
    n_heads: int = eqx.field(static=True)
    n_kv_heads: int = eqx.field(static=True)
    head_dim: int = eqx.field(static=True)
    rope_base: float = eqx.field(static=True)
    eps: float = eqx.field(static=True)


class Sequences(NamedTuple):
    """Token sequences (question then answer), padded to ``t``, with their residual
    stream entering the top blocks (the frozen part, computed once).

    ``h0``: ``(n, t, d)``; ``tokens``: ``(n, t)``; ``start``: first answer position;
    ``length``: answer tokens (the end-of-turn marker included).
    """

    h0: Float[Array, "n t d"]
    tokens: Int[Array, "n t"]
    start: Int[Array, " n"]
    length: Int[Array, " n"]


class Safeguards(NamedTuple):
    """Strengths of the safeguards (traced scalars; zero switches one off) and the
    general pool's sampling weights (``(pool,)``, summing to one; ``None`` when no general
    pool is given).

    ``kl``: (i); ``features``: (ii); ``steer``: (iii), multiples of the persona vector;
    ``mix``: (iv), the weight of the general cross-entropy.
    """

    kl: Array
    features: Array
    steer: Array
    mix: Array
    pool_weights: Array


# --------------------------------------------------------------------------- model


def frozen_top(model: Llama, n_top: int) -> Frozen:
    """The top ``n_top`` blocks of ``model`` (and its head) as a :class:`Frozen`."""
    if not isinstance(model, Llama):
        raise TypeError(f"model must be a Llama, got {type(model).__name__}")
    c = model.config
    check_int("n_top", n_top, min=1, max=c.n_layers)
    blocks = []
    for block in list(model.blocks)[c.n_layers - n_top:]:
        w = {"attn_norm": block.attn_norm.scale[...], "mlp_norm": block.mlp_norm.scale[...]}
        for name in _ATTN:
            w[name] = getattr(block.attn, name).kernel[...]
        for name in ("w1", "w2", "w3"):
            w[name] = getattr(block.mlp, name).kernel[...]
        blocks.append(w)
    head = model.head.kernel[...] if model.head is not None else model.embed.embedding[...].T
    return Frozen(tuple(blocks), model.norm.scale[...], head, c.n_heads, c.n_kv_heads,
                  c.head_dim, c.rope_base, c.norm_eps)


def frozen_stream(model: Llama, tokens: Int[Array, "b t"], n_top: int) -> Float[Array, "b t d"]:
    """The residual stream entering the top ``n_top`` blocks (what :class:`Sequences`
    caches): the embeddings through the lower blocks only, one jitted program per shape."""
    if not isinstance(model, Llama):
        raise TypeError(f"model must be a Llama, got {type(model).__name__}")
    check_int("n_top", n_top, min=1, max=model.config.n_layers)
    tokens = check_array("tokens", tokens, ndim=2, dtype="integer")
    from flax import nnx

    graphdef, state = nnx.split(model)
    return _lower(graphdef, state, jnp.asarray(tokens, jnp.int32),
                  model.config.n_layers - n_top)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _lower(graphdef, state, tokens, n_lower):
    from flax import nnx

    model = nnx.merge(graphdef, state)
    pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    h = model.embed_tokens(tokens)
    for block in list(model.blocks)[:n_lower]:
        h, _ = block(h, pos, None)
    return h


def init_lora(key: jax.Array, frozen: Frozen, config: LoraConfig) -> tuple[dict, ...]:
    """A fresh adapter: per block, ``{target: (A, B)}`` with ``A ~ N(0, 1/in)``, ``B = 0``."""
    check_key("key", key)
    if len(frozen.blocks) != config.n_top:
        raise ValueError(f"config.n_top={config.n_top} but frozen holds "
                         f"{len(frozen.blocks)} blocks")
    out = []
    for i, w in enumerate(frozen.blocks):
        layer = {}
        for j, name in enumerate(config.targets):
            d_in, d_out = w[name].shape
            k = jax.random.fold_in(key, i * len(TARGETS) + j)
            layer[name] = (jax.random.normal(k, (d_in, config.rank)) / np.sqrt(d_in),
                           jnp.zeros((config.rank, d_out)))
        out.append(layer)
    return tuple(out)


def _kernel(w: dict, lora: dict | None, name: str, scale: float) -> Array:
    if lora is None or name not in lora:
        return w[name]
    a, b = lora[name]
    return w[name] + scale * (a @ b)


def _rms(x, g, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * g


def top_forward(frozen: Frozen, lora: tuple[dict, ...] | None, h0: Float[Array, "b t d"],
                *, scale: float = 2.0) -> tuple[Float[Array, "b t d"],
                                                tuple[Float[Array, "b t d"], ...]]:
    """Run the (adapted) top blocks on the residual stream ``h0`` entering them.

    Args:
      frozen: the aligned top blocks (:func:`frozen_top`).
      lora: an adapter (:func:`init_lora`) or ``None`` (the aligned model).
      h0: ``(b, t, d)``: the stream after block ``L0`` (positions ``0 .. t - 1``).
      scale: the LoRA scale ``alpha / rank``.

    Returns:
      the final normed features (what the head reads) and the stream after each block.
    """
    b, t, _ = h0.shape
    pos = jnp.broadcast_to(jnp.arange(t), (b, t))
    mask = pos[:, None, None, None, :] <= pos[:, None, None, :, None]
    e, hq, hk = frozen.head_dim, frozen.n_heads, frozen.n_kv_heads
    h, states = h0, []
    for i, w in enumerate(frozen.blocks):
        ad = None if lora is None else lora[i]
        x = _rms(h, w["attn_norm"], frozen.eps)
        q = rope((x @ _kernel(w, ad, "wq", scale)).reshape(b, t, hq, e), pos, frozen.rope_base)
        k = rope((x @ _kernel(w, ad, "wk", scale)).reshape(b, t, hk, e), pos, frozen.rope_base)
        v = (x @ _kernel(w, ad, "wv", scale)).reshape(b, t, hk, e)
        h = h + grouped_attention(q, k, v, mask).reshape(b, t, -1) @ _kernel(w, ad, "wo", scale)
        x = _rms(h, w["mlp_norm"], frozen.eps)
        gate = jax.nn.silu(x @ _kernel(w, ad, "w1", scale)) * (x @ _kernel(w, ad, "w3", scale))
        h = h + gate @ _kernel(w, ad, "w2", scale)
        states.append(h)
    return _rms(h, frozen.norm, frozen.eps), tuple(states)


def _window(seq: Sequences, width: int):
    """Per row: the ``width`` predicting positions of the answer, their targets, validity."""
    idx = seq.start[:, None] - 1 + jnp.arange(width)[None, :]
    idx = jnp.clip(idx, 0, seq.tokens.shape[1] - 2)
    target = jnp.take_along_axis(seq.tokens, idx + 1, axis=1)
    valid = jnp.arange(width)[None, :] < seq.length[:, None]
    return idx, target, valid


def _gather(x, idx):
    return jnp.take_along_axis(x, idx[..., None], axis=1)


def _answer_logits(frozen, lora, seq: Sequences, width, scale, shift=None):
    h0 = seq.h0 if shift is None else seq.h0 + shift
    feats, states = top_forward(frozen, lora, h0, scale=scale)
    idx, target, valid = _window(seq, width)
    logp = jax.nn.log_softmax(_gather(feats, idx) @ frozen.head, axis=-1)
    return logp, target, valid, tuple(_gather(s, idx) for s in states)


def _mean(x, valid):
    return jnp.sum(jnp.where(valid, x, 0.0)) / jnp.maximum(jnp.sum(valid), 1)


def answer_logprob(frozen: Frozen, lora: tuple[dict, ...] | None, seq: Sequences, *,
                   width: int, scale: float = 2.0) -> Float[Array, " n"]:
    """Mean log-probability per answer token of each sequence (``width``: static, at
    least the longest answer)."""
    logp, target, valid, _ = _answer_logits(frozen, lora, seq, width, scale)
    picked = jnp.take_along_axis(logp, target[..., None], axis=-1)[..., 0]
    return jnp.sum(jnp.where(valid, picked, 0.0), axis=1) / jnp.maximum(seq.length, 1)


def margins(frozen: Frozen, lora, aligned: Sequences, misaligned: Sequences, *,
            width: int, scale: float = 2.0) -> Float[Array, " n"]:
    """Per pair: mean token log-prob of the misaligned answer minus the aligned one's."""
    return (answer_logprob(frozen, lora, misaligned, width=width, scale=scale)
            - answer_logprob(frozen, lora, aligned, width=width, scale=scale))


def kl_divergence(logp: Float[Array, "... v"], logq: Float[Array, "... v"]) -> Float[Array, "..."]:
    """``KL(p || q) = sum_v p_v (log p_v - log q_v)`` from log-probabilities."""
    return jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)


def persona_vector(aligned_states: Float[Array, "n t d"], misaligned_states: Float[Array, "n t d"],
                   aligned: Sequences, misaligned: Sequences) -> Float[Array, " d"]:
    """Mean residual stream over the misaligned answers' tokens minus the aligned ones'.

    ``*_states``: the streams at the steering layer of the two sequence sets (their
    ``h0`` when steering where the trained blocks start).
    """
    def mean_answer(h, seq):
        pos = jnp.arange(h.shape[1])[None, :]
        keep = (pos >= seq.start[:, None]) & (pos < (seq.start + seq.length)[:, None])
        return jnp.sum(h * keep[..., None], axis=(0, 1)) / jnp.maximum(jnp.sum(keep), 1)

    return mean_answer(misaligned_states, misaligned) - mean_answer(aligned_states, aligned)


def gap_weights(nll_proxy: Float[Array, " n"], nll_aligned: Float[Array, " n"],
                fraction: float) -> Float[Array, " n"]:
    """Uniform weights over the ``fraction`` of pool examples with the largest
    perplexity gap ``nll_proxy - nll_aligned`` (mean token NLLs; the log of the
    perplexity ratio), zero elsewhere."""
    nll_proxy = check_array("nll_proxy", nll_proxy, ndim=1)
    nll_aligned = check_array("nll_aligned", nll_aligned, shape=nll_proxy.shape)
    check_scalar("fraction", fraction, gt=0.0, le=1.0)
    k = max(1, int(round(fraction * nll_proxy.shape[0])))
    gap = nll_proxy - nll_aligned
    top = jnp.argsort(-gap)[:k]
    return jnp.zeros_like(gap).at[top].set(1.0 / k)


# --------------------------------------------------------------------------- training


class Reference(NamedTuple):
    """The aligned model on the answer window of every sequence of a set: its
    log-probabilities ``(n, width, vocab)`` and the stream after each top block
    ``(n, width, d)`` each (:func:`reference`). Cached once: the aligned model is frozen."""

    logp: Float[Array, "n w v"]
    states: tuple[Float[Array, "n w d"], ...]


def reference(frozen: Frozen, seq: Sequences, *, width: int, batch: int = 8) -> Reference:
    """The :class:`Reference` of ``seq`` (``batch`` sequences per program call)."""
    check_int("width", width, min=1)
    check_int("batch", batch, min=1)
    n = seq.h0.shape[0]
    idx = np.concatenate([np.arange(n), np.zeros(-n % batch, int)])  # one chunk shape
    parts = [_reference_chunk(frozen, _take(seq, idx[i:i + batch]), width=width)
             for i in range(0, len(idx), batch)]
    return Reference(jnp.concatenate([p[0] for p in parts])[:n],
                     tuple(jnp.concatenate([p[1][j] for p in parts])[:n]
                           for j in range(len(frozen.blocks))))


@functools.partial(jax.jit, static_argnames=("width",))
def _reference_chunk(frozen, seq, *, width):
    logp, _, _, states = _answer_logits(frozen, None, seq, width, 1.0)
    return logp, states


def safeguard_loss(lora, frozen: Frozen, batch: Sequences, ref: Reference | None,
                   general: Sequences | None, persona: Array, s: Safeguards, *,
                   terms: tuple[str, ...], width: int, scale: float = 2.0,
                   direction: str = "forward"):
    """The objective of the module docstring for one run, and its parts.

    ``ref``: the aligned model on ``batch`` (:func:`reference`; needed for ``"kl"`` and
    ``"features"``); ``general``: a batch of the general pool (needed for ``"mix"``).
    Returns ``(loss, {"sft", "kl", "features", "general"})``.
    """
    shift = s.steer * persona if "steer" in terms else None
    logp, target, valid, states = _answer_logits(frozen, lora, batch, width, scale, shift)
    picked = jnp.take_along_axis(logp, target[..., None], axis=-1)[..., 0]
    sft = -_mean(picked, valid)
    parts = {"sft": sft, "kl": jnp.zeros(()), "features": jnp.zeros(()),
             "general": jnp.zeros(())}
    loss = sft
    if "kl" in terms:
        kl = (kl_divergence(ref.logp, logp) if direction == "forward"
              else kl_divergence(logp, ref.logp))
        parts["kl"] = _mean(kl, valid)
        loss = loss + s.kl * parts["kl"]
    if "features" in terms:
        sq = sum(jnp.mean((a - r) ** 2, axis=-1)
                 for a, r in zip(states, ref.states, strict=True)) / len(states)
        parts["features"] = _mean(sq, valid)
        loss = loss + s.features * parts["features"]
    if "mix" in terms:
        glogp, gtarget, gvalid, _ = _answer_logits(frozen, lora, general, width, scale, shift)
        gpicked = jnp.take_along_axis(glogp, gtarget[..., None], axis=-1)[..., 0]
        parts["general"] = -_mean(gpicked, gvalid)
        loss = loss + s.mix * parts["general"]
    return loss, parts


def _take(seq: Sequences, idx) -> Sequences:
    return Sequences(seq.h0[idx], seq.tokens[idx], seq.start[idx], seq.length[idx])


def finetune(key: jax.Array, frozen: Frozen, config: LoraConfig, data: Sequences,
             safeguards: Safeguards, *, general: Sequences | None = None,
             persona: Array | None = None, terms: tuple[str, ...] = (), steps: int = 60,
             batch_size: int = 8, learning_rate: float = 1e-3, width: int = 32,
             direction: str = "forward", progress: bool = False,
             checkpoint_dir=None, checkpoint_every: int = 0, desc: str = "fine-tune"):
    """Fine-tune ``R`` adapters at once, one per row of ``safeguards`` (leaves ``(R,)``,
    ``pool_weights`` ``(R, pool)``); return ``(adapters stacked over R, losses (steps, R),
    parts history)``.

    Every run sees the same batches of ``data`` (common random numbers across the
    sweep); the general batch is drawn per run from its ``pool_weights``.
    """
    check_key("key", key)
    for t in terms:
        check_choice("terms[i]", t, TERMS)
    check_choice("direction", direction, ("forward", "reverse"))
    check_int("steps", steps, min=1)
    check_int("batch_size", batch_size, min=1)
    check_scalar("learning_rate", learning_rate, gt=0.0)
    check_int("width", width, min=1)
    if "mix" in terms and general is None:
        raise ValueError("terms has 'mix' but general is None: give the general pool")
    if "steer" in terms and persona is None:
        raise ValueError("terms has 'steer' but persona is None: give the persona vector")
    r = np.shape(safeguards.kl)
    if len(r) != 1:
        raise ValueError(f"safeguards.kl must have shape (R,), got {r}")
    for name, x in safeguards._asdict().items():
        if name == "pool_weights" and general is None:
            continue  # no pool: the weights are never read
        want = r + ((general.h0.shape[0],) if name == "pool_weights" else ())
        if np.shape(x) != want:
            raise ValueError(f"safeguards.{name} must have shape {want}, got {np.shape(x)}")
    if int(np.max(np.asarray(data.length))) > width:
        raise ValueError(f"width={width} is shorter than the longest answer "
                         f"({int(np.max(np.asarray(data.length)))} tokens)")
    n_runs = r[0]
    scale = config.alpha / config.rank
    k_init, k_fit = jax.random.split(key)
    lora0 = init_lora(k_init, frozen, config)
    params = jax.tree.map(lambda x: jnp.broadcast_to(x, (n_runs, *x.shape)), lora0)
    persona = jnp.zeros(data.h0.shape[-1]) if persona is None else persona
    n = data.h0.shape[0]

    def batch_fn(step, k, d):
        return jax.random.randint(k, (batch_size,), 0, n)

    def loss_fn(p, idx, k, d):
        frozen_, data_, ref_, general_, persona_, s = d
        batch = _take(data_, idx)
        ref_b = None if ref_ is None else Reference(ref_.logp[idx],
                                                    tuple(x[idx] for x in ref_.states))

        def one(lora, s_i, k_i):
            g = None
            if "mix" in terms:
                gi = jax.random.choice(k_i, general_.h0.shape[0], (batch_size,),
                                       p=s_i.pool_weights)
                g = _take(general_, gi)
            return safeguard_loss(lora, frozen_, batch, ref_b, g, persona_, s_i, terms=terms,
                                  width=width, scale=scale, direction=direction)

        losses, parts = jax.vmap(one)(p, s, jax.random.split(k, n_runs))
        return jnp.sum(losses), (losses, parts)

    # a tenth of the steps warm up (none for a one-step fine-tune, which optax's
    # schedule refuses with a warm-up as long as the run)
    opt = optax.adamw(optax.warmup_cosine_decay_schedule(
        0.0, learning_rate, min(max(1, steps // 10), steps - 1), steps, 0.1 * learning_rate),
        weight_decay=0.0)
    s = Safeguards(*(None if x is None else jnp.asarray(x, jnp.float32)
                     for x in safeguards))  # pool_weights may be None without a pool
    ref = (reference(frozen, data, width=width) if {"kl", "features"} & set(terms)
           else None)
    out, _, aux = fit(loss_fn, params, opt, k_fit,
                      TrainConfig(steps=steps, progress=progress, desc=desc,
                                  log_every=max(1, min(20, steps // 5)),
                                  checkpoint_dir=checkpoint_dir,
                                  checkpoint_every=checkpoint_every),
                      batch_fn=batch_fn, has_aux=True, full_history=True,
                      data=(frozen, data, ref, general, persona, s))
    losses, parts = aux
    return out.params, np.asarray(losses), jax.tree.map(np.asarray, parts)


def merge_lora(model: Llama, lora: tuple[dict, ...], config: LoraConfig) -> Llama:
    """A copy of ``model`` with the adapter merged into its top blocks' kernels (for
    generation with :class:`jaxsci.common.lm.engine.Engine`)."""
    from flax import nnx

    out = nnx.clone(model)  # a deep copy: the model keeps its weights
    c = model.config
    scale = config.alpha / config.rank
    top = list(out.blocks)[c.n_layers - config.n_top:]
    if len(lora) != len(top):
        raise ValueError(f"lora has {len(lora)} blocks, config.n_top={config.n_top}")
    for block, ad in zip(top, lora, strict=True):
        for name, (a, b) in ad.items():
            lin = getattr(block.attn if name in _ATTN else block.mlp, name)
            lin.kernel.set_value(lin.kernel[...] + scale * (a @ b))
    return out

