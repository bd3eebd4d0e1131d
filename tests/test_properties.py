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

and ``JAXSCI_PROPERTIES_METHOD=<method>`` (also set for the subprocess) loads only that
method's cases file: importing every method's modules costs the subprocess ~10 s.
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


def _methods():
    return [p.stem for p in sorted(CASES_DIR.glob("*.py")) if not p.stem.startswith("_")]


def _load_cases(only=None):
    """The cases of every method, or of method ``only`` (a fresh process loads just its
    own method's file: importing all of them costs ~10 s on 2 cores)."""
    out = []
    for stem in _methods():
        if only is not None and stem != only:
            continue
        path = CASES_DIR / f"{stem}.py"
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


def _by_method(only=None):
    out = {}
    for case in _load_cases(only):
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


def _fresh_process_class(method):
    def test_checks_in_a_fresh_process(self):
        env = {**os.environ, "JAXSCI_PROPERTIES_INLINE": "1", "JAXSCI_PROPERTIES_METHOD": method}
        root = Path(__file__).resolve().parent.parent
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/test_properties.py",
             "-n", "0", "-q", "-p", "no:cacheprovider", "--durations=5"],
            cwd=root, env=env, capture_output=True, text=True, timeout=1100)
        out = proc.stdout[-6000:] + proc.stderr[-2000:]
        assert proc.returncode >= 0, (
            f"{method}'s property checks: the process died with signal {-proc.returncode}:"
            f"\n{out}")
        assert proc.returncode == 0, f"{method}'s property checks failed:\n{out}"
        summary = re.findall(r"^=*\s*(\d+ passed.*?) in [\d.]+s\b", proc.stdout, re.M)
        assert summary and re.fullmatch(r"\d+ passed(, \d+ warnings?)?", summary[-1]), (
            f"{method}: every check must run and pass (none skipped or deselected):\n{out}")
        print(proc.stdout[-1500:])

    return type(f"TestProperties_{method}", (),
                {"test_checks_in_a_fresh_process": test_checks_in_a_fresh_process})


if INLINE:
    _ONLY = os.environ.get("JAXSCI_PROPERTIES_METHOD") or None
    for _method, _params in _by_method(_ONLY).items():
        globals()[f"TestProperties_{_method}"] = _property_class(_method, _params)

    def test_the_method_declares_three_entry_points():
        per = {}
        for case in _load_cases(_ONLY):
            per.setdefault(case.method, set()).add(case.name)
        if _ONLY is not None:
            # The parent counts only "N passed": every check collected here must belong
            # to the method it asked for, and there must be some.
            assert set(per) == {_ONLY}, (
                f"tests/cases/{_ONLY}.py declares cases of {sorted(per)}, expected {_ONLY}")
        short = {n: len(v) for n, v in per.items() if len(v) < 3}
        assert not short, f"methods with fewer than 3 entry points in the harness: {short}"
else:
    for _method in _methods():
        globals()[f"TestProperties_{_method}"] = _fresh_process_class(_method)


def test_every_landed_method_has_a_cases_file():
    from jaxsci.experiments import REGISTRY

    implemented = [n for n, e in REGISTRY.items() if e.status == "implemented"]
    missing = [n for n in implemented if not (CASES_DIR / f"{n}.py").exists()]
    assert not missing, f"implemented methods without tests/cases/<method>.py: {missing}"
