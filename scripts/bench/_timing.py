"""Shared timing for the benchmark scripts (run as ``python scripts/bench/NAME.py``, so
this folder is on ``sys.path``)."""

from __future__ import annotations

import time


def timed(fn, reps=3):
    """``(result, compile_s, best_s)``: the first call's extra time over the best of
    ``reps`` later calls (compilation, for a jitted ``fn``), and that best time."""
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return out, max(first - min(ts), 0.0), min(ts)
