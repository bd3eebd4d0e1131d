"""One parametrised test over every declared entry point (``tests/cases/*.py``) and
every property it declares (see ``tests/properties.py``).

``TestProperties_<method>`` holds one test per check of that method's cases; the class
name tells ``tests/conftest.py`` which method (pytest-xdist scope) the checks belong to,
so they run on the worker that has already imported the method's modules and compiled
its programs.

**History: a fresh process per method (2026-12-02 to 2026-12-06).** On 2026-12-02 three
clean-clone runs had a worker die (SIGSEGV, inside XLA's compile or the cache write of
the executable) on ``streaming_ate.offline_ate-grad[ridge]`` after ~1000 other tests in
the same process, while the check passed alone. Each method's checks then ran in a
subprocess of their own. The cause, found on 2026-12-06, was the process running out of
memory mappings (``vm.max_map_count``; ``tests/conftest.py`` now drops JAX's compiled
programs between test classes and modules when a worker holds too many), so the checks
run in the worker again: each subprocess cost seconds of interpreter, pytest and import
start-up (lagrangian's, one core: 8.7 s for the subprocess test, 5.6 s of checks in it).
``JAXSCI_PROPERTIES_FRESH=1`` brings the fresh processes back (one test per method,
failing with the failing checks' report), e.g. to tell a native crash from a failing
check; ``JAXSCI_PROPERTIES_METHOD=<method>`` collects only that method's
checks, e.g. to run a single check while debugging::

    JAXSCI_PROPERTIES_METHOD=streaming_ate python -m pytest -n 0 tests/test_properties.py \
        -k offline_ate
"""

import functools
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from properties import checks

FRESH = os.environ.get("JAXSCI_PROPERTIES_FRESH", "0") == "1"

CASES_DIR = Path(__file__).parent / "cases"


def _methods():
    return [p.stem for p in sorted(CASES_DIR.glob("*.py")) if not p.stem.startswith("_")]


@functools.cache
def _load_cases(only=None):
    """The cases of every method, or of method ``only`` (a fresh process loads just its
    own method's file: importing all of them costs ~10 s on 2 cores); loaded once per
    process (collection and the entry-point count share them)."""
    out = []
    for stem in _methods():
        if only is not None and stem != only:
            continue
        path = CASES_DIR / f"{stem}.py"
        spec = importlib.util.spec_from_file_location(f"cases_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out.extend(mod.CASES)
    return tuple(out)


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
        env = {**os.environ, "JAXSCI_PROPERTIES_FRESH": "0", "JAXSCI_PROPERTIES_METHOD": method}
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


_ONLY = os.environ.get("JAXSCI_PROPERTIES_METHOD") or None

if FRESH and _ONLY is None:
    for _method in _methods():
        globals()[f"TestProperties_{_method}"] = _fresh_process_class(_method)
else:
    for _method, _params in _by_method(_ONLY).items():
        globals()[f"TestProperties_{_method}"] = _property_class(_method, _params)

    def test_the_method_declares_three_entry_points():
        per = {}
        for case in _load_cases(_ONLY):
            per.setdefault(case.method, set()).add(case.name)
        if _ONLY is not None:
            # A fresh-process parent counts only "N passed": every check collected here
            # must belong to the method it asked for, and there must be some.
            assert set(per) == {_ONLY}, (
                f"tests/cases/{_ONLY}.py declares cases of {sorted(per)}, expected {_ONLY}")
        short = {n: len(v) for n, v in per.items() if len(v) < 3}
        assert not short, f"methods with fewer than 3 entry points in the harness: {short}"


def test_every_landed_method_has_a_cases_file():
    from jaxsci.experiments import REGISTRY

    implemented = [n for n, e in REGISTRY.items() if e.status == "implemented"]
    missing = [n for n in implemented if not (CASES_DIR / f"{n}.py").exists()]
    assert not missing, f"implemented methods without tests/cases/<method>.py: {missing}"
