r"""Measuring Agents in Production (ICML 2026): workflows vs free agent loops, by reliability.

The paper surveys 306 practitioners and 20 case studies of deployed agents. Its findings
(the paper's numbers, not results of this module): 68% of production agents run at most
10 steps before a human intervenes, 70% prompt off-the-shelf models rather than tuning
them, 74% rely mainly on human evaluation, reliability is the top challenge, and
predefined workflows dominate over open-ended agent loops.

This module measures the mechanism behind the last two findings on small SQLite worlds
(:mod:`jaxsci.data.sqlworlds`), whose tasks need ``L = 1 .. 4`` tool calls:

* **workflow mode** (:func:`workflow_propose`): the tool sequence is fixed by the
  workflow (the task's reference sequence of tools); at each step the model only picks
  the slot values of the next tool among candidates, then picks the final answer;
* **agent mode** (:func:`agent_propose`): at each step the model picks any tool with any
  candidate arguments, or a final answer.

Both run through :func:`~jaxsci.common.agents.run_agent` with a
:class:`~jaxsci.common.agents.ScoreActor` (:func:`run_task`): the candidate actions are
listed **programmatically** (:func:`call_options`, :func:`answer_options`), the model
scores each (``model.score``) and the actor samples ``softmax(log p / T)`` with the
rerun's seed, so every decision is the language model's. A step cap
(:class:`~jaxsci.common.agents.RunPolicy` ``max_steps``, ``on_cap="handoff"``) sends a
run that has not answered to a :class:`~jaxsci.common.agents.HumanQueue`: an
intervention, and a failed task. Reruns of each task give a ``(tasks, reruns)`` success
array; :func:`reliability_table` turns it into pass@1, pass^k and the reliability gap
``pass@1 - pass^k`` per depth and mode.

Departures from the paper: the paper is a survey of large production systems; here a
135M model (SmolLM2-135M-Instruct in-process, or any OpenAI-compatible server) acts by
option scoring over programmatic candidate lists (slot values are the quoted names and
numbers of the request and the typed id fields of earlier tool results; answers are the
values of the last tool result and "Done", written as ``answer(text="...")`` calls so
that their lengths compare with the tool calls'), so it never has to write a call itself.

>>> import numpy as np
>>> s = np.array([[1, 1, 0, 1], [1, 1, 1, 1]], bool)
>>> t = reliability_table({"agent": s}, [1, 2], k=2)["agent"]
>>> t.pass_at_1.tolist(), t.pass_hat_k.tolist()
([0.75, 1.0], [0.5, 1.0])
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxsci.common.agents import (
    HumanQueue,
    Option,
    RunPolicy,
    ScoreActor,
    SQLiteEnv,
    Task,
    pass_at_k,
    pass_hat_k,
    run_agent,
)
from jaxsci.common.lm.tools import Tool
from jaxsci.data.sqlworlds import World

__all__ = [
    "DONE",
    "MODES",
    "Reliability",
    "TaskRun",
    "agent_propose",
    "answer_options",
    "call_options",
    "messages",
    "call_text",
    "reliability_table",
    "run_task",
    "slot_values",
    "system_prompt",
    "workflow_propose",
]

MODES = ("workflow", "agent")
DONE = "Done"
MAX_CALL_OPTIONS = 8  # argument combinations per tool, at most (a product of slots)

Propose = Callable[[list[dict[str, Any]], tuple[Tool, ...]], list[Option]]


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return mode


def _args(tool: Tool) -> dict[str, str]:
    return {k: v.get("type", "string")
            for k, v in tool.json_schema.get("properties", {}).items()}


def system_prompt(world: World) -> str:
    """The system message: the world and its tools as ``name(arg, ...)`` with a description."""
    lines = [f"You operate a {world.name} database with tools. Each step, call one tool "
             f"or give the final answer."]
    lines += [f"- {t.name}({', '.join(_args(t))}): {t.description}" for t in world.tools]
    lines.append("- answer(text): give the final answer")
    return "\n".join(lines)


def messages(world: World, task: Task) -> list[dict[str, str]]:
    """The conversation a run starts from: the system prompt and the task's request."""
    return [{"role": "system", "content": system_prompt(world)},
            {"role": "user", "content": task.prompt}]


# ----------------------------------------------------------------- candidates


def _request(msgs: Sequence[Mapping[str, Any]]) -> str:
    return next((m["content"] for m in msgs if m["role"] == "user"), "")


def _results(msgs: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]]:
    """The JSON records of each successful tool result, in order."""
    out = []
    for m in msgs:
        if m["role"] != "tool":
            continue
        try:
            value = json.loads(m["content"])
        except (TypeError, ValueError):
            continue  # an error message: nothing to read from it
        rows = value if isinstance(value, list) else [value]
        out.append([r for r in rows if isinstance(r, dict)])
    return out


def _unique(values) -> list:
    return list(dict.fromkeys(values))


def slot_values(name: str, kind: str, msgs: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The candidate values of one argument, from the conversation.

    Strings: the phrases quoted in the request (``'Dune'``). Integers: the values of the
    field with the argument's name in earlier tool results (most recent first), then the
    numbers written in the request.
    """
    request = _request(msgs)
    if kind == "string":
        return _unique(re.findall(r"'([^']+)'", request))
    fields = [r[name] for rows in reversed(_results(msgs)) for r in rows
              if isinstance(r.get(name), int) and not isinstance(r.get(name), bool)]
    return _unique(fields + [int(x) for x in re.findall(r"\b\d+\b", request)])


def call_text(name: str, arguments: Mapping[str, Any]) -> str:
    """How a call is shown to the model: ``find_book(title="Dune")``."""
    return f"{name}({', '.join(f'{k}={json.dumps(v)}' for k, v in arguments.items())})"


def call_options(tool: Tool, msgs: Sequence[Mapping[str, Any]]) -> list[Option]:
    """The calls of ``tool`` with every combination of candidate slot values (at most
    :data:`MAX_CALL_OPTIONS`); none when a slot has no candidate."""
    slots = {k: slot_values(k, kind, msgs) for k, kind in _args(tool).items()}
    combos = itertools.islice(itertools.product(*slots.values()), MAX_CALL_OPTIONS)
    return [Option(call_text(tool.name, dict(zip(slots, c, strict=True))), tool.name,
                   dict(zip(slots, c, strict=True))) for c in combos]


def answer_options(msgs: Sequence[Mapping[str, Any]]) -> list[Option]:
    """The final answers offered, written as calls of ``answer(text=...)`` like the tool
    calls (so their lengths compare): :data:`DONE`, and each value of the last successful
    tool result other than its id fields."""
    results = _results(msgs)
    values = [] if not results else [
        str(v) for r in results[-1] for k, v in r.items() if not k.endswith("_id")]
    return [Option(call_text("answer", {"text": v}), answer=v)
            for v in _unique([DONE, *values])]


def _calls_made(msgs: Sequence[Mapping[str, Any]]) -> int:
    return sum(len(m.get("tool_calls") or ()) for m in msgs if m["role"] == "assistant")


def agent_propose(log: list[int] | None = None) -> Propose:
    """The free agent's candidates: every tool with its candidate arguments, and answers.

    Args:
      log: if given, the number of options of each decision is appended to it.

    Returns:
      ``propose(messages, tools) -> [Option, ...]`` for :class:`ScoreActor`.
    """
    def propose(msgs, tools):
        opts = [o for t in tools for o in call_options(t, msgs)] + answer_options(msgs)
        if log is not None:
            log.append(len(opts))
        return opts

    return propose


def workflow_propose(sequence: Sequence[str], log: list[int] | None = None) -> Propose:
    """A predefined workflow's candidates: the next tool of ``sequence`` with its candidate
    slot values, then (or when a slot has no candidate) the answers.

    Args:
      sequence: the tool names the workflow calls, in order.
      log: as in :func:`agent_propose`.

    Returns:
      ``propose(messages, tools) -> [Option, ...]`` for :class:`ScoreActor`.
    """
    sequence = tuple(sequence)

    def propose(msgs, tools):
        step = _calls_made(msgs)
        by_name = {t.name: t for t in tools}
        opts = []
        if step < len(sequence):
            if sequence[step] not in by_name:
                raise ValueError(f"workflow tool {sequence[step]!r} is not among the tools "
                                 f"{list(by_name)}")
            opts = call_options(by_name[sequence[step]], msgs)
        opts = opts or answer_options(msgs)
        if log is not None:
            log.append(len(opts))
        return opts

    return propose


# ----------------------------------------------------------------- one run


class TaskRun(NamedTuple):
    """One run of one task.

    Attributes:
      success: the verifier's verdict was ``"complete"`` (a handoff is a failure).
      steps: model decisions made.
      tool_calls: tool calls run.
      handoff: the run reached the step cap and went to the human queue.
      cap_hit: the run reached the step cap (handed off, or answered in its tool-free
        last step with ``on_cap="final_answer"``).
      answer: the final answer, ``None`` on handoff.
      options: the number of candidates of each decision.
    """

    success: bool
    steps: int
    tool_calls: int
    handoff: bool
    cap_hit: bool
    answer: str | None
    options: tuple[int, ...]


def run_task(model, world: World, task: Task | str, mode: str, *, temperature: float = 0.7,
             seed: int | None = 0, max_steps: int = 10, on_cap: str = "handoff",
             queue: HumanQueue | None = None,
             env: SQLiteEnv | None = None, trace=None) -> TaskRun:
    """Run one task of ``world`` in workflow or agent mode on a chat model.

    Args:
      model: a :class:`~jaxsci.common.lm.chat.ChatModel` (in-process or a server).
      world: the :class:`~jaxsci.data.sqlworlds.World`.
      task: one of its tasks (or its id).
      mode: ``"workflow"`` or ``"agent"``.
      temperature: of the option sampling (``0``: the best option).
      seed: step ``s`` samples with ``seed + s``.
      max_steps: the step cap.
      on_cap: at the cap, ``"handoff"`` (to ``queue``: an intervention, and a failed
        task) or ``"final_answer"`` (one last step without tools, answers only).
      queue: where handoffs go (default: a new in-memory queue).
      env: an environment of ``world`` to reuse (default: a new one).
      trace: a :class:`~jaxsci.common.agents.Tracer`, a JSONL path or ``None``.

    Returns:
      :class:`TaskRun`.
    """
    _check_mode(mode)
    if not isinstance(world, World):
        raise TypeError(f"world must be a World, got {type(world).__name__}")
    env = world.env() if env is None else env
    task = env.reset(task)
    if task is None:
        raise ValueError("task must be a task of the world, got None")
    log: list[int] = []
    propose = (workflow_propose([c.name for c in task.data["reference"]], log)
               if mode == "workflow" else agent_propose(log))
    if on_cap not in ("handoff", "final_answer"):
        raise ValueError(f"on_cap must be 'handoff' or 'final_answer', got {on_cap!r}")
    r = run_agent(model, messages(world, task), env.tools, RunPolicy(max_steps, on_cap),
                  actor=ScoreActor(propose, temperature), seed=seed, queue=queue, trace=trace)
    verdict = env.finish(r.answer) if r.status == "answer" else "others"
    env.close_episode()
    return TaskRun(verdict == "complete", r.steps, r.tool_calls, r.status == "handoff",
                   r.cap_hit, r.answer, tuple(log))


# ----------------------------------------------------------------- reliability


class Reliability(NamedTuple):
    """Reliability of one mode, per depth and over all tasks (:func:`reliability_table`).

    Attributes:
      depths: the distinct depths, ascending.
      pass_at_1, pass_hat_k, gap: per depth, means over its tasks (``gap = pass_at_1 -
        pass_hat_k``).
      overall_pass_at_1, overall_pass_hat_k, overall_gap: means over all tasks.
    """

    depths: np.ndarray
    pass_at_1: np.ndarray
    pass_hat_k: np.ndarray
    gap: np.ndarray
    overall_pass_at_1: float
    overall_pass_hat_k: float
    overall_gap: float


def reliability_table(successes: Mapping[str, Any], depths, k: int) -> dict[str, Reliability]:
    """pass@1, pass^k and the gap per depth and mode.

    Args:
      successes: mode (``"workflow"`` | ``"agent"``) -> booleans ``(tasks, reruns)``.
      depths: ``(tasks,)``, the depth of each task (the same tasks in every mode).
      k: reruns drawn for pass^k, ``1 <= k <= reruns``.

    Returns:
      mode -> :class:`Reliability`.

    Raises:
      ValueError: an unknown mode, no modes or no tasks, ``k`` above the reruns, depths
        that do not match the tasks.
    """
    if not isinstance(successes, Mapping) or not successes:
        raise ValueError(f"successes must map modes {MODES} to (tasks, reruns) arrays, got "
                         f"{type(successes).__name__} {successes!r}"[:200])
    d = np.asarray(depths)
    out = {}
    for mode, s in successes.items():
        _check_mode(mode)
        s = np.asarray(s)
        if s.ndim != 2 or s.shape[0] == 0:
            raise ValueError(f"successes[{mode!r}] must have shape (tasks, reruns) with at "
                             f"least one task, got shape {s.shape}")
        if d.shape != (s.shape[0],):
            raise ValueError(f"depths must have shape ({s.shape[0]},) (one per task of "
                             f"successes[{mode!r}]), got shape {d.shape}")
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or \
                not 1 <= k <= s.shape[1]:
            raise ValueError(f"k must be an int in [1, reruns={s.shape[1]}] (successes"
                             f"[{mode!r}] has {s.shape[1]} reruns per task), got {k!r}")
        p1, pk = pass_at_k(s, 1), pass_hat_k(s, int(k))
        levels = np.unique(d)
        a1 = np.array([p1[d == v].mean() for v in levels])
        ak = np.array([pk[d == v].mean() for v in levels])
        out[mode] = Reliability(levels, a1, ak, a1 - ak, float(p1.mean()), float(pk.mean()),
                                float(p1.mean() - pk.mean()))
    return out
