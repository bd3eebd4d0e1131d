"""Property cases for :mod:`jaxsci.agents.awm` (see ``tests/properties.py``): the policy's
logits (jit, vmap over observations, gradients in its parameters by finite differences
through a loss of the chosen action), and the training entry points (deterministic in
the key, bad input named)."""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.agents import awm as A
from jaxsci.data import scenarios as S

C = A.PolicyConfig(max_len=24, n_buckets=64, d_model=8, n_layers=1, n_heads=2)
_W = S.build_world(S.SCENARIOS["gym"], 0)
_JOBS = [(_W, t) for t in _W.tasks[:2]]


def _obs():
    o = A.observe(_W.tasks[1], '{"member_id": 2, "name": "Ada"}', 1, C)
    names, args, _, tmask = A._tool_arrays(_W, C)
    return {"tokens": jnp.asarray(o.tokens), "segments": jnp.asarray(o.segments),
            "tool_names": jnp.asarray(names), "arg_names": jnp.asarray(args),
            "tool_mask": jnp.asarray(tmask), "tool": jnp.asarray(1)}


_POLICY = A.ToolPolicy(jax.random.key(0), C)


def logits(tokens, segments, tool_names, arg_names, tool_mask, tool):
    return _POLICY.logits(tokens, segments, tool_names, arg_names, tool_mask, tool)


def _shuffle_tokens(t):
    rng = np.random.default_rng(0)
    return jnp.stack([t, jnp.asarray(rng.permutation(np.asarray(t))), t.at[3].set(5)])


CASES = [
    Case("awm.logits", logits, _obs, out=lambda y: [y[0][:-1], y[2]],
         vmap=("tokens", "tool"), batch={"tokens": _shuffle_tokens,
                                         "tool": lambda t: jnp.stack([t, t + 1, 0 * t])}),
    Case("awm.clone", A.clone,
         lambda: {"key": jax.random.key(1), "config": C, "jobs": _JOBS, "steps": 3},
         out=lambda r: r[1], jit=False, key="key",
         bad=(Bad({"steps": 0}, ValueError, "steps must be >= 1"),
              Bad({"learning_rate": -1.0}, ValueError, "learning_rate"))),
    Case("awm.grpo", A.grpo,
         lambda: {"key": jax.random.key(2), "config": C, "policy": _POLICY, "jobs": _JOBS,
                  "iterations": 1, "group": 2, "tasks_per_batch": 2, "max_steps": 2},
         out=lambda r: [r[1]["reward"], r[1]["success"]], jit=False, cached=False,
         bad=(Bad({"reward": "vibes"}, ValueError, "reward must be one of"),
              Bad({"group": 1}, ValueError, "group must be >= 2"),
              Bad({"jobs": []}, ValueError, "jobs must hold"))),
]
