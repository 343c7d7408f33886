"""Evaluation of memorization on any Hugging Face causal LM: extraction and membership inference.

    from goldfish.eval import EvalConfig, run_eval
    from goldfish.config import load_config
    results = run_eval(load_config(EvalConfig, None, ["model.path=runs/x/model", "data.path=prep/x", "out=ev"]))

Modules: ``config`` (``EvalConfig`` sections), ``loading`` (safe offline model/tokenizer loading), ``inputs``
(documents), ``windows`` (prefix/suffix windows), ``generate`` (batched KV-cached greedy decoding), ``extraction``
(one-pass measures), ``metrics`` (registered per-window metrics), ``scoring`` (per-token log-probs in bounded
memory), ``membership`` (MIA scores and ROC), ``stats`` (exact and paired statistics), ``adversary`` (the
mask-consistent extraction attack), ``aggregate`` (summaries), ``report`` (Markdown and plots),
``state`` (fingerprint and resumable partial files), ``run``
(orchestration). The results schema is eval/SCHEMA.md. Submodules load lazily, so ``import goldfish.eval`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from .config import EvalConfig

__all__ = ["EvalConfig", "run_eval", "extraction", "membership", "metrics", "aggregate", "report", "generate",
           "loading", "windows", "inputs", "scoring", "state", "stats", "adversary"]


def run_eval(cfg: EvalConfig) -> dict:
    """Run an evaluation and write its files; see :func:`goldfish.eval.run.run_eval`."""
    from .run import run_eval as _run_eval

    return _run_eval(cfg)


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
