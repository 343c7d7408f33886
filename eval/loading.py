"""Safe, offline loading of any Hugging Face causal LM and its tokenizer.

Accepted model paths: a Hugging Face folder (``config.json`` + weights), a ``.gguf`` file (dequantised by
transformers: ``from_pretrained(folder, gguf_file=name)``), a folder holding exactly one ``.gguf``, or a training
run folder (``<run>/model`` is used).

Safety rules -- a checkpoint is data, never code:
* ``trust_remote_code=False`` always (a config asking for custom code fails with a clear error);
* weights are read from safetensors or GGUF only; pickle files (``pytorch_model.bin``, ``.pt``, ...) are refused
  unless ``allow_pickle=True``, and even then read with ``torch.load(weights_only=True)``;
* ``local_files_only=True``: nothing is ever fetched from the Hugging Face Hub.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import pickle
from pathlib import Path
from typing import Sequence

import torch
from safetensors import SafetensorError

from goldfish.errors import UserError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where a model lives: the folder passed to ``from_pretrained`` and, for GGUF, the file name inside it."""

    folder: Path
    gguf_file: str | None = None

    def describe(self) -> str:
        return str(self.folder / self.gguf_file) if self.gguf_file else str(self.folder)


def resolve_model_path(path: str | Path) -> ModelSource:
    """Map a user path (HF folder, .gguf, run folder) to a :class:`ModelSource`, or raise one clear UserError."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"model path not found: {p} (pass --model a Hugging Face folder, a .gguf file or a run folder)")
    if p.is_file():
        if p.suffix == ".gguf":
            return ModelSource(p.parent, p.name)
        raise UserError(f"{p} is a file but not a .gguf; pass --model the folder that holds config.json and weights")
    if (p / "config.json").is_file():
        return ModelSource(p)
    if (p / "model" / "config.json").is_file():  # a training run folder
        return ModelSource(p / "model")
    ggufs = sorted(p.glob("*.gguf"))
    if len(ggufs) == 1:
        return ModelSource(p, ggufs[0].name)
    if len(ggufs) > 1:
        raise UserError(f"{p} holds {len(ggufs)} .gguf files; pass --model one of them, e.g. {ggufs[0]}")
    raise UserError(f"{p} is not a model folder: no config.json, no .gguf and no model/ subfolder "
                    f"(pass a Hugging Face model folder, a .gguf file or a training run folder)")


def check_weights(src: ModelSource, allow_pickle: bool) -> bool:
    """Refuse pickle-only folders unless allowed -> whether to read safetensors (``use_safetensors``)."""
    if src.gguf_file:
        return False
    if any(src.folder.glob("*.safetensors")):
        return True
    pickles = sorted(f.name for f in src.folder.iterdir() if f.suffix in PICKLE_SUFFIXES)
    if not pickles:
        raise UserError(f"{src.folder} has a config.json but no weights (*.safetensors); was the save interrupted?")
    if not allow_pickle:
        raise UserError(f"{src.folder} holds only pickle weights ({pickles[0]}), which can run code when loaded; "
                        f"convert them to safetensors, or set model.allow_pickle=true to load with "
                        f"torch.load(weights_only=True)")
    return False


def resolve_device(device: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; anything else is passed to ``torch.device``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError:
        raise UserError(f"device={device!r} is not a torch device; use auto, cpu, cuda or cuda:N") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


@contextlib.contextmanager
def _quiet_transformers(progress: bool = False):
    """Hide transformers' own "Loading weights" bar while loading (ours cover the evaluation), and its GGUF
    de-quantising bar unless ``progress``; restore both after."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    bar = gguf_utils.tqdm
    if not progress:
        gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar
        if was_enabled:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def one_gguf_read():
    """Parse each GGUF file once inside this block.

    transformers parses a GGUF file for the config, again for the tokenizer and again for the weights (a
    ``gguf.GGUFReader`` each time, ~17 s for SmolLM2's 49 k-token vocabulary on a laptop core). Within this block
    every reader of the same file is the first one (a read-only memory map, so sharing it is safe); loading the
    tokenizer and then the model reads the file once.
    """
    import gguf

    original = gguf.GGUFReader
    readers: dict[tuple[str, str], object] = {}

    def shared(path, mode: str = "r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared
    try:
        yield
    finally:
        gguf.GGUFReader = original


def load_model(path: str | Path, dtype: str = "float32", device: str = "auto", allow_pickle: bool = False,
               progress: bool = False):
    """Load a causal LM for inference (``eval()`` mode, on ``device``) -> ``PreTrainedModel``; ``progress`` shows
    transformers' GGUF conversion bar."""
    from transformers import AutoModelForCausalLM

    src = resolve_model_path(path)
    use_safetensors = check_weights(src, allow_pickle)
    if dtype not in DTYPES:
        raise UserError(f"dtype={dtype!r} is not one of {', '.join(DTYPES)}")
    kwargs = dict(dtype=DTYPES[dtype], local_files_only=True, trust_remote_code=False, weights_only=True)
    if src.gguf_file:
        kwargs["gguf_file"] = src.gguf_file
    else:
        kwargs["use_safetensors"] = use_safetensors
    try:
        with _quiet_transformers(progress):
            model = AutoModelForCausalLM.from_pretrained(src.folder, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError, ImportError, SafetensorError, pickle.UnpicklingError) as e:
        raise UserError(f"could not load a causal LM from {src.describe()}: {_first_line(e)}") from None
    return model.to(resolve_device(device)).eval()


def load_tokenizer(path: str | Path):
    """Load the tokenizer stored with a model (HF folder, GGUF, run folder) -> ``PreTrainedTokenizerBase``."""
    from transformers import AutoTokenizer

    src = resolve_model_path(path)
    kwargs = dict(local_files_only=True, trust_remote_code=False)
    if src.gguf_file:
        kwargs["gguf_file"] = src.gguf_file
    try:
        return AutoTokenizer.from_pretrained(src.folder, **kwargs)
    except (OSError, ValueError, KeyError, TypeError, ImportError) as e:
        raise UserError(f"could not load a tokenizer from {src.describe()}: {_first_line(e)}") from None


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
        raise UserError(f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary has {vocab}: they do "
                        f"not belong together (use the tokenizer the model was trained with)")
    top = max((max(d) for d in docs if len(d)), default=-1)
    if top >= vocab:
        raise UserError(f"{what} contain token id {top} but the model's vocabulary has only {vocab} ids: the data was "
                        f"tokenised with a different tokenizer than the model's (re-prepare it with the model's)")


def pad_id_of(tokenizer) -> int:
    """Any valid id works for padding (it is masked out); prefer pad, then eos, then 0."""
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None) if tokenizer is not None else None
        if isinstance(value, int):
            return value
    return 0


def num_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
