"""Evaluation of memorization on any Hugging Face causal LM: extraction and membership inference.

    from goldfish.config import load_config
    from goldfish.eval import EvalConfig
    from goldfish.eval.run import run_eval
    results = run_eval(load_config(EvalConfig, None, ["model.path=runs/x/model", "data.path=prep/x", "out=ev"]))

Modules: ``config`` (``EvalConfig`` sections), ``loading`` (safe offline model/tokenizer loading), ``inputs``
(documents), ``windows`` (prefix/suffix windows), ``generate`` (batched KV-cached greedy decoding), ``extraction``
(one-pass measures), ``metrics`` (registered per-window metrics), ``scoring`` (per-token log-probs in bounded
memory), ``membership`` (MIA scores and ROC), ``stats`` (every statistic: intervals, exact and paired tests),
``adversary`` (the mask-consistent extraction attack), ``aggregate`` (summaries), ``tables`` (how every table is
written), ``report`` (Markdown and plots), ``state`` (fingerprint and resumable partial files), ``run``
(orchestration: ``run_eval``). The results schema is eval/SCHEMA.md. The package itself imports only its config, so
``goldfish eval --help`` reads no model code; import the module you use (``from goldfish.eval import scoring``).
"""

from __future__ import annotations

from .config import EvalConfig

__all__ = ["EvalConfig"]
