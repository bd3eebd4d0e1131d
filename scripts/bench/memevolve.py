"""Benchmark: MemEvolve's task agent, option scoring of a block of (memory, query)
prompts in one batched forward pass (first token of each option) vs ``chat.score`` of
the full options one prompt at a time (what a user writes with the chat interface alone).

There is no peer implementation to run side by side (the authors' code drives hosted
agent frameworks); the comparison is the evaluation step that dominates a tournament
round. Both read SmolLM2-135M-Instruct in-process; the table gives the time after
warm-up (compile time apart) and how often the two pick the same option.

    python scripts/bench/memevolve.py [--tasks 16] [--model smollm2]
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import timed

from jaxsci.agents import memevolve as ME
from jaxsci.common.lm.chat import open_chat_model
from jaxsci.data.memtasks import make_stream


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--model", default="smollm2")
    a = ap.parse_args()
    chat = open_chat_model(a.model)
    tasks = make_stream(0, n_tasks=2 * a.tasks, n_entities=8)
    prov = ME.GenotypeProvider(ME.PRESETS["lightweight"])
    for t in tasks[:a.tasks]:  # a memory that has seen half the stream
        prov.take_in(ME.Trajectory(t.text, t.options[0], False, t.feedback_fail,
                                   t.options[t.answer]))
    test = tasks[a.tasks:]
    mems = prov.provide_many([t.text for t in test])
    ours, compile_s, ours_s = timed(lambda: ME.score_options(chat, mems, test), reps=1)
    peer, _, peer_s = timed(lambda: [
        np.asarray(chat.score(ME.question_messages(m, t.text, t.options), list(t.options)))
        for m, t in zip(mems, test, strict=True)], reps=1)
    y = np.array([t.answer for t in test])
    po, pp = np.array([s.argmax() for s in ours]), np.array([s.argmax() for s in peer])
    print(f"MemEvolve option scoring, {a.tasks} prompts (lightweight memory), model {a.model}")
    print("| task | jaxsci batched (s) | chat.score each (s) | chat.score / jaxsci | "
          "jaxsci compile (s) |")
    print("|---|---|---|---|---|")
    print(f"| score {a.tasks} prompts | {ours_s:.2f} | {peer_s:.2f} | "
          f"{peer_s / ours_s:.1f}x | {compile_s:.2f} |")
    print(f"same answer: {np.mean(po == pp):.2f}; accuracy batched first-token "
          f"{np.mean(po == y):.3f}, full-option chat.score {np.mean(pp == y):.3f}")


if __name__ == "__main__":
    main()
