import numpy as np
import pytest

from jaxsci.experiments import flowsmc as exp
from jaxsci.generative import flowsmc as fs


def test_smoke_grids_ranges_and_checkpoints(smoke_run):
    out, m, _ = smoke_run("flowsmc")
    cfg = exp.CONFIGS["smoke"]
    assert np.asarray(m["grid_mmd_smc"]).shape == (len(cfg.particles), len(cfg.noises))
    assert len(m["ess_trace_smc"]) == len(cfg.smc.stage_times) + 1
    # ESS are fractions of the particle count.
    assert 0.0 < m["ess_is"] <= 1.0 and 0.0 < m["ess_smc"] <= 1.0
    assert "naive IS" in (out / "report.md").read_text()
    # Every trained network checkpointed (a rerun of the same command resumes).
    for stage in ("mixture_flow", "digits_flow", "digits_classifier", "digits_evaluator"):
        assert any((out / "checkpoints" / stage).iterdir()), stage


def test_config_validation():
    with pytest.raises(ValueError, match="noise must be one of noises"):
        exp.FlowSMCConfig(noise=0.3)
    with pytest.raises(ValueError, match="noises must include 0.0"):
        exp.FlowSMCConfig(noises=(0.5, 1.0), noise=1.0)
    with pytest.raises(ValueError, match="stage_times"):
        exp.FlowSMCConfig(smc=fs.SMCConfig(stage_times=(0.1, 0.5)))
    with pytest.raises(ValueError, match="obs_std must be > 0"):
        exp.FlowSMCConfig(obs_std=0.0)
