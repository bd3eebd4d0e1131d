"""Machinery every method reuses: validation, RESULTS, sweeps, training, the experiment
protocol and driver, results and sphere geometry."""

from jaxsci.core import sphere, validation
from jaxsci.core.experiment import (
    Claim,
    Context,
    Experiment,
    FinishedRunError,
    Metric,
    apply_overrides,
    key_from_seed,
    run_experiment,
)
from jaxsci.core.results import Report, prepare_out_dir, to_jsonable
from jaxsci.core.status import RESULTS, raise_if_failed, succeeded
from jaxsci.core.sweep import grid_mesh, product_grid, sweep
from jaxsci.core.train import TrainConfig, TrainState, fit, init

__all__ = [
    "Claim",
    "Context",
    "Experiment",
    "FinishedRunError",
    "Metric",
    "RESULTS",
    "Report",
    "TrainConfig",
    "TrainState",
    "apply_overrides",
    "fit",
    "grid_mesh",
    "init",
    "key_from_seed",
    "prepare_out_dir",
    "product_grid",
    "raise_if_failed",
    "run_experiment",
    "sphere",
    "succeeded",
    "sweep",
    "to_jsonable",
    "validation",
]
