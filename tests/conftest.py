"""Test-wide setup: the property harness on the path, the fast-compile setting, a
per-session persistent XLA compilation cache, shared smoke runs and per-method test times.

**Compilation cache.** Every run starts with an empty cache in a fresh temporary folder
(removed at the end), one sub-folder per pytest-xdist worker, so the budget's "cold
cache" holds and two processes never write the same folder at once (JAX writes entries
without a lock; a worker's trend-run subprocess uses the worker's folder while the
worker waits for it). Within the run, a program whose HLO was compiled once is loaded,
not compiled again: the experiments build one ``jax.jit`` per training call, and the
second data set's steps of the same shapes (koopman's wave and Navier-Stokes runs, the
masked run, ...) are then cache hits. JAX never writes programs with host callbacks
(``equinox.error_if`` checks, ``jax.debug``) to the cache (``jax/_src/compiler.py``:
"Not writing persistent cache entry ... because it uses host callbacks"), so a loaded
executable never refers to another process's callback. ``JAXSCI_TEST_JAX_CACHE=0``
turns the cache off; ``JAXSCI_TEST_JAX_CACHE=DIR`` keeps it in ``DIR`` across runs
(warm: for local iteration only, not for budget measurements).

Two workers of one clean-clone run crashed (SIGSEGV) inside JAX's compile path on
2026-12-01 while a shared cache was on, and the next run, without any cache, still had
a worker abort (SIGABRT) inside ``backend_compile_and_load`` during a quick trend run:
the crashes are XLA's, not the cache's; the trend runs happen in subprocesses, which a
native crash ends without taking the worker (``tests/experiments/test_protocol.py``).
On 2026-12-02 three clean-clone runs had a worker die (SIGSEGV, in the compile or the
cache write) on one float64 gradient check after ~1000 other tests in that process (the
check passes alone): each method's property checks then ran in a fresh process
(in the worker again since the cause below was found: ``tests/test_properties.py``),
and a dead worker ends the run at once
(``--max-worker-restart=0`` in ``pyproject.toml``) instead of leaving it idle.

**The cause of those crashes (found 2026-12-06): the process runs out of memory
mappings.** Every compiled XLA CPU program maps about 15 regions of memory (its code
and data), and Linux allows ``vm.max_map_count`` = 65530 mappings per process: a worker
that has compiled ~4300 programs cannot map the next one, and LLVM's code emission or
the cache write then segfaults (a clean-clone run of 1054 tests lost both workers this
way at 81%). ``jax.clear_caches()`` drops the compiled programs and their mappings (300
programs: 4805 mappings, then 530 after the clear). :func:`pytest_runtest_teardown`
therefore clears JAX's caches between test modules and classes whenever this process
holds more than ``JAXSCI_TEST_MAX_MAPS`` (30000) mappings; programs a later test needs again come
back from the persistent compilation cache.

The tests compile with XLA's CPU backend optimisation level 0 and with XLA's older
elemental emitters instead of its fusion emitters (``--xla_cpu_use_fusion_emitters=false``):
they are compile-bound, most of their ~1000 compiles per file are small programs (eager
operations, tiny jitted checks) whose cost is the emitter's fixed overhead. Level 0
compiles ~1.5x faster for slower generated code (the same HLO, only the LLVM code
generation differs); the older emitters cut it again (on 2026-12-06,
``tests/dynamics/test_koopman.py`` with ``tests/generative/test_flowsmc.py``, ``-n 0`` on
one core, ``JAXSCI_TEST_JAX_CACHE=0``: 88 s with ``XLA_FLAGS=--xla_cpu_use_fusion_emitters=true``,
53 s without; a flag already in ``XLA_FLAGS`` is kept). The ``reproduce`` trend tests
are run-time-bound; they run each experiment's quick config in a subprocess with XLA's
default settings (``tests/experiments/test_protocol.py``), so the numbers they check are
the ones ``jaxsci reproduce`` gives. ``JAXSCI_TEST_FAST_COMPILE=0`` turns both settings
off.
"""

import atexit
import json
import os
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path


def _cache_folder():
    """This process's compilation-cache folder, or None when the cache is off."""
    chosen = os.environ.get("JAXSCI_TEST_JAX_CACHE", "")
    if chosen == "0":
        return None
    if chosen:
        base = Path(chosen)
    elif os.environ.get("_JAXSCI_TEST_SESSION_CACHE"):  # a worker: the controller's folder
        base = Path(os.environ["_JAXSCI_TEST_SESSION_CACHE"])
    else:  # the controller (or a run without xdist): a fresh, empty folder
        base = Path(tempfile.mkdtemp(prefix="jaxsci-test-xla-cache-"))
        os.environ["_JAXSCI_TEST_SESSION_CACHE"] = str(base)
        atexit.register(shutil.rmtree, base, ignore_errors=True)
    return base / os.environ.get("PYTEST_XDIST_WORKER", "main")


_CACHE = _cache_folder()
if _CACHE is not None:
    # Environment variables, so that the trend runs' subprocesses use the folder too.
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(_CACHE)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402
import pytest  # noqa: E402

# The property harness (tests/properties.py) is imported by name from test files.
sys.path.insert(0, str(Path(__file__).resolve().parent))

if _CACHE is not None:
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
    fast = os.environ.get("JAXSCI_TEST_FAST_COMPILE", "1")
    if fast == "1":
        flags = os.environ.get("XLA_FLAGS", "")
        for flag, value in (("xla_backend_optimization_level", "0"),
                            ("xla_cpu_use_fusion_emitters", "false")):
            if flag not in flags:
                flags += f" --{flag}={value}"
        os.environ["XLA_FLAGS"] = flags.strip()


_MAX_MAPS = int(os.environ.get("JAXSCI_TEST_MAX_MAPS", "30000"))


def _n_maps() -> int:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:  # not Linux: nothing to guard
        return 0


def pytest_runtest_teardown(item, nextitem):
    """Between test modules and classes (``tests/test_properties.py`` holds one class per
    method), drop JAX's compiled programs when this process holds more than
    ``_MAX_MAPS`` memory mappings (see the module docstring)."""
    if nextitem is not None and getattr(nextitem, "module", None) is getattr(
            item, "module", None) and getattr(nextitem, "cls", None) is getattr(item, "cls", None):
        return
    if _n_maps() > _MAX_MAPS:
        import gc

        jax.clear_caches()
        gc.collect()


def _figure_labels(fig):
    """(title, xlabel, ylabel) of every data axes of a figure (colorbars left out)."""
    out = []
    suptitle = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else ""
    for ax in fig.axes:
        three_d = getattr(ax, "name", "") == "3d"
        if ax.get_label() == "<colorbar>" or not ax.get_visible() or not (ax.axison or three_d):
            continue
        title = ax.get_title() or ax.get_title("left") or ax.get_title("right") or suptitle
        out.append({"title": title, "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                    "zlabel": getattr(ax, "get_zlabel", lambda: "-")()})
    return out


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """``smoke_run(name)``: the experiment's smoke config through the driver, once per
    worker. Returns ``(folder, metrics, figures)``; ``figures`` maps each saved file to
    the labels of its axes (recorded as the figure is saved)."""
    from jaxsci.core import results, run_experiment
    from jaxsci.experiments import load

    cache = {}

    def run(name):
        if name not in cache:
            out = tmp_path_factory.mktemp(f"{name}_smoke")
            figures = {}
            real = results.Report.add_figure

            def add_figure(self, fig, filename, caption=""):
                figures[filename] = _figure_labels(fig)
                return real(self, fig, filename, caption)

            results.Report.add_figure = add_figure
            try:
                run_experiment(load(name).EXPERIMENT, "smoke", out, progress=False)
            finally:
                results.Report.add_figure = real
            cache[name] = (out, json.loads((out / "metrics.json").read_text()), figures)
        return cache[name]

    return run


@pytest.fixture(scope="session")
def run_experiment(tmp_path_factory, smoke_run):
    """``run_experiment(module, size)``: run that config into a fresh folder.

    Returns ``(folder, metrics)``; the smoke size reuses ``smoke_run``'s run (one smoke
    run per experiment and worker).
    """

    from jaxsci.core import run_experiment

    def run(module, size):
        name = module.__name__.rsplit(".", 1)[-1]
        if size == "smoke":
            return smoke_run(name)[:2]
        out = tmp_path_factory.mktemp(f"{module.__name__.rsplit('.', 1)[-1]}_{size}")
        run_experiment(module.EXPERIMENT, size, out, progress=False)
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


# ---------------------------------------------------------------------------------------
# Test time per method, against DESIGN's budgets (printed at the end of every run).

BUDGET_UNIT_S = 15.0  # unit + smoke + property tests, per method
BUDGET_REPRODUCE_S = 240.0  # the quick trend test(s), per method
_TIMES: dict = defaultdict(lambda: [0.0, 0.0])
# JAXSCI_TEST_COMPILE_STATS=1: also how much of each method's unit time went to tracing,
# lowering and XLA compiling, and how many programs it compiled (jax.monitoring events
# in the process that ran the test, carried to the controller by each report).
_COMPILE_STATS = os.environ.get("JAXSCI_TEST_COMPILE_STATS", "0") == "1"
_COMPILE_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": 0,
                   "/jax/core/compile/jaxpr_to_mlir_module_duration": 1,
                   "/jax/core/compile/backend_compile_duration": 2}
_NOW = [0.0, 0.0, 0.0, 0]  # trace, lower, compile seconds, compiles: running totals
_COMPILE: dict = defaultdict(lambda: [0.0, 0.0, 0.0, 0])


def _on_compile_event(event: str, duration: float, **kwargs) -> None:
    slot = _COMPILE_EVENTS.get(event)
    if slot is not None:
        _NOW[slot] += duration
        if slot == 2:
            _NOW[3] += 1


if _COMPILE_STATS:
    jax.monitoring.register_event_duration_secs_listener(_on_compile_event)


_LAST = [0.0, 0.0, 0.0, 0]  # the running totals at the last report of this process


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Each setup/call/teardown report carries the compile time spent since the previous
    report of this process (pytest-xdist sends ``user_properties`` to the controller)."""
    report = yield
    if _COMPILE_STATS:
        delta = [a - b for a, b in zip(_NOW, _LAST, strict=True)]
        report.user_properties.append(("jaxsci_compile", delta))
        _LAST[:] = _NOW
    return report


def _method_of(nodeid: str):
    from jaxsci.experiments import REGISTRY

    path, _, rest = nodeid.partition("::")
    m = re.search(r"test_(\w+)\.py$", path)
    stem = m.group(1) if m else ""
    if stem in REGISTRY:
        return stem
    m = re.search(r"(?:Test\w+?_|\[)(\w+?)(?:\.|-|$|::)", rest)
    if m and m.group(1) in REGISTRY:
        return m.group(1)
    return None


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's loadscope with one scope per method: a method's unit, smoke,
    property and trend tests run on one worker, so its session-scoped smoke run and its
    shared compiled programs are built once, not once on every worker that happens to
    run one of its files. The language-model files that load the real SmolLM2 engine
    share one scope (one load per run). Other tests of no method are scoped by file
    (their module-scoped fixtures are built once). (``--dist loadgroup`` would do this
    with marks, but pytest-xdist 3.8 tags node ids in a way pytest 9.2 no longer
    honours.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByMethod(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.partition("::")[0]
            if re.search(r"tests/common/test_(llama|chat|serve|tools|callcache|parity)\.py$", path):
                return "common.lm"  # they share the real SmolLM2 engine (tests/common/conftest.py)
            return _method_of(nodeid) or path

    return ByMethod(config, log)


def pytest_runtest_logreport(report):
    method = _method_of(report.nodeid)
    if method is None:
        return
    slot = 1 if "reproduce" in report.keywords else 0
    _TIMES[method][slot] += report.duration
    for name, value in report.user_properties:
        if name == "jaxsci_compile" and slot == 0:
            for i in range(4):
                _COMPILE[method][i] += value[i]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _TIMES:
        return
    tr = terminalreporter
    tr.section("test time per method (budget: unit+smoke+property 15 s, quick trend 240 s)")
    over = []
    for method, (unit, repro) in sorted(_TIMES.items()):
        flag = ""
        if unit > 2 * BUDGET_UNIT_S or repro > 2 * BUDGET_REPRODUCE_S:
            flag = "  OVER 2x BUDGET"
            over.append(method)
        tr.write_line(f"{method:<20} unit+smoke {unit:7.1f} s   reproduce {repro:7.1f} s{flag}")
    if _COMPILE:
        tr.section("unit+smoke time in tracing / lowering / XLA compiling, per method "
                   "(JAXSCI_TEST_COMPILE_STATS=1)")
        for method, (t, lo, co, n) in sorted(_COMPILE.items()):
            tr.write_line(f"{method:<20} trace {t:6.1f} s  lower {lo:6.1f} s  compile "
                          f"{co:6.1f} s  programs {n:5d}")
    if over and os.environ.get("JAXSCI_ENFORCE_BUDGET", "0") == "1":
        tr.write_line(f"FAILED: methods over twice their test budget: {over}")
        if tr._session.exitstatus == 0:
            tr._session.exitstatus = 1

