"""The control cell's model and every cell's extra analysis (``attacks.json``).

A control cell trains nothing. Fine-tuning: it evaluates the starting model itself (no file is written). From
scratch: :func:`export_initial_model` saves the weights training would start from (same size, vocabulary and seed),
so the control shows what an untrained model of that shape scores.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ..io import atomic_directory
from ..train import goldfish_config
from .attacks import analyse
from .plan import ATTACKS_FILE, CellPlan


def export_initial_model(train_cfg: Any) -> Path:
    """Write the untrained model of ``train_cfg`` (Hugging Face folder + the data's tokenizer) to ``<out>/model``."""
    from ..data import load_prepared
    from ..modelcard import write_training_card
    from ..models import build_model, count_parameters

    prepared = load_prepared(train_cfg.data.path)
    tok = prepared.manifest["tokenizer"]
    model = build_model(train_cfg.model, int(tok["vocab_size"]), train_cfg.seed)
    for key, name in (("eos_id", "eos_token_id"), ("bos_id", "bos_token_id"), ("pad_id", "pad_token_id")):
        if tok.get(key) is not None:  # as training sets them, so generation stops and pads alike
            setattr(model.config, name, int(tok[key]))
    out = Path(train_cfg.out) / "model"
    with atomic_directory(out, overwrite=True) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        for f in (prepared.path / "tokenizer").iterdir():
            if f.is_file():
                shutil.copy2(f, tmp / f.name)
        untrained = {"steps": 0, "epochs": 0.0, "tokens": 0, "params": count_parameters(model), "world_size": 1,
                     "global_batch_size": train_cfg.schedule.global_batch_size, "seq_len": prepared.manifest["seq_len"]}
        train_sha = prepared.manifest.get("sha256", {}).get("train")
        write_training_card(tmp, train_cfg, untrained, prepared.manifest, train_sha)
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
    if plan.cell.control:
        return None
    for p in plans:
        if p.cell.control and p.cell.values == plan.cell.values and p.data_dir == plan.data_dir:
            path = p.dir / ATTACKS_FILE
            return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    return None


def analyse_cell(plan: CellPlan, plans: list[CellPlan]) -> dict:
    """Write the cell's ``attacks.json`` (see :mod:`goldfish.experiment.attacks`)."""
    source = _goldfish_plan(plan, plans)
    if source is not None:
        from ..data import load_prepared

        gcfg = goldfish_config(source.train_cfg, load_prepared(plan.data_dir))  # the mask training applied
    else:
        gcfg = None
    return analyse(plan.eval_cfg.model.path, plan.data_dir, plan.dir, gcfg, _reference(plan, plans),
                   n_bootstrap=plan.eval_cfg.membership.n_bootstrap, seed=plan.eval_cfg.seed,
                   control=plan.cell.control)
