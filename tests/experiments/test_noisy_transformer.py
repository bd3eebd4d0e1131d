import numpy as np
import pytest

from jaxsci.experiments import noisy_transformer as exp


@pytest.fixture(scope="module")
def smoke(run_experiment):
    return run_experiment(exp, "smoke")


def test_smoke_noiseless_collapses_and_shapes(smoke):
    _, m = smoke
    c = exp.CONFIGS["smoke"]
    # Deterministic at every size: no noise, no antipodal state.
    assert m["p_antipodal_noiseless"] == 0.0
    assert np.asarray(m["p_antipodal_mc"]).shape == (len(c.ds), len(c.betas))
    assert m["sde_layer_error"] == [] and m["sde_error_ratio"] == "nan"


def test_interrupted_run_resumes_from_saved_cells(smoke, tmp_path, monkeypatch):
    from jaxsci.core import run_experiment

    _, m = smoke

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    real = exp.many_tokens
    monkeypatch.setattr(exp, "many_tokens", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp.EXPERIMENT, "smoke", tmp_path, progress=False)
    calls = []
    real_cell = exp.dimension_cell
    monkeypatch.setattr(exp, "many_tokens", real)
    monkeypatch.setattr(exp, "dimension_cell", lambda *a: calls.append(a) or real_cell(*a))
    report = run_experiment(exp.EXPERIMENT, "smoke", tmp_path, progress=False)
    assert calls == []
    assert set(report.metrics["resumed_cells"]) == {"d2", "d4", "sample_paths"}
    np.testing.assert_array_equal(np.asarray(m["p_antipodal_mc"]),
                                  report.metrics["p_antipodal_mc"])


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="sigma must be > 0"):
        exp.NoisyTransformerConfig(sigma=0.0)
    with pytest.raises(ValueError, match=r"ds\[i\] must be >= 2"):
        exp.NoisyTransformerConfig(ds=(1,))
    with pytest.raises(ValueError, match="ds must be strictly increasing"):
        exp.NoisyTransformerConfig(ds=(4, 2))
