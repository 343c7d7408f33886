"""The control cell's model.

A control cell trains nothing. Fine-tuning: it evaluates the starting model itself (no file is written). From
scratch: :func:`export_initial_model` saves the weights training would start from (same size, vocabulary and seed),
so the control shows what an untrained model of that shape scores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..data import load_prepared
from ..io import atomic_directory
from ..modelcard import write_training_card
from ..models import build_model, count_parameters, set_special_ids


def export_initial_model(train_cfg: Any, out: Path) -> Path:
    """Write the untrained model of ``train_cfg`` (Hugging Face folder + the data's tokenizer) to ``out``."""
    prepared = load_prepared(train_cfg.data.path)
    tok = prepared.manifest["tokenizer"]
    # the special ids as training sets them, so generation stops and pads alike
    model = set_special_ids(build_model(train_cfg.model, int(tok["vocab_size"]), train_cfg.seed), tok)
    with atomic_directory(out, overwrite=True) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        prepared.copy_tokenizer(tmp)
        untrained = {
            "steps": 0,
            "epochs": 0.0,
            "tokens": 0,
            "params": count_parameters(model),
            "world_size": 1,
            "global_batch_size": train_cfg.schedule.global_batch_size,
            "seq_len": prepared.manifest["seq_len"],
        }
        write_training_card(tmp, train_cfg, untrained, prepared.manifest, prepared.train_sha256)
    return out
