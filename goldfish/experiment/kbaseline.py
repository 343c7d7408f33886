"""Each Goldfish cell's mask-arithmetic baseline (see ``goldfish.eval.baseline``): the mean over windows of
``(1 - g)^d_w`` from each window's own dropped count, and the nominal ``(1 - g/k)^S`` beside it, written to the
cell's ``k_baseline_file`` (``eval/k_baseline.json``) after evaluation and shown next to exact match in the study
report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from goldfish.eval.baseline import baseline_rows

from ..data import load_prepared
from ..io import atomic_write_json
from .plan import CellPlan


def write_k_baseline(plan: CellPlan, model: Any) -> Path | None:
    """Measure g on the cell's member windows (prefix from token 0: each prefix length of the eval config, ``all``
    = all but the last suffix_len tokens) with the mask the cell's training recorded, from the cell's shared
    ``model`` handle (``goldfish.eval.loading.SharedModel``); None (nothing written) for a standard-loss cell."""
    prepared = load_prepared(plan.data_dir)
    gcfg = plan.mask(prepared)
    if gcfg is None:
        return None
    docs = [m["input_ids"] for m in prepared.members]
    rows = baseline_rows(model.get(), docs, plan.eval_cfg.data.prefix_lens, plan.eval_cfg.data.suffix_len, gcfg,
                         token_budget=plan.eval_cfg.membership.token_budget, chunk=plan.eval_cfg.membership.chunk)
    atomic_write_json(plan.k_baseline_file, {"k": gcfg.k, "h": gcfg.h, "strategy": gcfg.strategy,
                                             "suffix_len": plan.eval_cfg.data.suffix_len, "rows": rows})
    return plan.k_baseline_file
