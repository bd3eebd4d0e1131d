"""Machinery every method reuses: validation, sweeps, training, results, sphere geometry."""

from jaxsci.core import sphere, validation
from jaxsci.core.results import Report, prepare_out_dir, to_jsonable
from jaxsci.core.sweep import grid_mesh, product_grid, sweep
from jaxsci.core.train import TrainConfig, TrainState, fit, init

__all__ = [
    "Report",
    "TrainConfig",
    "TrainState",
    "fit",
    "init",
    "grid_mesh",
    "prepare_out_dir",
    "product_grid",
    "sphere",
    "sweep",
    "to_jsonable",
    "validation",
]
