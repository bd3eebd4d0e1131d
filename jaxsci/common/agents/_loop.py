r"""The agent loop: a chat model calls tools step by step under a :class:`RunPolicy`.

:func:`run_agent` gives the model the conversation and the tools; each **step** is one
model decision (an :class:`Actor` call) and, when it calls tools, their results appended
to the conversation. A step without a tool call is the final answer. The policy caps the
run:

* ``max_steps``: the most model decisions of the run, the final answer's included, so a
  run never makes more than ``max_steps`` decisions;
* ``token_budget``: the most prompt + completion tokens over the run's calls;
* ``time_budget``: the most wall seconds.

When a cap is reached without an answer, ``on_cap`` decides:

* ``"final_answer"``: the last allowed step is given with the tools disabled and a "no
  steps left" notice (:data:`NO_STEPS_LEFT`), and the model answers (what users of agent
  frameworks ask for; LangChain's ``early_stopping_method="generate"``). With
  ``max_steps`` reached this is step ``max_steps`` itself; a token or time budget spent
  earlier gives it one step, within ``max_steps``.
* ``"handoff"``: the conversation goes to a :class:`HumanQueue` (JSONL or SQLite) as an
  **intervention**; the result's ``status`` is ``"handoff"``.
* ``"raise"``: :class:`StepCapReached` (what most frameworks do by default).

So every run ends in an answer or a handoff, or raises when asked to.

**Actors** choose each step. :class:`ChatActor` asks ``model.chat`` with the tools (an
in-process :class:`~jaxsci.common.lm.chat.LocalChat` decodes the call under the tool
grammar; a server uses its own tool support). :class:`ScoreActor` lets a small model act
by **option scoring**: a ``propose`` function lists the candidate actions as text (tool
calls with their arguments filled in, and answers), the model scores each
(``model.score``), and the actor takes the best one at ``temperature == 0`` or samples
``softmax(log p / temperature)`` keyed by the step's seed. Both work unchanged against
an in-process model and an OpenAI-compatible server.

Every step is traced (:class:`~jaxsci.common.agents.Tracer`): ``run`` (root),
``llm_call`` or ``score``, ``tool_call``, ``tool_result``, ``handoff``, ``answer``.

>>> from jaxsci.common.lm.chat import ChatResult, Usage
>>> class Parrot:  # a stand-in ChatModel for the example: it answers at once
...     model_id = "parrot"
...     def chat(self, messages, **kw):
...         return [ChatResult("42", "stop", Usage(5, 1))]
...     def score(self, messages, options):
...         return [0.0] * len(options)
>>> r = run_agent(Parrot(), [{"role": "user", "content": "6 x 7?"}], (), RunPolicy(3))
>>> r.status, r.answer, r.steps
('answer', '42', 1)
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from jaxsci.common.agents._traces import Tracer
from jaxsci.common.lm.tools import Tool, ToolCall, as_tools, make_tool_call, run_tool_calls

__all__ = [
    "ON_CAP",
    "NO_STEPS_LEFT",
    "RunPolicy",
    "StepCapReached",
    "HumanQueue",
    "Action",
    "Option",
    "ChatActor",
    "ScoreActor",
    "AgentResult",
    "run_agent",
]

ON_CAP = ("handoff", "final_answer", "raise")
NO_STEPS_LEFT = ("No steps left: you cannot call tools any more. Give your final answer "
                 "now, from what you know.")


def _positive(name: str, value, kind, allow_none: bool):
    if value is None and allow_none:
        return
    ok = isinstance(value, kind) and not isinstance(value, bool) and value > 0
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and \
            math.isfinite(value) and value > 0
    if not ok:
        what = "an int" if kind is int else "a number"
        raise ValueError(f"RunPolicy: {name} must be {what} > 0"
                         f"{' or None' if allow_none else ''}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class RunPolicy:
    """The caps of an agent run and what happens at them (see the module docstring).

    Attributes:
      max_steps: the most model decisions, ``>= 1``. The survey of production agents
        (Measuring Agents in Production, ICML 2026) finds 68% run at most 10 steps before
        a human intervenes; 10 is the default.
      on_cap: ``"handoff"`` | ``"final_answer"`` | ``"raise"``.
      token_budget: the most prompt + completion tokens, or ``None``.
      time_budget: the most wall seconds, or ``None``.
    """

    max_steps: int = 10
    on_cap: str = "handoff"
    token_budget: int | None = None
    time_budget: float | None = None

    def __post_init__(self):
        _positive("max_steps", self.max_steps, int, False)
        if self.on_cap not in ON_CAP:
            raise ValueError(f"RunPolicy: on_cap must be one of {ON_CAP}, got {self.on_cap!r}")
        _positive("token_budget", self.token_budget, int, True)
        _positive("time_budget", self.time_budget, float, True)


class StepCapReached(RuntimeError):
    """A run reached a cap with ``on_cap="raise"``.

    Attributes:
      reason: ``"max_steps"``, ``"token_budget"`` or ``"time_budget"``.
      messages: the conversation so far.
    """

    def __init__(self, message: str, reason: str, messages: list[dict[str, Any]]):
        super().__init__(message)
        self.reason, self.messages = reason, messages


# ----------------------------------------------------------------- the human queue


class HumanQueue:
    """Where handed-off runs wait for a person: a JSONL file, a SQLite file, or memory.

    Args:
      path: ``None`` (in memory), a ``.jsonl`` file, or a ``.db`` / ``.sqlite`` file
        (table ``interventions(id, time, run_id, reason, payload)``).

    Each :meth:`put` records one intervention and returns its id (``"hq-<n>"``).
    """

    def __init__(self, path=None):
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._items: list[dict[str, Any]] = []
        self._sqlite = self.path is not None and self.path.suffix in (".db", ".sqlite")
        if self.path is not None and not self._sqlite and self.path.suffix != ".jsonl":
            raise ValueError(f"HumanQueue: path must end in .jsonl, .db or .sqlite, got "
                             f"{str(self.path)!r}")
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._sqlite:
            with sqlite3.connect(self.path) as db:
                db.execute("CREATE TABLE IF NOT EXISTS interventions (id TEXT PRIMARY KEY, "
                           "time TEXT, run_id TEXT, reason TEXT, payload TEXT)")

    def put(self, run_id: str, reason: str, messages: Sequence[Mapping[str, Any]],
            **data) -> str:
        """Record an intervention; return its id."""
        with self._lock:
            n = len(self) + 1
            item = {"id": f"hq-{n}", "time": datetime.datetime.now(datetime.UTC).isoformat(),
                    "run_id": run_id, "reason": reason, "messages": list(messages), **data}
            text = json.dumps(item, ensure_ascii=False, default=str)
            if self.path is None:
                self._items.append(json.loads(text))
            elif self._sqlite:
                with sqlite3.connect(self.path) as db:
                    db.execute("INSERT INTO interventions VALUES (?, ?, ?, ?, ?)",
                               (item["id"], item["time"], run_id, reason, text))
            else:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(text + "\n")
        return item["id"]

    def items(self) -> list[dict[str, Any]]:
        """The interventions recorded, in order."""
        if self.path is None:
            return list(self._items)
        if not self.path.exists():
            return []
        if self._sqlite:
            with sqlite3.connect(self.path) as db:
                rows = db.execute("SELECT payload FROM interventions ORDER BY rowid").fetchall()
            return [json.loads(r[0]) for r in rows]
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def __len__(self) -> int:
        if self.path is None:
            return len(self._items)
        if self._sqlite:
            with sqlite3.connect(self.path) as db:
                return db.execute("SELECT COUNT(*) FROM interventions").fetchone()[0]
        return len(self.items())

    def __repr__(self) -> str:
        return f"HumanQueue({str(self.path) if self.path else None!r}, {len(self)} items)"


# ----------------------------------------------------------------- actors


class Action(NamedTuple):
    """One decision of an actor.

    Attributes:
      content: the reply text (the answer when there are no tool calls).
      tool_calls: the :class:`~jaxsci.common.lm.tools.ToolCall` values to run.
      kind: the trace kind of the model call: ``"llm_call"`` or ``"score"``.
      usage: token counts of the call (an object with ``prompt_tokens`` and
        ``completion_tokens``), or ``None``.
      data: extra fields for the trace (the options and their scores).
    """

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    kind: str = "llm_call"
    usage: Any = None
    data: dict[str, Any] = {}


@dataclasses.dataclass(frozen=True)
class ChatActor:
    """Decides by ``model.chat`` with the tools (the model writes its calls).

    Attributes:
      temperature, max_tokens, tool_choice, parallel_tool_calls: passed to ``chat``
        (``tool_choice`` only when tools are offered).
    """

    temperature: float = 0.0
    max_tokens: int = 128
    tool_choice: Any = "auto"
    parallel_tool_calls: bool = False

    def act(self, model, messages, tools: tuple[Tool, ...], *, seed: int | None) -> Action:
        kwargs: dict[str, Any] = dict(temperature=self.temperature, max_tokens=self.max_tokens)
        if seed is not None:
            kwargs["seed"] = seed
        if tools:
            kwargs.update(tools=list(tools), tool_choice=self.tool_choice,
                          parallel_tool_calls=self.parallel_tool_calls)
        r = model.chat(messages, **kwargs)[0]
        return Action(r.content, tuple(r.tool_calls), "llm_call", r.usage,
                      {"finish_reason": r.finish_reason})


class Option(NamedTuple):
    """A candidate action of :class:`ScoreActor`.

    Attributes:
      text: what the model scores as the start of its reply.
      name: the tool to call, or ``None`` for a final answer.
      arguments: the call's arguments (ignored for an answer).
      answer: the final answer this option gives (``None`` for a call: then ``text``).
    """

    text: str
    name: str | None = None
    arguments: Mapping[str, Any] = {}
    answer: str | None = None


@dataclasses.dataclass(frozen=True)
class ScoreActor:
    """Decides by scoring candidate actions with ``model.score`` (option scoring).

    Attributes:
      propose: ``propose(messages, tools) -> [Option, ...]``, the candidates of this step
        (called with ``tools=()`` for the tool-free final step: answers only).
      temperature: 0 takes the best option; above 0 samples ``softmax(logp / T)`` with a
        NumPy generator seeded by the step's seed.
    """

    propose: Callable[[list[dict[str, Any]], tuple[Tool, ...]], Sequence[Option]]
    temperature: float = 0.0

    def __post_init__(self):
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, int | float) or not t >= 0:
            raise ValueError(f"ScoreActor: temperature must be a number >= 0, got {t!r}")

    def act(self, model, messages, tools: tuple[Tool, ...], *, seed: int | None) -> Action:
        options = list(self.propose(messages, tools))
        if not options or not all(isinstance(o, Option) for o in options):
            raise ValueError(f"ScoreActor: propose must return a non-empty list of Option, "
                             f"got {options!r}"[:200])
        logp = np.asarray(model.score(messages, [o.text for o in options]), np.float64)
        i = choose(logp, self.temperature, seed)
        o = options[i]
        data = {"options": [x.text for x in options],
                "scores": [float(v) if math.isfinite(v) else None for v in logp],
                "chosen": i}
        if o.name is None:
            return Action(o.answer if o.answer is not None else o.text, (), "score", None, data)
        call = make_tool_call(f"call_{len(messages)}_{i}", o.name,
                              dict(o.arguments), tools)
        return Action("", (call,), "score", None, data)


def choose(logp, temperature: float, seed: int | None) -> int:
    """The index of the chosen option: argmax at ``temperature == 0`` (first on ties), else
    a sample of ``softmax(logp / temperature)`` from ``np.random.default_rng(seed)``."""
    logp = np.asarray(logp, np.float64)
    if temperature == 0 or not np.isfinite(logp).any():
        return int(np.argmax(np.where(np.isfinite(logp), logp, -np.inf)))
    z = np.where(np.isfinite(logp), logp / temperature, -np.inf)
    p = np.exp(z - z.max())
    p /= p.sum()
    return int(np.random.default_rng(seed).choice(len(p), p=p))


# ----------------------------------------------------------------- the loop


class AgentResult(NamedTuple):
    """How a run ended.

    Attributes:
      status: ``"answer"`` or ``"handoff"``.
      answer: the final answer (``None`` on handoff).
      steps: model decisions made (``<= policy.max_steps``).
      tool_calls: tool calls run.
      cap_hit: whether a cap was reached (a final answer given under the cap counts).
      cap_reason: ``None``, ``"max_steps"``, ``"token_budget"`` or ``"time_budget"``.
      intervention: the :class:`HumanQueue` id of a handoff, else ``None``.
      tokens: prompt + completion tokens reported by the model calls.
      messages: the whole conversation.
      run_id: the trace's run id.
    """

    status: str
    answer: str | None
    steps: int
    tool_calls: int
    cap_hit: bool
    cap_reason: str | None
    intervention: str | None
    tokens: int
    messages: list[dict[str, Any]]
    run_id: str


def _tokens(usage) -> int:
    if usage is None:
        return 0
    return int(getattr(usage, "prompt_tokens", 0) or 0) + \
        int(getattr(usage, "completion_tokens", 0) or 0)


def _hits(model) -> int | None:
    stats = getattr(type(model), "stats", None)
    if not callable(stats):
        return None
    try:
        return int(model.stats()["hits"])
    except Exception:  # noqa: BLE001  (a cache that cannot count just reports no hit)
        return None


def run_agent(model, messages: Sequence[Mapping[str, Any]], tools=(),
              policy: RunPolicy | None = None, *, actor=None, seed: int | None = None,
              trace: Tracer | str | os.PathLike | None = None, queue: HumanQueue | None = None
              ) -> AgentResult:
    """Run an agent until it answers or a cap of ``policy`` is reached.

    Args:
      model: a :class:`~jaxsci.common.lm.chat.ChatModel`.
      messages: the conversation to start from (system and user messages; a message may
        carry ``"provenance"`` for the trace).
      tools: :class:`~jaxsci.common.lm.tools.Tool` values with ``fn`` (or OpenAI dicts).
      policy: the caps (default ``RunPolicy()``).
      actor: :class:`ChatActor` (default) or :class:`ScoreActor`, or any object with
        ``act(model, messages, tools, *, seed) -> Action``.
      seed: step ``s`` decides with seed ``seed + s`` (``None``: unseeded).
      trace: a :class:`~jaxsci.common.agents.Tracer`, a JSONL path, or ``None``.
      queue: where handoffs go (default: a new in-memory :class:`HumanQueue`).

    Returns:
      :class:`AgentResult`.

    Raises:
      StepCapReached: at a cap with ``on_cap="raise"``.
      ValueError, TypeError: a bad argument, named.
    """
    policy = RunPolicy() if policy is None else policy
    if not isinstance(policy, RunPolicy):
        raise TypeError(f"policy must be a RunPolicy, got {type(policy).__name__}")
    if not (callable(getattr(model, "chat", None)) and callable(getattr(model, "score", None))):
        raise TypeError(f"model must be a ChatModel (with chat and score), got "
                        f"{type(model).__name__}")
    if isinstance(messages, str | Mapping) or not isinstance(messages, Sequence) or \
            not messages:
        raise ValueError("messages must be a non-empty list of chat messages, got "
                         f"{messages!r}"[:200])
    tools = as_tools(tools)
    actor = ChatActor() if actor is None else actor
    if not callable(getattr(actor, "act", None)):
        raise TypeError(f"actor must have act(model, messages, tools, *, seed), got "
                        f"{type(actor).__name__}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed must be an int or None, got {seed!r}")
    if trace is None or isinstance(trace, str | os.PathLike):
        trace = Tracer(trace, seed=seed, model=model)
    elif not isinstance(trace, Tracer):
        raise TypeError(f"trace must be a Tracer, a path or None, got {type(trace).__name__}")
    queue = HumanQueue() if queue is None else queue

    msgs: list[dict[str, Any]] = [dict(m) for m in messages]
    root = trace.span("run", messages=msgs, data={
        "policy": dataclasses.asdict(policy), "tools": [t.name for t in tools],
        "actor": type(actor).__name__})
    start = time.monotonic()
    tokens = steps = calls = 0

    def over_budget() -> str | None:
        if policy.token_budget is not None and tokens >= policy.token_budget:
            return "token_budget"
        if policy.time_budget is not None and time.monotonic() - start >= policy.time_budget:
            return "time_budget"
        return None

    def decide(step_tools, step_msgs) -> tuple[Action, str]:
        nonlocal tokens, steps
        before = _hits(model)
        t0 = time.perf_counter()
        action = actor.act(model, step_msgs, step_tools,
                           seed=None if seed is None else seed + steps)
        latency = time.perf_counter() - t0
        after = _hits(model)
        steps += 1
        tokens += _tokens(action.usage)
        span = trace.span(action.kind, parent=root, messages=step_msgs, latency_s=latency,
                          usage=action.usage, model=True,
                          cache_hit=None if before is None or after is None else after > before,
                          data={"step": steps, "content": action.content,
                                "tool_calls": [c.to_openai() for c in action.tool_calls],
                                **dict(action.data)})
        return action, span

    def finish(answer: str, span: str, cap_reason: str | None) -> AgentResult:
        trace.span("answer", parent=span, data={"answer": answer, "steps": steps})
        return AgentResult("answer", answer, steps, calls, cap_reason is not None, cap_reason,
                           None, tokens, msgs, trace.run_id)

    reason = None
    while True:
        reason = over_budget() or ("max_steps" if steps >= policy.max_steps else None)
        last = steps == policy.max_steps - 1
        if reason is not None or (last and tools and policy.on_cap == "final_answer"):
            break
        action, span = decide(tools, msgs)
        if not action.tool_calls:
            msgs.append({"role": "assistant", "content": action.content})
            return finish(action.content, span, None)
        msgs.append({"role": "assistant", "content": action.content,
                     "tool_calls": [c.to_openai() for c in action.tool_calls]})
        for call in action.tool_calls:
            cspan = trace.span("tool_call", parent=span, data={
                "id": call.id, "name": call.name, "arguments": call.arguments,
                "error": call.error})
            t0 = time.perf_counter()
            if call.error is not None:
                # The model reads why its call failed; the call's id (which differs between
                # backends) stays out of the text, so a run is the same in-process and
                # over HTTP.
                result = {"role": "tool", "tool_call_id": call.id,
                          "content": f"error: {call.error}"}
            else:
                (result,) = run_tool_calls([call], tools, errors="report")
            trace.span("tool_result", parent=cspan, messages=[result],
                       latency_s=time.perf_counter() - t0,
                       data={"id": call.id, "error": result["content"].startswith("error: ")})
            msgs.append(result)
            calls += 1

    reason = reason or "max_steps"
    if policy.on_cap == "final_answer" and steps < policy.max_steps:
        notice = {"role": "user", "content": NO_STEPS_LEFT, "provenance": "system"}
        msgs.append(notice)
        action, span = decide((), msgs)
        msgs.append({"role": "assistant", "content": action.content})
        return finish(action.content, span, reason)
    if policy.on_cap == "raise":
        raise StepCapReached(
            f"the agent reached its cap ({reason}: max_steps={policy.max_steps}, "
            f"token_budget={policy.token_budget}, time_budget={policy.time_budget}) after "
            f"{steps} steps and {calls} tool calls without a final answer "
            f"(RunPolicy.on_cap='raise'; use 'final_answer' or 'handoff' to end it "
            f"otherwise)", reason, msgs)
    hid = queue.put(trace.run_id, reason, msgs, steps=steps, tool_calls=calls)
    trace.span("handoff", parent=root, messages=msgs,
               data={"intervention": hid, "reason": reason, "steps": steps})
    return AgentResult("handoff", None, steps, calls, True, reason, hid, tokens, msgs,
                       trace.run_id)
