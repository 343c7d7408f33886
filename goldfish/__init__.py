"""Goldfish Loss: leave a pseudo-random 1/k of target tokens out of the loss, chosen by a hash of local context.

Public API::

    from goldfish import goldfish_mask, apply_goldfish, GoldfishConfig, goldfish_loss, GoldfishCollator
"""

from __future__ import annotations

__version__ = "0.1.0"

from .masks import GoldfishConfig, apply_goldfish, goldfish_mask  # noqa: E402
from .loss import GoldfishLossOutput, goldfish_loss  # noqa: E402
from .collator import GoldfishCollator  # noqa: E402

__all__ = [
    "GoldfishConfig",
    "GoldfishCollator",
    "GoldfishLossOutput",
    "apply_goldfish",
    "goldfish_loss",
    "goldfish_mask",
    "__version__",
]
