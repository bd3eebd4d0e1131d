"""Benchmark: stage attribution by the jvp estimator vs retraining without each stage.

The task: the digits MLP of the attribution experiment (``jaxsci.experiments.attribution``,
quick config, seed 0), four stages, SGD with momentum, weight decay and a cosine
schedule. The ground truth a user would otherwise compute is one retraining per stage;
the peer is that retraining as a plain NumPy loop (forward, backward, SGD-momentum-decay
update written by hand). jaxsci's rows: :func:`jaxsci.llm.attribution.retrain_effects`
(all stages in one vmapped program) and the three estimators of
:func:`~jaxsci.llm.attribution.stage_effects` (no retraining). dattri's TracIn is the
peer for the per-example decomposition when it is installed
(``pip install dattri``); otherwise the script says so. After warm-up, compile time
apart, best of three (the NumPy loop: one run).

    python scripts/bench/attribution.py
"""

from __future__ import annotations

import jax
import numpy as np
from _timing import timed

from jaxsci.experiments import attribution as X
from jaxsci.llm import attribution as A


def numpy_retrain(task, c, skip: int) -> dict:
    """Replay the run in NumPy with stage ``skip``'s steps skipped (schedule in time)."""
    p = {k: np.asarray(v, np.float64) for k, v in task.params.items()}
    mom = {k: np.zeros_like(v) for k, v in p.items()}
    sched = X._schedule(c.digits_steps, c.digits_lr)
    xs, ys = np.asarray(task.batches["x"]), np.asarray(task.batches["y"])
    for t in range(len(task.stages)):
        if task.stages[t] == skip:
            continue
        x, y = xs[t], ys[t]
        h = np.tanh(x @ p["w1"] + p["b1"])
        z = h @ p["w2"] + p["b2"]
        z = np.exp(z - z.max(1, keepdims=True))
        dz = z / z.sum(1, keepdims=True)
        dz[np.arange(len(y)), y] -= 1.0
        dz /= len(y)
        dh = (dz @ p["w2"].T) * (1 - h ** 2)
        g = {"w2": h.T @ dz, "b2": dz.sum(0), "w1": x.T @ dh, "b1": dh.sum(0)}
        lr = float(sched(t))
        for k in p:
            mom[k] = c.momentum * mom[k] + g[k] + c.weight_decay * p[k]
            p[k] = p[k] - lr * mom[k]
    return p


def main():
    c = X.CONFIGS["quick"]
    task = X.digits_task(c, 0)
    n = len(X.STAGES)
    args = (task.loss, task.opt, task.params, task.batches)
    final = A.replay(*args).params
    true, c_true, s_true = timed(lambda: jax.block_until_ready(
        A.retrain_effects(*args, task.stages, n)))
    rows = [("retraining, all stages (vmap)", s_true, c_true, 0.0)]
    flat_true = np.asarray(A.ravel_effects(true))
    for mode in A.MODES:
        est, comp, sec = timed(lambda m=mode: jax.block_until_ready(
            A.stage_effects(*args, task.stages, n, mode=m)))
        flat = np.asarray(A.ravel_effects(est))
        err = float(np.mean(np.linalg.norm(flat - flat_true, axis=1)
                            / np.linalg.norm(flat_true, axis=1)))
        rows.append((f"estimator: {mode}", sec, comp, err))
    _, comp, sec = timed(lambda: jax.block_until_ready(
        A.tracin_scores(task.loss, task.probe, task.opt, task.params, task.batches)))
    rows.append(("TracIn scores (per example)", sec, comp, float("nan")))

    peer, _, peer_s = timed(lambda: [numpy_retrain(task, c, s) for s in range(n)], reps=1)
    agree = max(float(np.max(np.abs(peer[s][k] - (np.asarray(final[k])
                                                  + np.asarray(true[k][s])))))
                for s in range(n) for k in peer[s])
    print(f"stage attribution, digits MLP, {len(task.stages)} steps x {c.batch} examples, "
          f"{n} stages (jax {jax.__version__}, {jax.devices()[0].platform})")
    print("| method | jaxsci (s) | NumPy retraining loop (s) | NumPy / jaxsci "
          "| jaxsci compile (s) | relative parameter error vs retraining |")
    print("|---|---|---|---|---|---|")
    for name, sec, comp, err in rows:
        print(f"| {name} | {sec:.4f} | {peer_s:.3f} | {peer_s / sec:.1f}x | {comp:.2f} "
              f"| {err:.3f} |")
    print(f"largest |jaxsci - NumPy| over retrained parameters: {agree:.2e}")
    try:
        import dattri  # noqa: F401
        print("dattri is installed; its TracIn attributes per example without optimiser "
              "state, compare with the TracIn row by hand.")
    except ImportError:
        print("dattri (TracIn peer) is not installed: pip install dattri")


if __name__ == "__main__":
    main()
