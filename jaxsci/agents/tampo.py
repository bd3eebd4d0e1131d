r"""TAMPO: task- and model-aware prompt optimisation for auto-routing (ICML 2026).

The paper routes each task to a (prompt, model) pair under a user's **preference vector**
``w`` over competing objectives (quality against cost). It builds a
**heterogeneity-aware dataset** of ``(task, model, prompt) -> (quality, cost)``, fits an
**uncertainty-aware reward model** on it, and uses that model as an **offline proxy**
to train a **preference-conditioned policy**; the reward model's uncertainty curbs
reward hacking (the policy exploiting the proxy's errors). This module gives every
piece; :mod:`jaxsci.experiments.tampo` runs the study.

* **Task bank** (:mod:`jaxsci.data.routing_tasks`): forced-choice task families.
* **Prompt space** (:func:`prompt_space`, :class:`PromptSpec`): instruction style (the
  system message, :data:`STYLES`) x few-shot ``k`` (worked examples as earlier chat turns)
  x verbaliser (how options are shown and answered, :data:`VERBALISERS`);
  :func:`messages` renders one.
* **Model pool** (:class:`ModelPool`, :class:`Arm`): SmolLM2 (any in-process
  :class:`~jaxsci.common.lm.chat.LocalChat`) read at its last layer and at **early-exit
  layers**: the final RMSNorm and the tied head applied to an intermediate residual
  (the logit lens), so one forward pass gives several models of increasing depth, cost
  and (usually) quality (:func:`exit_readout`); plus any OpenAI-compatible servers,
  read by ``chat.score``. An arm's cost is its prompt tokens times its cost per token
  (for an exit: the share of the 30 blocks it runs; for a server: as configured).
* **Dataset** (:func:`build_dataset`, :class:`RoutingData`): every (task, prompt, arm)
  answered by **option scoring** (the argmax over the options' log-probabilities as
  the assistant's reply: a label, or the option's text), per item; quality is accuracy.
  Each task also gets **label-free features** (:func:`task_features`): the reference
  prompt's mean confidence and label bias at every arm and the principal components
  of the model's mean-pooled residual stream over the task's questions; no answer key
  is read.
* **Reward model** (:class:`Ensemble`, :func:`fit_ensemble`): ``members`` MLPs on
  bootstrap resamples of the training rows (deep-ensemble uncertainty); the prediction
  is the members' mean ``mu`` and standard deviation ``sigma``.
* **Pessimistic reward** (:func:`pessimistic_reward`):
  ``r = w_q (mu - beta sigma) - w_c cost``; ``beta = 0`` is the plain proxy.
* **Policy** (:class:`Policy`, :func:`train_policy`): an MLP of (task features, ``w``)
  giving a softmax over all (prompt, arm) actions, trained offline against the proxy
  (the exact expectation over actions, plus an entropy bonus, with ``w`` drawn
  uniformly from the simplex each step); :func:`choose` is its greedy action.
* **Baselines**: :func:`best_global` (the one (prompt, arm) with the best mean utility on
  the training tasks, used everywhere) and :func:`random_search` (DSPy-style: ``n``
  random candidates evaluated on a task's dev items, the best kept).

Departures from the paper: forced-choice tasks read by option scoring instead of
free-text generation judged by a grader; the action is a choice from a discrete prompt
space (the paper's policy generates prompt text); cost is counted exactly (prompt tokens
x cost per token) rather than predicted; the model pool is one 135M model's exits (plus
optional servers) rather than commercial LLMs; the paper's 86 tasks become 8-12 families.

>>> space = prompt_space(("plain",), (0,), ("letters",))
>>> [p.name for p in space]
['plain/k=0/letters']
>>> import jax.numpy as jnp
>>> r = pessimistic_reward(jnp.array([0.8, 0.75]), jnp.array([0.2, 0.01]),
...                        jnp.zeros(2), jnp.array([1.0, 0.0]), 1.0)
>>> int(jnp.argmax(r))
1
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxsci.common.lm.engine import RUN_BOUND
from jaxsci.core.validation import check_int, check_key, check_scalar
from jaxsci.data import routing_tasks as RT

__all__ = [
    "STYLES",
    "VERBALISERS",
    "Arm",
    "answers",
    "Ensemble",
    "ModelPool",
    "Policy",
    "PolicyConfig",
    "PromptSpec",
    "RewardConfig",
    "RoutingData",
    "best_global",
    "build_dataset",
    "choose",
    "design_matrix",
    "exit_arms",
    "exit_readout",
    "fit_ensemble",
    "messages",
    "pessimistic_reward",
    "prompt_space",
    "random_search",
    "task_features",
    "train_policy",
    "utility",
]

STYLES: dict[str, str] = {
    "plain": "Answer the question.",
    "label": "Reply with only the label of the correct option.",
    "expert": "You are a careful expert. Consider both options, then reply with only the "
              "label of the correct one.",
}
"""Instruction styles: the system message of the prompt."""

VERBALISERS: dict[str, tuple[str, str] | None] = {
    "letters": ("A", "B"),
    "numbers": ("1", "2"),
    "text": None,
    "cloze": None,
}
"""Verbalisers: how the options are shown and what the model's answer is. ``letters`` /
``numbers``: the options listed with these labels, the answer is the label (one token
each for SmolLM2, read from one forward pass); ``text``: the options listed without
labels, the answer is the option's text; ``cloze``: the question alone, the answer is
the option's text (scored as a continuation, one row per option)."""


# --------------------------------------------------------------------------- prompt space


class PromptSpec(NamedTuple):
    """One point of the prompt space: instruction style, few-shot ``k``, verbaliser."""

    style: str
    shots: int
    verbaliser: str

    @property
    def name(self) -> str:
        return f"{self.style}/k={self.shots}/{self.verbaliser}"


def _nonempty(name: str, xs) -> tuple:
    if isinstance(xs, str) or not isinstance(xs, Sequence):
        raise TypeError(f"{name} must be a sequence, got {type(xs).__name__} {xs!r}")
    if len(xs) == 0:
        raise ValueError(f"{name} must be non-empty, got an empty {type(xs).__name__}")
    return tuple(xs)


def prompt_space(styles: Sequence[str] = ("plain", "label"), shots: Sequence[int] = (0, 1),
                 verbalisers: Sequence[str] = ("letters", "numbers")) -> tuple[PromptSpec, ...]:
    """The grid ``styles x shots x verbalisers`` (the first has ``shots[0]`` examples).

    Args:
      styles: keys of :data:`STYLES`.
      shots: numbers of worked examples, each >= 0.
      verbalisers: keys of :data:`VERBALISERS`.

    Returns:
      a tuple of :class:`PromptSpec`.
    """
    styles, shots, verbalisers = (_nonempty("styles", styles), _nonempty("shots", shots),
                                  _nonempty("verbalisers", verbalisers))
    for s in styles:
        if s not in STYLES:
            raise ValueError(f"styles must be among {sorted(STYLES)}, got {s!r}")
    for v in verbalisers:
        if v not in VERBALISERS:
            raise ValueError(f"verbalisers must be among {sorted(VERBALISERS)}, got {v!r}")
    shots = tuple(check_int("shots[i]", k, min=0) for k in shots)
    return tuple(PromptSpec(s, k, v) for s in styles for k in shots for v in verbalisers)


def _question(item: RT.Item, verbaliser: str) -> str:
    labels = VERBALISERS[verbaliser]
    if labels is not None:
        return (f"{item.question}\n{labels[0]}) {item.options[0]}\n"
                f"{labels[1]}) {item.options[1]}")
    if verbaliser == "text":
        return f"{item.question}\nOptions: {item.options[0]} or {item.options[1]}"
    return item.question


def answers(item: RT.Item, verbaliser: str) -> tuple[str, str]:
    """The two answers the model is scored on under ``verbaliser`` (labels or texts)."""
    labels = VERBALISERS[verbaliser]
    return tuple(labels) if labels is not None else tuple(item.options)


def messages(item: RT.Item, prompt: PromptSpec, examples: Sequence[RT.Item] = ()
             ) -> list[dict[str, str]]:
    """The chat messages that ask ``item`` under ``prompt``.

    Args:
      item: the question.
      prompt: a :class:`PromptSpec`.
      examples: worked examples (at least ``prompt.shots``); the first ``prompt.shots``
        become user / assistant turns before the question.

    Returns:
      a list of ``{"role", "content"}`` dicts (system message first).
    """
    if not isinstance(prompt, PromptSpec):
        raise TypeError(f"prompt must be a PromptSpec, got {type(prompt).__name__}")
    if len(examples) < prompt.shots:
        raise ValueError(f"examples must hold at least prompt.shots={prompt.shots} items, "
                         f"got {len(examples)}")
    v = prompt.verbaliser
    out = [{"role": "system", "content": STYLES[prompt.style]}]
    for ex in examples[:prompt.shots]:
        out += [{"role": "user", "content": _question(ex, v)},
                {"role": "assistant", "content": answers(ex, v)[ex.answer]}]
    out.append({"role": "user", "content": _question(item, v)})
    return out


# --------------------------------------------------------------------------- model pool


class Arm(NamedTuple):
    """A model of the pool: an early exit of the in-process model (``layer``) or a server."""

    name: str
    cost_per_token: float
    layer: int | None = None  # early-exit block of the in-process model
    server: int | None = None  # index into the pool's servers


def exit_arms(n_layers: int, exits: Sequence[int]) -> tuple[Arm, ...]:
    """Early-exit arms reading blocks ``exits`` of an ``n_layers`` model.

    The cost per token of exit ``l`` is ``l / n_layers`` (the share of the blocks run).
    """
    n_layers = check_int("n_layers", n_layers, min=1)
    exits = _nonempty("exits", exits)
    out = []
    for i, layer in enumerate(exits):
        layer = check_int(f"exits[{i}]", layer, min=1, max=n_layers)
        out.append(Arm(f"exit {layer}/{n_layers}", layer / n_layers, layer=layer))
    if len({a.layer for a in out}) != len(out):
        raise ValueError(f"exits must be distinct, got {exits}")
    return tuple(out)


_BATCH = 32
_BUCKETS = (48, 64, 96, 128, 192, 256)


@functools.partial(jax.jit, compiler_options=RUN_BOUND,
                   static_argnames=("layers", "pool_layer", "n_cont"))
def _readout(graphdef, state, blocks, tokens, lengths, first_ids, rest, rest_len, *, layers,
             pool_layer, n_cont):
    # The blocks as a lax.scan over their stacked weights (Llama.scan_features): one
    # compiled block body instead of 30, the same numbers to float32 rounding.
    model = nnx.merge(graphdef, state)
    c = model.config
    b, t = tokens.shape
    K = first_ids.shape[1]
    cache = None
    if n_cont:
        empty = jnp.zeros((c.n_layers, b, t + n_cont, c.n_kv_heads, c.head_dim),
                          model.embed.embedding[...].dtype)
        cache = (empty, empty)
    _, states, cache = model.scan_features(blocks, tokens, cache=cache, hidden=True)
    hidden = [states[i] for i in (*layers, pool_layer)]
    rows = jnp.arange(b)

    def head(h):
        # early exit: the final norm and the tied head read an intermediate residual
        return jax.nn.log_softmax(model.logits(model.norm(h)).astype(jnp.float32), axis=-1)

    score = jnp.stack([jnp.take_along_axis(head(h[rows, lengths - 1]), first_ids, axis=1)
                       for h in hidden[:len(layers)]], axis=1)  # (b, L, K)
    mask = (jnp.arange(t)[None] < lengths[:, None]).astype(jnp.float32)
    pooled = (hidden[-1].astype(jnp.float32) * mask[..., None]).sum(1) / lengths[:, None]
    if n_cont:
        # the options' later tokens, every option continuing the same cached prompt
        rep = tuple(jnp.repeat(x, K, axis=1) for x in cache)  # (layers, b K, slots, ...)
        inp = jnp.concatenate([first_ids[..., None], rest[..., :-1]], -1).reshape(b * K, -1)
        pos = (lengths[:, None, None] + jnp.arange(n_cont)[None, None]).repeat(K, 1)
        _, states, _ = model.scan_features(blocks, inp, pos.reshape(b * K, -1), cache=rep,
                                           hidden=True, return_cache=False)
        hid = [states[i] for i in layers]
        valid = jnp.arange(n_cont)[None, None] < rest_len[..., None]  # (b, K, n_cont)
        extra = []
        for h in hid:
            lp = jnp.take_along_axis(head(h), rest.reshape(b * K, -1)[..., None], -1)
            extra.append(jnp.sum(jnp.where(valid, lp.reshape(b, K, -1), 0.0), -1))
        score = score + jnp.stack(extra, axis=1)
    return score, pooled


def exit_readout(engine, prompts: Sequence[str], options: Sequence[Sequence[str]],
                 layers: Sequence[int], *, pool_layer: int | None = None, progress=None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``log p(option | prompt)`` of each prompt's options at several depths of the model.

    Exit ``l`` reads ``norm(h_l)`` with the tied head (the logit lens); at
    ``l = n_layers`` it is the model's own distribution, so the last exit equals
    ``LocalChat.score`` (a test checks it). One forward pass per batch of 32 prompts
    (sorted by length, padded to a few fixed lengths: one compiled program per length)
    gives every exit: the options' first tokens are read at the prompt's last position,
    and options of several tokens continue the prompt's key/value cache (all options of
    a prompt in one more short pass), their tokens' log-probabilities summed.

    Args:
      engine: a :class:`~jaxsci.common.lm.engine.Engine` (``LocalChat.engine``).
      prompts: rendered prompts (``LocalChat.prompt(messages)``), each non-empty.
      options: per prompt, its options (non-empty strings, tokenized on their own and
        appended to the prompt's tokens, as ``Engine.score`` does).
      layers: exit blocks in ``1 .. n_layers``.
      pool_layer: the block whose residual is mean-pooled over each prompt's tokens
        (default: the middle block).
      progress: a tqdm-like bar, updated once per batch (optional).

    Returns:
      ``(logp, pooled)``: ``(len(prompts), len(layers), n_options)`` float32 and
      ``(len(prompts), d_model)`` float32.
    """
    prompts = _nonempty("prompts", prompts)
    if len(options) != len(prompts):
        raise ValueError(f"options must hold one option tuple per prompt ({len(prompts)}), "
                         f"got {len(options)}")
    if len({len(o) for o in options}) != 1 or len(options[0]) < 2:
        raise ValueError("options must hold the same number (>= 2) of options per prompt")
    n_layers = engine.model.config.n_layers
    layers = tuple(check_int(f"layers[{i}]", x, min=1, max=n_layers)
                   for i, x in enumerate(_nonempty("layers", layers)))
    pool = n_layers // 2 if pool_layer is None else check_int("pool_layer", pool_layer,
                                                              min=0, max=n_layers)
    tok = engine.tokenizer
    K = len(options[0])
    pres, conts = [], []
    for i, (p, opts) in enumerate(zip(prompts, options, strict=True)):
        pre = [int(x) for x in tok.encode(p)] if isinstance(p, str) else []
        if not pre:
            raise ValueError(f"prompts[{i}] must be a non-empty string")
        cs = []
        for o in opts:
            c = [int(x) for x in tok.encode(o)] if isinstance(o, str) else []
            if not c:
                raise ValueError(f"options[{i}] must hold non-empty strings, got {o!r}")
            cs.append(c)
        pres.append(pre)
        conts.append(cs)
    max_len = engine.model.config.max_len
    extra = [max(len(c) for c in cs) - 1 for cs in conts]
    m = max(extra)  # one continuation length for the call: fewer compiled programs
    n_cont = 0 if m == 0 else 1 << max(0, m - 1).bit_length()
    order = sorted(range(len(pres)), key=lambda i: (extra[i] > 0, len(pres[i])))
    logp = np.zeros((len(prompts), len(layers), K), np.float32)
    pooled = np.zeros((len(prompts), engine.model.config.d_model), np.float32)
    graphdef, state = nnx.split(engine.model)
    blocks = engine.stacked_blocks()
    B = min(_BATCH, 1 << max(0, len(order) - 1).bit_length())  # a few prompts: a small batch
    for s in range(0, len(order), B):
        chunk = order[s:s + B]
        nc = n_cont if any(extra[i] for i in chunk) else 0
        longest = max(len(pres[i]) for i in chunk)
        if longest + nc > max_len:
            raise ValueError(f"a prompt has {longest} tokens, more than max_len={max_len}")
        t = min(next((b for b in _BUCKETS if b >= longest), -(-longest // 64) * 64),
                max_len - nc)
        tokens = np.zeros((B, t), np.int32)
        lengths = np.ones((B,), np.int32)
        first = np.zeros((B, K), np.int32)
        rest = np.zeros((B, K, max(nc, 1)), np.int32)
        rest_len = np.zeros((B, K), np.int32)
        for j, i in enumerate(chunk):
            tokens[j, :len(pres[i])] = pres[i]
            lengths[j] = len(pres[i])
            for k, c in enumerate(conts[i]):
                first[j, k] = c[0]
                rest[j, k, :len(c) - 1] = c[1:]
                rest_len[j, k] = len(c) - 1
        sc, po = (np.asarray(x) for x in _readout(
            graphdef, state, blocks, jnp.asarray(tokens), jnp.asarray(lengths),
            jnp.asarray(first),
            jnp.asarray(rest), jnp.asarray(rest_len), layers=layers, pool_layer=pool,
            n_cont=nc))
        logp[chunk] = sc[:len(chunk)]
        pooled[chunk] = po[:len(chunk)]
        if progress is not None:
            progress.update()
    return logp, pooled


class ModelPool:
    """The models a router picks from: early exits of an in-process model, and servers.

    Args:
      local: a :class:`~jaxsci.common.lm.chat.LocalChat` (or ``None``: servers only).
      exits: its early-exit blocks (:func:`exit_arms`); ignored without ``local``.
      servers: ``(name, chat, cost_per_token)`` triples: any
        :class:`~jaxsci.common.lm.chat.ChatModel` read by ``chat.score`` at its output.

    Attributes:
      arms: the :class:`Arm` tuple, exits first.
    """

    def __init__(self, local=None, exits: Sequence[int] = (), servers: Sequence = ()):
        from jaxsci.common.lm.chat import LocalChat

        if local is not None and not isinstance(local, LocalChat):
            raise TypeError(f"local must be a LocalChat or None, got {type(local).__name__}")
        self.local = local
        arms = list(exit_arms(local.engine.model.config.n_layers, exits)) if local else []
        self.servers = []
        for i, s in enumerate(servers):
            name, chat, cost = s
            check_scalar(f"servers[{i}] cost_per_token", cost, ge=0.0)
            self.servers.append(chat)
            arms.append(Arm(str(name), float(cost), server=i))
        if not arms:
            raise ValueError("the model pool is empty: pass local with exits, or servers")
        self.arms = tuple(arms)

    def count_tokens(self, msgs) -> int:
        """Prompt tokens of a conversation (the local tokenizer's; else characters / 4)."""
        if self.local is not None:
            return len(self.local.engine.tokenizer.encode(self.local.prompt(msgs)))
        return max(1, sum(len(m["content"]) for m in msgs) // 4)

    def read(self, convs: Sequence[list[dict]], options: Sequence[Sequence[str]], *,
             progress=None) -> tuple[np.ndarray, np.ndarray | None]:
        """``(logp (n, arms, options), pooled (n, d) or None)``: ``log p(option | conv)``
        at every arm (exits from one pass per batch; servers by ``chat.score``)."""
        parts, pooled = [], None
        exits = [a.layer for a in self.arms if a.layer is not None]
        if exits:
            texts = [self.local.prompt(m) for m in convs]
            lp, pooled = exit_readout(self.local.engine, texts, options, exits,
                                      progress=progress)
            parts.append(lp)
        for chat in self.servers:
            parts.append(np.stack([np.asarray(chat.score(m, list(lab)), np.float32)
                                   for m, lab in zip(convs, options, strict=True)])[:, None])
        return np.concatenate(parts, axis=1), pooled


# --------------------------------------------------------------------------- dataset


class RoutingData(NamedTuple):
    """The heterogeneity-aware dataset: every (task, prompt, arm), per item.

    Attributes:
      logp: ``(T, P, M, N, 2)`` option log-probabilities.
      answers: ``(T, N)`` the correct option.
      tokens: ``(T, P)`` mean prompt tokens.
      cost: ``(T, P, M)`` tokens x cost per token, divided by its maximum.
      features: ``(T, F)`` label-free task features (standardised).
    """

    logp: np.ndarray
    answers: np.ndarray
    tokens: np.ndarray
    cost: np.ndarray
    features: np.ndarray

    def correct(self) -> np.ndarray:
        """``(T, P, M, N)`` bool: the argmax option is the answer."""
        return np.argmax(self.logp, -1) == self.answers[:, None, None, :]

    def quality(self, items=slice(None)) -> np.ndarray:
        """``(T, P, M)`` accuracy over the selected items."""
        return self.correct()[..., items].mean(-1)


def task_features(logp_ref: np.ndarray, pooled: np.ndarray | None, pca_dims: int
                  ) -> np.ndarray:
    """Label-free task features from the reference prompt's answers (no answer key read).

    Args:
      logp_ref: ``(T, M, N, 2)`` option log-probabilities of the reference prompt.
      pooled: ``(T, N, d)`` mean-pooled residuals of its questions, or ``None``.
      pca_dims: principal components of the task-mean residual kept (``<= T - 1``).

    Returns:
      ``(T, F)`` standardised: per arm, the mean confidence (max option probability,
      renormalised over the options) and the mean probability of option 0 (label bias);
      then the principal components.
    """
    lp = np.asarray(logp_ref, np.float64)
    p = np.exp(lp - lp.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    feats = [p.max(-1).mean(-1), p[..., 0].mean(-1)]
    if pooled is not None and pca_dims > 0 and lp.shape[0] > 1:
        m = np.asarray(pooled, np.float64).mean(1)
        m = m - m.mean(0)
        u, s, _ = np.linalg.svd(m, full_matrices=False)
        k = min(pca_dims, lp.shape[0] - 1)
        feats.append(u[:, :k] * s[:k])
    f = np.concatenate(feats, axis=1)
    sd = f.std(0)
    return ((f - f.mean(0)) / np.where(sd > 1e-9, sd, 1.0)).astype(np.float32)


def build_dataset(pool: ModelPool, families: Sequence, prompts: Sequence[PromptSpec],
                  n_items: int, *, seed: int = 0, pca_dims: int = 2, progress=None
                  ) -> RoutingData:
    """Ask every task's items under every prompt of every arm; the model answers them all.

    Labels come from the models actually answering (option scoring), never simulated.
    The worked examples of a task are separate items (drawn with ``seed + 1``). The
    reference prompt for :func:`task_features` is ``prompts[0]``.

    Args:
      pool: the :class:`ModelPool`.
      families: task families (:class:`~jaxsci.data.routing_tasks.Family` or names).
      prompts: the prompt space (:func:`prompt_space`).
      n_items: questions per task, >= 2.
      seed: the items' seed.
      pca_dims: principal components of the residual stream in the task features.
      progress: a tqdm-like bar, updated once per batch of 32 prompts (optional).

    Returns:
      :class:`RoutingData`.
    """
    if not isinstance(pool, ModelPool):
        raise TypeError(f"pool must be a ModelPool, got {type(pool).__name__}")
    families = [RT.family(f) if isinstance(f, str) else f
                for f in _nonempty("families", families)]
    prompts = _nonempty("prompts", prompts)
    for p in prompts:
        if not isinstance(p, PromptSpec):
            raise TypeError(f"prompts must hold PromptSpec values, got {type(p).__name__}")
    n_items = check_int("n_items", n_items, min=2)
    k_max = max(p.shots for p in prompts)
    T, P, M = len(families), len(prompts), len(pool.arms)
    ans = np.zeros((T, n_items), np.int32)
    convs, opts = [], []
    for t, fam in enumerate(families):
        its = RT.items(fam, n_items, seed=seed)
        shots = RT.items(fam, max(k_max, 1), seed=seed + 1)
        ans[t] = [it.answer for it in its]
        convs += [messages(it, p, shots) for p in prompts for it in its]
        opts += [answers(it, p.verbaliser) for p in prompts for it in its]
    lp, po = pool.read(convs, opts, progress=progress)  # every task in one sorted sweep
    logp = lp.reshape(T, P, n_items, M, 2).transpose(0, 1, 3, 2, 4)
    tokens = np.asarray([pool.count_tokens(c) for c in convs], np.float64).reshape(
        T, P, n_items).mean(-1)
    pooled_ref = None if po is None else po.reshape(T, P, n_items, -1)[:, 0]
    cpt = np.asarray([a.cost_per_token for a in pool.arms])
    cost = tokens[:, :, None] * cpt[None, None, :]
    cost = cost / max(float(cost.max()), 1e-12)
    feats = task_features(logp[:, 0], pooled_ref, pca_dims)
    return RoutingData(logp, ans, tokens, cost.astype(np.float32), feats)


def design_matrix(features, prompts: Sequence[PromptSpec], arms: Sequence[Arm]) -> np.ndarray:
    """Reward-model inputs ``(T, P * M, F + prompt one-hots + arm one-hots + 1)``.

    Prompt components are one-hot per factor (style, ``k``, verbaliser); the arm is
    one-hot plus its cost per token. Action ``a = p * M + m``.
    """
    f = np.asarray(features, np.float32)
    if f.ndim != 2:
        raise ValueError(f"features must have shape (tasks, F), got {f.shape}")
    prompts, arms = _nonempty("prompts", prompts), _nonempty("arms", arms)
    cols = []
    for part in (0, 1, 2):
        vals = sorted({p[part] for p in prompts}, key=str)
        cols.append(np.asarray([[float(p[part] == v) for v in vals] for p in prompts]))
    pcode = np.concatenate(cols, 1)
    acode = np.concatenate([np.eye(len(arms)),
                            np.asarray([[a.cost_per_token] for a in arms])], 1)
    act = np.concatenate([np.repeat(pcode, len(arms), 0), np.tile(acode, (len(prompts), 1))],
                         1).astype(np.float32)
    T, A = f.shape[0], act.shape[0]
    return np.concatenate([np.broadcast_to(f[:, None], (T, A, f.shape[1])),
                           np.broadcast_to(act[None], (T, A, act.shape[1]))], -1)


# --------------------------------------------------------------------------- reward model


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """The ensemble reward model (deep ensemble on bootstrap resamples)."""

    members: int = 8
    width: int = 32
    steps: int = 300
    learning_rate: float = 1e-2
    weight_decay: float = 1e-3

    def __post_init__(self):
        check_int("members", self.members, min=2)
        check_int("width", self.width, min=1)
        check_int("steps", self.steps, min=1)
        check_scalar("learning_rate", self.learning_rate, gt=0.0)
        check_scalar("weight_decay", self.weight_decay, ge=0.0)


def _glorot(key, shape):
    return jax.random.normal(key, shape) * jnp.sqrt(2.0 / (shape[-2] + shape[-1]))


class Ensemble(eqx.Module):
    """``members`` two-hidden-layer tanh MLPs, stacked; output through a sigmoid (quality)."""

    w1: jax.Array
    b1: jax.Array
    w2: jax.Array
    b2: jax.Array
    w3: jax.Array
    b3: jax.Array

    def members_predict(self, x) -> jax.Array:
        """``(members, ...)`` predictions of ``x`` ``(..., F)``."""
        x = jnp.asarray(x, jnp.result_type(float))
        if x.shape[-1] != self.w1.shape[1]:
            raise ValueError(f"x must have {self.w1.shape[1]} features in its last axis, "
                             f"got shape {x.shape}")

        def one(w1, b1, w2, b2, w3, b3):
            h = jnp.tanh(x @ w1 + b1)
            h = jnp.tanh(h @ w2 + b2)
            return jax.nn.sigmoid((h @ w3 + b3)[..., 0])

        return jax.vmap(one)(self.w1, self.b1, self.w2, self.b2, self.w3, self.b3)

    def __call__(self, x) -> tuple[jax.Array, jax.Array]:
        """``(mu, sigma)``: the members' mean and standard deviation at ``x`` ``(..., F)``."""
        p = self.members_predict(x)
        return p.mean(0), p.std(0)


def init_ensemble(key, n_features: int, config: RewardConfig = RewardConfig()) -> Ensemble:
    """Independently initialised members (their spread is the epistemic uncertainty)."""
    check_key("key", key)
    n_features = check_int("n_features", n_features, min=1)
    m, h = config.members, config.width
    k = jax.random.split(key, 3)
    dt = jnp.result_type(float)
    return Ensemble(_glorot(k[0], (m, n_features, h)).astype(dt), jnp.zeros((m, h), dt),
                    _glorot(k[1], (m, h, h)).astype(dt), jnp.zeros((m, h), dt),
                    _glorot(k[2], (m, h, 1)).astype(dt), jnp.zeros((m, 1), dt))


@eqx.filter_jit
def fit_ensemble(key, x, y, weight, config: RewardConfig = RewardConfig()) -> Ensemble:
    """Fit the ensemble by full-batch AdamW on weighted squared error.

    Each member sees its own bootstrap resample (Poisson(1) counts times ``weight``), so
    the members agree where the data are dense and spread where there are none.

    Args:
      key: the key (initialisation and resampling).
      x: ``(n, F)`` inputs.
      y: ``(n,)`` targets in ``[0, 1]``.
      weight: ``(n,)`` non-negative row weights (0: a row held out), not all zero.
      config: :class:`RewardConfig`.

    Returns:
      the fitted :class:`Ensemble`.
    """
    dt = jnp.result_type(float)
    x, y, weight = jnp.asarray(x, dt), jnp.asarray(y, dt), jnp.asarray(weight, dt)
    if x.ndim != 2 or y.shape != x.shape[:1] or weight.shape != y.shape:
        raise ValueError(f"x must have shape (n, F), y and weight shape (n,); got "
                         f"{x.shape}, {y.shape}, {weight.shape}")
    weight = eqx.error_if(weight, jnp.any(weight < 0) | (jnp.sum(weight) <= 0),
                          "weight must be non-negative and not all zero")
    k_init, k_boot = jax.random.split(key)
    ens = init_ensemble(k_init, x.shape[1], config)
    counts = jax.random.poisson(k_boot, 1.0, (config.members, x.shape[0])) * weight
    opt = optax.adamw(config.learning_rate, weight_decay=config.weight_decay)
    state = opt.init(ens)

    def loss(e):
        p = e.members_predict(x)
        return jnp.sum(counts * (p - y) ** 2) / jnp.maximum(jnp.sum(counts), 1.0)

    def step(carry, _):
        e, s = carry
        v, g = jax.value_and_grad(loss)(e)
        u, s = opt.update(g, s, e)
        return (optax.apply_updates(e, u), s), v

    (ens, _), _ = jax.lax.scan(step, (ens, state), None, length=config.steps)
    return ens


def pessimistic_reward(mu, sigma, cost, w, beta) -> jax.Array:
    """``w_q (mu - beta sigma) - w_c cost``: the lower-confidence-bound proxy reward.

    Traced in every argument, vmappable and differentiable; ``beta = 0`` is the plain
    proxy. Raises (also under ``jit``) for ``beta < 0``, a negative weight or ``sigma``.

    Args:
      mu, sigma: the reward model's mean and standard deviation, ``(..., A)``.
      cost: the actions' costs, broadcastable to ``mu``.
      w: the preference vector ``(..., 2)``: ``(w_q, w_c)``.
      beta: the pessimism coefficient, >= 0.

    Returns:
      ``(..., A)``.
    """
    dt = jnp.result_type(float)  # float64 under jax_enable_x64
    mu, sigma, cost, w, beta = (jnp.asarray(v, dt) for v in (mu, sigma, cost, w, beta))
    if w.ndim == 0 or w.shape[-1] != 2:
        raise ValueError(f"w must have shape (..., 2) = (w_q, w_c), got {w.shape}")
    if beta.ndim != 0:
        raise ValueError(f"beta must be a scalar, got shape {beta.shape}")
    if mu.shape != sigma.shape:
        raise ValueError(f"mu and sigma must share a shape, got {mu.shape} and {sigma.shape}")
    beta = eqx.error_if(beta, beta < 0, "beta must be >= 0")
    w = eqx.error_if(w, jnp.any(w < 0), "w must be non-negative")
    sigma = eqx.error_if(sigma, jnp.any(sigma < 0), "sigma must be non-negative")
    return w[..., 0:1] * (mu - beta * sigma) - w[..., 1:2] * cost


def utility(quality, cost, w) -> jax.Array:
    """The realised utility ``w_q quality - w_c cost`` (``pessimistic_reward`` at ``beta=0``
    with the measured quality)."""
    q = jnp.asarray(quality, jnp.float32)
    return pessimistic_reward(q, jnp.zeros_like(q), cost, w, 0.0)


# --------------------------------------------------------------------------- policy


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    """The preference-conditioned policy and its offline training against the proxy."""

    width: int = 64
    steps: int = 400
    learning_rate: float = 1e-2
    entropy: float = 1e-3  # entropy bonus (keeps the softmax from saturating early)
    w_samples: int = 16  # preference vectors drawn per task per step

    def __post_init__(self):
        check_int("width", self.width, min=1)
        check_int("steps", self.steps, min=1)
        check_int("w_samples", self.w_samples, min=1)
        check_scalar("learning_rate", self.learning_rate, gt=0.0)
        check_scalar("entropy", self.entropy, ge=0.0)


class Policy(eqx.Module):
    """An MLP of ``(task features, w)`` giving logits over the (prompt, arm) actions."""

    w1: jax.Array
    b1: jax.Array
    w2: jax.Array
    b2: jax.Array
    w3: jax.Array
    b3: jax.Array

    def __call__(self, features, w) -> jax.Array:
        """Logits ``(..., A)`` for features ``(..., F)`` and preferences ``(..., 2)``."""
        z = jnp.concatenate([jnp.asarray(features, jnp.float32),
                             jnp.asarray(w, jnp.float32)], -1)
        h = jnp.tanh(z @ self.w1 + self.b1)
        h = jnp.tanh(h @ self.w2 + self.b2)
        return h @ self.w3 + self.b3


def _w_grid(key, shape):
    wc = jax.random.uniform(key, shape)
    return jnp.stack([1.0 - wc, wc], -1)


@eqx.filter_jit
def train_policy(key, features, mu, sigma, cost, beta,
                 config: PolicyConfig = PolicyConfig()) -> Policy:
    """Train the policy offline against the pessimistic proxy.

    Maximises ``E_task E_w [sum_a pi(a | task, w) r_w(task, a)] + entropy * H(pi)`` with
    ``r`` :func:`pessimistic_reward` and ``w = (1 - w_c, w_c)``, ``w_c ~ U(0, 1)``;
    the expectation over actions is exact (the action space is small).

    Args:
      key: the key.
      features: ``(T, F)`` task features (labelled or not: only the proxy is read).
      mu, sigma: ``(T, A)`` the reward model's predictions.
      cost: ``(T, A)``.
      beta: pessimism (traced: a ``vmap`` over it trains several policies at once).
      config: :class:`PolicyConfig`.

    Returns:
      the trained :class:`Policy`.
    """
    f = jnp.asarray(features, jnp.float32)
    mu, sigma, cost = (jnp.asarray(v, jnp.float32) for v in (mu, sigma, cost))
    if f.ndim != 2 or f.shape[0] == 0:
        raise ValueError(f"features must have shape (tasks, F) with tasks >= 1, got {f.shape}")
    if mu.shape != (f.shape[0], mu.shape[-1]) or sigma.shape != mu.shape or \
            cost.shape != mu.shape:
        raise ValueError(f"mu, sigma and cost must have shape (tasks, actions) with "
                         f"tasks={f.shape[0]}; got {mu.shape}, {sigma.shape}, {cost.shape}")
    T, A = mu.shape
    h = config.width
    k = jax.random.split(key, 4)
    pol = Policy(_glorot(k[0], (f.shape[1] + 2, h)), jnp.zeros(h), _glorot(k[1], (h, h)),
                 jnp.zeros(h), 0.01 * _glorot(k[2], (h, A)), jnp.zeros(A))
    opt = optax.adam(config.learning_rate)
    state = opt.init(pol)
    S = config.w_samples

    def loss(p, kw):
        w = _w_grid(kw, (T, S))
        r = pessimistic_reward(mu[:, None], sigma[:, None], cost[:, None], w, beta)
        logits = p(jnp.broadcast_to(f[:, None], (T, S, f.shape[1])), w)
        logpi = jax.nn.log_softmax(logits, -1)
        pi = jnp.exp(logpi)
        return -jnp.mean(jnp.sum(pi * r, -1) - config.entropy * jnp.sum(pi * logpi, -1))

    def step(carry, kw):
        p, s = carry
        v, g = jax.value_and_grad(loss)(p, kw)
        u, s = opt.update(g, s, p)
        return (optax.apply_updates(p, u), s), v

    (pol, _), _ = jax.lax.scan(step, (pol, state), jax.random.split(k[3], config.steps))
    return pol


def choose(policy: Policy, features, w) -> jax.Array:
    """The policy's greedy action(s) for task features ``(..., F)`` and ``w`` ``(..., 2)``."""
    return jnp.argmax(policy(features, w), -1)


# --------------------------------------------------------------------------- baselines


def best_global(quality, cost, w) -> jax.Array:
    """The single action with the best mean utility over the given tasks.

    Args:
      quality, cost: ``(T, A)`` measured on the training tasks (T >= 1).
      w: ``(2,)`` the preference.

    Returns:
      an int scalar action.
    """
    q = jnp.asarray(quality, jnp.float32)
    if q.ndim != 2 or q.shape[0] == 0:
        raise ValueError(f"quality must have shape (tasks, actions) with tasks >= 1, "
                         f"got {q.shape}")
    return jnp.argmax(utility(q, cost, w).mean(0))


def random_search(key, dev_quality, cost, w, n: int) -> jax.Array:
    """DSPy-style random search: ``n`` distinct random actions, the best dev utility kept.

    Args:
      key: the key.
      dev_quality: ``(A,)`` quality on the task's dev items (costs ``n x dev items`` real
        model calls).
      cost: ``(A,)``.
      w: ``(2,)``.
      n: candidates, ``1 <= n <= A`` (static).

    Returns:
      an int scalar action.
    """
    check_key("key", key)
    q = jnp.asarray(dev_quality, jnp.float32)
    if q.ndim != 1:
        raise ValueError(f"dev_quality must have shape (actions,), got {q.shape}")
    n = check_int("n", n, min=1, max=q.shape[0])
    cand = jax.random.choice(key, q.shape[0], (n,), replace=False)
    u = utility(q, cost, w)
    return cand[jnp.argmax(u[cand])]
