import json
import math

import pytest

from jaxsci.experiments import particles as exp


def test_smoke_writes_every_metric(tmp_path):
    report = exp.run(exp.CONFIGS["smoke"], tmp_path, progress=False)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for key in exp.METRIC_KEYS:
        assert key in metrics, key
        vals = metrics[key] if isinstance(metrics[key], list) else [metrics[key]]
        assert all(isinstance(v, int | float) and math.isfinite(v) for v in vals), key
    assert (tmp_path / "final_configurations.png").exists()
    assert (tmp_path / "cluster_counts.png").exists()
    assert "atoms" in (tmp_path / "report.md").read_text()
    assert report.metrics["energy_monotone"] == 1.0


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="betas"):
        exp.ParticlesConfig(betas=(-1.0,)).validate()
    with pytest.raises(ValueError, match="d must be >= 2"):
        exp.ParticlesConfig(d=1).validate()


@pytest.mark.reproduce
def test_quick_reproduces_paper_trend(tmp_path):
    cfg = exp.CONFIGS["quick"]
    m = exp.run(cfg, tmp_path, progress=False).metrics
    # gradient flow: the energy never decreases (float32 round-off allowance only)
    assert m["energy_monotone"] == 1.0
    # attention alone collapses to one cluster (at the betas whose metastable
    # clusters merge within t1; larger beta merges exponentially slowly)
    by_beta = dict(zip(cfg.betas, m["clusters_attention_only_by_beta"], strict=True))
    assert by_beta[1.0] == 1 and by_beta[2.0] == 1
    # with the perceptron: critical points (velocity ~ 0) that are a few atoms
    assert m["atomic_fraction"] >= 0.9
    assert m["clusters_with_perceptron"] <= cfg.atomic_max
    assert m["stationary_fraction_with_perceptron"] > m["stationary_fraction_attention_only"]
