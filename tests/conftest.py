"""Test-wide setup: a persistent XLA compilation cache shared by the suite.

Compiling dominates the smoke tests on a 2-core machine; the same programs are
compiled again by later tests and by CLI subprocesses (which inherit these
environment variables), so caching them cuts the suite's time without changing
any result (a cached executable is the same compiled program).

A run that deselects the ``reproduce`` trend tests (``-m "not reproduce"``: the unit
and smoke loop) also compiles with XLA's CPU backend optimisation level 0: those
tests are compile-bound, and level 0 compiles ~1.5x faster for slower generated code
(the same HLO, only the LLVM code generation differs). Runs that include the
``reproduce`` tests (CI's full suite) keep the default. ``JAXSCI_TEST_FAST_COMPILE=0``
or ``=1`` forces either choice.
"""

import json
import os
from pathlib import Path

# One cache folder per pytest-xdist worker, so two processes never write the same
# entry (the workers inherit the controller's environment, so set it, not setdefault).
_ROOT = Path(__file__).resolve().parents[1]
_CACHE = Path(os.environ.get("JAXSCI_TEST_JAX_CACHE", _ROOT / ".jax_cache"))
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
os.environ["JAX_COMPILATION_CACHE_DIR"] = str(_CACHE / _WORKER)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update(
    "jax_persistent_cache_min_compile_time_secs",
    float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]),
)
jax.config.update(
    "jax_persistent_cache_min_entry_size_bytes",
    int(os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"]),
)


def pytest_configure(config):
    # Before any test computes (the CPU backend reads XLA_FLAGS when it starts); xdist
    # workers run this hook too, with the same -m expression.
    fast = os.environ.get("JAXSCI_TEST_FAST_COMPILE")
    if fast is None:
        fast = "1" if "not reproduce" in (config.option.markexpr or "") else "0"
    if fast == "1" and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()


@pytest.fixture(scope="session")
def run_experiment(tmp_path_factory):
    """``run_experiment(module, size)``: run that config into a fresh folder.

    Returns ``(folder, metrics)``; shared by the experiment tests' smoke fixtures.
    """

    def run(module, size):
        out = tmp_path_factory.mktemp(f"{module.__name__.rsplit('.', 1)[-1]}_{size}")
        module.run(module.CONFIGS[size], out, progress=False)
        return out, json.loads((out / "metrics.json").read_text())

    return run


def _leaves(tree):
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _leaves(v)]
    return [tree]


@pytest.fixture(scope="session")
def assert_finite_metrics():
    """``assert_finite_metrics(metrics, keys)``: every key is present and all its
    numbers (nested dicts and lists included) are finite, at least one of them."""
    import numpy as np

    def check(metrics, keys):
        for key in keys:
            assert key in metrics, key
            vals = np.asarray(_leaves(metrics[key]), dtype=float)
            assert vals.size and np.all(np.isfinite(vals)), key

    return check
