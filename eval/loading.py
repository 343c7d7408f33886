"""Loading for evaluation: any local causal LM (through :func:`goldfish.models.load_pretrained`, the toolkit's one
loader and safety policy), its tokenizer, the device, and vocabulary checks.

Paths and safety rules are those of :mod:`goldfish.models`: a Hugging Face folder, a ``.gguf`` file, a folder with one
``.gguf`` or a training run folder; ``trust_remote_code=False``, safetensors/GGUF only unless pickles are explicitly
allowed (then ``torch.load(weights_only=True)``), nothing fetched from the Hub.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

import torch

from goldfish.errors import UserError
from goldfish.model_source import PICKLE_SUFFIXES, resolve_model_path
from goldfish.models import check_same_tokenizer, load_model_tokenizer, load_pretrained
from goldfish.precision import PRECISIONS, canonical_precision, resolve_precision, torch_dtype

from .scoring import ScoreMemo

__all__ = [
    "PICKLE_SUFFIXES",
    "SharedModel",
    "check_reference",
    "check_same_tokenizer",
    "check_vocab",
    "load_model",
    "load_model_tokenizer",
    "model_vocab_size",
    "num_parameters",
    "pad_id_of",
    "resolve_device",
    "resolve_model_path",
]


def resolve_device(device: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; anything else is passed to ``torch.device``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        where = torch.device(device)
    except RuntimeError:
        raise UserError(f"device={device!r} is not a torch device; use auto, cpu, cuda or cuda:N") from None
    if where.type == "cpu":
        return where
    if where.type == "meta":
        raise UserError(
            f"device={device!r} holds no weights (a meta tensor has a shape but no values), so nothing can "
            f"be evaluated on it; use model.device=cpu (or model.device=auto)"
        )
    if where.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (where.index is not None and where.index >= count):
            which = f" {where.index} (torch sees {count})" if count else ""
            raise UserError(
                f"device={device!r}, but this machine has no usable CUDA device{which}; use "
                f"model.device=cpu (or model.device=auto" + (f", or cuda:0 .. cuda:{count - 1})" if count else ")")
            )
        return where
    backend = torch.backends.mps if where.type == "mps" else getattr(torch, where.type, None)
    available = getattr(backend, "is_available", None)
    try:
        here = bool(available()) if callable(available) else False
    except Exception:  # noqa: BLE001 - a backend that cannot even say: not usable here
        here = False
    if not here:
        raise UserError(
            f"device={device!r}: there is no {where.type} device here (or this torch build cannot use "
            f"it); use model.device=cpu (or model.device=auto)"
        )
    return where


def load_model(
    path: str | Path, dtype: str = "auto", device: str = "auto", allow_pickle: bool = False, allow_partial: bool = False
):
    """Load a causal LM for inference (``eval()`` mode, on ``device``) -> ``PreTrainedModel``; ``dtype`` is a
    precision name (:mod:`goldfish.precision`: auto | fp32 | bf16 | fp16 | checkpoint, or the long torch spellings;
    ``auto`` is resolved for ``device``)."""
    resolve_model_path(path)  # a wrong path fails before the dtype is looked at
    if canonical_precision(dtype) is None:
        raise UserError(f"dtype={dtype!r} is not one of {', '.join(PRECISIONS)}")
    where = resolve_device(device)
    precision = resolve_precision(dtype, where)
    return load_pretrained(path, torch_dtype(precision), allow_pickle, allow_partial).to(where).eval()


class SharedModel:
    """The model of an eval config's ``model`` section, loaded on the first :meth:`get` and the same object after:
    an experiment cell hands one to its evaluation, k baseline and attacks, so the model is read once per cell
    (``goldfish.experiment.runner.run_cell``). Nothing is loaded when no phase asks for it (a resumed cell).
    ``memo``: the scores of the segments this model has scored (:class:`goldfish.eval.scoring.ScoreMemo`), so the
    phases that score the same windows (extraction's one pass, membership's target pass, the mask baseline) compute
    them once."""

    def __init__(self, section):
        self.section = section
        self._model = None
        self.memo = ScoreMemo()

    def get(self):
        if self._model is None:
            m = self.section
            self._model = load_model(m.path, m.dtype, m.device, m.allow_pickle, m.allow_partial)
        return self._model


def model_vocab_size(model) -> int:
    """Rows of the output embedding (what the model can predict), falling back to ``config.vocab_size``."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)


def check_vocab(model, tokenizer=None, docs: Sequence[Sequence[int]] = (), what: str = "the documents") -> None:
    """Raise a UserError when the tokenizer or the document token ids do not fit the model's vocabulary."""
    vocab = model_vocab_size(model)
    if tokenizer is not None and len(tokenizer) > vocab:
        raise UserError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary has {vocab}: they do "
            f"not belong together (use the tokenizer the model was trained with)"
        )
    top = max((max(d) for d in docs if len(d)), default=-1)
    if top >= vocab:
        raise UserError(
            f"{what} contain token id {top} but the model's vocabulary has only {vocab} ids: the data was "
            f"tokenised with a different tokenizer than the model's (re-prepare it with the model's)"
        )


def check_reference(reference, path: str | Path, tokenizer, docs: Sequence[Sequence[int]]) -> None:
    """Refuse (one line) a reference model that cannot score ``docs`` as the evaluated model does: one whose stored
    tokenizer is not ``tokenizer`` (the ids would mean other text: a same-size foreign vocabulary gives an AUC near
    0.5 that looks like a result), or whose vocabulary is smaller than the documents' ids. A reference folder
    without a tokenizer is checked by its vocabulary alone (with a warning)."""
    own = load_model_tokenizer(path)
    if own is None:
        print(
            f"warning: reference model {path} stores no tokenizer; it is assumed to use the evaluated model's "
            f"({len(tokenizer) if tokenizer is not None else 'unknown'} tokens)",
            file=sys.stderr,
        )
    elif tokenizer is not None:
        check_same_tokenizer(own, tokenizer, path, "the evaluated model and its data")
    try:
        check_vocab(reference, tokenizer, docs, what="the documents")
    except UserError as e:
        raise UserError(f"reference model {path}: {e}") from None


def pad_id_of(tokenizer) -> int:
    """Any valid id works for padding (it is masked out); prefer pad, then eos, then 0."""
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None) if tokenizer is not None else None
        if isinstance(value, int):
            return value
    return 0


def num_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
