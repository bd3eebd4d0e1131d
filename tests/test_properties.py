"""One parametrised test over every declared entry point (``tests/cases/*.py``) and
every property it declares (see ``tests/properties.py``).

Each method's checks run in a fresh interpreter: ``TestProperties_<method>`` has one test,
which runs ``pytest`` on the method's checks in a subprocess (with the test session's
environment: the fast-compile setting, the worker's compilation cache) and fails with
the failing checks' report. On 2026-12-02 three clean-clone runs had a worker die
(SIGSEGV, inside XLA's compile or the cache write of the executable) on
``streaming_ate.offline_ate-grad[ridge]`` after ~1000 other tests in the same process,
while the check passed alone and after its method's other tests: a native crash that
depends on the process's history. A fresh process per method gives every method's
checks the same history, on CI and locally, and a crash ends one subprocess, not the
worker. ``JAXSCI_PROPERTIES_INLINE=1`` (set for the subprocess) collects the checks
themselves, one test each, e.g. to run a single check while debugging::

    JAXSCI_PROPERTIES_INLINE=1 python -m pytest -n 0 tests/test_properties.py -k offline_ate
"""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from properties import checks

INLINE = os.environ.get("JAXSCI_PROPERTIES_INLINE", "0") == "1"

CASES_DIR = Path(__file__).parent / "cases"


def _load_cases():
    out = []
    for path in sorted(CASES_DIR.glob("*.py")):
        if path.stem.startswith("_"):
            continue
        spec = importlib.util.spec_from_file_location(f"cases_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out.extend(mod.CASES)
    return out


@pytest.fixture(autouse=True)
def _no_persistent_cache_writes():
    """The checks compile programs no other test compiles (float64 gradients, vmapped
    copies), so writing them to the session's persistent cache buys nothing (and the
    first crash above was inside such a write). Reads still hit the cache."""
    import jax

    before = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1e9)
    yield
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before)


def _by_method():
    out = {}
    for case in _load_cases():
        for cid, fn in checks(case):
            out.setdefault(case.method, []).append(pytest.param(fn, id=f"{case.name}-{cid}"))
    return out


def _property_class(method, params):
    # One class per method: a readable report, and the class name tells
    # tests/conftest.py which method (pytest-xdist group) the checks belong to.
    @pytest.mark.parametrize("check", params)
    def test_property(self, check):
        check()

    return type(f"TestProperties_{method}", (), {"test_property": test_property})


def _fresh_process_class(method, n_checks):
    def test_checks_in_a_fresh_process(self):
        env = {**os.environ, "JAXSCI_PROPERTIES_INLINE": "1"}
        root = Path(__file__).resolve().parent.parent
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", f"tests/test_properties.py::TestProperties_{method}",
             "-n", "0", "-q", "-p", "no:cacheprovider", "--durations=5"],
            cwd=root, env=env, capture_output=True, text=True, timeout=1100)
        out = proc.stdout[-6000:] + proc.stderr[-2000:]
        assert proc.returncode >= 0, (
            f"{method}'s property checks: the process died with signal {-proc.returncode}:"
            f"\n{out}")
        assert proc.returncode == 0, f"{method}'s property checks failed:\n{out}"
        assert re.search(rf"\b{n_checks} passed\b", proc.stdout), (
            f"{method}: expected {n_checks} checks to pass:\n{out}")
        print(proc.stdout[-1500:])

    return type(f"TestProperties_{method}", (),
                {"test_checks_in_a_fresh_process": test_checks_in_a_fresh_process})


for _method, _params in _by_method().items():
    globals()[f"TestProperties_{_method}"] = (
        _property_class(_method, _params) if INLINE else
        _fresh_process_class(_method, len(_params)))


def test_every_landed_method_declares_three_entry_points():
    from jaxsci.experiments import REGISTRY

    per = {}
    for case in _load_cases():
        per.setdefault(case.method, set()).add(case.name)
    implemented = [n for n, e in REGISTRY.items() if e.status == "implemented"]
    short = {n: len(per.get(n, ())) for n in implemented if len(per.get(n, ())) < 3}
    assert not short, f"methods with fewer than 3 entry points in the harness: {short}"
