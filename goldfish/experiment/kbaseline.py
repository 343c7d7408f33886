"""Each Goldfish cell's mask-arithmetic baseline ``(1 - g/k)^S`` (see ``goldfish.eval.baseline``), written to
``<cell>/eval/k_baseline.json`` after evaluation and shown next to exact match in the study report."""

from __future__ import annotations

from pathlib import Path

from ..io import atomic_write_json

FILE = "k_baseline.json"


def write_k_baseline(plan) -> Path | None:
    """Measure g on the cell's member windows (prefix from token 0: each prefix length of the eval config, ``all``
    = all but the last suffix_len tokens) with the cell's own mask; None (nothing written) for a standard-loss
    cell."""
    from goldfish.eval.baseline import baseline_rows
    from goldfish.eval.loading import load_model

    from ..data import load_prepared
    from ..train_config import goldfish_config

    prepared = load_prepared(plan.data_dir)
    gcfg = goldfish_config(plan.train_cfg, prepared)
    if gcfg is None:
        return None
    model = load_model(plan.model_dir)
    docs = [m["input_ids"] for m in prepared.members]
    rows = baseline_rows(model, docs, plan.eval_cfg.data.prefix_lens, plan.eval_cfg.data.suffix_len, gcfg)
    path = plan.eval_dir / FILE
    atomic_write_json(path, {"k": gcfg.k, "h": gcfg.h, "strategy": gcfg.strategy,
                             "suffix_len": plan.eval_cfg.data.suffix_len, "rows": rows})
    return path
