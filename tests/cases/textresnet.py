"""Property cases for :mod:`jaxsci.agents.textresnet` and :mod:`jaxsci.data.relay`
(``tests/properties.py``).

TextResNet's entry points are pure-Python / NumPy functions over text (no JAX programs:
``jit=False``): causal routing of a projection, density-aware scheduling, the token count
and the relay-chain generator; the harness checks that they lower nothing and that bad
input raises an error naming the argument."""

import numpy as np
from properties import Bad, Case

from jaxsci.agents import textresnet as T
from jaxsci.data import relay as R


def _routed_counts(routed):
    return np.array([len(r) for r in routed])


CASES = [
    Case("textresnet.route", T.route,
         lambda: {"projection": np.array([[0.1, 0.9, 0.2], [-np.inf, -np.inf, -np.inf]])},
         out=_routed_counts, jit=False,
         bad=(Bad({"projection": np.zeros(3)}, ValueError, "projection must be"),)),
    Case("textresnet.schedule", T.schedule,
         lambda: {"routed": [[0], [1, 2], []], "budget": 2},
         out=lambda y: np.asarray(y), jit=False,
         bad=(Bad({"budget": 0}, ValueError, "budget must be an int"),
              Bad({"confidence": [0.1]}, ValueError, "confidence must have shape"))),
    Case("textresnet.count_tokens", T.count_tokens,
         lambda: {"text": "Feedback: 'iron' (a metal) was not asked for."},
         out=lambda y: np.asarray(y), jit=False,
         bad=(Bad({"text": 3}, TypeError, "text must be a str"),)),
    Case("textresnet.make_chain", R.make_chain, lambda: {"seed": 2, "depth": 8, "faults": 2},
         out=lambda c: np.asarray(c.faulty), jit=False,
         bad=(Bad({"depth": 21}, ValueError, "depth must be an int"),
              Bad({"faults": 3}, ValueError, "faults must be an int"))),
]
