"""Agent papers: LLM and learned agents, measured by behaviour and by their internals.

* :mod:`jaxsci.agents.goals` -- goal-directedness in grid worlds: behavioural optimality
  of a trained transformer and of SmolLM2 (option scoring), probes of their hidden states.
"""

from jaxsci.agents import goals

__all__ = ["goals"]
