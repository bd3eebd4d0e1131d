"""Property cases for dflash and the shared LM it decodes: the LM loss (grad wrt the
parameters vs finite differences), greedy and sampled ``decode.generate``, the
drafter's training loss (its forward), speculative decoding and its rejection rule
(see ``tests/properties.py``). Shapes are tiny: each check compiles."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from properties import Bad, Case

from jaxsci.common.lm import decode, training
from jaxsci.common.lm.model import Transformer, TransformerConfig
from jaxsci.llm import dflash as df

# A tiny target over the byte vocabulary (the drafter's block input is MASK = 259).
TCFG = TransformerConfig(d_model=8, n_layers=1, n_heads=2, d_ff=16, max_len=32)
TARGET = Transformer(TCFG, rngs=nnx.Rngs(0))
B = 3
DRAFTER = df.Drafter(df.DrafterConfig(block_size=B), TCFG, rngs=nnx.Rngs(1))
N_NEW = 4
BUF = 16  # one prompt bucket


def _floats(tree):
    """Float leaves as the default float dtype (float64 inside the gradient checks)."""
    return jax.tree_util.tree_map(
        lambda a: jnp.asarray(a, float) if jnp.issubdtype(jnp.asarray(a).dtype, jnp.inexact)
        else a, tree)


def _prompt(seed, length):
    rng = np.random.default_rng(seed)
    buf = np.full(BUF, 258, np.int32)  # PAD
    buf[:length] = rng.integers(0, 256, length)
    return {"buf": jnp.asarray(buf), "length": jnp.asarray(length, jnp.int32)}


def _prompts3(p):
    """Three different prompts (and lengths) in one padded batch."""
    ps = [p, _prompt(1, 5), _prompt(2, 11)]
    return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *ps)


# --------------------------------------------------------------------------- LM loss

SMALL = TransformerConfig(vocab_size=11, d_model=4, n_layers=1, n_heads=2, d_ff=8, max_len=8)
_LM_GRAPH, _LM_STATE = nnx.split(Transformer(SMALL, rngs=nnx.Rngs(2)))


def _lm_loss_args():
    rng = np.random.default_rng(0)
    return {"params": _floats(_LM_STATE),
            "tokens": jnp.asarray(rng.integers(0, SMALL.vocab_size, (2, 6)), jnp.int32)}


# Jitted: eagerly, every primitive of the forward compiles on its own (most of the
# case's time, float64 gradient checks included); the checks still transform it.
@jax.jit
def _lm_loss(params, tokens):
    return training.lm_loss(nnx.merge(_LM_GRAPH, params), tokens)


LM_LOSS = Case(
    "dflash.lm_loss", _lm_loss, _lm_loss_args,
    grad=("params",),
    vmap=("tokens",),
    batch={"tokens": lambda t: jnp.stack([t, (t + 1) % SMALL.vocab_size, t[:, ::-1]])},
    bad=(
        Bad({"tokens": jnp.zeros((6,), jnp.int32)}, ValueError, "tokens must have 2 dim"),
        Bad({"tokens": jnp.zeros((2, 6))}, TypeError, "tokens must have a integer dtype"),
        Bad({"tokens": jnp.full((2, 6), 11, jnp.int32)}, Exception,
            r"tokens must be ids in \[0, 10\]", jit=True),
    ),
    fd_rtol=1e-5,
)


# --------------------------------------------------------------------------- generate


def _generate(prompt):
    return decode.generate(TARGET, prompt["buf"], N_NEW, prompt_length=prompt["length"])


GENERATE = Case(
    "dflash.generate", _generate, lambda: {"prompt": _prompt(0, 7)},
    vmap=("prompt",), batch={"prompt": _prompts3},
    bad=(
        # A traced length beyond the buffer decodes garbage unless checked at run time.
        Bad({"prompt": {**_prompt(0, 7), "length": jnp.asarray(17, jnp.int32)}}, Exception,
            r"prompt_length must be in \[1, 16\]", jit=True),
        Bad({"prompt": {**_prompt(0, 7), "length": jnp.asarray(0, jnp.int32)}}, ValueError,
            "prompt_length must be >= 1"),
        Bad({"prompt": {"buf": jnp.full((BUF,), 300, jnp.int32),
                        "length": jnp.asarray(3, jnp.int32)}}, Exception,
            r"prompt ids must be in \[0, 259\]", jit=True),
    ),
)


def _sample(key):
    p = _prompt(0, 7)
    return decode.generate(TARGET, p["buf"], N_NEW, key=key, temperature=1.0,
                           prompt_length=p["length"])


SAMPLE = Case(
    "dflash.generate_sampled", _sample, lambda: {"key": jax.random.key(0)},
    vmap=("key",), key="key",
    bad=(Bad({"key": None}, ValueError, "key must be given when temperature > 0"),
         Bad({"key": 3}, TypeError, "key")),
)


# --------------------------------------------------------------------------- drafter


_D_GRAPH, _D_STATE = nnx.split(DRAFTER)


def _drafter_loss_args():
    rng = np.random.default_rng(3)
    return {"params": _floats(_D_STATE),
            "tokens": jnp.asarray(rng.integers(0, 256, (2, 10)), jnp.int32),
            "anchors": jnp.asarray([[1, 4], [2, 7]], jnp.int32),
            "decay": jnp.asarray(2.0, float)}


# Jitted: eagerly, the loss's hundreds of primitives would each compile on their own
# (most of this case's time); the checks still transform it (jit of jit, vmap, grad).
@jax.jit
def _drafter_loss(params, tokens, anchors, decay):
    return df.drafter_loss(nnx.merge(_D_GRAPH, params), TARGET, tokens, anchors,
                           block_size=B, decay=decay)


DRAFTER_LOSS = Case(
    "dflash.drafter_loss", _drafter_loss, _drafter_loss_args,
    # The gradient wrt the drafter's parameters goes through the same layers as the LM
    # loss's (checked there); the decay's is the drafter-specific one.
    grad=("decay",),
    vmap=("decay", "anchors"),
    batch={"anchors": lambda a: jnp.stack([a, a[:, ::-1], jnp.full_like(a, 3)])},
    bad=(
        # Anchors past the last full block were silently clamped by the gather.
        Bad({"anchors": jnp.asarray([[1, 8], [2, 7]], jnp.int32)}, Exception,
            r"anchors must be in \[1, t - block_size\] = \[1, 7\]", jit=True),
        Bad({"anchors": jnp.asarray([1, 4], jnp.int32)}, ValueError,
            "anchors must have 2 dimensions"),
    ),
)


# --------------------------------------------------------------------------- speculative


def _speculative(prompt):
    return df.speculative_generate(TARGET, DRAFTER, prompt["buf"], N_NEW,
                                   prompt_length=prompt["length"])


SPECULATIVE = Case(
    "dflash.speculative_generate", _speculative, lambda: {"prompt": _prompt(0, 7)},
    out=lambda g: (g.tokens, g.length, g.rounds),
    vmap=("prompt",), batch={"prompt": _prompts3},
    bad=(
        Bad({"prompt": {**_prompt(0, 7), "length": jnp.asarray(30, jnp.int32)}}, Exception,
            r"prompt_length must be in \[1, 16\]", jit=True),
        Bad({"prompt": {"buf": jnp.zeros((0,), jnp.int32), "length": None}}, ValueError,
            "prompt must hold at least one token"),
    ),
)


def _speculative_sampled(key):
    p = _prompt(0, 7)
    return df.speculative_generate(TARGET, DRAFTER, p["buf"], N_NEW, key=key,
                                   temperature=1.0, prompt_length=p["length"]).tokens


SPECULATIVE_SAMPLED = Case(
    "dflash.speculative_generate_sampled", _speculative_sampled,
    lambda: {"key": jax.random.key(1)}, key="key", jit=False,
    bad=(Bad({"key": None}, ValueError, "key must be given when temperature > 0"),),
)


def _rejection_args():
    k1, k2 = jax.random.split(jax.random.key(4))
    # A wide, flat vocabulary: another key gives another token (the determinism check).
    p = jax.nn.softmax(0.1 * jax.random.normal(k1, (3, 200)), -1)
    q = jax.nn.softmax(0.1 * jax.random.normal(k2, (2, 200)), -1)
    return {"key": jax.random.key(5), "drafts": jnp.asarray([1, 3], jnp.int32), "p": p, "q": q}


def _rejection(key, drafts, p, q, resample="residual"):
    return df.rejection_sample(key, drafts, p, q, resample=resample)


REJECTION = Case(
    "dflash.rejection_sample", _rejection, _rejection_args,
    vmap=("key", "p"), key="key",
    batch={"p": lambda p: jnp.stack([p, p[::-1], jnp.roll(p, 1, -1)])},
    bad=(Bad({"resample": "bogus"}, ValueError, "resample must be one of"),),
)


CASES = [LM_LOSS, GENERATE, SAMPLE, DRAFTER_LOSS, SPECULATIVE, SPECULATIVE_SAMPLED, REJECTION]
