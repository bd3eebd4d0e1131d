import json
import math

import numpy as np
import pytest

from jaxsci.experiments import noisy_transformer as exp


def test_smoke_writes_every_metric(tmp_path):
    exp.run(exp.CONFIGS["smoke"], tmp_path, progress=False)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for key in exp.METRIC_KEYS:
        assert key in metrics, key
        vals = np.asarray(metrics[key], dtype=float).ravel()
        assert np.all(np.isfinite(vals)), key
    assert metrics["p_antipodal_noiseless"] == 0.0
    assert (tmp_path / "p_antipodal.png").exists() and (tmp_path / "rho_paths.png").exists()


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="sigma must be > 0"):
        exp.NoisyTransformerConfig(sigma=0.0).validate()
    with pytest.raises(ValueError, match=r"ds\[i\] must be >= 2"):
        exp.NoisyTransformerConfig(ds=(1,)).validate()


@pytest.mark.reproduce
def test_quick_reproduces_phase_transition(tmp_path):
    cfg = exp.CONFIGS["quick"]
    m = exp.run(cfg, tmp_path, progress=False).metrics
    p_mc, p_th = np.asarray(m["p_antipodal_mc"]), np.asarray(m["p_antipodal_theory"])
    se = np.asarray(m["p_antipodal_se"])
    und = np.asarray(m["undecided_fraction"])
    # MC of the d-dimensional layers agrees with the 1-D scale-function theory within
    # 3 standard errors plus the fraction of paths not yet absorbed, away from beta_c
    # (within 0.2 of it the boundary's Lyapunov exponent is ~0 and absorption by t1
    # is incomplete: that cell is reported in the docs, not asserted)
    far = np.abs(np.asarray(cfg.betas)[None, :] - np.asarray(m["critical_beta"])[:, None]) > 0.2
    assert np.all((np.abs(p_mc - p_th) <= 3 * se + und)[far])
    # phase transition: no antipodal state below beta_c(d), some well above it
    betas = np.asarray(cfg.betas)
    for i, bc in enumerate(m["critical_beta"]):
        assert np.all(p_mc[i][betas < bc - 0.25] <= 3 * se[i][betas < bc - 0.25])
        assert np.all(p_mc[i][betas > bc + 0.5] > 0.02)
    # beta_c grows with d (the dimension side of the transition)
    assert all(a < b for a, b in zip(m["critical_beta"], m["critical_beta"][1:], strict=False))
    assert m["p_antipodal_noiseless"] == 0.0
    assert m["antipodal_fraction_many_tokens"] > 0.0
    err = m["sde_layer_error"]
    assert err[-1] < err[0]  # layers -> SDE as h shrinks
    assert math.isfinite(m["max_abs_gap"])
