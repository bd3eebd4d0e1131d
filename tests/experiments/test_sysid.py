import json
import math

import numpy as np
import pytest

from jaxsci.experiments import sysid as E


def test_smoke_writes_every_metric(tmp_path):
    report = E.run(E.CONFIGS["smoke"], tmp_path, progress=False)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for key in E.METRIC_KEYS:
        assert key in metrics, key
        vals = np.asarray(metrics[key], dtype=float).ravel()
        assert vals.size and np.all(np.isfinite(vals)), key
    assert (tmp_path / "error_vs_L.png").exists() and (tmp_path / "error_vs_p.png").exists()
    assert (tmp_path / "report.md").exists()
    assert report.metrics["err_l2"].shape == (1, 3)


def test_config_validation():
    with pytest.raises(ValueError, match="probs"):
        E.SysidConfig(probs=(0.0, 1.5)).validate()
    with pytest.raises(ValueError, match="lengths"):
        E.SysidConfig(lengths=(0, 2)).validate()
    with pytest.raises(ValueError, match="fixed_p"):
        E.SysidConfig(fixed_p=0.33).validate()


def test_crossing_p():
    p = np.array([0.0, 0.2, 0.4])
    assert E.crossing_p(p, np.array([0.1, 0.5, 1.5]), 1.0) == (pytest.approx(0.3), False)
    assert E.crossing_p(p, np.array([0.1, 0.2, 0.3]), 1.0) == (0.4, True)


@pytest.mark.reproduce
def test_quick_reproduces_paper_trend(tmp_path):
    m = E.run(E.CONFIGS["quick"], tmp_path, progress=False).metrics
    c = E.CONFIGS["quick"]
    probs = np.asarray(c.probs)
    l2, ls = m["err_l2"], m["err_ls"]
    j = c.probs.index(c.fixed_p)
    # 1. Error decays with the memory length L (below the threshold).
    assert l2[-1, j] < 0.25 * l2[0, j]
    assert l2[-1, 0] < 0.25 * l2[0, 0]
    # 2. Below the threshold the l2 estimator stays small where least squares fails.
    below = (probs > 0) & (probs <= 0.3)
    assert np.all(l2[-1, below] < 0.2)
    assert np.all(ls[-1, below] > 10.0 * l2[-1, below])
    assert np.all(ls[-1, (probs >= 0.1) & (probs <= 0.3)] > c.breakdown_level)
    # 3. Past the threshold the l2 estimator breaks down too; the threshold is in (0, 1).
    thr = m["empirical_p_threshold"]
    assert not m["empirical_p_threshold_censored"]
    assert 0.3 < thr < 0.7
    assert np.all(l2[-1, probs > thr] > c.breakdown_level)
    assert math.isfinite(m["wall_time_s"])
