r"""RSIR: recursive self-improving recommendation (generate, filter by fidelity, retrain).

Paper: "Recursive Self-Improving Recommendation" (ICML 2026; authors' code
USTC-StarTeam/RSIR, no licence; it could not be fetched here, so the loop follows the
abstract and the issue's reading of that code, with every open choice a field).

The loop
--------
Round ``k`` trains a sequential recommender from scratch on ``D_k`` (:func:`train`), then
generates ``m`` trajectories from every *real* training sequence ``s`` (:func:`generate`):

1. the trajectory starts with the seed sequence's first item ``s_0``;
2. at each step the model scores every item given the trajectory so far; items already
   generated are masked; with probability ``local_prob`` the candidates are further
   restricted to the seed user's own items ``set(s)``; the next item is the argmax;
3. **fidelity rule**: after appending it (the synthetic context update), the model
   re-scores the catalogue given the new context; if none of the seed's *not yet
   generated* items ranks within the top ``k`` of the unmasked candidates, the trajectory
   stops and the step's item is dropped (the accepted prefix is kept); when the step used
   up the seed's last remaining item the item is kept and the trajectory ends (the test
   would be vacuous). The rank test is a
   ``k``-th-largest threshold, ``any(score[j] >= kth_largest)``, exact under ties
   (tied items count as within the top ``k``);
4. a trajectory also ends at ``max_len`` items, or when no unmasked candidate is left.

Trajectories of length ``>= min_len`` (3) are kept, duplicates removed
(:func:`accepted_trajectories`), and added as pseudo-users: ``D_{k+1} = D_0 \cup T_k``
(``accumulate=False``, our default: each round's successor sees the real data and the
current model's trajectories) or ``D_k \cup T_k`` (``accumulate=True``). Defaults are the
authors' script defaults ``k = 20``, ``local_prob = 0.7``, ``m = 5``; their shipped config
has ``k = 2e7`` (the filter off) and ``local_prob = 0.5`` (:class:`GenerateConfig`).

The generator is one jitted program: ``lax.scan`` over steps, ``vmap`` over the
trajectories; each step costs one scoring pass (the fidelity pass of step ``t`` is the
generation pass of step ``t + 1``). Scorers are values (:class:`AbstractScorer`):
:class:`SASRecScorer` (the model) and :class:`BigramScorer` (a weak generator: smoothed
transition counts of ``D_0``), so a constructed scorer tests the rule.

SASRec (Flax NNX, :class:`SASRec`)
----------------------------------
Item and learned position embeddings, ``n_blocks`` pre-LayerNorm causal self-attention +
point-wise feed-forward blocks with residuals and dropout, a final LayerNorm; item
embeddings are shared with the output layer (score ``<h_t, e_i>``). Sequences are
left-aligned, padded with the id ``n_items``. Training predicts item ``t + 1`` from every
prefix: sampled softmax against ``n_negatives = 256`` uniform negatives shared by the
batch (the authors' loss) or the full softmax (``loss="full"``), Adam. Ranking scores a
user by the hidden state at their last position, the training items masked.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxsci.common import ranking
from jaxsci.core import TrainConfig, fit
from jaxsci.core.validation import check_array, check_choice, check_int, check_key, check_scalar

__all__ = [
    "SASRec",
    "SASRecConfig",
    "sequence_loss",
    "train",
    "user_scores",
    "evaluate",
    "AbstractScorer",
    "SASRecScorer",
    "BigramScorer",
    "bigram_scorer",
    "GenerateConfig",
    "Trajectories",
    "generate",
    "accepted_trajectories",
    "augment",
]


# ----------------------------------------------------------------------------- SASRec


def _dropout(x, rate, key):
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


class SASRec(nnx.Module):
    """Self-attentive sequential recommendation (Kang & McAuley 2018) in Flax NNX."""

    def __init__(self, n_items: int, max_len: int, dim: int = 64, n_blocks: int = 2,
                 n_heads: int = 1, dropout: float = 0.2, *, rngs: nnx.Rngs):
        check_int("n_items", n_items, min=2)
        check_int("max_len", max_len, min=1)
        check_int("dim", dim, min=1)
        check_int("n_blocks", n_blocks, min=1)
        check_int("n_heads", n_heads, min=1)
        if dim % n_heads:
            raise ValueError(f"dim must be divisible by n_heads ({n_heads}), got {dim}")
        check_scalar("dropout", dropout, ge=0.0, lt=1.0)
        self.n_items, self.max_len, self.dropout = n_items, max_len, dropout
        init = nnx.initializers.normal(0.02)
        self.item = nnx.Param(init(rngs.params(), (n_items + 1, dim)))  # last row: padding
        self.pos = nnx.Param(init(rngs.params(), (max_len, dim)))
        self.attn = nnx.List([nnx.MultiHeadAttention(n_heads, dim, dim, decode=False,
                                                     rngs=rngs) for _ in range(n_blocks)])
        self.ln1 = nnx.List([nnx.LayerNorm(dim, rngs=rngs) for _ in range(n_blocks)])
        self.ln2 = nnx.List([nnx.LayerNorm(dim, rngs=rngs) for _ in range(n_blocks)])
        self.ff1 = nnx.List([nnx.Linear(dim, dim, rngs=rngs) for _ in range(n_blocks)])
        self.ff2 = nnx.List([nnx.Linear(dim, dim, rngs=rngs) for _ in range(n_blocks)])
        self.ln_out = nnx.LayerNorm(dim, rngs=rngs)

    def hidden(self, seq: Int[Array, "b l"], key: jax.Array | None = None) -> Array:
        """Hidden states ``(b, l, d)``; ``seq`` holds item ids, ``-1`` or ``n_items`` pad.

        ``key`` turns dropout on (training); ``None`` is the deterministic forward.
        """
        seq = jnp.where(seq < 0, self.n_items, seq)
        length = seq.shape[-1]
        valid = (seq != self.n_items)[..., None]
        x = self.item[...][seq] * jnp.sqrt(self.item.shape[-1]) + self.pos[...][:length]
        keys = [None] * (1 + 2 * len(self.attn)) if key is None else list(
            jax.random.split(key, 1 + 2 * len(self.attn)))
        x = _dropout(x, self.dropout, keys[0]) * valid
        causal = nnx.make_causal_mask(jnp.zeros(seq.shape, jnp.int32))
        for b in range(len(self.attn)):
            h = self.ln1[b](x)
            x = x + _dropout(self.attn[b](h, mask=causal, deterministic=True),
                             self.dropout, keys[1 + 2 * b])
            h = self.ln2[b](x)
            x = x + _dropout(self.ff2[b](jax.nn.relu(self.ff1[b](h))), self.dropout,
                             keys[2 + 2 * b])
            x = x * valid
        return self.ln_out(x)

    def item_embeddings(self) -> Array:
        """``(n_items, d)`` output embeddings (shared with the input ones)."""
        return self.item[...][: self.n_items]


@dataclasses.dataclass(frozen=True)
class SASRecConfig:
    """SASRec and its training; defaults are SASRec's (ml-1m) with the authors' loss."""

    dim: int = 64
    n_blocks: int = 2
    n_heads: int = 1
    dropout: float = 0.2
    loss: str = "sampled"  # "sampled" (256 uniform negatives, the authors') | "full"
    n_negatives: int = 256
    learning_rate: float = 1e-3
    batch_size: int = 128
    steps: int = 2000

    def __post_init__(self):
        check_int("dim", self.dim, min=1)
        check_int("n_blocks", self.n_blocks, min=1)
        check_int("n_heads", self.n_heads, min=1)
        check_scalar("dropout", self.dropout, ge=0.0, lt=1.0)
        check_choice("loss", self.loss, ("sampled", "full"))
        check_int("n_negatives", self.n_negatives, min=1)
        check_scalar("learning_rate", self.learning_rate, gt=0.0)
        check_int("batch_size", self.batch_size, min=1)
        check_int("steps", self.steps, min=1)


def _check_sequences(name: str, seqs, n_items: int) -> None:
    check_array(name, seqs, ndim=2, dtype="integer")
    if not isinstance(seqs, jax.core.Tracer):
        a = np.asarray(seqs)
        if a.size and (a.min() < -1 or a.max() >= n_items):
            raise ValueError(f"{name} holds item ids in [0, {n_items}) or -1 (padding), "
                             f"got values in [{a.min()}, {a.max()}]")
        if a.shape[1] < 2:
            raise ValueError(f"{name} must have room for at least 2 items, got width "
                             f"{a.shape[1]}")


def sequence_loss(model: SASRec, seqs: Int[Array, "b l"], key: jax.Array, *,
                  loss: str = "sampled", n_negatives: int = 256,
                  dropout_key: jax.Array | None = None) -> Array:
    """Next-item loss over every prefix of ``seqs`` (left-aligned, ``-1`` padding).

    ``loss="sampled"``: softmax of the positive against ``n_negatives`` uniform items
    (drawn with ``key``, shared by the batch's positions; a negative that equals the
    positive is not removed); ``"full"``: the softmax over the catalogue.
    """
    x, y = seqs[:, :-1], seqs[:, 1:]
    mask = (y >= 0) & (x >= 0)
    h = model.hidden(x, dropout_key)
    emb = model.item_embeddings()
    y_safe = jnp.where(y >= 0, y, 0)
    pos = jnp.sum(h * emb[y_safe], axis=-1)
    if loss == "full":
        logits = h @ emb.T
        nll = jax.nn.logsumexp(logits, axis=-1) - pos
    else:
        neg = jax.random.randint(key, (n_negatives,), 0, model.n_items)
        neg_logits = h @ emb[neg].T
        all_logits = jnp.concatenate([pos[..., None], neg_logits], axis=-1)
        nll = jax.nn.logsumexp(all_logits, axis=-1) - pos
    return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1)


def train(key: jax.Array, sequences: Int[Array, "n l"], n_items: int,
          config: SASRecConfig = SASRecConfig(), *, n_valid: int | None = None,
          train_config: TrainConfig | None = None) -> tuple[SASRec, np.ndarray]:
    """Train a SASRec from scratch on the first ``n_valid`` rows of ``sequences``.

    ``sequences`` may have spare rows (``n_valid`` of them used, the rest ignored), so a
    growing data set of fixed capacity reuses one compiled step. Batches are uniform draws
    of rows. Returns ``(model, losses)``.
    """
    check_key("key", key)
    check_int("n_items", n_items, min=2)
    if not isinstance(config, SASRecConfig):
        raise TypeError(f"config must be a SASRecConfig, got {type(config).__name__}")
    _check_sequences("sequences", sequences, n_items)
    n_rows = int(sequences.shape[0])
    n_valid = n_rows if n_valid is None else check_int("n_valid", n_valid, min=1, max=n_rows)
    k_init, k_fit = jax.random.split(key)
    model = SASRec(n_items, int(sequences.shape[1]), config.dim, config.n_blocks,
                   config.n_heads, config.dropout, rngs=nnx.Rngs(params=k_init))
    graphdef, state = nnx.split(model)
    if train_config is None:
        train_config = TrainConfig(steps=config.steps, progress=False, desc="rsir: SASRec")
    data = {"seqs": jnp.asarray(sequences, jnp.int32), "n_valid": jnp.asarray(n_valid)}

    def batch_fn(step, key, data):
        rows = jax.random.randint(key, (config.batch_size,), 0, data["n_valid"])
        return data["seqs"][rows]

    def loss_fn(params, seqs, key, data):
        k_neg, k_drop = jax.random.split(key)
        return sequence_loss(nnx.merge(graphdef, params), seqs, k_neg, loss=config.loss,
                             n_negatives=config.n_negatives, dropout_key=k_drop)

    out, losses = fit(loss_fn, state, optax.adam(config.learning_rate), k_fit, train_config,
                      batch_fn=batch_fn, data=data)
    return nnx.merge(graphdef, out.params), losses


def _last_hidden(model: SASRec, seqs, lengths):
    h = model.hidden(seqs)
    return jnp.take_along_axis(h, jnp.clip(lengths - 1, 0)[:, None, None], axis=1)[:, 0]


def user_scores(model: SASRec, seqs: Int[Array, "b l"], lengths: Int[Array, " b"]) -> Array:
    """``(b, n_items)`` next-item scores from each row's last position."""
    return _last_hidden(model, jnp.asarray(seqs), jnp.asarray(lengths)) @ \
        model.item_embeddings().T


@nnx.jit(static_argnames=("ks",))
def _evaluate(model, seqs, lengths, test, ks):
    scores = user_scores(model, seqs, lengths)
    return ranking.recall_ndcg(scores, seqs, test[:, None], ks=ks)


def evaluate(model: SASRec, seqs, lengths, test, ks=(10,), *, per_user: bool = False):
    """Leave-one-out Recall@k / NDCG@k: score after each training sequence, its items
    masked, against the held-out item.

    Returns the means (floats), or with ``per_user=True`` each user's values (NumPy
    arrays, for paired comparisons between models).
    """
    _check_sequences("seqs", seqs, model.n_items)
    ks = (ks,) if isinstance(ks, int) else tuple(ks)
    out = _evaluate(model, jnp.asarray(seqs), jnp.asarray(lengths), jnp.asarray(test), ks)
    w = np.asarray(out.pop("has_target"))
    if per_user:
        return {k: np.asarray(v)[w] for k, v in out.items()}
    return {k: float(np.asarray(v)[w].mean()) for k, v in out.items()}


# ----------------------------------------------------------------------------- scorers


class AbstractScorer(eqx.Module):
    """Scores of every item given one left-aligned context (``-1`` padded) and its length."""

    @abc.abstractmethod
    def __call__(self, context: Int[Array, " l"], length: Int[Array, ""]) -> Float[Array, " n"]:
        ...


class SASRecScorer(AbstractScorer):
    """A SASRec's next-item scores (its state is a pytree leaf: jit/vmap friendly)."""

    graphdef: nnx.GraphDef = eqx.field(static=True)
    state: nnx.State

    def __init__(self, model: SASRec):
        self.graphdef, self.state = nnx.split(model)

    def __call__(self, context, length):
        model = nnx.merge(self.graphdef, self.state)
        return user_scores(model, context[None], length[None])[0]


class BigramScorer(AbstractScorer):
    """``log P(next | last item)`` from smoothed transition counts (a weak generator)."""

    log_prob: Float[Array, "n n"]

    def __call__(self, context, length):
        last = context[jnp.clip(length - 1, 0)]
        return self.log_prob[last]


def bigram_scorer(seqs, n_items: int, smoothing: float = 0.1) -> BigramScorer:
    """A :class:`BigramScorer` from the consecutive pairs of ``seqs`` (``-1`` padded)."""
    _check_sequences("seqs", seqs, n_items)
    check_scalar("smoothing", smoothing, gt=0.0)
    a = np.asarray(seqs)
    prev, nxt = a[:, :-1].ravel(), a[:, 1:].ravel()
    ok = (prev >= 0) & (nxt >= 0)
    counts = np.full((n_items, n_items), float(smoothing))
    np.add.at(counts, (prev[ok], nxt[ok]), 1.0)
    pop = np.bincount(a[a >= 0], minlength=n_items) + float(smoothing)
    counts += 1e-3 * pop[None, :]  # break ties among unseen pairs by popularity
    return BigramScorer(jnp.asarray(np.log(counts / counts.sum(1, keepdims=True)),
                                    jnp.float32))


# ----------------------------------------------------------------------------- generation


@dataclasses.dataclass(frozen=True)
class GenerateConfig:
    """The generation rule; defaults are the authors' script defaults."""

    m: int = 5  # trajectories per seed sequence
    k: int = 20  # fidelity top-k; >= n_items turns the filter off (the shipped 2e7)
    local_prob: float = 0.7  # probability of restricting a step to the seed user's items
    min_len: int = 3
    max_len: int | None = None  # default: the seed sequence's length
    accumulate: bool = False  # D_{k+1} = D_k + T_k (True) or D_0 + T_k (False)

    def __post_init__(self):
        check_int("m", self.m, min=1)
        check_int("k", self.k, min=1)
        check_scalar("local_prob", self.local_prob, ge=0.0, le=1.0)
        check_int("min_len", self.min_len, min=1)
        if self.max_len is not None:
            check_int("max_len", self.max_len, min=1)


class Trajectories(NamedTuple):
    """Generated sequences: ``items`` ``(n, L)`` left-aligned, ``-1`` padded."""

    items: Array
    lengths: Array
    stopped_by_filter: Array  # (n,) bool: ended by the fidelity rule


def _kth_largest(scores, k):
    return jax.lax.top_k(scores, k)[0][-1]


def _one_trajectory(scorer, seed_seq, seed_len, key, k, local_prob, max_len, n_items):
    width = seed_seq.shape[0]
    own = jnp.zeros(n_items, bool).at[jnp.where(seed_seq >= 0, seed_seq, n_items)].set(
        True, mode="drop")
    first = seed_seq[0]
    context = jnp.full((width,), -1, jnp.int32).at[0].set(first)
    generated = jnp.zeros(n_items, bool).at[first].set(True)
    cap = jnp.minimum(seed_len, max_len) if max_len is not None else seed_len
    k_eff = min(k, n_items)
    scores = scorer(context, jnp.asarray(1))

    def step(carry, t):
        context, length, generated, done, by_filter, scores, key = carry
        key, k_coin = jax.random.split(key)
        local = jax.random.bernoulli(k_coin, local_prob)
        cand = ~generated
        restricted = cand & own
        use_local = local & jnp.any(restricted)
        allowed = jnp.where(use_local, restricted, cand)
        nxt = jnp.argmax(jnp.where(allowed, scores, -jnp.inf)).astype(jnp.int32)
        active = ~done & (length < cap) & jnp.any(allowed)
        new_context = context.at[length].set(nxt)
        new_generated = generated.at[nxt].set(True)
        new_scores = scorer(new_context, length + 1)
        masked = jnp.where(new_generated, -jnp.inf, new_scores)
        remaining = own & ~new_generated
        thr = _kth_largest(masked, k_eff)
        exhausted = ~jnp.any(remaining)  # every item of the seed generated: keep, then end
        faithful = jnp.any(remaining & (masked >= thr) & (masked > -jnp.inf)) | exhausted
        accept = active & faithful
        stop_filter = active & ~faithful
        context = jnp.where(accept, new_context, context)
        generated = jnp.where(accept, new_generated, generated)
        scores = jnp.where(accept, new_scores, scores)
        length = length + accept.astype(length.dtype)
        done = done | ~accept | (accept & exhausted)
        return (context, length, generated, done, by_filter | stop_filter, scores, key), None

    init = (context, jnp.asarray(1, jnp.int32), generated, jnp.asarray(False),
            jnp.asarray(False), scores, key)
    (context, length, _, _, by_filter, _, _), _ = jax.lax.scan(step, init,
                                                               jnp.arange(width - 1))
    return context, length, by_filter


def generate(scorer: AbstractScorer, seeds: Int[Array, "s l"], seed_lengths: Int[Array, " s"],
             key: jax.Array, config: GenerateConfig = GenerateConfig(), *,
             n_items: int) -> Trajectories:
    """``config.m`` trajectories from every seed sequence (module docstring), jitted.

    Returns ``s * m`` trajectories, seed-major (rows ``i*m .. i*m+m-1`` come from seed
    ``i``), before the length filter and deduplication (:func:`accepted_trajectories`).
    """
    if not isinstance(scorer, AbstractScorer):
        raise TypeError(f"scorer must be an AbstractScorer, got {type(scorer).__name__}")
    check_key("key", key)
    check_int("n_items", n_items, min=2)
    _check_sequences("seeds", seeds, n_items)
    check_array("seed_lengths", seed_lengths, ndim=1, shape=(seeds.shape[0],), dtype="integer")
    if not isinstance(seed_lengths, jax.core.Tracer) and np.any(np.asarray(seed_lengths) < 1):
        raise ValueError("seed_lengths must be >= 1 (empty seed sequences cannot seed a "
                         "trajectory)")
    return _generate(scorer, jnp.asarray(seeds, jnp.int32), jnp.asarray(seed_lengths, jnp.int32),
                     key, config.m, config.k, float(config.local_prob), config.max_len, n_items)


@eqx.filter_jit
def _generate(scorer, seeds, seed_lengths, key, m, k, local_prob, max_len, n_items):
    n = seeds.shape[0]
    keys = jax.random.split(key, n * m)
    rep = lambda x: jnp.repeat(x, m, axis=0)  # noqa: E731
    one = lambda s, ln, kk: _one_trajectory(scorer, s, ln, kk, k, local_prob, max_len,  # noqa: E731
                                            n_items)
    items, lengths, by_filter = jax.vmap(one)(rep(seeds), rep(seed_lengths), keys)
    return Trajectories(items, lengths, by_filter)


def accepted_trajectories(traj: Trajectories, min_len: int = 3) -> np.ndarray:
    """The distinct trajectories of length ``>= min_len``, as a padded NumPy array."""
    check_int("min_len", min_len, min=1)
    items = np.asarray(traj.items)
    keep = items[np.asarray(traj.lengths) >= min_len]
    if keep.shape[0] == 0:
        return keep
    return np.unique(keep, axis=0)


def augment(base: np.ndarray, trajectories: np.ndarray, capacity: int) -> tuple[np.ndarray, int]:
    """``base`` rows then ``trajectories``, padded with ``-1`` rows to ``capacity`` rows.

    Returns ``(rows, n_valid)``; trajectories beyond the capacity are dropped (the last
    ones). Fixed shapes let every round reuse one compiled training step.
    """
    base = np.asarray(base)
    width = base.shape[1]
    t = np.asarray(trajectories).reshape(-1, np.shape(trajectories)[-1])
    if t.shape[1] > width and np.any(t[:, width:] >= 0):
        raise ValueError(f"trajectories longer than the base width {width}")
    t = np.pad(t[:, :width], ((0, 0), (0, max(0, width - t.shape[1]))), constant_values=-1)
    rows = np.concatenate([base, t])[:capacity]
    out = np.full((capacity, width), -1, np.int32)
    out[: len(rows)] = rows
    return out, len(rows)
