"""Agent papers: LLM and learned agents, measured by behaviour and by their internals.

* :mod:`jaxsci.agents.goals` -- goal-directedness in grid worlds: behavioural optimality
  of a trained transformer and of SmolLM2 (option scoring), probes of their hidden states.
* :mod:`jaxsci.agents.map` -- Measuring Agents in Production: predefined workflows vs
  free agent loops on SQLite worlds, by reliability (pass@1, pass^k) under a step cap.
* :mod:`jaxsci.agents.awm` -- Agent World Model: a pointer-copy tool policy trained by
  GRPO with database-verified rewards on synthesised worlds.
* :mod:`jaxsci.agents.pse` -- Persistent Semantic Entities: contamination that tool
  results plant across turns, sessions and agents, and the defences against it.

The harness they share (run policy, traces, reliability metrics, SQLite environments,
sandbox) is :mod:`jaxsci.common.agents`.
"""

from jaxsci.agents import awm, goals, map, pse

__all__ = ["awm", "goals", "map", "pse"]
