"""grans experiment specifics (the smoke run and the claims are the protocol tests'):
config validation, the strategy names, the case list and nested overrides."""

import dataclasses

import pytest

from jaxsci.core import apply_overrides
from jaxsci.experiments import grans as exp
from jaxsci.solvers import grans as gr


def test_config_validates_on_construction_and_nests_library_configs():
    with pytest.raises(ValueError, match="projection"):
        exp.GRANSExperimentConfig(projection="bogus")
    with pytest.raises(ValueError, match="smoother"):
        exp.GRANSExperimentConfig(smoother="gauss_seidel")
    with pytest.raises(ValueError, match="baselines"):
        exp.GRANSExperimentConfig(baselines=("scipy_lu",))
    with pytest.raises(ValueError, match="stages must be >= 1"):
        dataclasses.replace(exp.CONFIGS["quick"], train=gr.GRANSTrainConfig(stages=0))
    # one owner per number: the training settings are the library's config
    assert isinstance(exp.CONFIGS["quick"].train, gr.GRANSTrainConfig)
    assert exp.GRANSExperimentConfig().train == gr.GRANSTrainConfig()


def test_overrides_reach_nested_configs():
    cfg = apply_overrides(exp.CONFIGS["smoke"], ["train.stages=2", "model.levels=1",
                                                 "projection=galerkin"])
    assert cfg.train.stages == 2 and cfg.model.levels == 1 and cfg.projection == "galerkin"
    with pytest.raises(ValueError, match="must be one of"):
        apply_overrides(exp.CONFIGS["smoke"], ["smoother=gauss_seidel"])


def test_strategy_names_map_to_library_modules():
    import jax

    cfg = dataclasses.replace(exp.CONFIGS["smoke"], projection="galerkin", smoother="jacobi")
    m = exp.make_model(cfg, jax.random.key(0))
    assert isinstance(m.projection, gr.Galerkin) and isinstance(m.smoother, gr.Jacobi)
    m = exp.make_model(exp.CONFIGS["quick"], jax.random.key(0), n_basis=1)
    assert isinstance(m.projection, gr.MinRes) and isinstance(m.smoother, gr.L1Jacobi)
    assert m.config.n_basis == 1


def test_cases_cover_sizes_equations_and_shifts():
    cfg = exp.CONFIGS["quick"]
    cases = exp.cases(cfg)
    n_eq = len(cfg.test_equations)
    assert len(cases) == n_eq * len(cfg.test_sizes) + n_eq * sum(s != 0 for s in cfg.shifts)
    assert {c[0] for c in cases} == set(cfg.test_equations)
    assert all(size == cfg.shift_size for _, s, size in cases if s != 0.0)
