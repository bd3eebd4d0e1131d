import numpy as np
import pytest

from jaxsci.experiments import particles as exp


@pytest.fixture(scope="module")
def smoke(run_experiment):
    return run_experiment(exp, "smoke")


def test_smoke_gradient_flow_and_shapes(smoke):
    out, m = smoke
    c = exp.CONFIGS["smoke"]
    # The energy is a Lyapunov function at every size (not a trend: a property).
    assert m["energy_monotone"] == 1.0
    assert np.asarray(m[f"clusters_width{c.widths[0]}"]).shape == (
        len(c.betas), len(c.scales), c.seeds)
    assert "atoms" in (out / "report.md").read_text()


def test_interrupted_run_resumes_from_saved_cells(smoke, tmp_path, monkeypatch):
    from jaxsci.core import run_experiment

    _, m = smoke
    real = exp.simulate
    calls = []

    def flaky(*args):
        if len(calls) == 1:
            raise KeyboardInterrupt
        calls.append(args[2])
        return real(*args)

    monkeypatch.setattr(exp, "simulate", flaky)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp.EXPERIMENT, "smoke", tmp_path, progress=False)
    again = []
    monkeypatch.setattr(exp, "simulate", lambda *a: again.append(a[2]) or real(*a))
    report = run_experiment(exp.EXPERIMENT, "smoke", tmp_path, progress=False)
    assert calls == [None] and again == list(exp.CONFIGS["smoke"].widths)
    assert report.metrics["resumed_cells"] == ["attention_only"]
    np.testing.assert_array_equal(np.asarray(m["clusters_attention_only_all"]),
                                  report.metrics["clusters_attention_only_all"])


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="betas"):
        exp.ParticlesConfig(betas=(-1.0,))
    with pytest.raises(ValueError, match="d must be >= 2"):
        exp.ParticlesConfig(d=1)
    with pytest.raises(ValueError, match="at least one step"):
        exp.ParticlesConfig(t1=0.01, dt=0.1)
