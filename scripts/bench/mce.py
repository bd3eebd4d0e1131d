"""Benchmark: MCE's option scoring of many (context, case) prompts, one batched forward
per 16 prompts (first token of each condition name) vs ``chat.score`` of the full names,
one prompt at a time (what a user writes with the chat interface alone).

There is no peer implementation to run side by side (the authors' code is locked to one
vendor's agent SDK and a hosted model); the comparison is the evaluation step that
dominates an MCE iteration. Both read SmolLM2-135M-Instruct in-process; the table gives
the time per prompt after warm-up (compile time apart) and how often the two pick the
same condition.

    python scripts/bench/mce.py [--cases 16] [--model smollm2]
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import timed

from jaxsci.agents import mce as M
from jaxsci.common.lm.chat import open_chat_model
from jaxsci.data.diagnosis import make_task


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=16)
    ap.add_argument("--model", default="smollm2")
    a = ap.parse_args()
    chat = open_chat_model(a.model)
    task = make_task(0, n_conditions=4, n_train=48, n_test=a.cases)
    art = M.knn_fewshot(task.names, task.train, 2)
    texts = [c.text for c in task.test]
    ctxs = art.many(texts)
    ours, compile_s, ours_s = timed(
        lambda: M.score_options(chat, ctxs, texts, task.names), reps=1)
    peer, _, peer_s = timed(lambda: np.stack([
        np.asarray(chat.score(M.question_messages(c, t, task.names), list(task.names)))
        for c, t in zip(ctxs, texts, strict=True)]), reps=1)
    y = np.array([c.label for c in task.test])
    agree = float(np.mean(ours.argmax(-1) == peer.argmax(-1)))
    print(f"MCE option scoring, {a.cases} prompts (2-NN contexts), {len(task.names)} names, "
          f"model {a.model}")
    print("| task | jaxsci batched (s) | chat.score each (s) | chat.score / jaxsci | "
          "jaxsci compile (s) |")
    print("|---|---|---|---|---|")
    print(f"| score {a.cases} prompts | {ours_s:.2f} | {peer_s:.2f} | "
          f"{peer_s / ours_s:.1f}x | {compile_s:.2f} |")
    print(f"same answer: {agree:.2f}; accuracy batched first-token {M.accuracy(ours, y):.3f}, "
          f"full-name chat.score {M.accuracy(peer, y):.3f}")


if __name__ == "__main__":
    main()
