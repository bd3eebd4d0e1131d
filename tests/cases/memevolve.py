"""Property cases for :mod:`jaxsci.agents.memevolve` and :mod:`jaxsci.data.memtasks`
(``tests/properties.py``).

MemEvolve's entry points are NumPy / pure-Python functions (no JAX programs:
``jit=False``): BM25 scores, the Pareto ranks and the tournament's selection rule, the
hashing embedder, the task streams (the SQLite family too); the harness checks that they
lower nothing and that bad input raises an error naming the argument."""

import numpy as np
from properties import Bad, Case

from jaxsci.agents import memevolve as ME
from jaxsci.data import memtasks as T

CASES = [
    Case("memevolve.bm25_scores", ME.bm25_scores,
         lambda: {"query": "velmora passcode", "docs": ["passcode of velmora", "tools"]},
         out=lambda y: np.asarray(y), jit=False,
         bad=(Bad({"query": 3}, TypeError, "query must be a str"),)),
    Case("memevolve.pareto_ranks", ME.pareto_ranks,
         lambda: {"acc": np.array([0.5, 0.7, 0.7]), "tokens": np.array([10.0, 30.0, 20.0]),
                  "cost": np.array([1.0, 1.0, 1.0])}, out=lambda y: np.asarray(y), jit=False,
         bad=(Bad({"acc": np.array([0.5, np.nan, 0.7])}, ValueError, "finite"),)),
    Case("memevolve.select_finalists", ME.select_finalists,
         lambda: {"acc": np.array([0.5, 0.7, 0.7]), "tokens": np.array([10.0, 30.0, 20.0]),
                  "cost": np.array([1.0, 1.0, 1.0]), "t": 2}, out=lambda y: np.asarray(y),
         jit=False, bad=(Bad({"t": 0}, ValueError, "t must be an int"),)),
    Case("memevolve.make_stream", T.make_stream, lambda: {"seed": 2, "n_tasks": 6},
         out=lambda s: np.array([t.answer for t in s]), jit=False,
         bad=(Bad({"n_entities": 5}, ValueError, "n_entities must be even"),
              Bad({"family": "sqlite"}, ValueError, "family must be one of"))),
    Case("memevolve.make_sql_stream", T.make_sql_stream, lambda: {"seed": 2, "n_tasks": 6},
         out=lambda s: np.array([t.answer for t in s]), jit=False,
         bad=(Bad({"n_types": 99}, ValueError, "n_types"),)),
]
