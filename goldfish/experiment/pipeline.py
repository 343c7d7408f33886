"""The toolkit's own :class:`~goldfish.experiment.plan.Pipeline`: ``goldfish.data``, ``goldfish.train``,
``goldfish.eval``, the control cell's initial model and the model card; the per-cell analyses are every one of
``goldfish.experiment.analyses.ANALYSES`` (``Pipeline.analyses`` None), sharing the evaluation's loaded model
(``goldfish.eval.loading.SharedModel``).
"""

from __future__ import annotations

from pathlib import Path

from goldfish.eval.config import EvalConfig
from goldfish.eval.loading import SharedModel
from goldfish.eval.run import run_eval
from goldfish.eval.state import config_fingerprint

from ..data import prepare
from ..data.config import PrepareConfig
from ..io import read_json
from ..modelcard import add_eval_results, eval_results
from ..train import train
from ..train_config import TrainConfig, train_fingerprint
from .control import export_initial_model
from .plan import CellPlan, Evaluate, Pipeline, Step, Train


def add_to_card(plan: CellPlan) -> None:
    """Add the cell's extraction, membership and held-out numbers to the model card of the model it trained (a
    control that evaluates the starting model leaves that model's folder untouched)."""
    if Path(plan.eval_cfg.model.path) != plan.model_dir or not (plan.model_dir / "config.json").is_file():
        return
    attacks = read_json(plan.attacks_file) if plan.attacks_file.is_file() else None
    add_eval_results(plan.model_dir, eval_results(read_json(plan.results_file), attacks, source="goldfish experiment"))


def default_pipeline() -> Pipeline:
    """The toolkit's own data, training and evaluation; every per-cell analysis of ``ANALYSES``."""
    return Pipeline(
        prepare=Step(PrepareConfig, prepare),
        train=Train(
            TrainConfig,
            train,
            fingerprint=lambda train_cfg: train_fingerprint(train_cfg, None),
            initial_model=export_initial_model,
        ),
        evaluate=Evaluate(EvalConfig, run_eval, fingerprint=config_fingerprint, card=add_to_card),
        open_model=lambda eval_cfg: SharedModel(eval_cfg.model),
    )
