"""Property cases for :mod:`jaxsci.agents.map` (see ``tests/properties.py``).

map's numerical entry points are NumPy statistics over ``(tasks, reruns)`` success
arrays (no JAX programs: ``jit=False``); the harness checks that they lower nothing
(``cached``) and that bad input raises an error naming the argument."""

import numpy as np
from properties import Bad, Case

from jaxsci.agents import map as mp
from jaxsci.common.agents import pass_at_k, pass_hat_k

_S = np.array([[1, 1, 0, 1], [1, 0, 0, 0], [1, 1, 1, 1]], bool)


def _table(t):
    return [np.asarray(getattr(t[m], f)) for m in ("agent", "workflow")
            for f in ("pass_at_1", "pass_hat_k", "gap")]


CASES = [
    Case("map.reliability_table", mp.reliability_table,
         lambda: {"successes": {"agent": _S, "workflow": ~_S}, "depths": np.array([1, 2, 2]),
                  "k": 2},
         out=_table, jit=False,
         bad=(Bad({"successes": {"free": _S}}, ValueError, "mode must be one of"),
              Bad({"k": 5}, ValueError, "k must be an int in"),
              Bad({"depths": np.array([1, 2])}, ValueError, "depths must have shape"),
              Bad({"successes": {}}, ValueError, "successes must map modes"))),
    Case("map.pass_hat_k", pass_hat_k, lambda: {"successes": _S, "k": 3}, jit=False,
         bad=(Bad({"k": 0}, ValueError, "k"), Bad({"k": 5}, ValueError, "k"))),
    Case("map.pass_at_k", pass_at_k, lambda: {"successes": _S, "k": 2}, jit=False,
         bad=(Bad({"successes": np.full((3, 4), 2)}, ValueError, "successes must be booleans"),
              Bad({"successes": np.ones((2, 2, 2), bool)}, ValueError, "successes must have"))),
]
