"""Lossless speculative decoding with a DFlash block-diffusion drafter, on a CPU.

    python examples/dflash_decode.py          # a few minutes on 2 cores

Trains a small byte-level target on the synthetic corpora, then a block drafter on
the target's own outputs, and decodes prompts with the target alone and with the
drafter: the same tokens, fewer target forward passes.
"""

import jax
import jax.numpy as jnp

from jaxsci.common.lm import ByteTokenizer, TransformerConfig, decode, train_lm
from jaxsci.data import corpora
from jaxsci.llm import dflash as df

tok = ByteTokenizer()
config = TransformerConfig(d_model=64, n_layers=3, n_heads=4, d_ff=192, max_len=128)
docs = corpora.documents(jax.random.key(0), 2000, 65)  # BOS + samples of one task each
target, _ = train_lm(jax.random.key(1), config, docs, steps=300, learning_rate=5e-3,
                     progress=True)

# The drafter learns from the target's own continuations of corpus prefixes, decoded
# greedily and sampled (the two ways it will be used).
prefixes = corpora.documents(jax.random.key(2), 1024, 16)
data = jnp.concatenate([
    df.target_outputs(jax.random.key(3), target, prefixes[:512], 64, temperature=0.0),
    df.target_outputs(jax.random.key(4), target, prefixes[512:], 64, temperature=1.0),
])
# The drafter's own settings; its widths are the target's (Drafter(config, target)).
drafter_config = df.DrafterConfig(kind="block", n_layers=1, block_size=8)
drafter, _ = df.train_drafter(jax.random.key(5), target, drafter_config, data, steps=400,
                              learning_rate=5e-3, progress=True)

for task in corpora.TASKS:
    prompt = corpora.prompts(jax.random.key(6), task, 1)[0]
    plain = decode.generate(target, prompt, 64)
    spec = df.speculative_generate(target, drafter, prompt, 64, block_size=8)
    same = bool((plain.tokens == spec.tokens).all())
    tau = (int(spec.length) - 1) / int(spec.rounds)  # tokens per target pass
    print(f"{task:10s} identical={same}  tokens per target pass={tau:.2f}  "
          f"{tok.decode(spec.tokens)!r}")

# Sampling: the output distribution is exactly the target's (temperature 1).
spec = df.speculative_generate(target, drafter, prompt, 64, block_size=8,
                               key=jax.random.key(7), temperature=1.0)
print("sampled:", repr(tok.decode(spec.tokens)))
