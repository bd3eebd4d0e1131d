"""Which programs a set of tests compiles: a census by program name and by test.

Runs pytest in this process (one process, no xdist, the suite's fast-compile XLA flags
from ``tests/conftest.py``, no persistent compilation cache) on the given test paths or
node ids, with JAX's compile log captured. Prints the programs compiled most often and
longest (name, count, seconds: many compiles of a small eager operation point at a
Python loop of ``jnp`` calls, or at host-side work done with ``jnp`` instead of
``numpy``), and the tests that compiled the most programs.

    python scripts/diagnose/compile_census.py tests/dynamics/test_koopman.py \\
        "tests/test_properties.py::TestProperties_koopman" [--top 25]
    python scripts/diagnose/compile_census.py tests --collect-only   # at collection

The compile seconds are XLA's backend compile alone; tracing and lowering come on top
(``JAXSCI_TEST_COMPILE_STATS=1`` on a test run gives those per method).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections import defaultdict


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tests", nargs="+", help="pytest paths or node ids")
    ap.add_argument("--top", type=int, default=25)
    args, extra = ap.parse_known_args(argv)  # other pytest options pass through
    os.environ["JAXSCI_TEST_JAX_CACHE"] = "0"

    import jax
    import pytest

    jax.config.update("jax_log_compiles", True)
    by_name: dict = defaultdict(lambda: [0, 0.0])
    by_test: dict = defaultdict(lambda: [0, 0.0])
    current = ["(collection)"]

    class Collect(logging.Handler):
        def emit(self, record):
            m = re.match(r"Finished XLA compilation of (.+) in ([\d.e-]+) sec",
                         record.getMessage())
            if m:
                t = float(m.group(2))
                for table, key in ((by_name, m.group(1)), (by_test, current[0])):
                    table[key][0] += 1
                    table[key][1] += t

    log = logging.getLogger("jax")
    log.addHandler(Collect())
    log.setLevel(logging.DEBUG)
    log.propagate = False

    class Track:
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            current[0] = item.nodeid
            try:
                return (yield)
            finally:
                current[0] = "(between tests)"

    code = pytest.main(["-q", "-n", "0", "-p", "no:cacheprovider", *extra, *args.tests],
                       plugins=[Track()])
    n = sum(c for c, _ in by_name.values())
    total = sum(t for _, t in by_name.values())
    print(f"\n{n} compilations, {total:.1f} s of XLA backend compile")
    print(f"\nprograms by count (top {args.top}):")
    for name, (c, t) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"  {c:5d}x  {t:7.2f} s  {name}")
    print(f"\nprograms by compile time (top {args.top}):")
    for name, (c, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"  {c:5d}x  {t:7.2f} s  {name}")
    print(f"\ntests by programs compiled (top {args.top}):")
    for name, (c, t) in sorted(by_test.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"  {c:5d}x  {t:7.2f} s  {name}")
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
