"""Benchmark: TextResNet's backward pass (one projector prompt per attributable feedback
component, option scoring of the step letters) vs a TextGrad backward pass (one critique
prompt per node, yes/no option scoring), on the same depth-8 relay chains.

The TextGrad baseline here is jaxsci's own implementation of its node-by-node backward
pass (:func:`jaxsci.agents.textresnet.textgrad_backward`); the ``textgrad`` package itself
is run against ``jaxsci serve`` by ``scripts/bench/textresnet_textgrad.py``. The
table gives the time per chain after warm-up (compile time apart), the backward prompt
tokens per chain, and their ratios.

    python scripts/bench/textresnet.py [--chains 4] [--depth 8] [--model smollm2]
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import timed

from jaxsci.agents import textresnet as T
from jaxsci.common.lm.chat import open_chat_model
from jaxsci.data.relay import check, make_bank


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--model", default="smollm2")
    a = ap.parse_args()
    chat = open_chat_model(a.model)
    chains = make_bank(0, a.depth, a.chains)
    instr = [c.instructions for c in chains]
    deltas = [T.forward(x) for x in instr]
    comps = [check(c.spec, d)[1] for c, d in zip(chains, deltas, strict=True)]

    def ours():
        proj = T.project(deltas, comps, backend="llm", chat=chat)
        return [T.textresnet_backward(d, c, p) for d, c, p in zip(deltas, comps, proj,
                                                                   strict=True)]

    rn, rn_compile, rn_s = timed(ours, reps=1)
    tg, tg_compile, tg_s = timed(lambda: T.textgrad_backward(chat, instr, deltas, comps),
                                 reps=1)
    rn_tok = np.mean([b.tokens for b in rn])
    tg_tok = np.mean([b.tokens for b in tg])
    print(f"TextResNet vs TextGrad backward, {a.chains} chains of depth {a.depth}, "
          f"model {a.model}")
    print("| task | TextResNet (s/chain) | TextGrad (s/chain) | TextGrad / TextResNet | "
          "tokens TextResNet | tokens TextGrad | token ratio | compile (s) |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| backward depth {a.depth} | {rn_s / a.chains:.3f} | {tg_s / a.chains:.3f} | "
          f"{tg_s / rn_s:.1f}x | {rn_tok:.0f} | {tg_tok:.0f} | {tg_tok / rn_tok:.1f}x | "
          f"{rn_compile + tg_compile:.2f} |")


if __name__ == "__main__":
    main()
