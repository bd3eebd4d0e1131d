import dataclasses
import json

import numpy as np
import pytest

from jaxsci.core import run_experiment
from jaxsci.dynamics import hopfield as hf
from jaxsci.experiments import hopfield as exp


@pytest.fixture(scope="module")
def smoke(smoke_run):
    return smoke_run("hopfield")


def test_smoke_shapes_and_report(smoke):
    out, m, _ = smoke
    n_a, n_t = len(exp.CONFIGS["smoke"].alphas), len(exp.CONFIGS["smoke"].temperatures)
    assert np.asarray(m["alignment_lse"]).shape == (n_a, n_t)
    # The exact density has no finite zero-temperature capacity (documented).
    assert m["alpha_c_T0_lse_exact"] == "inf"
    assert "boundary agreement" in (out / "report.md").read_text()
    # The nested library config is what the run used and recorded.
    assert m["config"]["sampler"]["n_equil"] == exp.CONFIGS["smoke"].sampler.n_equil


def test_interrupted_run_resumes_and_matches_uninterrupted(smoke, tmp_path, monkeypatch):
    # Interrupt after two of the four (kernel, alpha) cells, then rerun: only the
    # missing cells are simulated and the result equals the uninterrupted run with
    # the same seed (which also checks determinism under the seed).
    _, m, _ = smoke
    real = exp.simulate_cell_grid
    calls = []

    def flaky(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(args[2:])
        return real(*args, **kwargs)

    monkeypatch.setattr(exp, "simulate_cell_grid", flaky)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp.EXPERIMENT, "smoke", tmp_path, progress=False)
    assert len(list((tmp_path / ".cells").glob("*.npz"))) == 2

    resumed = []

    def counting(*args, **kwargs):
        resumed.append(args[2:])
        return real(*args, **kwargs)

    monkeypatch.setattr(exp, "simulate_cell_grid", counting)
    run_experiment(exp.EXPERIMENT, "smoke", tmp_path, progress=False)
    assert len(resumed) == 2 and not set(resumed) & set(calls)
    again = json.loads((tmp_path / "metrics.json").read_text())
    assert len(again["resumed_cells"]) == 2
    for k in ("alignment_lse", "alignment_lsr"):
        np.testing.assert_array_equal(m[k], again[k])
    assert not (tmp_path / ".cells").exists()


def test_crossing_alpha_interpolates_and_censors():
    alphas = np.array([0.1, 0.2, 0.3])
    a, censored = exp.crossing_alpha(alphas, np.array([0.9, 0.7, 0.3]), 0.5)
    assert a == pytest.approx(0.25) and not censored
    a, censored = exp.crossing_alpha(alphas, np.array([0.9, 0.8, 0.7]), 0.5)
    assert a == 0.3 and censored


def test_config_validates_at_construction():
    with pytest.raises(ValueError, match="max_patterns"):
        exp.HopfieldConfig(n=40, alphas=(0.6,))
    with pytest.raises(ValueError, match="alphas must be increasing"):
        exp.HopfieldConfig(alphas=(0.3, 0.1))
    with pytest.raises(ValueError, match="threshold must be < 1"):
        exp.HopfieldConfig(threshold=1.0)
    # The nested sampler config validates itself.
    with pytest.raises(ValueError, match="n_sample must be >= 1"):
        exp.HopfieldConfig(sampler=hf.MetropolisConfig(n_sample=0))


def test_one_owner_per_sampler_number():
    # The experiment declares no sampler setting of its own: the library's config is it.
    fields = {f.name for f in dataclasses.fields(exp.HopfieldConfig)}
    assert not fields & {"n_equil", "n_sample", "init_noise", "step_size"}
    assert exp.HopfieldConfig().sampler == hf.MetropolisConfig()
    assert exp.KERNELS["lsr"](exp.HopfieldConfig(b=3.0)) == hf.LSR(3.0)


def test_chunk_size_respects_the_memory_budget():
    cfg = exp.HopfieldConfig(memory_budget_gb=1e-3)
    # 4 temporaries of M float32 per chain: 1 MB / (16 * 1000 B) = 62 chains.
    assert exp.chunk_size(cfg, 1000) == 62
    assert exp.chunk_size(cfg, 10**9) == 1


def test_full_is_refused_up_front_where_it_cannot_fit(tmp_path, monkeypatch):
    # The paper's scale (M = e^18 patterns of N = 30, a 40 GB step budget) on a machine
    # with 24 GB available: refused with the estimate before any output is written.
    from jaxsci.core import experiment as core_exp

    monkeypatch.setattr(core_exp, "_available_memory_gb", lambda: (24.0, "this machine"))
    full = exp.CONFIGS["full"]
    assert exp.memory_gb(full) > 24.0 > 10 * exp.memory_gb(exp.CONFIGS["quick"])
    with pytest.raises(MemoryError, match=r"needs about 49 GB .* this machine has 24 GB"):
        run_experiment(exp.EXPERIMENT, "full", tmp_path / "full", progress=False)
    assert not (tmp_path / "full").exists()
