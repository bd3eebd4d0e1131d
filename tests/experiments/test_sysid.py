import numpy as np
import pytest

from jaxsci.experiments import sysid as E


@pytest.fixture(scope="module")
def smoke(run_experiment):
    return run_experiment(E, "smoke")


def test_smoke_shapes_and_status(smoke):
    _, m = smoke
    c = E.CONFIGS["smoke"]
    assert np.asarray(m["err_l2"]).shape == (len(c.lengths), len(c.probs))
    assert np.asarray(m["err_l2_trials"]).shape == (len(c.lengths), len(c.probs), c.trials)
    assert 0.0 <= m["irls_converged_fraction"] <= 1.0


def test_interrupted_run_resumes_from_saved_cells(smoke, tmp_path, monkeypatch):
    # Interrupt after the sweep (while plotting), rerun: the saved cells are reused bit
    # for bit, nothing is simulated again, and the metrics equal the uninterrupted run.
    from jaxsci.core import run_experiment

    _, m = smoke
    real_plot = E.plot_error_vs_L

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(E, "plot_error_vs_L", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(E.EXPERIMENT, "smoke", tmp_path, progress=False)
    assert not (tmp_path / "metrics.json").exists()
    calls = []
    real_sim = E.simulate_length
    monkeypatch.setattr(E, "plot_error_vs_L", real_plot)
    monkeypatch.setattr(E, "simulate_length", lambda *a: calls.append(a) or real_sim(*a))
    again = run_experiment(E.EXPERIMENT, "smoke", tmp_path, progress=False).metrics
    assert calls == [] and again["resumed_cells"] == ["L2"]
    np.testing.assert_array_equal(np.asarray(m["err_l2_trials"]), again["err_l2_trials"])


def test_config_validation():
    with pytest.raises(ValueError, match="probs"):
        E.SysidConfig(probs=(0.0, 1.5))
    with pytest.raises(ValueError, match="lengths"):
        E.SysidConfig(lengths=(0, 2))
    with pytest.raises(ValueError, match="fixed_p"):
        E.SysidConfig(fixed_p=0.33)
    with pytest.raises(ValueError, match="t_len"):
        E.SysidConfig(t_len=50, lengths=(10,))


def test_crossing_p():
    p = np.array([0.0, 0.2, 0.4])
    assert E.crossing_p(p, np.array([0.1, 0.5, 1.5]), 1.0) == (pytest.approx(0.3), False)
    assert E.crossing_p(p, np.array([0.1, 0.2, 0.3]), 1.0) == (0.4, True)
