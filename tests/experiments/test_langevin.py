import json

import numpy as np
import pytest

from jaxsci.experiments import langevin as E


def test_smoke_writes_every_metric(tmp_path):
    report = E.run(E.CONFIGS["smoke"], tmp_path, progress=False)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for key in E.METRIC_KEYS:
        assert key in metrics, key
        if key in ("systems",):
            continue
        vals = np.asarray(metrics[key], dtype=float).ravel()
        assert vals.size and np.all(np.isfinite(vals)), key
    assert (tmp_path / "error_vs_tau.png").exists() and (tmp_path / "drift_fields.png").exists()
    assert (tmp_path / "report.md").exists()
    assert report.metrics["wrmse_augmented"].shape == (2, 2)


def test_config_validation():
    with pytest.raises(ValueError, match="taus must be strictly increasing"):
        E.LangevinConfig(taus=(0.5, 0.1)).validate()
    with pytest.raises(ValueError, match="taus must be multiples of dt"):
        E.LangevinConfig(taus=(0.015,)).validate()
    with pytest.raises(ValueError, match="systems"):
        E.LangevinConfig(systems=("lorenz",)).validate()
    with pytest.raises(ValueError, match="diffusion_mode"):
        E.LangevinConfig(diffusion_mode="guess").validate()


@pytest.mark.reproduce
def test_quick_reproduces_paper_trend(tmp_path):
    c = E.CONFIGS["quick"]
    m = E.run(c, tmp_path, progress=False).metrics
    direct, geo, aug = m["wrmse_direct"], m["wrmse_geometric"], m["wrmse_augmented"]
    # 1. At the largest interval the augmented estimator beats the direct one on every system.
    assert np.all(aug[:, -1] < direct[:, -1])
    # 2. The direct estimator degrades as tau grows (its bias toward (E[x'|x] - x) / tau).
    assert np.all(direct[:, -1] > direct[:, 0])
    # 3. On non-conservative systems the geometric estimator fails (error near the drift's
    #    own size) and the augmented one beats it.
    for i, s in enumerate(c.systems):
        if s not in ("double_well",):
            assert geo[i, -1] > 0.8 * m["drift_rms"][i, -1]
            assert aug[i, -1] < geo[i, -1]
