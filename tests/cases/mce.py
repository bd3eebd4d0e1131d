"""Property cases for :mod:`jaxsci.agents.mce` and :mod:`jaxsci.data.diagnosis`
(``tests/properties.py``).

MCE's numerical entry points are NumPy / pure-Python functions (no JAX programs:
``jit=False``): accuracy of option scores, skill crossover, the token count, the task
generator; the harness checks that they lower nothing and that bad input raises an
error naming the argument."""

import numpy as np
from properties import Bad, Case

from jaxsci.agents import mce as M
from jaxsci.data import diagnosis as D

_A = M.Skill(("instruction", "table"), table_findings=1, max_rules=0, k=1, token_cap=40)
_B = M.Skill(("examples",), table_findings=3, max_rules=4, k=3, token_cap=96)


def _genes(s):
    return np.array([s.table_findings, s.max_rules, s.k, s.token_cap, len(s.components)])


CASES = [
    Case("mce.accuracy", M.accuracy,
         lambda: {"scores": np.array([[0.0, -1.0, -2.0], [-3.0, -0.5, -1.0]]),
                  "labels": np.array([0, 2])}, out=lambda y: np.asarray(y), jit=False,
         bad=(Bad({"labels": np.array([0, 3])}, ValueError, "labels must be ints"),
              Bad({"scores": np.zeros(3)}, ValueError, "scores must be"))),
    Case("mce.crossover", M.crossover, lambda: {"a": _A, "b": _B, "seed": 3}, out=_genes,
         jit=False,
         bad=(Bad({"a": "table"}, TypeError, "a must be a Skill"),
              Bad({"seed": -1}, ValueError, "seed must be an int"))),
    Case("mce.count_tokens", M.count_tokens, lambda: {"text": "sore knees -> Lumera"},
         out=lambda y: np.asarray(y), jit=False,
         bad=(Bad({"text": 3}, TypeError, "text must be a str"),)),
    Case("mce.make_task", D.make_task, lambda: {"seed": 2, "n_train": 6, "n_val": 2,
                                                 "n_test": 2},
         out=lambda t: np.array([c.label for c in t.train]), jit=False,
         bad=(Bad({"n_conditions": 5}, ValueError, "n_conditions must be even"),
              Bad({"p_key": 1.5}, ValueError, "p_key must be a probability"))),
]
