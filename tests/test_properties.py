"""One parametrised test over every declared entry point (``tests/cases/*.py``) and
every property it declares (see ``tests/properties.py``)."""

import importlib.util
from pathlib import Path

import pytest
from properties import checks

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
    copies), so writing them to the session's persistent cache buys nothing, and on
    2026-12-01/02 two clean-clone runs had a worker die (SIGSEGV) inside
    ``put_executable_and_time`` (the executable's serialisation) on
    ``streaming_ate.offline_ate-grad[ridge]`` after ~900 other tests; the same check
    passes alone and after its method's other tests. Reads still hit the cache."""
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


for _method, _params in _by_method().items():
    globals()[f"TestProperties_{_method}"] = _property_class(_method, _params)


def test_every_landed_method_declares_three_entry_points():
    from jaxsci.experiments import REGISTRY

    per = {}
    for case in _load_cases():
        per.setdefault(case.method, set()).add(case.name)
    implemented = [n for n, e in REGISTRY.items() if e.status == "implemented"]
    short = {n: len(per.get(n, ())) for n in implemented if len(per.get(n, ())) < 3}
    assert not short, f"methods with fewer than 3 entry points in the harness: {short}"
