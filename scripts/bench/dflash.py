"""Benchmark: greedy decoding speed, target alone vs autoregressive drafter vs DFlash.

The peer is what a user runs without speculative decoding: the same target decoding
one token per forward pass with its KV cache (:func:`jaxsci.common.lm.decode.generate`),
and the EAGLE-style autoregressive drafter of the same size as the block drafter
(``B - 1`` sequential drafter passes per round). All three are single jitted programs
(a ``lax.while_loop``), run one prompt at a time (batch 1, as in the paper), greedy,
timed after warm-up (compile time reported separately); outputs are checked equal.

Models: the checkpoints of ``jaxsci reproduce dflash --quick`` (``runs/dflash/
checkpoints/models``) if present, else trained here with the quick config first (a few
minutes). Usage::

    python scripts/bench/dflash.py [--checkpoints DIR] [--prompts 8] [--new 64]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.common.lm import decode
from jaxsci.common.lm.model import count_params
from jaxsci.common.lm.tokenizer import PAD
from jaxsci.data import corpora
from jaxsci.experiments import dflash as exp
from jaxsci.llm import dflash as df


def _models(ckpt: Path):
    if not (ckpt / "target" / "config.json").exists():
        print(f"no checkpoints in {ckpt}: training with the quick config first", flush=True)
        exp.train_models(exp.CONFIGS["quick"], jax.random.split(jax.random.key(0), 3)[0],
                         ckpt, progress=True)
    return exp.load_models(ckpt)


def _time(fn, bufs, lens, repeats):
    best, outs = np.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        outs = [jax.block_until_ready(fn(b, n)) for b, n in zip(bufs, lens, strict=True)]
        best = min(best, time.perf_counter() - t0)
    return best, outs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoints", default="runs/dflash/checkpoints/models")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per task")
    ap.add_argument("--new", type=int, default=64, help="tokens generated per prompt")
    ap.add_argument("--repeats", type=int, default=3, help="best of")
    ap.add_argument("--block-sizes", default="4,8")
    args = ap.parse_args()
    m = _models(Path(args.checkpoints))
    target, block, ar = m["target"], m["block"], m["ar"]
    sizes = [int(b) for b in args.block_sizes.split(",")]
    cfg = exp.CONFIGS["quick"]
    buf_len = cfg.prompt_buffer
    if buf_len + args.new > target.config.max_len:
        raise SystemExit(f"--new must be <= {target.config.max_len - buf_len}")

    def plain(b, n):
        return decode.generate(target, b, args.new, prompt_length=n)

    def spec(drafter, B):
        return lambda b, n: df.speculative_generate(target, drafter, b, args.new,
                                                    block_size=B, prompt_length=n)

    methods = {("target", 0): plain}
    methods.update({("ar", B): spec(ar, B) for B in sizes})
    methods.update({("block", B): spec(block, B) for B in sizes})

    tasks = list(cfg.tasks)
    data = {}
    for i, t in enumerate(tasks):
        ps = corpora.prompts(jax.random.key(1000 + i), t, args.prompts, cfg.prompt_bytes)
        ps = [p for p in ps if len(p) <= buf_len]
        bufs = [jnp.asarray(np.pad(p, (0, buf_len - len(p)), constant_values=PAD)) for p in ps]
        data[t] = (bufs, [len(p) for p in ps])
    compile_s = {}
    b0, n0 = data[tasks[0]][0][0], data[tasks[0]][1][0]
    for key, fn in methods.items():
        t0 = time.perf_counter()
        jax.block_until_ready(fn(b0, n0))
        compile_s[key] = time.perf_counter() - t0

    print(f"DFlash decoding benchmark: target {count_params(target)} params "
          f"({target.config.n_layers} layers, d={target.config.d_model}), drafters "
          f"{count_params(block)} params ({block.config.n_layers} layer); greedy, batch 1, "
          f"{args.new} new tokens, {args.prompts} prompts per task, best of {args.repeats}; "
          f"{jax.devices()[0].platform}")
    print("| task | B | target tok/s | AR-draft tok/s | block-draft tok/s | tau AR | tau block "
          "| AR / target | block / target | block / AR | lossless |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for t in tasks:
        bufs, lens = data[t]
        secs, ref = _time(plain, bufs, lens, args.repeats)
        gen = sum(int(o.length) for o in ref)
        tps_t = gen / secs
        for B in sizes:
            row = {}
            same = True
            for kind in ("ar", "block"):
                s, outs = _time(methods[(kind, B)], bufs, lens, args.repeats)
                row[kind] = (sum(int(o.length) for o in outs) / s,
                             sum(int(o.length) - 1 for o in outs) / sum(int(o.rounds)
                                                                        for o in outs))
                same &= all(np.array_equal(o.tokens, r.tokens)
                            for o, r in zip(outs, ref, strict=True))
            ratios.append(row["block"][0] / tps_t)
            print(f"| {t} | {B} | {tps_t:.0f} | {row['ar'][0]:.0f} | {row['block'][0]:.0f} | "
                  f"{row['ar'][1]:.2f} | {row['block'][1]:.2f} | {row['ar'][0] / tps_t:.2f}x | "
                  f"{row['block'][0] / tps_t:.2f}x | {row['block'][0] / row['ar'][0]:.2f}x | "
                  f"{'yes' if same else 'NO'} |")
    print("compile (s): " + ", ".join(f"{k[0]}{'' if k[0] == 'target' else f' B={k[1]}'} "
                                      f"{v:.1f}" for k, v in compile_s.items()))
    print(f"ratio block-draft / target-only tokens/s: geometric mean "
          f"{float(np.exp(np.mean(np.log(ratios)))):.2f}x over tasks and block sizes")


if __name__ == "__main__":
    main()
