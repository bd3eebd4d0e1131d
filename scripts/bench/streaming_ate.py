"""Benchmark: streaming ATE by balancing coresets vs EconML ``LinearDML`` refits.

A user who wants an ATE that stays current over a stream would, with EconML, keep
every unit and refit ``LinearDML`` (default nuisance models, the covariates and stream
time as controls ``W``) at every report. jaxsci keeps three merge-reduce coresets of
``levels x m`` points and, at a report, solves the balancing problem on them. On the
same shifting stream (:func:`jaxsci.stats.streaming_ate.make_shifting_stream`) at each
``n`` we measure, after warm-up (compile time reported apart):

* jaxsci: wall time per unit of the jitted update (``step`` scanned over chunks of
  ``--chunk`` units), the time of one estimate, and the peak number of stored points;
* EconML: the time of one ``LinearDML`` fit on all ``n`` units (what each report costs)
  and the rows it keeps (``n``);

and print the ratio (one EconML refit / one jaxsci report, and per-unit cost when a
report is made every ``--report-every`` units), plus both estimates (true ATE 1).

    python scripts/bench/streaming_ate.py [--ns 2000 20000] [--m 32] [--chunk 1000]

EconML (``econml``) is in jaxsci's ``bench`` extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax
import numpy as np

from jaxsci.stats import streaming_ate as sa


def jaxsci_side(n, m, chunk, key):
    s = sa.make_shifting_stream(key, n)
    est = sa.StreamingATE(sa.Gaussian(1.0), m=m, levels=sa.levels_for(n, m))

    @jax.jit
    def feed(state, xs, ts, ys):
        def body(st, u):
            return sa.step(est, st, u[0], u[1], u[2])[0], None

        return jax.lax.scan(body, state, (xs, ts, ys))[0]

    report = jax.jit(lambda st: sa.estimate(est, st).ate)
    st = sa.init(est, s.x.shape[1], jax.random.key(1))
    t0 = time.perf_counter()
    warm = feed(st, s.x[:chunk], s.treat[:chunk], s.y[:chunk])
    jax.block_until_ready(report(warm))
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(0, n, chunk):
        st = feed(st, s.x[i:i + chunk], s.treat[i:i + chunk], s.y[i:i + chunk])
    jax.block_until_ready(st)
    per_unit = (time.perf_counter() - t0) / n
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        ate = float(jax.block_until_ready(report(st)))
        times.append(time.perf_counter() - t0)
    return {"per_unit_s": per_unit, "report_s": float(np.median(times)), "ate": ate,
            "stored": int(st.peak_stored), "compile_s": compile_s - float(np.median(times))}


def econml_side(n, key):
    from econml.dml import LinearDML

    s = sa.make_shifting_stream(key, n)
    x, t, y = (np.asarray(a) for a in (s.x, s.treat, s.y))
    t0 = time.perf_counter()
    est = LinearDML(discrete_treatment=True, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        est.fit(y, t.astype(int), X=None, W=x)
    return {"fit_s": time.perf_counter() - t0, "ate": float(est.ate()), "stored": n}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ns", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--m", type=int, default=32)
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--report-every", type=int, default=100)
    args = ap.parse_args()
    try:
        import econml
    except ImportError:
        print("skipped: EconML is not installed (pip install -e '.[bench]')")
        return
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; econml {econml.__version__};"
          f" m = {args.m}, chunk {args.chunk}, a report every {args.report_every} units")
    hdr = (f"{'n':>7} | {'jaxsci us/unit':>14} {'report s':>9} {'stored':>7} {'compile s':>9}"
           f" {'ATE':>6} | {'EconML fit s':>12} {'stored':>7} {'ATE':>6} | "
           f"{'refit/report':>12} {'per-unit ratio':>14}")
    print(hdr)
    print("-" * len(hdr))
    for n in args.ns:
        key = jax.random.key(n)
        j = jaxsci_side(n, args.m, min(args.chunk, n), key)
        e = econml_side(n, key)
        # Per unit with a report every k units: jaxsci's update + report / k; EconML's
        # refit / k (its per-unit update is appending a row, free).
        k = args.report_every
        ratio_unit = (e["fit_s"] / k) / (j["per_unit_s"] + j["report_s"] / k)
        print(f"{n:>7} | {1e6 * j['per_unit_s']:>14.1f} {j['report_s']:>9.3f} {j['stored']:>7}"
              f" {j['compile_s']:>9.1f} {j['ate']:>6.3f} | {e['fit_s']:>12.3f} {e['stored']:>7}"
              f" {e['ate']:>6.3f} | {e['fit_s'] / j['report_s']:>11.1f}x {ratio_unit:>13.1f}x")


if __name__ == "__main__":
    main()
