"""One SmolLM2 decoding step at batch 1 against the KV cache's length (float32).

The engine's step-wise program (``Engine.stream``: a jitted prefill of a 32-token prompt,
then one jitted cached step per token); prints the median and best time between
consecutive deltas, per cache length. docs/llm.md quotes it:

    taskset -c 1 python scripts/bench/llm_step.py
"""

from __future__ import annotations

import argparse
import itertools
import time

import jax
import numpy as np

from jaxsci.common.lm.engine import Engine, bucket


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="64,256,1024,4096")
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    eng = Engine.smollm2()
    eng = Engine(eng.model, eng.tokenizer, stop_ids=())  # every step decodes
    prompt = list(range(1000, 1032))  # 32 tokens: the 32-slot prompt bucket
    print(f"jax {jax.__version__}; batch 1, float32; step = one cached decoding step "
          f"(Engine.stream, the time between its deltas)")
    for want in (int(x) for x in args.lengths.split(",")):
        # The stream's cache holds the prompt's bucket + the bucket of max_new_tokens.
        new = want - bucket(len(prompt))
        slots = bucket(len(prompt)) + bucket(new)
        stream = eng.stream(prompt, new)
        times, last = [], time.perf_counter()
        for _ in itertools.islice(stream, args.steps):  # abandoning it stops generation
            now = time.perf_counter()
            times.append(now - last)
            last = now
        stream.close()
        times = np.asarray(times[3:]) * 1e3  # the first deltas include prefill and compiles
        print(f"cache {slots:5d} slots: step {np.median(times):.1f} ms median, "
              f"{times.min():.1f} ms best", flush=True)


if __name__ == "__main__":
    main()
