"""One precision vocabulary for training and evaluation: ``auto | fp32 | bf16 | fp16 | checkpoint``.

``auto`` (training's default) is resolved for the device by :func:`resolve_precision`: bf16 where it is native and
faster than fp32, otherwise fp32 -- decided by a rule from the device's class (:mod:`goldfish.hardware`: CUDA's native
bf16, AMX, the shipped table of CPU classes), never by a timing, so every rank of a launch and every rerun on the same
class of machine resolves it alike; the choice and its reason are printed on the console (``precision: auto -> bf16
(...)``). Evaluation defaults to ``checkpoint``: the checkpoint's own dtype, as Hugging Face's ``dtype="auto"`` and
lm-evaluation-harness's ``dtype=auto`` mean it. What a run records -- its config,
fingerprint, summary and report -- is always the *resolved* name, so a run resumed on a machine whose ``auto``
resolves differently is a different run.

``TrainConfig.precision`` accepts ``auto``, ``fp32`` and ``bf16`` (bf16 autocast over fp32 master weights; fp16
training would need loss scaling); the evaluation's weights precision (``model.dtype``) also accepts ``fp16`` and
``checkpoint`` (the checkpoint's own dtype). The long torch spellings ``float32``, ``bfloat16`` and ``float16`` are
accepted everywhere as aliases and stored in the short form.
"""

from __future__ import annotations

import sys

import torch

from .hardware import default_device, native_bf16
from .ownership import is_main_process

PRECISIONS: dict[str, torch.dtype | str] = {
    "auto": "auto",
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "checkpoint": "checkpoint",
}
ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
_WARNED: set[str] = set()
_ANNOUNCED: set[tuple[str, str]] = set()


def canonical_precision(value: object, allowed: tuple[str, ...] = tuple(PRECISIONS)) -> str | None:
    """``value`` in the short form when it names one of ``allowed`` (aliases included), else ``None``."""
    name = ALIASES.get(value, value) if isinstance(value, str) else None
    return name if name in allowed else None


def resolve_precision(
    precision: str, device: torch.device | str | None = None, *, bf16_ok: bool = True, warn: bool = True
) -> str:
    """The precision a run on ``device`` (default: :func:`goldfish.hardware.default_device`) computes in.

    ``auto`` -> ``bf16`` when bf16 is native and faster than fp32 on the device and ``bf16_ok`` (a caller that
    cannot use bf16 here, e.g. AxoNN on a CPU, passes False), else ``fp32``. An explicit ``bf16`` where it is not
    faster is kept and, with ``warn``, announced once on stderr with the reason (by the first process of a launch).
    Other names pass through.
    """
    precision = ALIASES.get(precision, precision)
    device = torch.device(device) if device is not None else default_device()
    if precision not in ("auto", "bf16"):
        return precision
    native, why = native_bf16(device)
    if precision == "auto":
        return "bf16" if native and bf16_ok else "fp32"
    if not native and warn and why not in _WARNED and is_main_process():
        _WARNED.add(why)
        print(
            f"warning: precision=bf16 on {device.type} where it is not faster than fp32 ({why}); use "
            f"precision=auto (or fp32) unless bf16 itself is under study",
            file=sys.stderr,
            flush=True,
        )
    return precision


def announce(setting: str, device: torch.device | str | None = None, *, bf16_ok: bool = True) -> None:
    """Print ``auto``'s choice and its reason once per process (the first of a launch) on stderr --
    ``precision: auto -> bf16 (cpu: the rule's reason)`` -- when a run starts computing; other settings print
    nothing (they were chosen, not resolved)."""
    if ALIASES.get(setting, setting) != "auto" or not is_main_process():
        return
    device = torch.device(device) if device is not None else default_device()
    native, why = native_bf16(device)
    chosen = "bf16" if native and bf16_ok else "fp32"
    reason = why if bf16_ok or not native else "the engine computes in fp32 here"
    if (chosen, reason) not in _ANNOUNCED:
        _ANNOUNCED.add((chosen, reason))
        print(f"precision: auto -> {chosen} ({device.type}: {reason})", file=sys.stderr, flush=True)


def torch_dtype(precision: str) -> torch.dtype | str:
    """The torch dtype of a resolved precision name (``"checkpoint"`` -> ``"auto"``, for ``from_pretrained``)."""
    name = ALIASES.get(precision, precision)
    if name == "auto":
        raise ValueError("resolve precision 'auto' (resolve_precision) before asking for its torch dtype")
    return "auto" if name == "checkpoint" else PRECISIONS[name]
