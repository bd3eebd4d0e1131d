"""Benchmark: MERLIN (jaxsci) vs PyDMD on the same wave fields.

Task: the ``koopman`` experiment's quick wave set (MERLIN's 2-D wave equation,
``c = 1/16``, frames ``dt = 0.25`` apart, 32 x 32 grid, 80 training and 20 test
trajectories of 53 frames). Both methods see the same normalised training
snapshots and forecast each test trajectory 10 steps from its first 3 frames;
error = mean relative L2 at horizon 10.

* PyDMD (``pydmd.DMD``, the peer a user would pick; PyKoopman does not install
  beside numpy 2): ``DMD(svd_rank=r).fit(X, Y)`` on all consecutive pairs of
  delay-stacked snapshots (delay 3, the configuration the experiment's validation
  picks for the wave; ``r = 64``), called the way a user calls it on the full
  snapshot matrices, timed with BLAS pinned to one thread and with the default
  threads (best reported), and the same fit in POD coordinates (what the experiment
  runs: identical operator, see ``jaxsci.experiments.koopman.dmd_fit``).
* jaxsci: Phase I (``train_phase1``), the global backbone and Phase II
  (``train_memory``) with the quick config (model sizes: ``C.model``, a
  ``koopman.MerlinConfig``; the model from the experiment's public ``new_model``).
  Fit time is wall time including compilation; the training step is also timed alone: a jitted
  ``value_and_grad`` of the Phase-I loss on one batch, first call (compile + run)
  and the mean of 10 further calls.

Ratio = jaxsci fit time / PyDMD fit time (how much more MERLIN costs than DMD),
and the error ratio. Run: ``python scripts/bench/koopman.py``.
"""

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from threadpoolctl import threadpool_limits

from jaxsci.dynamics import koopman as kp
from jaxsci.experiments import koopman as ke

C = ke.CONFIGS["quick"]
HORIZON = 10


def data():
    raw = np.asarray(ke.generate("wave", jax.random.key(0), C.n_train + C.n_test, C.n_grid, C))
    raw = raw.reshape(raw.shape[0], raw.shape[1], -1)
    train, test = raw[: C.n_train], raw[C.n_train :]
    mu, sd = train.mean(), train.std()
    return (train - mu) / sd, (test - mu) / sd


def pydmd_run(train, test, compressed, threads):
    with threadpool_limits(threads):
        t0 = time.perf_counter()
        comp = ke.pod_compress(train, C.n_cond, False, 64) if compressed else None
        fit = ke.dmd_fit(train, 64, C.n_cond, False, comp)
        fit_s = time.perf_counter() - t0
        pred = ke.dmd_forecast(fit, test[:, : C.n_cond], HORIZON)
    err = ke.rel_l2(pred[:, -1], test[:, C.n_cond - 1 + HORIZON]).mean()
    return fit_s, float(err)


def step_timing(coords, train):
    model = ke.new_model(C, jax.random.key(1))
    b, w = C.phase1.batch_size, C.phase1.window + C.n_cond - 1
    vals = jnp.asarray(train[:b, :w])[..., None]
    mask = jnp.ones(vals.shape[:3], bool)
    query = jnp.arange(C.phase1.n_query)
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss(p):
        return kp.phase1_loss(eqx.combine(p, static), coords, vals, mask, query)[0]

    step = jax.jit(jax.value_and_grad(loss))
    t0 = time.perf_counter()
    jax.block_until_ready(step(params))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(10):
        jax.block_until_ready(step(params))
    run = (time.perf_counter() - t0) / 10
    return first - run, run


def main():
    train, test = data()
    coords = ke.grid_coords(C.n_grid)
    print(f"wave, {C.n_grid}x{C.n_grid}, {C.n_train} train / {C.n_test} test trajectories of "
          f"{C.n_snapshots} frames; error = mean relative L2 at horizon {HORIZON}")
    rows = []
    for compressed in (False, True):
        best = min((pydmd_run(train, test, compressed, t) + (t,) for t in (1, None)),
                   key=lambda r: r[0])
        name = "PyDMD DMD r=64 delay 3" + (" (POD coords)" if compressed else "")
        rows.append((name, best[0], best[1], f"BLAS threads {best[2] or 'default'}"))
    compile_s, step_s = step_timing(coords, train)
    t0 = time.perf_counter()
    fitted = ke.fit_merlin(C, jax.random.key(2), coords, train)
    fit_s = time.perf_counter() - t0
    fields, _ = ke.evaluate(fitted, C, coords, test)
    target = test[:, C.n_cond - 1 + HORIZON]
    for kind in ("linear", "memory"):
        err = float(ke.rel_l2(fields[kind][:, HORIZON], target).mean())
        rows.append((f"jaxsci MERLIN ({kind})", fit_s, err, "fit incl. compile"))
    print(f"{'method':34s} {'fit_s':>8s} {'err_h10':>8s}  note")
    for name, t, e, note in rows:
        print(f"{name:34s} {t:8.2f} {e:8.4f}  {note}")
    dmd_t, dmd_e, pod_t = rows[0][1], rows[0][2], rows[1][1]
    print(f"jaxsci Phase-I step: {step_s * 1e3:.1f} ms/step (batch {C.phase1.batch_size} windows "
          f"of {C.phase1.window} latents), compile {compile_s:.2f} s; "
          f"{C.phase1.steps} Phase-I steps + {C.memory.steps} memory steps "
          f"(Phase I {fitted['phase1_time_s']:.1f} s, memory {fitted['memory_time_s']:.1f} s)")
    print(f"ratio fit time jaxsci / PyDMD: {fit_s / dmd_t:.2f}x (full snapshots), "
          f"{fit_s / pod_t:.0f}x (POD coords); error ratio (memory / DMD) at h={HORIZON}: "
          f"{rows[-1][2] / dmd_e:.2f}")


if __name__ == "__main__":
    main()
