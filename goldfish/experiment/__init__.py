"""``goldfish experiment``: a grid of prepare -> train -> eval cells, resumable, aggregated into one report.

Public API::

    from goldfish.experiment import ExperimentConfig, load_experiment, expand_cells, plan_cells, run_experiment

``run_experiment(load_experiment("experiments/default.yaml"))`` runs the demo; tests pass a :class:`Pipeline` of fake
phase functions to exercise the runner without training.
"""

from __future__ import annotations

from .config import ExperimentConfig, HardwareConfig
from .grid import Cell, expand_cells
from .phases import run_cell
from .pipeline import default_pipeline
from .plan import DONE, CellPlan, Pipeline, plan_cells
from .runner import load_experiment, run_experiment

__all__ = [
    "DONE",
    "Cell",
    "CellPlan",
    "ExperimentConfig",
    "HardwareConfig",
    "Pipeline",
    "default_pipeline",
    "expand_cells",
    "load_experiment",
    "plan_cells",
    "run_cell",
    "run_experiment",
]
