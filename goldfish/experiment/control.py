"""The control cell's model and every cell's extra analysis (``attacks.json``).

A control cell trains nothing. Fine-tuning: it evaluates the starting model itself (no file is written). From
scratch: :func:`export_initial_model` saves the weights training would start from (same size, vocabulary and seed),
so the control shows what an untrained model of that shape scores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..io import atomic_directory
from .analysis import analyse
from .plan import ATTACKS_FILE, CellPlan, control_of


def export_initial_model(train_cfg: Any) -> Path:
    """Write the untrained model of ``train_cfg`` (Hugging Face folder + the data's tokenizer) to ``<out>/model``."""
    from ..data import load_prepared
    from ..modelcard import write_training_card
    from ..models import build_model, count_parameters, set_special_ids

    prepared = load_prepared(train_cfg.data.path)
    tok = prepared.manifest["tokenizer"]
    # the special ids as training sets them, so generation stops and pads alike
    model = set_special_ids(build_model(train_cfg.model, int(tok["vocab_size"]), train_cfg.seed), tok)
    out = Path(train_cfg.out) / "model"
    with atomic_directory(out, overwrite=True) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        prepared.copy_tokenizer(tmp)
        untrained = {"steps": 0, "epochs": 0.0, "tokens": 0, "params": count_parameters(model), "world_size": 1,
                     "global_batch_size": train_cfg.schedule.global_batch_size, "seq_len": prepared.manifest["seq_len"]}
        write_training_card(tmp, train_cfg, untrained, prepared.manifest, prepared.train_sha256)
    return out


def _goldfish_plan(plan: CellPlan, plans: list[CellPlan]) -> CellPlan | None:
    """The cell whose Goldfish mask defines kept/dropped positions: the cell itself if Goldfish, else the first
    Goldfish cell on the same data (so standard and control are measured on the same positions)."""
    def is_goldfish(p: CellPlan) -> bool:
        return getattr(getattr(p.train_cfg, "loss", None), "type", None) == "goldfish"

    if is_goldfish(plan):
        return plan
    return next((p for p in plans if is_goldfish(p) and p.data_dir == plan.data_dir), None)


def _reference(plan: CellPlan, plans: list[CellPlan]) -> dict | None:
    """The control cell's attacks.json for this grid point (its per-token log-probs calibrate the attacks)."""
    control = control_of(plan, plans)
    path = control.dir / ATTACKS_FILE if control is not None else None
    return json.loads(path.read_text(encoding="utf-8")) if path is not None and path.is_file() else None


def analyse_cell(plan: CellPlan, plans: list[CellPlan], model: Any) -> dict:
    """Write the cell's ``attacks.json`` (see :mod:`goldfish.experiment.analysis`) from the cell's shared ``model``
    handle (``goldfish.eval.loading.SharedModel``), scored as eval's membership section scores (its window, stride,
    token budget and chunk)."""
    from goldfish.eval.scoring import scoring_window

    from ..data import load_prepared

    source = _goldfish_plan(plan, plans)
    gcfg = source.mask(load_prepared(plan.data_dir)) if source is not None else None  # the mask training applied
    m = plan.eval_cfg.membership
    loaded = model.get()
    return analyse(loaded, plan.data_dir, plan.dir, gcfg, _reference(plan, plans), n_bootstrap=m.n_bootstrap,
                   seed=plan.eval_cfg.seed, control=plan.cell.control, window=scoring_window(m.window, loaded),
                   stride=m.stride, token_budget=m.token_budget, chunk=m.chunk)
