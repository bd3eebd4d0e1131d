import dataclasses
import json

import numpy as np
import pytest

from jaxsci.experiments import lyapunov as exp


@pytest.fixture(scope="module")
def smoke(run_experiment):
    return run_experiment(exp, "smoke")


def test_smoke_writes_every_metric_finite(smoke, assert_finite_metrics):
    out, m = smoke
    assert_finite_metrics(m, exp.METRIC_KEYS)
    cfg = exp.CONFIGS["smoke"]
    frac = np.asarray(m["certified_fraction"])
    assert frac.shape == (len(cfg.systems), len(cfg.n_values))
    assert np.all((frac >= 0) & (frac <= 1))
    assert np.all(np.asarray(m["verification_seconds"]) > 0)
    # The monolithic baseline's branch-and-bound runs in more dimensions than a subsystem's.
    k = [cfg.systems.index(s) for s in cfg.monolithic_systems]
    assert np.all(np.asarray(m["monolithic_dims"]) > np.asarray(m["local_dims"])[k][:, None])
    for png in ("verification_time.png", "level_sets.png"):
        assert (out / png).stat().st_size > 2_000, png
    assert "monolithic dims" in (out / "report.md").read_text()


def test_config_validation():
    with pytest.raises(ValueError, match="systems\\[i\\] must be one of"):
        exp.LyapunovConfig(systems=("rockets",)).validate()
    with pytest.raises(ValueError, match="n_values needs >= 2 sizes"):
        exp.LyapunovConfig(n_values=(4,)).validate()
    with pytest.raises(ValueError, match="n_values must be increasing"):
        exp.LyapunovConfig(n_values=(4, 2)).validate()
    with pytest.raises(ValueError, match="max_delay must be >= 0"):
        exp.LyapunovConfig(max_delay=-1).validate()
    with pytest.raises(ValueError, match="figure_system must be one of"):
        dataclasses.replace(exp.CONFIGS["smoke"], figure_system="platoon").validate()


@pytest.mark.reproduce
def test_quick_verification_work_scales_linearly_and_beats_monolithic(tmp_path):
    exp.run(exp.CONFIGS["quick"], tmp_path, progress=False)
    m = json.loads((tmp_path / "metrics.json").read_text())
    # Compositional verification: bounded work per subsystem, so the work (boxes bounded
    # x box dimension, a deterministic count; wall clock is load-dependent and only
    # reported) grows about linearly in N.
    slope = np.asarray(m["verification_work_scaling_exponent"])
    assert np.all((slope > 0.6) & (slope < 1.4)), slope
    assert np.all(np.isfinite(m["verification_scaling_exponent"]))
    frac = np.asarray(m["certified_fraction"])
    mono = np.asarray(m["monolithic_certified_fraction"])
    n_values = m["n_values"]
    rows = [m["systems"].index(s) for s in m["monolithic_systems"]]
    for j, n in enumerate(m["monolithic_n"]):
        k = n_values.index(n)
        # Same total box budget: the monolithic certificate covers less of its domain.
        assert np.all(mono[:, j] < frac[rows, k]), (n, mono[:, j], frac[rows, k])
    # Verification work is per subsystem: the largest N bounds the most boxes.
    boxes = np.asarray(m["boxes"])
    assert np.all(boxes[:, -1] > boxes[:, 0])
