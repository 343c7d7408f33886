"""One precision vocabulary for training and evaluation: ``fp32 | bf16 | fp16 | auto``.

``TrainConfig.precision`` accepts ``fp32`` and ``bf16`` (bf16 autocast over fp32 master weights; fp16 training would
need loss scaling and ``auto`` has no meaning for fresh weights); the evaluation's weights precision (``dtype``)
accepts all four (``auto``: the checkpoint's own dtype). The long torch spellings ``float32``, ``bfloat16`` and
``float16`` are accepted everywhere as aliases and stored in the short form.
"""

from __future__ import annotations

import torch

PRECISIONS: dict[str, torch.dtype | str] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
                                            "auto": "auto"}
ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def canonical_precision(value: object, allowed: tuple[str, ...] = tuple(PRECISIONS)) -> str | None:
    """``value`` in the short form when it names one of ``allowed`` (aliases included), else ``None``."""
    name = ALIASES.get(value, value) if isinstance(value, str) else None
    return name if name in allowed else None


def torch_dtype(precision: str) -> torch.dtype | str:
    """The torch dtype of a precision name (``"auto"`` stays ``"auto"``, for ``from_pretrained``)."""
    return PRECISIONS[ALIASES.get(precision, precision)]
