"""The call cache on the real model: how long a rerun of recorded chats takes.

SmolLM2-135M-Instruct in-process (float32). Five greedy chats (``max_tokens=8``) are run
once to compile every prompt bucket, then through a :class:`CachedChat` on an empty file
(misses: the model runs, the replies are stored), then from a fresh wrapper in replay
mode (hits: a miss would raise). Also the time to fingerprint the weights (once per
wrapper). There is no peer: this measures what a rerun of a deterministic agent
experiment costs with and without the cache.

    python scripts/bench/callcache.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

QUESTIONS = ("What is 2 + 2?", "Name a colour.", "Capital of France?", "Say hi.",
             "One word for happy?")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="best of this many (default 3)")
    ap.add_argument("--max-tokens", type=int, default=8)
    args = ap.parse_args(argv)

    from jaxsci.common.lm import CachedChat, open_chat_model
    from jaxsci.common.lm.callcache import model_fingerprint

    chat = open_chat_model("smollm2")
    msgs = [[{"role": "user", "content": q}] for q in QUESTIONS]
    for m in msgs:  # compile every prompt bucket outside the timings
        chat.chat(m, max_tokens=args.max_tokens)

    def best(fn):
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    t_fp = best(lambda: model_fingerprint(chat))
    fp = model_fingerprint(chat)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "calls.db"

        def record():
            path.unlink(missing_ok=True)
            with CachedChat(chat, path, fingerprint=fp) as c:
                return [c.chat(m, max_tokens=args.max_tokens) for m in msgs]

        def replay():
            with CachedChat(chat, path, mode="replay", fingerprint=fp) as c:
                return [c.chat(m, max_tokens=args.max_tokens) for m in msgs]

        t_miss = best(record)
        first = record()
        t_hit = best(replay)
        assert replay() == first, "a replayed reply differs from the recorded one"

    print(f"# SmolLM2-135M-Instruct, float32, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}; {len(msgs)} greedy chats, max_tokens="
          f"{args.max_tokens}; best of {args.repeats}")
    print("| what | time |\n|---|---|")
    print(f"| fingerprint of the weights (once per wrapper) | {t_fp:.2f} s |")
    print(f"| {len(msgs)} chats through the cache, misses (the model runs) | {t_miss:.2f} s |")
    print(f"| the same {len(msgs)} replayed from a fresh wrapper (hits) | "
          f"{t_hit * 1e3:.1f} ms |")
    print(f"| ratio | {t_miss / t_hit:.0f}x |")


if __name__ == "__main__":
    main()
