"""Goldfish Loss: leave a pseudo-random 1/k of target tokens out of the loss, chosen by a hash of local context.

Public API::

    from goldfish import goldfish_mask, apply_goldfish, GoldfishConfig, goldfish_loss, GoldfishCollator
    from goldfish import GoldfishTrainer, GoldfishSFTTrainer, GoldfishTrainerMixin   # goldfish.hf: HF Trainer / TRL

The trainers are imported on first use (PEP 562): ``transformers.Trainer`` takes seconds to import, and
``GoldfishSFTTrainer`` needs the optional ``trl``.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

from .masks import GoldfishConfig, apply_goldfish, goldfish_mask  # noqa: E402
from .loss import GoldfishLossOutput, goldfish_loss  # noqa: E402
from .collator import GoldfishCollator  # noqa: E402

_TRAINERS = ("GoldfishTrainer", "GoldfishSFTTrainer", "GoldfishTrainerMixin")  # in goldfish.hf

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
    if name in _TRAINERS:
        return getattr(importlib.import_module(".hf", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
