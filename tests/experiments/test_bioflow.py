import numpy as np
import pytest

from jaxsci.dynamics import bioflow as bf
from jaxsci.experiments import bioflow as exp


def test_smoke_structure_and_checkpoints(smoke_run):
    out, m, _ = smoke_run("bioflow")
    assert set(m["per_regime"]) <= set(bf.REGIMES) and m["per_regime"]
    assert set(m["mae_by_steps"]) == {"gaussian", "regime"}
    for by in m["mae_by_steps"].values():
        assert set(by) == {str(k) for k in exp.CONFIGS["smoke"].sweep_steps}
        assert all(np.isfinite(v) for r in by.values() for v in r.values())
    assert m["n_systems"] <= 13 * exp.CONFIGS["smoke"].per_family
    assert 0 < m["n_test"] < m["n_systems"]
    assert "MAE reduction" in (out / "report.md").read_text()
    for name in exp.SOURCES:  # each training checkpointed: a rerun resumes
        assert any((out / "checkpoints" / f"velocity_{name}").iterdir()), name


def test_config_validation():
    with pytest.raises(ValueError, match="context must be <="):
        exp.BioFlowConfig(n_times=32, context=32)
    with pytest.raises(ValueError, match="test_fraction must be < 1"):
        exp.BioFlowConfig(test_fraction=1.0)
    with pytest.raises(ValueError, match="prior.backtest must be <="):
        exp.BioFlowConfig(n_times=32, context=16, prior=bf.RegimePrior(backtest=13))
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        exp.BioFlowConfig(prior=bf.RegimePrior(temperature=-1.0))
    assert isinstance(exp.CONFIGS["quick"].source("regime"), bf.RegimeSource)
