import json

import numpy as np
import pytest

from jaxsci.experiments import flowsmc as exp


@pytest.fixture(scope="module")
def smoke(run_experiment):
    return run_experiment(exp, "smoke")


def test_smoke_writes_every_metric_finite(smoke, assert_finite_metrics):
    out, m = smoke
    assert_finite_metrics(m, exp.METRIC_KEYS)
    cfg = exp.CONFIGS["smoke"]
    assert np.asarray(m["grid_mmd_smc"]).shape == (len(cfg.particles), len(cfg.noises))
    assert len(m["ess_trace_smc"]) == len(cfg.stage_times) + 1
    for png in ("samples.png", "ess.png", "digits.png"):
        assert (out / png).stat().st_size > 2_000, png
    assert "naive IS" in (out / "report.md").read_text()
    # ESS are fractions of the particle count.
    assert 0.0 < m["ess_is"] <= 1.0 and 0.0 < m["ess_smc"] <= 1.0


def test_config_validation():
    with pytest.raises(ValueError, match="noise must be one of noises"):
        exp.FlowSMCConfig(noise=0.3).validate()
    with pytest.raises(ValueError, match="stage_times"):
        exp.FlowSMCConfig(stage_times=(0.1, 0.5)).validate()
    with pytest.raises(ValueError, match="obs_std must be > 0"):
        exp.FlowSMCConfig(obs_std=0.0).validate()


@pytest.mark.reproduce
def test_quick_smc_beats_importance_sampling(tmp_path):
    exp.run(exp.CONFIGS["quick"], tmp_path, progress=False)
    m = json.loads((tmp_path / "metrics.json").read_text())
    # Naive IS weights degenerate on the sharp observation; SMC's final weights (since
    # its last resampling) keep a clearly larger ESS.
    assert m["ess_is"] < 0.1
    assert m["ess_smc"] > 2 * m["ess_is"]
    # SMC is closer to the exact conditional than IS, at every particle count.
    i = m["grid_noises"].index(exp.CONFIGS["quick"].noise)
    mmd_smc = np.asarray(m["grid_mmd_smc"])
    assert np.all(mmd_smc[:, i] < np.asarray(m["grid_mmd_is"]))
    # The stochastic intermediate flow matters: without noise resampled copies collapse.
    assert np.all(mmd_smc[:, 1:].min(1) < mmd_smc[:, 0])
    # Digits: SMC agrees with the independent evaluator more often than IS, and both
    # beat unconditional sampling.
    assert m["cond_accuracy_smc"] > m["cond_accuracy_is"] > m["cond_accuracy_unconditional"]
    assert m["ess_digits_smc"] > m["ess_digits_is"]
