"""Property cases for :mod:`jaxsci.llm.misalignment` (see ``tests/properties.py``).

A tiny random-weight LLaMA stands in for SmolLM2's top blocks (the functions only see
arrays of its shapes)."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from properties import Bad, Case

from jaxsci.common.lm.llama import Llama, LlamaConfig
from jaxsci.llm import misalignment as M

CFG = LlamaConfig(vocab_size=32, d_model=16, n_layers=3, n_heads=4, n_kv_heads=2,
                  head_dim=4, d_ff=24, max_len=16)
LORA = M.LoraConfig(n_top=2, rank=2, alpha=4.0)


def _frozen():
    return M.frozen_top(Llama(CFG, rngs=nnx.Rngs(0)), 2)


def _lora():
    lora = M.init_lora(jax.random.key(1), _frozen(), LORA)
    # a non-zero B, so that the adapter moves the model (B = 0 at init)
    return jax.tree.map(lambda x: x + 0.05 * jnp.cos(jnp.arange(x.size).reshape(x.shape)),
                        lora)


def _seq(seed=0):
    rng = np.random.default_rng(seed)
    h0 = jnp.asarray(rng.standard_normal((2, 6, 16)), float)
    tokens = jnp.asarray(rng.integers(0, 32, (2, 6)), jnp.int32)
    return M.Sequences(h0, tokens, jnp.asarray([2, 3]), jnp.asarray([3, 2]))


def _logits(seed):
    return jnp.asarray(np.random.default_rng(seed).standard_normal((3, 5)), float)


CASES = [
    Case("misalignment.kl_divergence", M.kl_divergence,
         lambda: {"logp": jax.nn.log_softmax(_logits(0)), "logq": jax.nn.log_softmax(_logits(1))},
         vmap=("logp",), batch={"logp": lambda x: jnp.stack([x, x[::-1], 0.5 * x])},
         grad=("logq",)),
    Case("misalignment.top_forward", M.top_forward,
         lambda: {"frozen": _frozen(), "lora": _lora(), "h0": _seq().h0, "scale": 2.0},
         out=lambda r: (r[0], r[1][-1]), vmap=("h0",), grad=("h0", "lora"),
         fd_rtol=1e-3),
    Case("misalignment.answer_logprob", M.answer_logprob,
         lambda: {"frozen": _frozen(), "lora": _lora(), "seq": _seq(), "width": 3},
         grad=("lora",), vmap=("lora",), fd_rtol=1e-3,
         batch={"lora": lambda t: jax.tree.map(lambda x: jnp.stack([x, 2 * x, -x]), t)}),
    Case("misalignment.gap_weights", M.gap_weights,
         lambda: {"nll_proxy": jnp.asarray([2.0, 3.5, 1.0, 2.5], float),
                  "nll_aligned": jnp.asarray([2.0, 2.0, 2.0, 2.0], float), "fraction": 0.5},
         bad=(Bad({"nll_aligned": jnp.ones(3)}, ValueError, "nll_aligned must have shape"),
              Bad({"fraction": 0.0}, ValueError, "fraction"),
              Bad({"nll_proxy": jnp.ones((2, 2))}, ValueError, "nll_proxy must have"))),
    Case("misalignment.persona_vector", M.persona_vector,
         lambda: {"aligned_states": _seq(0).h0, "misaligned_states": _seq(1).h0,
                  "aligned": _seq(0), "misaligned": _seq(1)},
         grad=("misaligned_states",)),
]
