"""Option scoring on the real model: the cached prefix against one full pass per row.

SmolLM2-135M-Instruct in-process (float32). ``Engine.score(prefix, options)`` runs the
prefix once into a KV cache and every option attends to it (``P + N C`` token
positions); ``cache_prefix=False`` runs prefix + option for each option (``N (P + C)``),
as the engine did before 2026-12-06. Both are timed on the same random token prompts
(prompt length ``P``, ``N`` options of up to ``C`` tokens, the shapes of an agent's
decision: a few hundred prompt tokens, a handful of short tool calls), best of
``--repeats`` after a compiling call; the printed difference is the largest gap between
the two paths' summed log-probabilities. There is no outside peer: llama.cpp and
transformers score a continuation per request.

    python scripts/bench/score.py [--repeats 3] [--settings 150x4x6,400x7x15,900x12x20]
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import timed


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="best of this many (default 3)")
    ap.add_argument("--settings", default="150x4x6,400x7x15,900x12x20",
                    help="PxNxC: prompt tokens x options x option tokens (default %(default)s)")
    args = ap.parse_args(argv)
    settings = [tuple(int(v) for v in s.split("x")) for s in args.settings.split(",")]
    if any(len(s) != 3 or min(s) < 1 for s in settings):
        raise SystemExit(f"--settings must be PxNxC triples of positive integers, got "
                         f"{args.settings!r}")

    from jaxsci.common.lm.engine import Engine

    engine = Engine.smollm2()
    rng = np.random.default_rng(0)
    print(f"{'P':>5} {'N':>3} {'C':>3} | {'full per row (s)':>16} {'cached prefix (s)':>17} "
          f"{'speed-up':>8} | {'compile full/cached (s)':>23} | max |diff|")
    for p, n, c in settings:
        prefix = rng.integers(100, 40000, p).tolist()
        options = [rng.integers(100, 40000, rng.integers(max(1, c // 2), c + 1)).tolist()
                   for _ in range(n)]
        full, comp_full, t_full = timed(
            lambda prefix=prefix, options=options: engine.score(prefix, options,
                                                                cache_prefix=False),
            args.repeats)
        cached, comp_cached, t_cached = timed(
            lambda prefix=prefix, options=options: engine.score(prefix, options),
            args.repeats)
        print(f"{p:>5} {n:>3} {c:>3} | {t_full:>16.2f} {t_cached:>17.2f} "
              f"{t_full / t_cached:>7.1f}x | {comp_full:>11.1f} / {comp_cached:<9.1f} | "
              f"{np.abs(full - cached).max():.1e}")


if __name__ == "__main__":
    main()
