"""Goldfish Loss: leave a pseudo-random 1/k of target tokens out of the loss, chosen by a hash of local context.

Public API::

    from goldfish import goldfish_mask, apply_goldfish, GoldfishConfig, goldfish_loss, GoldfishCollator
    from goldfish import GoldfishTrainer, GoldfishSFTTrainer, GoldfishTrainerMixin   # goldfish.hf: HF Trainer / TRL

Every name is imported on first use (PEP 562): ``transformers.Trainer`` takes seconds to import,
``GoldfishSFTTrainer`` needs the optional ``trl``, and the ``goldfish`` command sets its OpenMP wait policy before
torch is loaded (:mod:`goldfish.cli`), which an eager import of the mask library here would prevent.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "GoldfishConfig": ".masks",
    "apply_goldfish": ".masks",
    "goldfish_mask": ".masks",
    "GoldfishLossOutput": ".loss",
    "goldfish_loss": ".loss",
    "GoldfishCollator": ".collator",
    "GoldfishTrainer": ".hf",
    "GoldfishSFTTrainer": ".hf",
    "GoldfishTrainerMixin": ".hf",
}

__all__ = [
    "GoldfishConfig",
    "GoldfishCollator",
    "GoldfishLossOutput",
    "GoldfishSFTTrainer",
    "GoldfishTrainer",
    "GoldfishTrainerMixin",
    "apply_goldfish",
    "goldfish_loss",
    "goldfish_mask",
    "__version__",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
