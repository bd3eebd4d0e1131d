import dataclasses

import numpy as np
import pytest

from jaxsci.dynamics import lyapunov as ly
from jaxsci.experiments import lyapunov as exp


@pytest.fixture(scope="module")
def smoke(smoke_run):
    # The same session run as the protocol's TestSmoke_lyapunov (one smoke run in all).
    out, m, _ = smoke_run("lyapunov")
    return out, m


def test_smoke_shapes_and_the_monolithic_baseline(smoke):
    out, m = smoke
    cfg = exp.CONFIGS["smoke"]
    frac = np.asarray(m["certified_fraction"])
    assert frac.shape == (len(cfg.systems), len(cfg.n_values))
    assert np.all((frac >= 0) & (frac <= 1))
    assert np.all(np.asarray(m["verification_seconds"]) > 0)
    # The monolithic baseline's branch-and-bound runs in more dimensions than a subsystem's.
    k = [cfg.systems.index(s) for s in cfg.monolithic_systems]
    assert np.all(np.asarray(m["monolithic_dims"]) > np.asarray(m["local_dims"])[k][:, None])
    assert "monolithic dims" in (out / "report.md").read_text()
    # The nested synthesis config is recorded once, under its own name.
    assert m["config"]["synthesis"]["verify"]["max_boxes"] == cfg.synthesis.verify.max_boxes


def test_config_validation():
    with pytest.raises(ValueError, match="systems\\[i\\] must be one of"):
        exp.LyapunovConfig(systems=("rockets",))
    with pytest.raises(ValueError, match="n_values needs >= 2 sizes"):
        exp.LyapunovConfig(n_values=(4,))
    with pytest.raises(ValueError, match="n_values must be increasing"):
        exp.LyapunovConfig(n_values=(4, 2))
    with pytest.raises(ValueError, match="max_delay must be >= 0"):
        exp.LyapunovConfig(max_delay=-1)
    with pytest.raises(ValueError, match="figure_system must be one of"):
        dataclasses.replace(exp.CONFIGS["smoke"], figure_system="platoon")
    with pytest.raises(TypeError, match="synthesis must be a SynthesisConfig"):
        exp.LyapunovConfig(synthesis={"steps": 3})
    with pytest.raises(ValueError, match="certify_system must be one of"):
        exp.LyapunovConfig(certify_system="rockets")
    with pytest.raises(ValueError, match="certify_n must be >= 1"):
        exp.LyapunovConfig(certify_n=0)
    with pytest.raises(TypeError, match="certify_synthesis must be a SynthesisConfig"):
        exp.LyapunovConfig(certify_synthesis=None)
    with pytest.raises(ValueError, match="gain_slack"):
        ly.SynthesisConfig(gain_slack=1.0)
    # Nested library configs validate themselves.
    with pytest.raises(ValueError, match="max_boxes must be >= 1"):
        ly.VerifyConfig(max_boxes=0)
    with pytest.raises(ValueError, match="margin"):
        ly.SynthesisConfig(margin=1.5)


def test_set_overrides_reach_the_nested_config():
    cfg = exp.EXPERIMENT.config("smoke", ["synthesis.verify.max_boxes=99", "sim_runs=3"])
    assert cfg.synthesis.verify.max_boxes == 99 and cfg.sim_runs == 3
    with pytest.raises(ValueError, match="max_boxes"):
        exp.EXPERIMENT.config("smoke", ["synthesis.verify.max_boxes=0"])
