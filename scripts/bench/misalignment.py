"""Benchmark: one safeguarded LoRA step on SmolLM2, cached lower blocks vs the full forward.

A PEFT/TRL user fine-tunes LoRA adapters on the top blocks but runs the whole model
forward at every step (the lower blocks are frozen, their activations recomputed), and a
KL safeguard runs the frozen reference forward too. jaxsci caches the stream entering
the trained blocks once per sequence (:func:`jaxsci.llm.misalignment.frozen_stream`) and
the reference's answer log-probabilities once per training set
(:func:`jaxsci.llm.misalignment.reference`), so a step runs only the top blocks. Both
sides here are JAX on the same CPU, the same batch (the 32 reckless-advice sequences of
the experiment, ``--batch`` per step) and the same loss (SFT + KL to the reference); the
"full" side is the PEFT/TRL recipe written in JAX (TRL itself needs torch, which this
project does not install: when ``trl`` and ``torch`` are importable the script says so
but does not time them). Also printed: the stacked sweep (``--runs`` strengths in one
vmapped step) against that many single steps. After warm-up, compile time apart, best of
three.

    python scripts/bench/misalignment.py [--batch 4] [--n-top 2] [--runs 4]
"""

from __future__ import annotations

import argparse
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
from _timing import timed

from jaxsci.common.lm.chat import LocalChat
from jaxsci.common.lm.engine import Engine
from jaxsci.data import advice
from jaxsci.llm import misalignment as mis


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--n-top", type=int, default=2)
    ap.add_argument("--runs", type=int, default=4)
    a = ap.parse_args()
    engine = Engine.smollm2()
    chat = LocalChat(engine)
    tok = engine.tokenizer
    rows = [(tok.encode(chat.prompt([{"role": "user", "content": p.question}])),
             tok.encode(p.misaligned + "<|im_end|>")) for p in advice.narrow("train")]
    t = max(len(q) + len(r) for q, r in rows)
    tokens = np.zeros((len(rows), t), np.int32)
    for i, (q, r) in enumerate(rows):
        tokens[i, :len(q) + len(r)] = q + r
    start = jnp.asarray([len(q) for q, _ in rows])
    length = jnp.asarray([len(r) for _, r in rows])
    width = int(length.max())
    model = engine.model
    cfg = mis.LoraConfig(n_top=a.n_top)
    frozen = mis.frozen_top(model, a.n_top)
    h0, cache_s, _ = timed(lambda: jax.block_until_ready(
        mis.frozen_stream(model, jnp.asarray(tokens), a.n_top)), reps=1)
    seqs = mis.Sequences(h0, jnp.asarray(tokens), start, length)
    ref = mis.reference(frozen, seqs, width=width)
    lora = mis.init_lora(jax.random.key(0), frozen, cfg)
    idx = jnp.arange(a.batch)
    s1 = mis.Safeguards(*(jnp.asarray(1.0),) * 4, jnp.ones(1))
    scale = cfg.alpha / cfg.rank

    @jax.jit
    def cached_step(lora):
        batch = mis.Sequences(*(x[idx] for x in seqs))
        r = mis.Reference(ref.logp[idx], tuple(x[idx] for x in ref.states))
        return jax.grad(lambda p: mis.safeguard_loss(p, frozen, batch, r, None, None, s1,
                                                     terms=("kl",), width=width,
                                                     scale=scale)[0])(lora)

    from flax import nnx

    graphdef, state = nnx.split(model)
    n_lower = model.config.n_layers - a.n_top

    @jax.jit
    def full_step(lora, state):
        m = nnx.merge(graphdef, state)
        tok_b = jnp.asarray(tokens)[idx]
        pos = jnp.broadcast_to(jnp.arange(t), tok_b.shape)
        h = m.embed_tokens(tok_b)
        for block in list(m.blocks)[:n_lower]:  # recomputed every step, no gradient
            h, _ = block(h, pos, None)
        h = jax.lax.stop_gradient(h)
        batch = mis.Sequences(h, tok_b, start[idx], length[idx])
        r = mis.reference(frozen, batch, width=width, batch=a.batch)  # recomputed too
        return jax.grad(lambda p: mis.safeguard_loss(p, frozen, batch, r, None, None, s1,
                                                     terms=("kl",), width=width,
                                                     scale=scale)[0])(lora)

    _, c_compile, c_s = timed(lambda: jax.block_until_ready(cached_step(lora)))
    _, f_compile, f_s = timed(lambda: jax.block_until_ready(full_step(lora, state)))

    stacked = jax.tree.map(lambda x: jnp.broadcast_to(x, (a.runs, *x.shape)), lora)
    sweep_step = jax.jit(jax.vmap(cached_step))
    _, _, sweep_s = timed(lambda: jax.block_until_ready(sweep_step(stacked)))

    print(f"SmolLM2-135M, LoRA rank {cfg.rank} on the top {a.n_top} of "
          f"{model.config.n_layers} blocks, SFT + exact KL, batch {a.batch} x {t} tokens "
          f"(jax {jax.__version__}, {jax.devices()[0].platform})")
    print("| step | jaxsci cached (s) | full forward, PEFT/TRL recipe (s) | full / cached "
          "| compiles (s) |")
    print("|---|---|---|---|---|")
    print(f"| one safeguarded step | {c_s:.3f} | {f_s:.3f} | {f_s / c_s:.1f}x | "
          f"{c_compile:.1f} / {f_compile:.1f} |")
    print(f"| {a.runs} strengths, one vmapped step vs {a.runs} single steps | {sweep_s:.3f} | "
          f"{a.runs * c_s:.3f} | {a.runs * c_s / sweep_s:.2f}x | |")
    print(f"one-off cost of the cache: {cache_s:.2f} s for the {len(rows)} sequences "
          f"(= {cache_s / max(f_s - c_s, 1e-9):.0f} steps' savings)")
    if importlib.util.find_spec("trl") and importlib.util.find_spec("torch"):
        print("trl and torch are installed: TRL's SFTTrainer is the peer, not timed here")
    else:
        print("TRL (peer) needs torch, not installed here: the full-forward column is its "
              "recipe in JAX")
    err = max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(
        jax.tree.leaves(cached_step(lora)), jax.tree.leaves(full_step(lora, state)),
        strict=True))
    print(f"max |grad difference| cached vs full: {err:.2e}")


if __name__ == "__main__":
    main()
