"""The toolkit's own :class:`~goldfish.experiment.plan.Pipeline`: ``goldfish.data``, ``goldfish.train``,
``goldfish.eval``, the control cell's initial model, the k baseline, the attacks analysis and the exposure counts --
the k baseline, the attacks analysis and the validation loss sharing the evaluation's loaded model (``goldfish.eval.loading.SharedModel``).

It lives apart from :mod:`goldfish.experiment.plan` because the phases it wires (``control``, ``kbaseline``) read
``plan``'s :class:`~goldfish.experiment.plan.CellPlan`: keeping the wiring here leaves no import cycle. Each phase's
module is imported when the phase first runs (deliberately lazy: planning and ``--dry-run`` need no model code).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .plan import ATTACKS_FILE, CellPlan, Pipeline


def _prepare(cfg: Any, out: Path, overwrite: bool = False, progress: bool = True) -> Path:
    from ..data import prepare

    return prepare(cfg, out=out, overwrite=overwrite, progress=progress)


def _train(cfg: Any) -> Path:
    from ..train import train

    return train(cfg)


def _evaluate(cfg: Any, model: Any) -> dict:
    from goldfish.eval import run_eval

    return run_eval(cfg, model)


def _baseline(plan: CellPlan, model: Any) -> Any:
    from .kbaseline import write_k_baseline

    return write_k_baseline(plan, model)


def _open_model(eval_cfg: Any) -> Any:
    from goldfish.eval.loading import SharedModel

    return SharedModel(eval_cfg.model)


def _initial_model(cfg: Any) -> Path:
    from .control import export_initial_model

    return export_initial_model(cfg)


def _analyse(plan: CellPlan, plans: list[CellPlan], model: Any) -> dict:
    from .control import analyse_cell

    return analyse_cell(plan, plans, model)


def _exposure(plan: CellPlan, model: Any) -> dict:
    from .exposure import write_exposure

    return write_exposure(plan, model)


def _card(plan: CellPlan) -> None:
    """Add the cell's extraction, membership and held-out numbers to the model card of the model it trained (a
    control that evaluates the starting model leaves that model's folder untouched)."""
    from ..modelcard import add_eval_results, eval_results

    if Path(plan.eval_cfg.model.path) != plan.model_dir or not (plan.model_dir / "config.json").is_file():
        return
    results, attacks = (plan.eval_dir / "results.json", plan.dir / ATTACKS_FILE)
    add_eval_results(plan.model_dir, eval_results(json.loads(results.read_text(encoding="utf-8")),
                                                  json.loads(attacks.read_text(encoding="utf-8"))
                                                  if attacks.is_file() else None, source="goldfish experiment"))


def default_pipeline() -> Pipeline:
    """The toolkit's own data, training and evaluation. Only the config classes are imported here, so planning
    and ``--dry-run`` need no model code; each phase imports its module when it first runs."""
    from goldfish.eval.config import EvalConfig

    from ..data.config import PrepareConfig
    from ..train_config import TrainConfig

    return Pipeline(
        PrepareConfig, TrainConfig, EvalConfig, _prepare, _train, _evaluate, _initial_model,
        baseline=_baseline, analyse=_analyse, open_model=_open_model, exposure=_exposure, card=_card,
    )
