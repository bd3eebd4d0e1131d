import json

import numpy as np
import pytest

from jaxsci.experiments import grans as exp


def _finite(v):
    return np.all(np.isfinite(np.asarray(v, dtype=float)))


def test_smoke_writes_every_metric_finite(tmp_path):
    exp.run(exp.CONFIGS["smoke"], tmp_path, progress=False)
    m = json.loads((tmp_path / "metrics.json").read_text())
    for key in exp.METRIC_KEYS:
        assert key in m, key
        if key == "median_speedup_vs_gmres":  # smoke runs no GMRES baseline
            continue
        if key != "cases":
            assert _finite(m[key]), key
    for case in m["cases"].values():
        for label in ("grans", "grans_fgmres", "grans_untrained"):
            assert _finite(case[label]["iterations"]) and case[label]["solve_seconds"] > 0
    assert (tmp_path / "residuals.png").stat().st_size > 5_000
    assert (tmp_path / "solution.png").exists()


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("grans_quick")
    exp.run(exp.CONFIGS["quick"], out, progress=False)
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.reproduce
def test_quick_fewer_iterations_than_krylov_and_training_helps(quick):
    m = quick
    # Hardware-independent part of the paper's claim: far fewer iterations than CG at
    # equal tolerance, and the learned correction beats the untrained network.
    assert m["median_iteration_ratio_vs_cg"] > 2.0
    assert m["median_untrained_over_trained_iterations"] > 1.0
    # ...and a one-shot neural operator stalls orders of magnitude above the tolerance.
    assert m["neural_operator_rel_residual"] > 100 * exp.CONFIGS["quick"].tol
    # Most cases, including unseen equations, reach 1e-5.
    assert m["grans_fgmres_converged_fraction"] >= 0.75
    assert m["cross_equation_fgmres_converged_fraction"] >= 0.5


@pytest.mark.reproduce
def test_quick_paper_claim_every_case_reaches_tolerance(quick):
    m = quick
    # the paper: 1e-5 on every equation, under +-70% shifts and on unseen equations
    # (holds since the experiment uses the minimal-residual projection and l1-Jacobi;
    # docs/grans.md, "Differences").
    assert m["grans_fgmres_converged_fraction"] == 1.0
    assert m["cross_equation_fgmres_converged_fraction"] == 1.0
    assert m["shift_fgmres_converged_fraction"] == 1.0


@pytest.mark.reproduce
@pytest.mark.xfail(
    strict=True,
    reason="known gap (docs/grans.md): on 2 CPU cores G-RANS-FGMRES is slower in "
    "wall-clock than CG (median ratio ~0.1) and AMG-PCG. Strict: turns into a failure "
    "once the claim holds.",
)
def test_quick_paper_claim_faster_than_krylov(quick):
    m = quick
    # ...with less wall-clock time than Krylov at equal tolerance.
    assert m["median_speedup_vs_cg"] > 1.0
