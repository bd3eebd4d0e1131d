r"""Goal-directedness by behaviour and by probing, in grid worlds (ICML 2026).

The paper evaluates an LLM agent navigating a 2-D grid world behaviourally (optimality
against BFS-optimal policies across sizes, obstacle densities and goal structures, and
under difficulty-preserving transforms) and by probing its internal representations
(position of the agent and of the goal, the map, multi-step plans). This module gives
the pieces; :mod:`jaxsci.experiments.goals` runs the study. The environment is
:mod:`jaxsci.data.gridworld`.

**(a) A trained positive control**, :class:`GridAgent`: a small transformer (equinox)
with one token per cell (the cell's code, or ``AGENT`` on the agent's cell, or
``OUTSIDE`` where a smaller grid is padded to ``max_size``) plus learned row and column
embeddings, reading its four action logits at the agent's token. :func:`train_agent`
trains it by behaviour cloning on the BFS-optimal actions, multi-label over tied optimal
actions (a sigmoid cross-entropy per action, target 1 on every optimal action), with
fresh grids at every step (sizes, densities and kinds drawn from the config), in one
scanned optax loop (one compiled program). :func:`agent_features` returns its action
logits and the residual stream at the agent's token after every block (the probes'
input). Its greedy action is :func:`agent_act`.

**(b) An LLM agent**: :func:`messages` renders a grid as a chat prompt and
:func:`score_actions` asks any :class:`~jaxsci.common.lm.chat.ChatModel` (in-process
SmolLM2 or an OpenAI-compatible server) for ``log p(action | prompt)`` of the four
action words (option scoring; the choice is the argmax). :func:`llm_features`, for an
in-process :class:`~jaxsci.common.lm.chat.LocalChat`, computes the same scores and the
hidden states of every layer at the last prompt token **from one forward pass**: when
each action word is a single token (SmolLM2: ``up``, ``down``, ``left``, ``right`` are),
the option log-probabilities are the next-token log-softmax at the last prompt token, so
the forward that yields the hidden states also scores the actions (checked equal to
:meth:`LocalChat.score` in the tests). Otherwise the scores come from
:meth:`LocalChat.score` in a second forward and ``same_forward`` is ``False``.
Hidden states need the model in-process; a server gives behaviour only.

**(c) Probes**: :func:`fit_probe` trains a linear (``hidden=0``) or one-hidden-layer MLP
probe with optax (full batch, Adam, weight decay), vmapped over layers; targets are
``(n, heads)`` class labels (e.g. the agent's row and column: two heads), features
standardised with the training split's statistics. :func:`probe_accuracy` scores it.
Controls (used by the experiment): the same probe on shuffled training labels, and the
embedding layer. :func:`belief_consistency`: is the chosen action optimal under the map
decoded from the probes (BFS on the decoded grid)?

Departures from the paper: the paper's agent is a large LLM with chain-of-thought; here
a 135M model answers by option scoring (no reasoning), and a transformer trained here
plays the goal-directed control. Probes are trained on a few hundred grids.

>>> import jax
>>> from jaxsci.data import gridworld as gw
>>> cfg = AgentConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_size=5, sizes=(5,))
>>> model = GridAgent(jax.random.key(0), cfg)
>>> logits, hidden = agent_features(model, gw.generate(jax.random.key(1), 5, 0.2))
>>> logits.shape, hidden.shape
((4,), (2, 16))
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxsci.common.blocks import PreNormBlock
from jaxsci.common.lm.engine import RUN_BOUND
from jaxsci.core.validation import check_int, check_key, check_scalar
from jaxsci.data import gridworld as gw

__all__ = [
    "AGENT",
    "OUTSIDE",
    "AgentConfig",
    "GridAgent",
    "ProbeConfig",
    "agent_act",
    "agent_features",
    "belief_consistency",
    "encode",
    "fit_probe",
    "llm_features",
    "messages",
    "optimality",
    "probe_accuracy",
    "probe_predict",
    "score_actions",
    "train_agent",
]

AGENT, OUTSIDE = 4, 5
N_TOKENS = 6


# ------------------------------------------------------------------ (a) trained agent


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """The trained agent and its behaviour-cloning run.

    ``sizes`` / ``max_density`` / ``kinds``: the training distribution (densities drawn
    uniformly in ``[0, max_density]``); ``steps`` Adam steps of ``batch_size`` fresh grids.
    """

    max_size: int = 9
    d_model: int = 64
    n_layers: int = 3
    n_heads: int = 4
    d_ff: int = 128
    sizes: tuple[int, ...] = (5, 6, 7, 8, 9)
    max_density: float = 0.3
    kinds: tuple[str, ...] = gw.KINDS
    steps: int = 600
    batch_size: int = 60
    learning_rate: float = 2e-3

    def __post_init__(self):
        check_int("max_size", self.max_size, min=gw.MIN_SIZE, max=gw.MAX_SIZE)
        for name in ("d_model", "n_layers", "n_heads", "d_ff", "steps", "batch_size"):
            check_int(name, getattr(self, name), min=1)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads "
                             f"({self.n_heads})")
        if not self.sizes:
            raise ValueError("sizes must name at least one grid size")
        for s in self.sizes:
            check_int("sizes[i]", s, min=gw.MIN_SIZE, max=self.max_size)
        check_scalar("max_density", self.max_density, ge=0.0, le=1.0)
        if not self.kinds or any(k not in gw.KINDS for k in self.kinds):
            raise ValueError(f"kinds must be a non-empty subset of {list(gw.KINDS)}, got "
                             f"{self.kinds!r}")
        check_scalar("learning_rate", self.learning_rate, gt=0.0)


class GridAgent(eqx.Module):
    """A transformer over the cells of a grid (one token per cell), acting at the agent's
    token. Build with ``GridAgent(key, AgentConfig(...))``; call on :func:`encode`'s
    tokens and the agent's flat index: ``(logits (4,), hidden (n_layers + 1, d))``."""

    embed: jax.Array
    rows: jax.Array
    cols: jax.Array
    blocks: tuple[PreNormBlock, ...]
    norm: eqx.nn.LayerNorm
    head: eqx.nn.Linear
    max_size: int = eqx.field(static=True)

    def __init__(self, key, config: AgentConfig):
        c = config
        ks = jax.random.split(check_key("key", key), 4 + c.n_layers)
        s = 0.02
        self.embed = s * jax.random.normal(ks[0], (N_TOKENS, c.d_model))
        self.rows = s * jax.random.normal(ks[1], (c.max_size, c.d_model))
        self.cols = s * jax.random.normal(ks[2], (c.max_size, c.d_model))
        self.blocks = tuple(PreNormBlock(ks[4 + i], c.d_model, c.n_heads, c.d_ff)
                            for i in range(c.n_layers))
        self.norm = eqx.nn.LayerNorm(c.d_model)
        self.head = eqx.nn.Linear(c.d_model, 4, key=ks[3])
        self.max_size = c.max_size

    def __call__(self, tokens, agent_index):
        m = self.max_size
        pos = (self.rows[:, None, :] + self.cols[None, :, :]).reshape(m * m, -1)
        x = self.embed[tokens] + pos
        hidden = [x[agent_index]]
        for b in self.blocks:
            x = b(x)
            hidden.append(x[agent_index])
        logits = self.head(self.norm(x[agent_index]))
        return logits, jnp.stack(hidden)


def encode(grid: gw.Grid, max_size: int) -> tuple[jax.Array, jax.Array]:
    """A grid as :class:`GridAgent` input: ``(max_size**2,)`` int32 tokens (cell codes,
    ``AGENT`` on the agent, ``OUTSIDE`` beyond a smaller grid) and the agent's flat index.
    vmap over a batch of grids of one size."""
    n = grid.cells.shape[-1]
    if n > max_size:
        raise ValueError(f"grid size {n} exceeds the agent's max_size {max_size}")
    t = grid.cells.at[grid.agent[0], grid.agent[1]].set(AGENT)
    t = jnp.pad(t, ((0, max_size - n), (0, max_size - n)), constant_values=OUTSIDE)
    return t.reshape(-1).astype(jnp.int32), grid.agent[0] * max_size + grid.agent[1]


@eqx.filter_jit
def _features(model, grid):
    def one(g):
        tokens, idx = encode(g, model.max_size)
        return model(tokens, idx)

    return jax.vmap(one)(grid) if grid.cells.ndim == 3 else one(grid)


def agent_features(model: GridAgent, grid: gw.Grid) -> tuple[jax.Array, jax.Array]:
    """The trained agent's action logits ``(4,)`` and its residual stream at the agent's
    token after the embedding and every block, ``(n_layers + 1, d_model)``. A batch of
    grids (cells ``(n, size, size)``) gives ``(n, 4)`` and ``(n, n_layers + 1, d_model)``
    from one vmapped program."""
    if not isinstance(model, GridAgent):
        raise TypeError(f"model must be a GridAgent, got {type(model).__name__}")
    cells = jnp.asarray(grid.cells)
    if cells.ndim not in (2, 3):
        raise ValueError(f"grid.cells must have shape (size, size) or (n, size, size), got "
                         f"{cells.shape}")
    return _features(model, grid)


def agent_act(model: GridAgent, grid: gw.Grid) -> jax.Array:
    """The trained agent's greedy action (int32: a scalar, or ``(n,)`` for a batch; ties go
    to the first action)."""
    return jnp.argmax(agent_features(model, grid)[0], axis=-1).astype(jnp.int32)


def optimality(actions, grids: gw.Grid) -> jax.Array:
    """Per grid, whether ``actions`` (``(n,)`` int) is optimal at the agent (``(n,)``
    bool; vmapped :func:`jaxsci.data.gridworld.optimal_actions`)."""
    return _optimality(jnp.asarray(actions, jnp.int32), gw.Grid(
        jnp.asarray(grids.cells, jnp.int32), jnp.asarray(grids.agent, jnp.int32)))


@jax.jit
def _optimality(a, grids):
    sets = jax.vmap(gw.optimal_actions)(grids)
    return jnp.take_along_axis(sets, a[:, None], axis=1)[:, 0]


def _training_batch(key, c: AgentConfig):
    per = -(-c.batch_size // len(c.sizes))
    toks, idxs, targets = [], [], []
    for i, s in enumerate(c.sizes):
        kk = jax.random.fold_in(key, i)
        kd, kc, kg = jax.random.split(kk, 3)
        dens = jax.random.uniform(kd, (per,), maxval=c.max_density)
        kinds = jnp.asarray([gw.KINDS.index(k) for k in c.kinds])[
            jax.random.randint(kc, (per,), 0, len(c.kinds))]
        grids = jax.vmap(lambda k, d, kind, s=s: gw.generate(k, s, d, kind))(
            jax.random.split(kg, per), dens, kinds)
        t, ix = jax.vmap(lambda g: encode(g, c.max_size))(grids)
        toks.append(t)
        idxs.append(ix)
        targets.append(jax.vmap(gw.optimal_actions)(grids))
    return jnp.concatenate(toks), jnp.concatenate(idxs), jnp.concatenate(targets)


def train_agent(key, config: AgentConfig = AgentConfig()) -> tuple[GridAgent, jax.Array]:
    """Behaviour cloning of the BFS-optimal policy (multi-label over tied actions).

    Args:
      key: PRNG key (initialisation and the training grids).
      config: the :class:`AgentConfig`.

    Returns:
      ``(model, losses)``: the trained :class:`GridAgent` and the loss of every step.
    """
    if not isinstance(config, AgentConfig):
        raise TypeError(f"config must be an AgentConfig, got {type(config).__name__}")
    key = check_key("key", key)
    return _train_agent(key, config)


@eqx.filter_jit  # the model's non-array fields (dropout flags) stay Python values
def _train_agent(key, c: AgentConfig):
    k_init, k_data = jax.random.split(key)
    model = GridAgent(k_init, c)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    opt = optax.chain(optax.clip_by_global_norm(1.0),
                      optax.adamw(optax.cosine_decay_schedule(c.learning_rate, c.steps),
                                  weight_decay=1e-4))

    def loss_fn(p, batch):
        toks, idx, target = batch
        m = eqx.combine(p, static)
        logits = jax.vmap(lambda t, i: m(t, i)[0])(toks, idx)
        return optax.sigmoid_binary_cross_entropy(logits, target.astype(logits.dtype)).mean()

    def body(carry, k):
        p, s = carry
        loss, g = jax.value_and_grad(loss_fn)(p, _training_batch(k, c))
        upd, s = opt.update(g, s, p)
        return (optax.apply_updates(p, upd), s), loss

    (params, _), losses = jax.lax.scan(body, (params, opt.init(params)),
                                       jax.random.split(k_data, c.steps))
    return eqx.combine(params, static), losses


# ------------------------------------------------------------------ (b) the LLM agent


_INSTRUCTIONS = (
    "You are the agent {agent} on a grid. Reach the goal {goal} in as few moves as "
    "possible. {wall} is a wall, {empty} is free{decoy}. Rows are numbered from the top, "
    "columns from the left; up decreases the row, left decreases the column.\n"
    "{grid}\nWhat is your next move? Answer with one word: up, down, left or right.")


def messages(grid: gw.Grid, symbols: gw.Symbols = gw.SYMBOLS) -> list[dict[str, str]]:
    """The chat prompt for one grid (the ASCII rendering with coordinates)."""
    decoy = bool(np.any(np.asarray(grid.cells) == gw.DECOY))
    text = _INSTRUCTIONS.format(
        agent=symbols.agent, goal=symbols.goal, wall=symbols.wall, empty=symbols.empty,
        decoy=f", {symbols.decoy} is a decoy (not a goal)" if decoy else "",
        grid=gw.render(grid, symbols))
    return [{"role": "user", "content": text}]


def _unbatch(grids: gw.Grid) -> list[gw.Grid]:
    cells, agent = np.asarray(grids.cells), np.asarray(grids.agent)
    if cells.ndim != 3:
        raise ValueError(f"grids must be a batch: cells of shape (n, size, size), got "
                         f"{cells.shape}")
    return [gw.Grid(jnp.asarray(c), jnp.asarray(a)) for c, a in zip(cells, agent, strict=True)]


def score_actions(chat, grids: gw.Grid, symbols: gw.Symbols = gw.SYMBOLS) -> np.ndarray:
    """``log p(action | prompt)`` of the four action words, per grid, through
    ``chat.score`` (any :class:`~jaxsci.common.lm.chat.ChatModel`: in-process or a server).

    Returns:
      ``(n, 4)`` float32 in :data:`~jaxsci.data.gridworld.ACTIONS` order.
    """
    return np.stack([np.asarray(chat.score(messages(g, symbols), list(gw.ACTIONS)),
                                np.float32) for g in _unbatch(grids)])


@functools.partial(jax.jit, compiler_options=RUN_BOUND, static_argnames=("layers",))
def _llm_forward(graphdef, state, blocks, tokens, last, option_ids, *, layers):
    from flax import nnx

    model = nnx.merge(graphdef, state)
    # the scanned blocks: one compiled block body instead of 30 (the same numbers to
    # float32 rounding, Llama.scan_features)
    h, hidden, _ = model.scan_features(blocks, tokens, hidden=True)
    rows = jnp.arange(tokens.shape[0])
    logp = jax.nn.log_softmax(model.logits(h[rows, last]).astype(jnp.float32), axis=-1)
    hid = jnp.stack([hidden[i][rows, last] for i in layers], axis=1)  # (b, layers, d)
    return logp[:, option_ids], hid


def llm_features(chat, grids: gw.Grid, *, symbols: gw.Symbols = gw.SYMBOLS,
                 layers: Sequence[int] | None = None,
                 batch_size: int = 8) -> dict[str, Any]:
    """Action scores and hidden states at the last prompt token, per grid.

    Args:
      chat: an in-process :class:`~jaxsci.common.lm.chat.LocalChat`.
      grids: a batch of grids.
      symbols: the rendering's symbols.
      layers: block indices (0: the embeddings); default every layer ``0..n_layers``.
      batch_size: prompts per forward pass (padded to a multiple of 32 tokens).

    Returns:
      ``{"scores": (n, 4), "hidden": (n, len(layers), d) float32, "layers": (L,),
      "same_forward": bool}``.
    """
    from jaxsci.common.lm.chat import LocalChat

    if not isinstance(chat, LocalChat):
        raise TypeError(f"llm_features needs an in-process LocalChat (hidden states), got "
                        f"{type(chat).__name__}; a server gives behaviour only "
                        f"(score_actions)")
    from flax import nnx

    eng = chat.engine
    n_layers = eng.model.config.n_layers
    layers = tuple(range(n_layers + 1)) if layers is None else tuple(
        check_int(f"layers[{i}]", x, min=0, max=n_layers) for i, x in enumerate(layers))
    batch_size = check_int("batch_size", batch_size, min=1)
    opt_ids = [eng.tokenizer.encode(a) for a in gw.ACTIONS]
    single = all(len(x) == 1 for x in opt_ids)
    gl = _unbatch(grids)
    seqs = [eng.tokenizer.encode(chat.prompt(messages(g, symbols))) for g in gl]
    longest = max(len(s) for s in seqs)
    if longest > eng.model.config.max_len:
        raise ValueError(f"a prompt has {longest} tokens, more than the model's context "
                         f"{eng.model.config.max_len}")
    t = -(-longest // 32) * 32
    graphdef, state = nnx.split(eng.model)
    blocks = eng.stacked_blocks()
    ids = jnp.asarray([x[0] for x in opt_ids] if single else [0] * 4, jnp.int32)
    scores, hidden = [], []
    for i in range(0, len(seqs), batch_size):
        chunk = seqs[i:i + batch_size]
        tok = np.zeros((batch_size, t), np.int32)
        last = np.zeros((batch_size,), np.int32)
        for j, s in enumerate(chunk):
            tok[j, :len(s)] = s
            last[j] = len(s) - 1
        sc, hid = _llm_forward(graphdef, state, blocks, jnp.asarray(tok), jnp.asarray(last),
                               ids, layers=layers)
        scores.append(np.asarray(sc)[:len(chunk)])
        hidden.append(np.asarray(hid)[:len(chunk)])
    scores = np.concatenate(scores)
    if not single:
        scores = score_actions(chat, grids, symbols)
    return {"scores": scores.astype(np.float32), "hidden": np.concatenate(hidden),
            "layers": np.asarray(layers), "same_forward": single}


# ------------------------------------------------------------------ (c) probes


@dataclasses.dataclass(frozen=True)
class ProbeConfig:
    """A probe: ``hidden=0`` linear, else one hidden layer of that width (ReLU); full-batch
    AdamW for ``steps`` with ``weight_decay``."""

    hidden: int = 0
    steps: int = 300
    learning_rate: float = 1e-2
    weight_decay: float = 1e-2

    def __post_init__(self):
        check_int("hidden", self.hidden, min=0)
        check_int("steps", self.steps, min=1)
        check_scalar("learning_rate", self.learning_rate, gt=0.0)
        check_scalar("weight_decay", self.weight_decay, ge=0.0)


def _probe_logits(p, x, n_heads, n_classes):
    if "w1" in p:
        x = jax.nn.relu(x @ p["w1"] + p["b1"])
    return (x @ p["w"] + p["b"]).reshape(x.shape[0], n_heads, n_classes)


def _fit_one(key, x, y, n_classes, c: ProbeConfig):
    n, d = x.shape
    h = y.shape[1]
    mu, sd = x.mean(0), x.std(0) + 1e-6
    xs = (x - mu) / sd
    k1, k2 = jax.random.split(key)
    d_in = c.hidden or d
    p = {"w": jax.random.normal(k1, (d_in, h * n_classes)) / jnp.sqrt(d_in),
         "b": jnp.zeros((h * n_classes,))}
    if c.hidden:
        p["w1"] = jax.random.normal(k2, (d, c.hidden)) * jnp.sqrt(2.0 / d)
        p["b1"] = jnp.zeros((c.hidden,))
    opt = optax.adamw(c.learning_rate, weight_decay=c.weight_decay)

    def loss(p):
        lg = _probe_logits(p, xs, h, n_classes)
        return optax.softmax_cross_entropy_with_integer_labels(lg, y).mean()

    def body(carry, _):
        p, s = carry
        v, g = jax.value_and_grad(loss)(p)
        u, s = opt.update(g, s, p)
        return (optax.apply_updates(p, u), s), v

    (p, _), losses = jax.lax.scan(body, (p, opt.init(p)), None, length=c.steps)
    return {"params": p, "mean": mu, "scale": sd, "loss": losses[-1]}


def fit_probe(key, x, y, n_classes: int, config: ProbeConfig = ProbeConfig()) -> dict:
    """Train a probe from features ``x`` to class labels ``y``.

    Args:
      key: PRNG key (initialisation).
      x: ``(n, d)`` features (or ``(L, n, d)``: one probe per layer, vmapped).
      y: ``(n, heads)`` int labels in ``[0, n_classes)`` (one head: ``(n,)`` is accepted).
      n_classes: classes per head (static).
      config: a :class:`ProbeConfig` (static).

    Returns:
      a probe: ``{"params", "mean", "scale", "loss"}`` (with a leading layer axis for a
      stacked ``x``), for :func:`probe_predict` / :func:`probe_accuracy`.
    """
    key = check_key("key", key)
    n_classes = check_int("n_classes", n_classes, min=2)
    if not isinstance(config, ProbeConfig):
        raise TypeError(f"config must be a ProbeConfig, got {type(config).__name__}")
    x = jnp.asarray(x, jnp.float32)
    if x.ndim not in (2, 3):
        raise ValueError(f"x must have shape (n, d) or (layers, n, d), got {x.shape}")
    y = jnp.asarray(y)
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or not jnp.issubdtype(y.dtype, jnp.integer):
        raise ValueError(f"y must be (n, heads) integer labels, got shape {y.shape} and "
                         f"dtype {y.dtype}")
    if y.shape[0] != x.shape[-2]:
        raise ValueError(f"y must have {x.shape[-2]} rows (one per row of x), got "
                         f"{y.shape[0]}")
    if not isinstance(y, jax.core.Tracer) and (int(y.min()) < 0 or int(y.max()) >= n_classes):
        raise ValueError(f"y must hold labels in [0, {n_classes}), got values in "
                         f"[{int(y.min())}, {int(y.max())}]")
    return _fit_jit(key, x, y.astype(jnp.int32), n_classes, config)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _fit_jit(key, x, y, n_classes, config):
    if x.ndim == 3:
        keys = jax.random.split(key, x.shape[0])
        return jax.vmap(lambda k, xx: _fit_one(k, xx, y, n_classes, config))(keys, x)
    return _fit_one(key, x, y, n_classes, config)


def probe_predict(probe: dict, x, n_classes: int) -> jax.Array:
    """Logits ``(n, heads, n_classes)`` (``(L, n, heads, n_classes)`` for a per-layer probe
    on stacked features)."""
    n_classes = check_int("n_classes", n_classes, min=2)
    return _predict(probe, jnp.asarray(x, jnp.float32), n_classes)


@functools.partial(jax.jit, static_argnums=(2,))
def _predict(probe, x, n_classes):
    def one(pr, xx):
        p = pr["params"]
        xs = (xx - pr["mean"]) / pr["scale"]
        lg = (jax.nn.relu(xs @ p["w1"] + p["b1"]) if "w1" in p else xs) @ p["w"] + p["b"]
        return lg.reshape(xx.shape[0], -1, n_classes)

    return jax.vmap(one)(probe, x) if x.ndim == 3 else one(probe, x)


def probe_accuracy(probe: dict, x, y, n_classes: int) -> jax.Array:
    """Mean accuracy over heads and rows (per layer for a stacked probe)."""
    y = jnp.asarray(y)
    if y.ndim == 1:
        y = y[:, None]
    lg = probe_predict(probe, x, n_classes)
    return jnp.mean(jnp.argmax(lg, -1) == y, axis=(-2, -1))


def belief_consistency(chosen, cells_probs, agent_rc, goal_rc) -> tuple[np.ndarray, np.ndarray]:
    """Is each chosen action optimal under the decoded map?

    Args:
      chosen: ``(n,)`` chosen actions.
      cells_probs: ``(n, size * size, 2)`` decoded probabilities of free / wall per cell
        (argmax taken).
      agent_rc, goal_rc: ``(n, 2)`` decoded agent and goal positions.

    Returns:
      ``(consistent, solvable)``: ``(n,)`` bool each: the chosen action is optimal on the
      decoded grid; the decoded grid has a goal reachable from the decoded agent.
    """
    chosen = np.asarray(chosen)
    cp = np.asarray(cells_probs)
    n = chosen.shape[0]
    size = int(round(np.sqrt(cp.shape[1])))
    cons, solv = np.zeros(n, bool), np.zeros(n, bool)
    for i in range(n):
        cells = np.where(cp[i].argmax(-1) == 1, gw.WALL, gw.EMPTY).reshape(size, size)
        a, g = np.asarray(agent_rc[i]), np.asarray(goal_rc[i])
        cells[a[0], a[1]] = gw.EMPTY
        cells[g[0], g[1]] = gw.GOAL
        if (a == g).all():
            continue
        grid = gw.Grid(jnp.asarray(cells, jnp.int32), jnp.asarray(a, jnp.int32))
        opt = np.asarray(gw.optimal_actions(grid))
        solv[i] = opt.any()
        cons[i] = opt[int(chosen[i])]
    return cons, solv
