r"""The agent harness shared by the agent papers: run policy, traces, reliability
metrics, SQLite environments and a code sandbox.

Every agent experiment talks to a language model through
:class:`~jaxsci.common.lm.chat.ChatModel` (in-process SmolLM2 or any OpenAI-compatible
server, ``jaxsci serve`` included) and its tools through
:class:`~jaxsci.common.lm.tools.Tool`; this package adds what an agent run needs on top:

* **the loop** -- :func:`run_agent` under a :class:`RunPolicy` (``max_steps``, ``on_cap``
  = ``"handoff"`` | ``"final_answer"`` | ``"raise"``, ``token_budget``,
  ``time_budget``); handoffs go to a :class:`HumanQueue` (JSONL or SQLite) as
  interventions; decisions by :class:`ChatActor` (the model writes tool calls) or
  :class:`ScoreActor` (option scoring, for small models);
* **traces** -- one JSONL schema (:class:`Tracer`, :func:`read_trace`): run, span and
  parent ids, kinds, provenance of each context segment, model id and weights hash,
  tokens, latency, cache hits; the blinded human-evaluation sheet
  (:func:`export_eval_sheet`, :func:`import_eval_sheet`), :func:`cohen_kappa` and
  :func:`judge_agreement`;
* **reliability** -- :func:`pass_at_k`, :func:`pass_hat_k` (tau-bench's pass^k),
  :func:`rerun_consistency`, :func:`flakiness`, :func:`regression_diff`,
  :func:`bootstrap_ci`, and :func:`assert_gap` / :func:`assert_monotone` for claims;
* **environments** -- :class:`SQLiteEnv` (schema + seed SQL + tools + tasks; reset from
  a template through SQLite's backup API, initial and final snapshots, read-only
  verifiers returning ``"complete"`` / ``"others"``);
* **sandbox** -- :func:`run_code`: generated Python in a child process with CPU-time,
  memory and file-size limits, a wall timeout, a temporary directory and no network.

The implementation lives in private modules; this package is the one import path.

>>> import numpy as np
>>> float(pass_hat_k(np.array([[1, 1, 0, 1]], bool), 2)[0])
0.5
"""

from jaxsci.common.agents._loop import (
    NO_STEPS_LEFT,
    ON_CAP,
    Action,
    AgentResult,
    ChatActor,
    HumanQueue,
    Option,
    RunPolicy,
    ScoreActor,
    StepCapReached,
    choose,
    run_agent,
)
from jaxsci.common.agents._reliability import (
    RegressionDiff,
    assert_gap,
    assert_monotone,
    bootstrap_ci,
    flakiness,
    is_monotone,
    pass_at_k,
    pass_hat_k,
    regression_diff,
    rerun_consistency,
)
from jaxsci.common.agents._sandbox import SandboxResult, network_isolation, run_code
from jaxsci.common.agents._sqlenv import VERDICTS, SeedSQLError, SQLiteEnv, Task, snapshot
from jaxsci.common.agents._traces import (
    FIELDS,
    KINDS,
    PROVENANCE,
    SCHEMA_VERSION,
    Tracer,
    check_record,
    cohen_kappa,
    config_hash,
    export_eval_sheet,
    import_eval_sheet,
    judge_agreement,
    read_trace,
    segments_of,
)

__all__ = [
    "NO_STEPS_LEFT", "ON_CAP", "Action", "AgentResult", "ChatActor", "HumanQueue", "Option",
    "RunPolicy", "ScoreActor", "StepCapReached", "choose", "run_agent",
    "RegressionDiff", "assert_gap", "assert_monotone", "bootstrap_ci", "flakiness",
    "is_monotone", "pass_at_k", "pass_hat_k", "regression_diff", "rerun_consistency",
    "SandboxResult", "network_isolation", "run_code",
    "VERDICTS", "SeedSQLError", "SQLiteEnv", "Task", "snapshot",
    "FIELDS", "KINDS", "PROVENANCE", "SCHEMA_VERSION", "Tracer", "check_record",
    "cohen_kappa", "config_hash", "export_eval_sheet", "import_eval_sheet",
    "judge_agreement", "read_trace", "segments_of",
]
