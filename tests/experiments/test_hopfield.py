import json
import math

import numpy as np
import pytest

from jaxsci.experiments import hopfield as exp


def _finite(v):
    arr = np.asarray(v, dtype=float)
    return np.all(np.isfinite(arr))


@pytest.fixture(scope="module")
def smoke(run_experiment):
    return run_experiment(exp, "smoke")


def test_smoke_writes_every_metric_finite(smoke):
    out, m = smoke
    for key in exp.METRIC_KEYS:
        assert key in m, key
        if key == "alpha_c_T0_lse_exact":
            # The exact density has no finite zero-temperature capacity (documented).
            assert m[key] == "inf"
        else:
            assert _finite(m[key]), key
    n_a, n_t = len(exp.CONFIGS["smoke"].alphas), len(exp.CONFIGS["smoke"].temperatures)
    assert np.asarray(m["alignment_lse"]).shape == (n_a, n_t)
    assert (out / "phase_diagrams.png").stat().st_size > 10_000
    assert "boundary agreement" in (out / "report.md").read_text()


def test_interrupted_run_resumes_and_matches_uninterrupted(smoke, tmp_path, monkeypatch):
    # Interrupt after two of the four (kernel, alpha) cells, then rerun: only the
    # missing cells are simulated and the result equals the uninterrupted run with
    # the same seed (which also checks determinism under the seed).
    _, m = smoke
    real = exp.simulate_cell_grid
    calls = []

    def flaky(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(args[2:])
        return real(*args, **kwargs)

    monkeypatch.setattr(exp, "simulate_cell_grid", flaky)
    with pytest.raises(KeyboardInterrupt):
        exp.run(exp.CONFIGS["smoke"], tmp_path, progress=False)
    assert len(json.loads((tmp_path / "progress.json").read_text())["cells"]) == 2

    resumed = []

    def counting(*args, **kwargs):
        resumed.append(args[2:])
        return real(*args, **kwargs)

    monkeypatch.setattr(exp, "simulate_cell_grid", counting)
    exp.run(exp.CONFIGS["smoke"], tmp_path, progress=False)
    assert len(resumed) == 2 and not set(resumed) & set(calls)
    again = json.loads((tmp_path / "metrics.json").read_text())
    for k in ("alignment_lse", "alignment_lsr"):
        np.testing.assert_array_equal(m[k], again[k])
    assert not (tmp_path / "progress.json").exists()


def test_crossing_alpha_interpolates_and_censors():
    alphas = np.array([0.1, 0.2, 0.3])
    a, censored = exp.crossing_alpha(alphas, np.array([0.9, 0.7, 0.3]), 0.5)
    assert a == pytest.approx(0.25) and not censored
    a, censored = exp.crossing_alpha(alphas, np.array([0.9, 0.8, 0.7]), 0.5)
    assert a == 0.3 and censored


def test_config_validation():
    with pytest.raises(ValueError, match="max_patterns"):
        exp.HopfieldConfig(n=40, alphas=(0.6,)).validate()
    with pytest.raises(ValueError, match="alphas must be increasing"):
        exp.HopfieldConfig(alphas=(0.3, 0.1)).validate()
    with pytest.raises(ValueError, match="threshold must be < 1"):
        exp.HopfieldConfig(threshold=1.0).validate()


@pytest.mark.reproduce
def test_quick_reproduces_phase_diagram_trends(tmp_path):
    cfg = exp.CONFIGS["quick"]
    exp.run(cfg, tmp_path, progress=False)
    m = json.loads((tmp_path / "metrics.json").read_text())
    thr = m["threshold"]
    # The Monte-Carlo maps follow an analytic boundary (the better of the two densities)
    # on most of the grid, for both kernels.
    for kernel in ("lse", "lsr"):
        best = max(m[f"boundary_agreement_{kernel}_gaussian"],
                   m[f"boundary_agreement_{kernel}_exact"])
        assert best >= 0.8, (kernel, best)
    # LSR: below alpha_th the target is retrieved at every temperature simulated.
    assert m["lsr_min_alignment_below_th"] > thr
    # LSE: a critical line at every load: at the highest T even the smallest load is lost
    # for LSE, and LSR keeps more of the (alpha, T) plane than LSE.
    lse, lsr = np.asarray(m["alignment_lse"]), np.asarray(m["alignment_lsr"])
    assert np.all(lse[:, -1] < thr)
    assert (lsr > thr).sum() > (lse > thr).sum()
    # Near T = 0 retrieval extends to large loads (the paper: alpha_c(0) = 0.5).
    assert m["alpha_c_T0_lse_mc"] >= 0.4 and m["alpha_c_T0_lsr_mc"] >= 0.4
    assert math.isfinite(m["wall_time_s"])
