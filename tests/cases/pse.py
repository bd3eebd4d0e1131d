"""Property cases for :mod:`jaxsci.agents.pse` (see ``tests/properties.py``).

pse's numerical entry points are NumPy statistics and text detectors (no JAX programs:
``jit=False``); the harness checks that they lower nothing (``cached``) and that bad
input raises an error naming the argument."""

import numpy as np
from properties import Bad, Case

from jaxsci.agents import pse as P
from jaxsci.data import pse_bank as B

_FOLLOWS = np.array([1, 0, 1, 1, 0, 0], bool)
_GROUPS = np.array([0, 0, 1, 1, 2, 2])
_TEXTS = [P.tool_text(B.SCENARIOS[0], "named"), B.BENIGN[0], B.BENIGN[4], "Bus 7 is late."]


CASES = [
    Case("pse.contamination_rates", P.contamination_rates,
         lambda: {"follows": _FOLLOWS, "groups": _GROUPS, "n_groups": 4}, jit=False,
         bad=(Bad({"groups": np.array([0, 1])}, ValueError, "follows and groups must be"),
              Bad({"n_groups": 0}, ValueError, "n_groups must be an int"),
              Bad({"groups": np.array([0, 0, 1, 1, 2, 5])}, ValueError,
                  "groups must be ints in"),
              Bad({"follows": np.full(6, 2)}, ValueError, "follows must be booleans"))),
    Case("pse.keyword_flags", P.keyword_flags, lambda: {"texts": _TEXTS}, jit=False,
         bad=(Bad({"texts": "one text"}, TypeError, "texts must be a sequence of str"),
              Bad({"texts": ["ok", 3]}, TypeError, r"texts\[1\] must be a str"))),
    Case("pse.reduction", P.reduction,
         lambda: {"defended": np.array([0.25, 0.0]), "undefended": np.array([0.5, 0.5])},
         out=lambda y: np.asarray(y), jit=False,
         bad=(Bad({"undefended": np.array([1.5])}, ValueError, "undefended must be a rate"),
              Bad({"defended": np.array([-0.5])}, ValueError, "defended must be a rate"))),
]
