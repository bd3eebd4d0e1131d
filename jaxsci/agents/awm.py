r"""Agent World Model (ICML 2026): RL with database-verified rewards on synthesised worlds.

The paper synthesises many database-backed environments (scenario -> tasks -> SQLite
schema and data -> tool API -> verification code) and trains agents on them with GRPO,
rewarded by verifiers that read the initial and final databases. The environments here
are :mod:`jaxsci.data.scenarios` (twelve scenario templates, seeded variants, every task
gated). This module gives the agent and its training:

**The policy** (:class:`ToolPolicy`, equinox) reads an observation of ``max_len`` tokens:
a ``<done>`` token, the task's words, a separator, and the last tool result flattened to
``key value`` words (or ``error``). Words are embedded by a hash into ``n_buckets``, so
the policy meets names it has never seen. Each step it chooses, from one transformer
pass:

* a **tool** among the world's tools or ``FINISH``: the logit of tool ``j`` is the dot
  product of a query from the pooled observation with the embedding of the tool's name
  words (``find``, ``visit``, ...), so tools of unseen worlds are scored by their names;
* each **argument** of that tool by **pointer-copy**: a query built from the argument's
  name words points at an observation token, whose text becomes the value (an id from a
  tool result, a quoted name or a number from the task);
* for ``FINISH``, the **answer** by the same pointer (``<done>`` answers "Done.").

``log pi(a | o)`` is the sum of the log-softmaxes of these choices.

**Training.** :func:`clone` fits the policy to the reference programs of the training
worlds (behaviour cloning: the prior a pretrained LLM brings in the paper). :func:`grpo`
then runs the paper's algorithm: for each task a group of ``G`` rollouts,
``A_i = (r_i - mean(r)) / (std(r) + eps)``, no critic, and the policy-gradient loss
``-mean_i A_i * sum_t log pi(a_t | o_t)``. One update per batch of groups keeps it on
policy, so the clipped importance ratio of the paper is 1 and is not computed; there is
no KL penalty. Rewards: ``"verified"`` is 1 when the task's verifier returns
``"complete"`` on (initial database, final database, answer); ``"proxy"`` is the hackable
one of the ablation, 1 whenever the agent finishes (claims success).

:func:`rollouts` runs a batch of episodes, with the policy batched over episodes at each
step and the databases stepped in Python; :func:`evaluate` gives the true success rate.

Departures from the paper: the agents are a 2-block transformer trained here, not an
LLM, so a behaviour-cloning stage stands in for the LLM's pretraining; one update per
batch (no ratio clipping, no KL); worlds from templates, not from an LLM.
"""

from __future__ import annotations

import dataclasses
import json
import re
import zlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxsci.common.agents import Task
from jaxsci.common.blocks import PreNormBlock
from jaxsci.core.validation import check_int, check_key, check_scalar
from jaxsci.data.sqlworlds import World

__all__ = [
    "REWARDS",
    "Batch",
    "PolicyConfig",
    "ToolPolicy",
    "clone",
    "evaluate",
    "grpo",
    "observe",
    "rollouts",
]

REWARDS = ("verified", "proxy")
DONE, SEP = "<done>", "<sep>"
_WORD = re.compile(r"[A-Za-z0-9<>][A-Za-z0-9_\-<>]*")


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    """The policy's sizes. ``max_tools`` / ``max_args``: the most tools per world and
    arguments per tool it can address; ``name_words``: words per tool or argument name."""

    max_len: int = 48
    n_buckets: int = 2048
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_tools: int = 14
    max_args: int = 5
    name_words: int = 4

    def __post_init__(self):
        for f in dataclasses.fields(self):
            check_int(f.name, getattr(self, f.name), min=1)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads "
                             f"({self.n_heads})")


def _bucket(word: str, n: int) -> int:
    return 1 + zlib.crc32(word.lower().encode()) % (n - 1)  # 0 is padding


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def _name_ids(name: str, c: PolicyConfig) -> list[int]:
    ids = [_bucket(w, c.n_buckets) for w in re.split(r"[_\s]+", name) if w][:c.name_words]
    return ids + [0] * (c.name_words - len(ids))


def _flatten(result: Any) -> list[str]:
    if isinstance(result, dict):
        return [w for k, v in result.items() for w in (k, *_words(str(v)))]
    if isinstance(result, list):  # how many rows, then the rows
        return ["rows", str(len(result)), *(w for r in result for w in _flatten(r))]
    return _words(str(result))


class Observation(NamedTuple):
    """One step's input: ``words`` (the texts, for copying) and the arrays the policy
    reads (token buckets, segment ids, a validity mask, each ``(max_len,)``)."""

    words: list[str]
    tokens: np.ndarray
    segments: np.ndarray


def observe(task: Task, result: Any, step: int, c: PolicyConfig) -> Observation:
    """The observation of ``task`` after a tool ``result`` (``None`` before any call; an
    exception object for a failed call) at ``step``."""
    if result is None:
        tail: list[str] = []
    elif isinstance(result, Exception):
        tail = ["error"]
    else:
        try:
            tail = _flatten(json.loads(result)) if isinstance(result, str) else \
                _flatten(result)
        except ValueError:
            tail = _words(str(result))
    words = [DONE, f"<step{step}>", *_words(task.prompt), SEP, *tail][:c.max_len]
    seg = [0, 0] + [1] * (len(words) - 2)
    if SEP in words:
        seg[words.index(SEP) + 1:] = [2] * (len(words) - words.index(SEP) - 1)
    tok = np.zeros(c.max_len, np.int32)
    tok[:len(words)] = [_bucket(w, c.n_buckets) for w in words]
    sg = np.zeros(c.max_len, np.int32)
    sg[:len(words)] = seg
    return Observation(words, tok, sg)


def _tool_arrays(world: World, c: PolicyConfig):
    tools = world.tools
    if len(tools) > c.max_tools:
        raise ValueError(f"world {world.name!r} has {len(tools)} tools, more than "
                         f"max_tools={c.max_tools}")
    names = np.zeros((c.max_tools, c.name_words), np.int32)
    args = np.zeros((c.max_tools, c.max_args, c.name_words), np.int32)
    amask = np.zeros((c.max_tools, c.max_args), bool)
    for j, t in enumerate(tools):
        names[j] = _name_ids(t.name, c)
        props = list(t.json_schema.get("properties", {}))
        if len(props) > c.max_args:
            raise ValueError(f"tool {t.name!r} has {len(props)} arguments, more than "
                             f"max_args={c.max_args}")
        for a, p in enumerate(props):
            args[j, a] = _name_ids(p, c)
            amask[j, a] = True
    tmask = np.zeros(c.max_tools + 1, bool)
    tmask[:len(tools)] = True
    tmask[-1] = True  # FINISH
    return names, args, amask, tmask


class ToolPolicy(eqx.Module):
    """The pointer-copy tool policy (see the module docstring). ``ToolPolicy(key,
    PolicyConfig())``; :meth:`logits` gives the tool, argument and answer logits."""

    embed: jax.Array
    segments: jax.Array
    positions: jax.Array
    blocks: tuple[PreNormBlock, ...]
    norm: eqx.nn.LayerNorm
    q_tool: eqx.nn.Linear
    k_tool: eqx.nn.Linear
    finish: jax.Array
    q_arg: eqx.nn.Linear
    q_ans: eqx.nn.Linear

    def __init__(self, key, config: PolicyConfig = PolicyConfig()):
        c = config
        ks = jax.random.split(check_key("key", key), 8 + c.n_layers)
        d, s = c.d_model, 0.02
        self.embed = s * jax.random.normal(ks[0], (c.n_buckets, d))
        self.segments = s * jax.random.normal(ks[1], (3, d))
        self.positions = s * jax.random.normal(ks[2], (c.max_len, d))
        self.blocks = tuple(PreNormBlock(ks[8 + i], d, c.n_heads, 2 * d) for i in range(c.n_layers))
        self.norm = eqx.nn.LayerNorm(d)
        self.q_tool = eqx.nn.Linear(d, d, key=ks[3])
        self.k_tool = eqx.nn.Linear(d, d, key=ks[4])
        self.finish = s * jax.random.normal(ks[5], (d,))
        self.q_arg = eqx.nn.Linear(2 * d, d, key=ks[6])
        self.q_ans = eqx.nn.Linear(d, d, key=ks[7])

    def _names(self, ids):
        m = (ids > 0)[..., None]
        return (self.embed[ids] * m).sum(-2) / jnp.maximum(m.sum(-2), 1)

    def logits(self, tokens, segments, tool_names, arg_names, tool_mask, tool):
        """``(tool (max_tools + 1,), args (max_args, max_len), answer (max_len,))``
        logits for one observation; ``tool``: the chosen tool whose arguments are asked
        (an index; ``max_tools`` is FINISH)."""
        valid = tokens > 0
        x = self.embed[tokens] + self.segments[segments] + self.positions
        for b in self.blocks:
            x = b(x, valid)
        h = jax.vmap(self.norm)(x)
        pooled = (h * valid[:, None]).sum(0) / jnp.maximum(valid.sum(), 1)
        keys = jax.vmap(self.k_tool)(self._names(tool_names))
        keys = jnp.concatenate([keys, self.finish[None]], 0)
        lt = jnp.where(tool_mask, keys @ self.q_tool(pooled), -1e9)
        an = self._names(arg_names[jnp.minimum(tool, tool_names.shape[0] - 1)])
        qa = jax.vmap(lambda e: self.q_arg(jnp.concatenate([pooled, e])))(an)
        la = jnp.where(valid[None, :], qa @ h.T / jnp.sqrt(h.shape[-1]), -1e9)
        lans = jnp.where(valid, h @ self.q_ans(pooled) / jnp.sqrt(h.shape[-1]), -1e9)
        return lt, la, lans


class Batch(NamedTuple):
    """Steps of many episodes, as arrays (leading axis: steps), for :func:`_logp`."""

    tokens: np.ndarray
    segments: np.ndarray
    tool_names: np.ndarray
    arg_names: np.ndarray
    arg_mask: np.ndarray
    tool_mask: np.ndarray
    tool: np.ndarray  # chosen tool (max_tools: FINISH)
    args: np.ndarray  # chosen positions (max_args,), -1 where unused
    answer: np.ndarray  # chosen answer position (FINISH), -1 otherwise


def _step_logp(policy, tokens, segments, names, arg_names, arg_mask, tool_mask, tool, args,
               answer):
    lt, la, lans = policy.logits(tokens, segments, names, arg_names, tool_mask, tool)
    lp = jax.nn.log_softmax(lt)[tool]
    la = jax.nn.log_softmax(la, -1)
    used = (args >= 0) & arg_mask[jnp.minimum(tool, names.shape[0] - 1)]
    lp += jnp.sum(jnp.where(used, jnp.take_along_axis(la, jnp.maximum(args, 0)[:, None],
                                                      1)[:, 0], 0.0))
    return lp + jnp.where(answer >= 0, jax.nn.log_softmax(lans)[jnp.maximum(answer, 0)], 0.0)


def _logp(policy, b: Batch):
    return jax.vmap(_step_logp, in_axes=(None, *([0] * 9)))(policy, *b)


@eqx.filter_jit
def _forward(policy, tokens, segments, names, arg_names, tool_mask):
    def one(t, s, n, a, m):
        lt, _, lans = policy.logits(t, s, n, a, m, 0)
        return lt, lans

    return jax.vmap(one)(tokens, segments, names, arg_names, tool_mask)


@eqx.filter_jit
def _arg_logits(policy, tokens, segments, names, arg_names, tool_mask, tool):
    return jax.vmap(lambda t, s, n, a, m, j: policy.logits(t, s, n, a, m, j)[1])(
        tokens, segments, names, arg_names, tool_mask, tool)


# ----------------------------------------------------------------- episodes


def _value(word: str, kind: str):
    if kind == "integer":
        return int(word) if re.fullmatch(r"-?\d+", word) else word
    return word


def _sample(rng: np.random.Generator, logits: np.ndarray, greedy: bool) -> int:
    z = logits.astype(np.float64)
    if greedy:
        return int(np.argmax(z))
    p = np.exp(z - z.max())
    return int(rng.choice(len(p), p=p / p.sum()))


class Episode(NamedTuple):
    """One rollout: its steps (a :class:`Batch` row per step), whether the verifier
    accepted it, whether the agent finished, and its answer."""

    steps: list[tuple]
    success: bool
    finished: bool
    answer: str | None


def _pad_rows(x: np.ndarray) -> np.ndarray:
    """``x`` with copies of its first row appended up to a power-of-two number of rows."""
    n = len(x)
    b = 1 << max(0, n - 1).bit_length()
    return x if b == n else np.concatenate([x, np.repeat(x[:1], b - n, axis=0)])


def rollouts(policy: ToolPolicy, config: PolicyConfig, jobs: Sequence[tuple[World, Task]],
             *, seed: int = 0, max_steps: int = 5, greedy: bool = False) -> list[Episode]:
    """Run one episode per ``(world, task)`` job, all in lockstep: at each step one batched
    policy pass over the episodes still running, then their tool calls in Python.

    Returns:
      one :class:`Episode` per job, in order.
    """
    c = config
    max_steps = check_int("max_steps", max_steps, min=1)
    rng = np.random.default_rng(seed)
    envs = [w.env() for w, _ in jobs]
    arrays = {w.name: _tool_arrays(w, c) for w, _ in jobs}
    for env, (_, t) in zip(envs, jobs, strict=True):
        env.reset(t)
    results: list[Any] = [None] * len(jobs)
    steps: list[list[tuple]] = [[] for _ in jobs]
    answer: list[str | None] = [None] * len(jobs)
    done = [False] * len(jobs)
    n = len(jobs)
    for step in range(max_steps):
        live = [i for i in range(n) if not done[i]]
        if not live:
            break
        obs = [observe(jobs[i][1], results[i], step, c) for i in live]
        ta = [arrays[jobs[i][0].name] for i in live]
        last = step == max_steps - 1
        tmask = np.stack([a[3] for a in ta])
        args_in = (np.stack([o.tokens for o in obs]), np.stack([o.segments for o in obs]),
                   np.stack([a[0] for a in ta]), np.stack([a[1] for a in ta]), tmask)
        # The live episodes padded to a power-of-two batch (copies of the first, dropped):
        # a handful of compiled programs instead of one per number of live episodes.
        args_in = tuple(_pad_rows(x) for x in args_in)
        lt, lans = (np.asarray(x) for x in _forward(policy, *args_in))
        tools = np.asarray([_sample(rng, lt[k], greedy) for k in range(len(live))])
        la = np.asarray(_arg_logits(policy, *args_in, jnp.asarray(_pad_rows(tools))))
        for k, i in enumerate(live):
            world, task = jobs[i]
            o, tool = obs[k], int(tools[k])
            pos = -np.ones(c.max_args, np.int32)
            ans = -1
            if tool == c.max_tools:  # FINISH
                ans = _sample(rng, lans[k], greedy)
                word = o.words[ans] if ans < len(o.words) else DONE
                answer[i] = "Done." if word == DONE else word
                done[i] = True
            else:
                t = world.tools[tool]
                props = t.json_schema.get("properties", {})
                call = {}
                for a, (p, spec) in enumerate(props.items()):
                    pos[a] = _sample(rng, la[k, a], greedy)
                    w = o.words[pos[a]] if pos[a] < len(o.words) else ""
                    call[p] = _value(w, spec.get("type", "string"))
                try:
                    results[i] = envs[i].call(t.name, call)
                except Exception as exc:  # noqa: BLE001  (the agent reads that it failed)
                    results[i] = exc
                done[i] = last
            steps[i].append((o.tokens, o.segments, *ta[k][:3], ta[k][3], tool, pos, ans))
    out = []
    for i, env in enumerate(envs):
        finished = answer[i] is not None
        ok = finished and env.finish(answer[i]) == "complete"
        env.close_episode()
        out.append(Episode(steps[i], ok, finished, answer[i]))
    return out


def _batch(rows: Sequence[tuple]) -> Batch:
    return Batch(*(np.stack([r[j] for r in rows]) for j in range(9)))


def evaluate(policy: ToolPolicy, config: PolicyConfig, jobs, *, max_steps: int = 5,
             seed: int = 0, greedy: bool = True) -> float:
    """The share of ``jobs`` the policy solves (the verifier's verdict), greedy by default."""
    eps = rollouts(policy, config, jobs, seed=seed, max_steps=max_steps, greedy=greedy)
    return float(np.mean([e.success for e in eps]))


# ----------------------------------------------------------------- behaviour cloning


def _locate(words: list[str], value, key: str | None = None) -> int:
    """The position of ``value`` in ``words``: right after the word ``key`` if it is
    there (an id copied from the field of the same name), else its first occurrence."""
    target = str(value)
    hits = [i for i, w in enumerate(words) if w == target]
    keyed = [i for i in hits if key is not None and i > 0 and words[i - 1] == key]
    return (keyed or hits or [-1])[0]


def demonstrations(config: PolicyConfig, jobs: Sequence[tuple[World, Task]]) -> Batch:
    """The reference programs of ``jobs`` as teacher-forced steps (each argument and
    answer pointed at its first occurrence in the observation; a program whose value is
    nowhere to copy from is skipped)."""
    c = config
    rows = []
    for world, task in jobs:
        env = world.env()
        env.reset(task)
        ta = _tool_arrays(world, c)
        names = [t.name for t in world.tools]
        result, prog, ok = None, [], True
        for s, call in enumerate(task.data["reference"]):
            o = observe(task, result, s, c)
            pos = -np.ones(c.max_args, np.int32)
            props = list(world.tools[names.index(call.name)].json_schema["properties"])
            for a, p in enumerate(props):
                pos[a] = _locate(o.words, call.arguments[p], p)
                ok &= pos[a] >= 0
            prog.append((o.tokens, o.segments, *ta[:3], ta[3], names.index(call.name), pos,
                         -1))
            result = env.call(call.name, dict(call.arguments))
        o = observe(task, result, len(task.data["reference"]), c)
        ans = task.data["answer"]
        at = 0 if ans == "Done." else _locate(o.words, ans)
        ok &= at >= 0
        prog.append((o.tokens, o.segments, *ta[:3], ta[3], c.max_tools,
                     -np.ones(c.max_args, np.int32), at))
        env.close_episode()
        if ok:
            rows += prog
    if not rows:
        raise ValueError("no demonstration could be built from the jobs")
    return _batch(rows)


def clone(key, config: PolicyConfig, jobs, *, steps: int = 300, learning_rate: float = 3e-3,
          policy: ToolPolicy | None = None) -> tuple[ToolPolicy, np.ndarray]:
    """Behaviour cloning on the reference programs of ``jobs`` (full batch, Adam).

    Returns:
      ``(policy, losses)``.
    """
    steps = check_int("steps", steps, min=1)
    check_scalar("learning_rate", learning_rate, gt=0.0)
    b = jax.tree.map(jnp.asarray, demonstrations(config, jobs))
    policy = ToolPolicy(key, config) if policy is None else policy
    return _clone(policy, b, float(learning_rate), steps)


@eqx.filter_jit  # the learning rate and step count are static: one program per setting
def _clone(policy, b, learning_rate, steps):
    opt = optax.adam(learning_rate)
    params, static = eqx.partition(policy, eqx.is_inexact_array)

    def body(carry, _):
        p, s = carry
        loss, g = jax.value_and_grad(lambda p: -_logp(eqx.combine(p, static), b).mean())(p)
        u, s = opt.update(g, s, p)
        return (optax.apply_updates(p, u), s), loss

    (params, _), losses = jax.lax.scan(body, (params, opt.init(params)), None, length=steps)
    return eqx.combine(params, static), losses


# ----------------------------------------------------------------- GRPO


def grpo(key, config: PolicyConfig, policy: ToolPolicy, jobs, *, iterations: int = 40,
         group: int = 8, tasks_per_batch: int = 8, reward: str = "verified",
         learning_rate: float = 1e-3, max_steps: int = 5, progress=None
         ) -> tuple[ToolPolicy, dict[str, np.ndarray]]:
    """GRPO (see the module docstring) on ``jobs``.

    Args:
      key: PRNG key (which tasks each batch draws, and the sampling seeds).
      config: the policy's :class:`PolicyConfig`.
      policy: the starting policy.
      jobs: ``(world, task)`` pairs to train on.
      iterations: updates; each draws ``tasks_per_batch`` tasks and ``group`` rollouts
        of each.
      reward: ``"verified"`` (the task's verifier) or ``"proxy"`` (1 whenever the agent
        finishes: it claims success).
      learning_rate: Adam's.
      max_steps: the episode cap (no answer at the cap: reward 0 under both rewards).
      progress: a tqdm-like bar updated once per iteration, or ``None``.

    Returns:
      ``(policy, history)``: ``history["reward"]`` (mean reward per iteration) and
      ``history["success"]`` (mean true success per iteration).
    """
    if reward not in REWARDS:
        raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
    iterations = check_int("iterations", iterations, min=1)
    group = check_int("group", group, min=2)
    tasks_per_batch = check_int("tasks_per_batch", tasks_per_batch, min=1)
    check_scalar("learning_rate", learning_rate, gt=0.0)
    if not jobs:
        raise ValueError("jobs must hold at least one (world, task) pair")
    key = check_key("key", key)
    params, static = eqx.partition(policy, eqx.is_inexact_array)
    state = optax.adam(learning_rate).init(params)
    rng = np.random.default_rng(int(jax.random.randint(key, (), 0, 2**31 - 1)))
    hist = {"reward": [], "success": []}
    for _ in range(iterations):
        pick = rng.choice(len(jobs), size=min(tasks_per_batch, len(jobs)), replace=False)
        batch_jobs = [jobs[j] for j in pick for _ in range(group)]
        eps = rollouts(eqx.combine(params, static), config, batch_jobs,
                       seed=int(rng.integers(2**31)), max_steps=max_steps)
        r = np.asarray([float(e.success if reward == "verified" else e.finished)
                        for e in eps]).reshape(len(pick), group)
        adv = (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-6)
        rows, weights = [], []
        for e, a in zip(eps, adv.reshape(-1), strict=True):
            rows += e.steps
            weights += [a] * len(e.steps)
        hist["reward"].append(float(r.mean()))
        hist["success"].append(float(np.mean([e.success for e in eps])))
        if np.any(adv != 0):
            b = _pad(_batch(rows), len(batch_jobs) * max_steps)
            w = np.zeros(len(b.tool), np.float32)
            w[:len(weights)] = weights
            params, state = _grpo_step(params, static, state, jax.tree.map(jnp.asarray, b),
                                       jnp.asarray(w), float(learning_rate),
                                       len(batch_jobs))
        if progress is not None:
            progress.update(1)
    return eqx.combine(params, static), {k: np.asarray(v) for k, v in hist.items()}


def _pad(b: Batch, n: int) -> Batch:
    """Pad the steps to ``n`` rows (one compiled update for every batch)."""
    k = len(b.tool)
    return Batch(*(np.concatenate([x, np.repeat(x[:1], n - k, 0)]) if n > k else x[:n]
                   for x in b))


@eqx.filter_jit
def _grpo_step(params, static, state, b, w, learning_rate, n_episodes):
    opt = optax.adam(learning_rate)

    def loss(p):
        return -(w * _logp(eqx.combine(p, static), b)).sum() / n_episodes

    g = jax.grad(loss)(params)
    u, state = opt.update(g, state, params)
    return optax.apply_updates(params, u), state
