"""Where an experiment's smoke run spends its time: wall clock, tracing and compiling.

Runs ``NAME``'s smoke config through the driver in this process, with the XLA flags the
test suite's workers use (``tests/conftest.py``: backend optimisation level 0 and the
older elemental emitters) unless ``--level 3`` asks for XLA's default level, and no
persistent compilation cache (a cold start, as the budget counts it). Prints the wall
time, the number of XLA compilations, the seconds spent tracing and compiling, and the
programs that took longest to compile; the rest of the wall time is imports, model
loading, execution and host work.

    python scripts/diagnose/smoke_profile.py misalignment [--level 0|3] [--top 8]

The test suite's smoke runs take longer than this (about 1.5-2x on 2 cores): two
pytest-xdist workers share the cores.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name")
    ap.add_argument("--level", type=int, choices=(0, 3), default=0,
                    help="XLA backend optimisation level (0: the test suite's)")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args(argv)
    flags = "--xla_cpu_use_fusion_emitters=false"
    if args.level == 0:
        flags += " --xla_backend_optimization_level=0"
    os.environ["XLA_FLAGS"] = flags
    os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)

    import jax

    jax.config.update("jax_log_compiles", True)
    compiles: dict = defaultdict(lambda: [0, 0.0])
    tracing = [0.0]

    class Collect(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            m = re.match(r"Finished XLA compilation of (.+) in ([\d.e-]+) sec", msg)
            if m:
                compiles[m.group(1)][0] += 1
                compiles[m.group(1)][1] += float(m.group(2))
            m = re.match(r"Finished tracing .* in ([\d.e-]+) sec", msg)
            if m:
                tracing[0] += float(m.group(1))

    log = logging.getLogger("jax")
    log.addHandler(Collect())
    log.setLevel(logging.DEBUG)
    log.propagate = False  # the handler above reads them; nothing printed

    from jaxsci.core import run_experiment
    from jaxsci.experiments import load

    out = Path(tempfile.mkdtemp(prefix=f"smoke_profile_{args.name}_"))
    t0 = time.perf_counter()
    try:
        run_experiment(load(args.name).EXPERIMENT, "smoke", out, progress=False)
    finally:
        wall = time.perf_counter() - t0
        shutil.rmtree(out, ignore_errors=True)
    n = sum(c for c, _ in compiles.values())
    total = sum(t for _, t in compiles.values())
    print(f"{args.name} smoke, XLA backend level {args.level}: {wall:.1f} s wall; "
          f"{n} compilations {total:.1f} s, tracing {tracing[0]:.1f} s")
    for prog, (c, t) in sorted(compiles.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"  {t:6.2f} s  {c:3d}x  {prog}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
