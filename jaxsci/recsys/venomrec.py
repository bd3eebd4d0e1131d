r"""VenomRec as a robustness evaluation: cross-modal poisoning of toy multimodal recommenders.

Paper: "VenomRec: cross-modal interactive poisoning of multimodal recommenders" (ICML
2026; authors' code GuoweiGuan666/VenomRec, read to understand, nothing copied). **Scope:**
synthetic items whose "image" is a set of patch vectors and whose "text" is a sequence of
token ids (:func:`jaxsci.data.recsys.multimodal_items`), toy victims trained here, no
pixels, no natural language, no pretrained encoder, no real catalogue. It ships to
measure how fusion designs and defences hold up, not to attack a deployed system.

Victims (:class:`FusionRecommender`, Flax NNX)
----------------------------------------------
Item ``i`` has patches ``x_{i,p}`` (``P x d_p``) and tokens ``t_{i,1..T}``. With patch
encodings ``v_p = W_v x_p + c`` and token embeddings ``e_t = E[t]``, ``a = mean_p v_p``,
``b = mean_t e_t``, the content vector ``h_i`` is

* ``additive``: ``h = a + b``;
* ``cross_attention``: the text attends over the patches,
  ``A_{t,p} = softmax_p((W_q e_t) . (W_k v_p) / sqrt(d))``,
  ``h = mean_t (e_t + sum_p A_{t,p} v_p)``;
* ``gated`` (consensus): ``h = sigmoid(gamma cos(a, b) + beta) (a + b)``: when the two
  modalities disagree the content is shut out (``gamma`` starts at 5, both are learned).

The item representation is ``r_i = E_id[i] + h_i``; a user's state after ``t`` items is
the decayed causal mean ``u_t = sum_{s<=t} lambda^{t-s} r_{j_s} / sum_{s<=t} lambda^{t-s}``
and the score of item ``i`` is ``(W_u u_t) . r_i``. Training: next-item full softmax over
the catalogue, Adam, an L2 penalty on the ID embeddings (``id_l2``: rare items lean on
their content). The trainer is a pure function (:func:`train_params`: ``lax.scan`` over
steps) so clean training and every fine-tune of an evaluation grid are one ``vmap``.

Attack (the authors' two stages)
--------------------------------
*Exposure Alignment* (:func:`exposure_alignment`): the high-exposure centre is the mean
raw patches ``x*`` and mean content ``h*`` of the ``n_popular`` most popular items; the
target's *competition pool* is the ``pool_size`` popular items whose content is closest
(cosine) to the target's; its keywords are the pool's most frequent tokens absent from
the target's text.

*Cross-modal Interactive Perturbation* (:func:`perturb`), for ``r = 1..rounds`` (4):

1. patch saliency ``s_p = m_p (1 - cos(v_p, v*_p))`` with ``m_p = mean_t A_{t,p}`` the
   cross-attention mass (uniform for victims without attention); the top
   ``patch_ratio`` (15 %) of the patches move toward the centre,
   ``x_p <- Pi_eps(x_p + step (x*_p - x_p))``, ``Pi_eps`` the projection onto the
   L-infinity ball of radius ``eps`` (0.05) around the original patches;
2. token saliency ``s_t = 1 - cos(e_t, sum_p A_{t,p} v_p)`` (disagreement with the image
   context); the ``max(min_tokens, floor(text_ratio T))`` (20 %, at least 2: per round,
   as the authors' code) most salient not-yet-replaced tokens take the next pool
   keywords;
3. stop when ``cos(h_target, h*) >= stop_cos`` (0.92). The authors test the cosine of
   the edited image feature to the popular centre; ours reads the fused content, what
   the victim ranks by (with ``eps = 0.05`` neither reaches 0.92 here).

Both variants recompute the patch mask every round (the authors' default). ``interactive``
takes the text mask after the round's image edit, on the edited image; ``decoupled``
takes it before (the authors' ``cross_mode``); ``image`` and ``text`` edit one
modality. The variant is a traced id (:func:`mode_index`), so one compiled program runs
them all. The attacker scores with the
clean victim (white box, our choice: the paper's surrogate is left open here). Fake users
(:func:`fake_users`) are length-10 sequences with the target third from the end and
fillers drawn by popularity (``popular``) or uniformly (``random``), ``mr * n_users`` of
them.

Defences and metrics
--------------------
ER@k (:func:`jaxsci.common.ranking.exposure_rate`) over ``n_candidates`` = 100 sampled
candidates (the target and 99 items the user has not seen; random scores give
``k / 100``), utility NDCG@10 with full ranking and history masked. Detection of fake
users from their final user states: *spectral signatures*
(:func:`spectral_signature_scores`: squared projection on the top principal direction,
by power iteration) and *activation clustering* (:func:`activation_clustering_scores`:
two-means, the smaller cluster suspect), each scored by AUC (:func:`detection_auc`).

>>> import jax.numpy as jnp
>>> from flax import nnx
>>> from jaxsci.recsys import venomrec
>>> victim = venomrec.FusionRecommender(5, 10, 3, dim=4, fusion="gated", rngs=nnx.Rngs(0))
>>> venomrec.item_table(victim, jnp.ones((5, 2, 3)), jnp.zeros((5, 4), int)).shape
(5, 4)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxsci.common.ranking import exposure_rate, recall_ndcg
from jaxsci.core.validation import check_int, check_scalar

__all__ = [
    "FUSIONS", "MODES", "FusionRecommender", "VictimConfig", "init_victim", "train_params",
    "train_victim", "Content", "content", "item_table", "user_states", "last_states",
    "candidate_scores", "sequence_loss", "AttackConfig",
    "Alignment", "exposure_alignment", "mode_index", "perturb", "fake_users",
    "sample_candidates", "spectral_signature_scores", "activation_clustering_scores",
    "detection_auc", "poison_items", "Poisoned", "pad_fake", "poison_and_evaluate",
]

FUSIONS = ("additive", "cross_attention", "gated")
MODES = ("interactive", "decoupled", "image", "text")


class FusionRecommender(nnx.Module):
    """A sequential recommender over items with patch and token content (module docstring)."""

    def __init__(self, n_items: int, vocab: int, patch_dim: int, dim: int = 32,
                 fusion: str = "gated", decay: float = 0.7, *, rngs: nnx.Rngs):
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
        check_int("n_items", n_items, min=2)
        check_int("vocab", vocab, min=2)
        check_int("dim", dim, min=1)
        check_scalar("decay", decay, gt=0.0, le=1.0)
        self.n_items, self.vocab, self.fusion, self.decay = n_items, vocab, fusion, decay
        init = nnx.initializers.normal(0.1)
        self.id_emb = nnx.Param(init(rngs.params(), (n_items, dim)))
        self.patch = nnx.Linear(patch_dim, dim, rngs=rngs)
        self.tok = nnx.Embed(vocab, dim, embedding_init=init, rngs=rngs)
        self.query = nnx.Linear(dim, dim, rngs=rngs)
        if fusion == "cross_attention":
            self.wq = nnx.Linear(dim, dim, use_bias=False, rngs=rngs)
            self.wk = nnx.Linear(dim, dim, use_bias=False, rngs=rngs)
        if fusion == "gated":
            self.gamma = nnx.Param(jnp.asarray(5.0))
            self.beta = nnx.Param(jnp.asarray(0.0))


def _cos(x, y, axis=-1):
    return jnp.sum(x * y, axis) / (jnp.linalg.norm(x, axis=axis) * jnp.linalg.norm(y, axis=axis)
                                   + 1e-8)


class Content(NamedTuple):
    """One item's content under a victim: ``h`` and the pieces saliency reads."""

    h: Array         # (d,) the fused content vector
    v: Array         # (P, d) patch encodings
    e: Array         # (T, d) token embeddings
    attn: Array      # (T, P) text-to-patch attention (uniform without cross-attention)


def content(model: FusionRecommender, patches: Float[Array, "p dp"],
            tokens: Int[Array, " t"]) -> Content:
    """The content vector of one item (``vmap`` for many) and its attention."""
    v = model.patch(patches)
    e = model.tok(tokens)
    n_t, n_p = e.shape[0], v.shape[0]
    a, b = v.mean(0), e.mean(0)
    uniform = jnp.full((n_t, n_p), 1.0 / n_p)
    if model.fusion == "additive":
        return Content(a + b, v, e, uniform)
    if model.fusion == "cross_attention":
        logits = model.wq(e) @ model.wk(v).T / math.sqrt(v.shape[-1])
        attn = jax.nn.softmax(logits, axis=-1)
        return Content(jnp.mean(e + attn @ v, axis=0), v, e, attn)
    gate = jax.nn.sigmoid(model.gamma[...] * _cos(a, b) + model.beta[...])
    return Content(gate * (a + b), v, e, uniform)


def item_table(model: FusionRecommender, patches: Float[Array, "i p dp"],
               tokens: Int[Array, "i t"]) -> Array:
    """``(n_items, d)`` item representations ``r_i = E_id[i] + h_i``."""
    h = jax.vmap(lambda x, t: content(model, x, t).h)(patches, tokens)
    return model.id_emb[...] + h


def user_states(model: FusionRecommender, table: Float[Array, "i d"],
                seqs: Int[Array, "b l"]) -> Array:
    """``(b, l, d)`` query vectors ``W_u u_t`` after every prefix (padding ``-1``)."""
    valid = seqs >= 0
    r = jnp.where(valid[..., None], table[jnp.maximum(seqs, 0)], 0.0)
    n = seqs.shape[-1]
    lag = jnp.arange(n)[:, None] - jnp.arange(n)[None, :]
    w = jnp.where(lag >= 0, model.decay ** jnp.maximum(lag, 0), 0.0)      # (l, l)
    w = w[None] * valid[:, None, :]
    u = (w @ r) / jnp.maximum(w.sum(-1, keepdims=True), 1e-8)
    return model.query(u)


def last_states(model, table, seqs, lengths) -> Array:
    """``(b, d)`` query vectors after each row's last item."""
    q = user_states(model, table, seqs)
    return jnp.take_along_axis(q, jnp.maximum(lengths - 1, 0)[:, None, None], axis=1)[:, 0]


def sequence_loss(model: FusionRecommender, patches, tokens, seqs: Int[Array, "b l"],
                  weights: Float[Array, " b"] | None = None, id_l2=0.0) -> Array:
    """Next-item full-softmax cross-entropy over valid steps, weighted by row, + ID L2."""
    table = item_table(model, patches, tokens)
    q = user_states(model, table, seqs)[:, :-1]
    nxt = seqs[:, 1:]
    logits = q @ table.T
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(nxt, 0))
    w = (nxt >= 0) * (1.0 if weights is None else weights[:, None])
    return jnp.sum(ce * w) / jnp.maximum(jnp.sum(w), 1.0) + id_l2 * jnp.mean(
        jnp.sum(model.id_emb[...] ** 2, -1))


@dataclasses.dataclass(frozen=True)
class VictimConfig:
    """A victim's architecture and training (clean training, then fine-tuning).

    The paper's victims are MLLM recommenders that rank by content; here the item ID
    embeddings carry an L2 penalty ``id_l2`` (default 0.3, our choice) so that rare items'
    scores rest on their content, as in a content-grounded recommender. With a weak
    penalty (``id_l2 = 1e-2``) the ID embeddings carry most of the ranking and content
    edits matter less (docs/venomrec.md gives both).
    """

    fusion: str = "gated"
    dim: int = 32
    decay: float = 0.7
    steps: int = 800
    batch_size: int = 64
    learning_rate: float = 3e-3
    id_l2: float = 0.3
    finetune_steps: int = 200
    finetune_learning_rate: float = 1e-3

    def __post_init__(self):
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {self.fusion!r}")
        for name in ("dim", "steps", "batch_size", "finetune_steps"):
            check_int(name, getattr(self, name), min=1)
        check_scalar("learning_rate", self.learning_rate, gt=0.0)
        check_scalar("finetune_learning_rate", self.finetune_learning_rate, gt=0.0)
        check_scalar("id_l2", self.id_l2, ge=0.0)


def init_victim(key: jax.Array, n_items: int, vocab: int, patch_dim: int,
                config: VictimConfig = VictimConfig()) -> FusionRecommender:
    """A freshly initialised :class:`FusionRecommender`."""
    return FusionRecommender(n_items, vocab, patch_dim, config.dim, config.fusion,
                             config.decay, rngs=nnx.Rngs(params=key))


def _check_ids(name, ids, n_items):
    ids = jnp.asarray(ids)
    ok = jnp.all((ids >= -1) & (ids < n_items))
    return eqx.error_if(ids, ~ok, f"{name} holds item ids in [0, {n_items}) (or -1 padding)")


@functools.partial(jax.jit, static_argnames=("graphdef", "steps", "batch_size"))
def train_params(graphdef, params, patches, tokens, seqs, weights, key, *, steps: int,
                 batch_size: int, learning_rate, id_l2):
    """Train a victim's parameters (pure: ``vmap`` over any array argument).

    Batches of ``batch_size`` rows are drawn with probability proportional to
    ``weights`` (a zero weight removes a row: fake users of an inactive arm). Returns
    ``(params, losses)``.
    """
    opt = optax.adam(learning_rate)
    p = weights / jnp.sum(weights)

    def step(carry, k):
        params, state = carry
        idx = jax.random.choice(k, seqs.shape[0], (batch_size,), p=p)
        loss, g = jax.value_and_grad(lambda q: sequence_loss(
            nnx.merge(graphdef, q), patches, tokens, seqs[idx], None, id_l2))(params)
        upd, state = opt.update(g, state, params)
        return (optax.apply_updates(params, upd), state), loss

    (params, _), losses = jax.lax.scan(step, (params, opt.init(params)),
                                       jax.random.split(key, steps))
    return params, losses


def train_victim(key: jax.Array, model: FusionRecommender, patches, tokens, seqs,
                 config: VictimConfig = VictimConfig(), weights=None):
    """Train ``model`` on ``seqs`` for ``config.steps`` (clean training).

    Args:
      key: batch sampling.
      model: a victim (:func:`init_victim`); it is not modified.
      patches, tokens: the catalogue's content, ``(I, P, dp)`` and ``(I, T)``.
      seqs: ``(n, l)`` item sequences, ``-1`` padded.
      config: ``steps``, ``batch_size``, ``learning_rate``, ``id_l2``.
      weights: ``(n,)`` row sampling weights (default uniform).

    Returns:
      ``(model, losses)``: the trained copy and the loss at every step.
    """
    seqs = _check_ids("seqs", seqs, model.n_items)
    if seqs.ndim != 2 or seqs.shape[1] < 2:
        raise ValueError(f"seqs must be (n, l >= 2) item ids, got shape {seqs.shape}")
    patches, tokens = jnp.asarray(patches), jnp.asarray(tokens)
    if patches.shape[0] != model.n_items or tokens.shape[0] != model.n_items:
        raise ValueError(f"patches and tokens must have one row per item ({model.n_items}), "
                         f"got {patches.shape[0]} and {tokens.shape[0]}")
    w = jnp.ones(seqs.shape[0]) if weights is None else jnp.asarray(weights, jnp.float32)
    graphdef, params = nnx.split(model)
    params, losses = train_params(graphdef, params, patches, tokens, seqs, w, key,
                                  steps=config.steps, batch_size=config.batch_size,
                                  learning_rate=config.learning_rate, id_l2=config.id_l2)
    return nnx.merge(graphdef, params), np.asarray(losses)


# ----------------------------------------------------------------------------- attack

@dataclasses.dataclass(frozen=True)
class AttackConfig:
    """The attack's settings; defaults are the authors' runner's (``step`` is our choice).

    ``text_ratio`` and ``min_tokens`` are per round, as in the authors' code (at most
    ``text_ratio`` of the tokens and at least ``min_tokens`` replaced each round);
    ``pool_size`` is their competition-pool size (8).
    """

    mode: str = "interactive"
    rounds: int = 4
    patch_ratio: float = 0.15
    eps: float = 0.05
    step: float = 0.5
    text_ratio: float = 0.2
    min_tokens: int = 2
    stop_cos: float = 0.92
    n_popular: int = 20
    pool_size: int = 8

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        check_int("rounds", self.rounds, min=1)
        check_int("min_tokens", self.min_tokens, min=0)
        check_int("n_popular", self.n_popular, min=1)
        check_int("pool_size", self.pool_size, min=1)
        check_scalar("patch_ratio", self.patch_ratio, gt=0.0, le=1.0)
        check_scalar("text_ratio", self.text_ratio, ge=0.0, le=1.0)
        check_scalar("eps", self.eps, ge=0.0)
        check_scalar("step", self.step, gt=0.0, le=1.0)
        check_scalar("stop_cos", self.stop_cos, ge=-1.0, le=1.0)

    def tokens_per_round(self, n_tokens: int) -> int:
        """Tokens replaced per round: ``max(min_tokens, floor(text_ratio T))``, at most T."""
        return min(n_tokens, max(self.min_tokens, int(self.text_ratio * n_tokens)))

    def n_text(self, n_tokens: int) -> int:
        """Keywords needed for every round (at most ``T``)."""
        return min(n_tokens, self.rounds * self.tokens_per_round(n_tokens))


class Alignment(NamedTuple):
    """Exposure Alignment for one target: the centre and the pool's keywords."""

    centre_patches: Array   # (P, dp)
    centre_content: Array   # (d,)
    keywords: Array         # (n_text,) token ids
    pool: Array             # (pool_size,) item ids


def exposure_alignment(model: FusionRecommender, patches, tokens, popularity, target,
                       config: AttackConfig = AttackConfig()) -> Alignment:
    """The high-exposure centre and the target's competition-pool keywords (jittable;
    ``vmap`` over ``target``)."""
    n_items = patches.shape[0]
    target = eqx.error_if(jnp.asarray(target), (jnp.asarray(target) < 0)
                          | (jnp.asarray(target) >= n_items),
                          f"target must be an item id in [0, {n_items})")
    h = jax.vmap(lambda x, t: content(model, x, t).h)(patches, tokens)
    popular = jax.lax.top_k(jnp.asarray(popularity, jnp.float32), config.n_popular)[1]
    sim = jnp.where(jnp.arange(n_items) == target, -jnp.inf, _cos(h, h[target][None]))
    pool = popular[jax.lax.top_k(sim[popular], config.pool_size)[1]]
    counts = jnp.sum(jax.nn.one_hot(tokens[pool], model.vocab), axis=(0, 1))
    absent = jnp.sum(jax.nn.one_hot(tokens[target], model.vocab), axis=0) == 0
    n_text = config.n_text(tokens.shape[1])
    keywords = jax.lax.top_k(jnp.where(absent, counts, -1.0), max(n_text, 1))[1][:n_text]
    return Alignment(patches[popular].mean(0), h[popular].mean(0), keywords, pool)


def _patch_saliency(model, x, tok, centre_v):
    c = content(model, x, tok)
    return c.attn.mean(0) * (1.0 - _cos(c.v, centre_v))


def _token_saliency(model, x, tok):
    c = content(model, x, tok)
    return 1.0 - _cos(c.e, c.attn @ c.v)


def mode_index(mode) -> Array:
    """Attack variants as traced ids: a name, or names, to indices into :data:`MODES`
    (arrays of ids pass through)."""
    if isinstance(mode, str):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        return jnp.asarray(MODES.index(mode), jnp.int32)
    if isinstance(mode, list | tuple) and all(isinstance(m, str) for m in mode):
        bad = [m for m in mode if m not in MODES]
        if bad:
            raise ValueError(f"mode must be one of {MODES}, got {bad[0]!r}")
        return jnp.asarray([MODES.index(m) for m in mode], jnp.int32)
    return jnp.asarray(mode, jnp.int32)


def perturb(model: FusionRecommender, patches: Float[Array, "p dp"], tokens: Int[Array, " t"],
            alignment: Alignment, config: AttackConfig = AttackConfig(), eps=None,
            mode=None):
    """Edit one item's patches and tokens (Cross-modal Interactive Perturbation).

    Args:
      model: the victim the attacker scores with.
      patches, tokens: the target's content, ``(P, dp)`` and ``(T,)``.
      alignment: :func:`exposure_alignment` for the target.
      config: the attack's settings.
      eps: a scalar L-infinity budget overriding ``config.eps`` (traced: ``vmap`` over
        budgets).
      mode: the variant overriding ``config.mode``, a name or its index in
        :data:`MODES` (traced: one compiled program runs every variant).

    Returns:
      ``(patches, tokens, cos)``: the edited item and its cosine to the centre after
      every round (editing stops once it reaches ``config.stop_cos``).
    """
    eps = jnp.asarray(config.eps if eps is None else eps, jnp.float32)
    eps = eqx.error_if(eps, eps < 0, "eps must be >= 0")
    mode = mode_index(config.mode if mode is None else mode)
    mode = eqx.error_if(mode, (mode < 0) | (mode >= len(MODES)),
                        f"mode must index MODES {MODES}")
    graphdef, state = nnx.split(model)
    return _perturb(graphdef, state, patches, tokens, alignment, config, eps, mode)


@eqx.filter_jit
def _perturb(graphdef, state, patches, tokens, alignment, config, eps, mode):
    # Module-level jit: a second call compiles nothing (the scan body's closure).
    model = nnx.merge(graphdef, state)
    n_p, n_t = patches.shape[0], tokens.shape[0]
    k_p = max(1, math.ceil(config.patch_ratio * n_p))
    n_text = config.n_text(n_t)
    k_t = config.tokens_per_round(n_t)
    do_img = mode != MODES.index("text")
    do_txt = mode != MODES.index("image")
    fresh = mode == MODES.index("interactive")
    x0 = patches
    centre_v = model.patch(alignment.centre_patches)
    kw = jnp.concatenate([alignment.keywords,
                          jnp.zeros((config.rounds * k_t,), alignment.keywords.dtype)])

    def one_round(carry, _):
        x, tok, replaced, used, done = carry
        # both variants recompute the patch mask every round (the authors' default);
        # decoupled takes the text mask before this round's image edit, interactive
        # after it, on the edited image
        sal_t_before = _token_saliency(model, x, tok)
        sal = _patch_saliency(model, x, tok, centre_v)
        mask = jnp.zeros(n_p, bool).at[jax.lax.top_k(sal, k_p)[1]].set(True)
        moved = x + config.step * (alignment.centre_patches - x)
        moved = x0 + jnp.clip(moved - x0, -eps, eps)
        x = jnp.where(mask[:, None] & ~done & do_img, moved, x)
        if k_t > 0:
            sal = jnp.where(fresh, _token_saliency(model, x, tok), sal_t_before)
            sal = jnp.where(replaced, -jnp.inf, sal)
            slots = jax.lax.top_k(sal, k_t)[1]
            ok = (used + jnp.arange(k_t) < n_text) & ~done & do_txt & ~replaced[slots]
            new = jax.lax.dynamic_slice(kw, (used,), (k_t,))
            tok = tok.at[slots].set(jnp.where(ok, new, tok[slots]))
            replaced = replaced.at[slots].set(replaced[slots] | ok)
            used = used + jnp.sum(ok)
        cos = _cos(content(model, x, tok).h, alignment.centre_content)
        return (x, tok, replaced, used, done | (cos >= config.stop_cos)), cos

    init = (x0, tokens, jnp.zeros(n_t, bool), jnp.asarray(0), jnp.asarray(False))
    (x, tok, *_), cos = jax.lax.scan(one_round, init, None, length=config.rounds)
    return x, tok, cos


def fake_users(key: jax.Array, target, n_items: int, n_fake: int, popularity=None, *,
               length: int = 10, position: int = -3) -> Array:
    """``(n_fake, length)`` fake sequences: ``target`` at ``position`` (third from the
    end), the other slots distinct fillers drawn ``∝ popularity`` (uniform if None)."""
    check_int("n_fake", n_fake, min=0)
    check_int("length", length, min=2)
    if not -length <= position < length:
        raise ValueError(f"position must be in [-{length}, {length}), got {position}")
    target = jnp.asarray(target)
    target = eqx.error_if(target, (target < 0) | (target >= n_items),
                          f"target must be an item id in [0, {n_items})")
    w = jnp.ones(n_items) if popularity is None else jnp.asarray(popularity, jnp.float32) + 1e-3
    w = jnp.where(jnp.arange(n_items) == target, 0.0, w)

    def one(k):
        fill = jax.random.choice(k, n_items, (length - 1,), replace=False, p=w / w.sum())
        pos = position % length
        return jnp.concatenate([fill[:pos], target[None], fill[pos:]])

    return jax.vmap(one)(jax.random.split(key, n_fake)).astype(jnp.int32)


def sample_candidates(key: jax.Array, history: Int[Array, "u l"], target, n_items: int,
                      n_candidates: int = 100) -> Array:
    """``(u, n_candidates)``: the target in column 0 and ``n_candidates - 1`` distinct
    items each user has not seen (and not the target)."""
    check_int("n_candidates", n_candidates, min=2)
    seen = jnp.zeros((history.shape[0], n_items), bool).at[
        jnp.arange(history.shape[0])[:, None], jnp.maximum(history, 0)].max(history >= 0)
    seen = seen.at[:, target].set(True)
    g = jax.random.uniform(key, seen.shape)
    others = jax.lax.top_k(jnp.where(seen, -1.0, g), n_candidates - 1)[1]
    return jnp.concatenate([jnp.broadcast_to(jnp.asarray(target), (history.shape[0], 1)),
                            others], axis=1).astype(jnp.int32)


def candidate_scores(model, table, history, lengths, candidates) -> Array:
    """``(u, c)`` scores of each user's candidates."""
    q = last_states(model, table, history, lengths)
    return jnp.einsum("ud,ucd->uc", q, table[candidates])


# ----------------------------------------------------------------------------- defences

def _centred_top_direction(emb, weights, iters):
    """Weighted-centred rows and the top principal direction (power iteration; rows of
    weight 0 do not enter the fit)."""
    w = jnp.ones(emb.shape[0]) if weights is None else jnp.asarray(weights, jnp.float32)
    x = emb - jnp.sum(emb * w[:, None], 0) / jnp.sum(w)
    cov = (x * w[:, None]).T @ x / jnp.sum(w)
    v = jax.lax.fori_loop(0, iters, lambda _, v: (cov @ v) / jnp.linalg.norm(cov @ v + 1e-30),
                          jnp.ones(emb.shape[1]) / math.sqrt(emb.shape[1]))
    return x, v, w


def spectral_signature_scores(emb: Float[Array, "n d"], weights=None, iters: int = 50) -> Array:
    """Squared projection of the (weighted-)centred rows on the top principal direction
    (power iteration; rows with weight 0 are ignored in the fit)."""
    x, v, _ = _centred_top_direction(emb, weights, iters)
    return (x @ v) ** 2


def activation_clustering_scores(emb: Float[Array, "n d"], weights=None,
                                 iters: int = 20) -> Array:
    """Two-means on the rows (initialised by the sign of the top principal projection);
    the score is how much closer a row is to the smaller cluster than to the larger."""
    x, v, w = _centred_top_direction(emb, weights, 50)
    assign = (x @ v) > 0

    def centres(a):
        wa, wb = w * a, w * ~a
        ca = jnp.sum(x * wa[:, None], 0) / jnp.maximum(wa.sum(), 1e-8)
        cb = jnp.sum(x * wb[:, None], 0) / jnp.maximum(wb.sum(), 1e-8)
        return ca, cb, wa.sum(), wb.sum()

    def body(_, a):
        ca, cb, _, _ = centres(a)
        return jnp.sum((x - ca) ** 2, -1) < jnp.sum((x - cb) ** 2, -1)

    assign = jax.lax.fori_loop(0, iters, body, assign)
    ca, cb, na, nb = centres(assign)
    d_a = jnp.linalg.norm(x - ca, axis=-1)
    d_b = jnp.linalg.norm(x - cb, axis=-1)
    return jnp.where(na <= nb, d_b - d_a, d_a - d_b)


def detection_auc(scores: Float[Array, " n"], is_fake, weights=None) -> Array:
    """AUC of ``scores`` separating fake (``is_fake``) from real rows (Mann-Whitney, ties
    one half; rows with weight 0 ignored). NaN without both classes."""
    w = jnp.ones(scores.shape[0]) if weights is None else jnp.asarray(weights, jnp.float32)
    f = jnp.asarray(is_fake, bool)
    wf, wr = w * f, w * ~f
    gt = (scores[:, None] > scores[None, :]) + 0.5 * (scores[:, None] == scores[None, :])
    num = jnp.sum(wf[:, None] * wr[None, :] * gt)
    den = jnp.sum(wf) * jnp.sum(wr)
    return jnp.where(den > 0, num / jnp.maximum(den, 1e-30), jnp.nan)


# ----------------------------------------------------------------------------- evaluation

@functools.partial(jax.jit, static_argnames=("graphdef", "config"))
def _poison_items(graphdef, params, patches, tokens, popularity, targets, eps, mode, config):
    model = nnx.merge(graphdef, params)

    def one(t, e, md):
        al = exposure_alignment(model, patches, tokens, popularity, t, config)
        return perturb(model, patches[t], tokens[t], al, config, eps=e, mode=md)

    return jax.vmap(one)(targets, eps, mode)


def poison_items(model: FusionRecommender, patches: Float[Array, "i p dp"],
                 tokens: Int[Array, "i t"], popularity: Float[Array, " i"],
                 targets: Int[Array, " m"], config: AttackConfig = AttackConfig(),
                 eps=None, mode=None) -> tuple[Array, Array, Array]:
    """Both attack stages for many targets: one compiled program, ``vmap`` over targets.

    Args:
      model: the victim the attacker scores with (white box).
      patches, tokens: the clean catalogue, ``(I, P, dp)`` and ``(I, T)``.
      popularity: ``(I,)`` exposure counts (the training interactions).
      targets: ``(m,)`` item ids to promote.
      config: the attack (``config.mode`` picks the variant).
      eps: ``(m,)`` L-infinity budgets, one per target (default ``config.eps``):
        a budget sweep is a repeated target with a grid of ``eps``.
      mode: ``(m,)`` variants, names or indices into :data:`MODES` (default
        ``config.mode``): every variant for every target is one call, one program.

    Returns:
      ``(patches, tokens, cos)``: each target's edited patches ``(m, P, dp)`` and tokens
      ``(m, T)``, and its cosine to the high-exposure centre after every round
      ``(m, rounds)``.
    """
    targets = jnp.asarray(targets, jnp.int32)
    if targets.ndim != 1:
        raise ValueError(f"targets must be a 1-D array of item ids, got shape {targets.shape}")
    patches, tokens = jnp.asarray(patches), jnp.asarray(tokens)
    popularity = jnp.asarray(popularity, jnp.float32)
    if popularity.shape != (patches.shape[0],):
        raise ValueError(f"popularity must have shape ({patches.shape[0]},), got "
                         f"{popularity.shape}")
    eps = jnp.broadcast_to(jnp.asarray(config.eps if eps is None else eps, jnp.float32),
                           targets.shape)
    mode = jnp.broadcast_to(mode_index(config.mode if mode is None else mode), targets.shape)
    graphdef, params = nnx.split(model)
    return _poison_items(graphdef, params, patches, tokens, popularity, targets, eps, mode,
                         config)


class Poisoned(NamedTuple):
    """The members of an evaluation grid: one poisoned catalogue and fake users each.

    Every leaf has a leading member axis ``M``: ``target (M,)`` the promoted item,
    ``patches (M, P, dp)`` and ``tokens (M, T)`` its (edited or clean) content, which
    replaces the catalogue's row ``target``; ``fake (M, F, L)`` fake rows (``-1``
    padded to the training width, :func:`pad_fake`), ``fake_weight (M, F)`` (1 active,
    0 absent: a grid over ``mr`` is a grid over how many rows are active), and
    ``key (M, 2)`` the fine-tune's randomness as key data
    (``jax.random.key_data``).
    """

    target: Array
    patches: Array
    tokens: Array
    fake: Array
    fake_weight: Array
    key: Array


def pad_fake(fake, width: int) -> Array:
    """Pad fake rows ``(..., F, length)`` with ``-1`` to ``width`` columns."""
    fake = jnp.asarray(fake)
    if fake.shape[-1] > width:
        raise ValueError(f"fake rows are longer ({fake.shape[-1]}) than width ({width})")
    pad = [(0, 0)] * (fake.ndim - 1) + [(0, width - fake.shape[-1])]
    return jnp.pad(fake, pad, constant_values=-1)


@functools.partial(jax.jit, static_argnames=("graphdef", "config", "k", "n_candidates",
                                             "k_utility", "member_batch"))
def _evaluate_members(graphdef, params, patches, tokens, train, lengths, test, members,
                      candidate_key, config, k, n_candidates, k_utility, member_batch):
    n_real, n_items = train.shape[0], patches.shape[0]
    fake_len = jnp.sum(members.fake >= 0, axis=-1)

    def one(args):
        m, fl = args
        cat_p = patches.at[m.target].set(m.patches)
        cat_t = tokens.at[m.target].set(m.tokens)
        seqs = jnp.concatenate([train, m.fake])
        w = jnp.concatenate([jnp.ones(n_real), m.fake_weight])
        p, _ = train_params(graphdef, params, cat_p, cat_t, seqs, w,
                            jax.random.wrap_key_data(m.key), steps=config.finetune_steps,
                            batch_size=config.batch_size,
                            learning_rate=config.finetune_learning_rate, id_l2=config.id_l2)
        model = nnx.merge(graphdef, p)
        table = item_table(model, cat_p, cat_t)
        cand = sample_candidates(jax.random.fold_in(candidate_key, m.target), train,
                                 m.target, n_items, n_candidates)
        q = last_states(model, table, train, lengths)
        er = exposure_rate(jnp.einsum("ud,ucd->uc", q, table[cand]), 0, k)
        ndcg = recall_ndcg(q @ table.T, train, test[:, None], ks=(k_utility,))
        emb = jnp.concatenate([q, last_states(model, table, m.fake, jnp.maximum(fl, 1))])
        is_fake = jnp.arange(emb.shape[0]) >= n_real
        return {"er": er, "ndcg": jnp.mean(ndcg[f"ndcg@{k_utility}"]),
                "auc_spectral": detection_auc(spectral_signature_scores(emb, w), is_fake, w),
                "auc_clustering": detection_auc(activation_clustering_scores(emb, w),
                                                is_fake, w)}

    if member_batch is None:
        return jax.vmap(one)((members, fake_len))
    return jax.lax.map(one, (members, fake_len), batch_size=member_batch)


def poison_and_evaluate(model: FusionRecommender, patches: Float[Array, "i p dp"],
                        tokens: Int[Array, "i t"], train: Int[Array, "u l"],
                        lengths: Int[Array, " u"], test: Int[Array, " u"],
                        members: Poisoned, candidate_key: jax.Array,
                        config: VictimConfig = VictimConfig(), *, k: int = 20,
                        n_candidates: int = 100, k_utility: int = 10,
                        member_batch: int | None = None) -> dict[str, Array]:
    """Fine-tune the clean victim on every member's poisoned data and score it.

    One compiled program over the members (a robustness surface over targets, arms,
    budgets and malicious ratios is one call). Each member's catalogue is the
    clean one with row ``target`` replaced by its content; the victim is fine-tuned for
    ``config.finetune_steps`` on the real rows plus the member's active fake rows.

    Args:
      model: the clean victim.
      patches, tokens: the clean catalogue.
      train, lengths, test: the real users' training rows (``-1`` padded), their lengths
        and held-out items.
      members: the grid (:class:`Poisoned`).
      candidate_key: the candidates of a target depend only on this key and the target
        (members with the same target are paired).
      config: the fine-tune (``finetune_steps``, ``finetune_learning_rate``, ...).
      k, n_candidates, k_utility: ER@``k`` over ``n_candidates`` sampled candidates,
        NDCG@``k_utility``.
      member_batch: members fine-tuned at once (``lax.map`` over chunks of this size,
        ``vmap`` inside a chunk); None: all at once. On a 2-core CPU a whole-grid
        ``vmap`` ran 0.8x the speed of one member at a time (``scripts/bench/venomrec.py``);
        on accelerators the whole grid at once is the fast choice.

    Returns:
      ``(M,)`` arrays: ``er`` (ER@k of the target over the real users; random scores give
      ``k / n_candidates``), ``ndcg`` (utility: NDCG@k_utility of the held-out items,
      full ranking, history masked), ``auc_spectral`` and ``auc_clustering`` (detection
      AUC of the fake rows among all rows from the final user states; NaN without
      active fake rows).
    """
    check_int("k", k, min=1)
    check_int("k_utility", k_utility, min=1)
    check_int("n_candidates", n_candidates, min=k + 1)
    if member_batch is not None:
        check_int("member_batch", member_batch, min=1)
    train = _check_ids("train", train, model.n_items)
    fake = _check_ids("members.fake", members.fake, model.n_items)
    target = jnp.asarray(members.target, jnp.int32)
    target = eqx.error_if(target, (target < 0) | (target >= model.n_items),
                          f"members.target must be item ids in [0, {model.n_items})")
    if fake.ndim != 3 or fake.shape[-1] != train.shape[1]:
        raise ValueError(f"members.fake must be (M, F, {train.shape[1]}) (pad_fake to the "
                         f"training width), got shape {fake.shape}")
    members = members._replace(target=target, fake=fake,
                               fake_weight=jnp.asarray(members.fake_weight, jnp.float32),
                               patches=jnp.asarray(members.patches, jnp.float32),
                               tokens=jnp.asarray(members.tokens, jnp.int32))
    graphdef, params = nnx.split(model)
    return _evaluate_members(graphdef, params, jnp.asarray(patches), jnp.asarray(tokens),
                             train, jnp.asarray(lengths), jnp.asarray(test), members,
                             candidate_key, config, k, n_candidates, k_utility, member_batch)
