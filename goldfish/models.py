"""Model construction from the size table (:mod:`goldfish.sizes`) and the one loader of local models.

Models are plain Hugging Face ``LlamaForCausalLM``: the engines parallelise them. :func:`load_pretrained` is the only
place a checkpoint is read -- by the trainer (``model.path``: fine-tuning) and by the evaluation package -- with one
safety policy, because a checkpoint is data, never code:

* ``trust_remote_code=False`` always (a config asking for custom code fails with a clear error);
* weights come from safetensors or GGUF; pickle files (``pytorch_model.bin``, ``.pt``, ...) are refused unless
  ``allow_pickle=True``, and even then read with ``torch.load(weights_only=True)``;
* a model is always loaded from local files (``local_files_only=True``); a Hub id (``ORG/NAME``, not a local path)
  is resolved to its snapshot in the Hugging Face cache first (:func:`goldfish.model_source.hub_snapshot`), fetched
  into the cache when it is not there and the Hub may be reached (not under ``HF_HUB_OFFLINE=1``) -- its config,
  tokenizer and safetensors weights only, never code or pickles;
* anything unreadable (a missing path, a corrupt safetensors file, a fake ``.gguf``) is one :class:`UserError` line;
* a ``config.json`` describing more parameters than the weight files hold (200,000 layers) is refused from the
  files' headers before anything is built (:func:`check_claimed_size`): a model is built from its config before its
  weights are read, so such a config would otherwise cost minutes and gigabytes before it failed.

Accepted paths (:func:`goldfish.model_source.resolve_model_path`): a Hugging Face folder (``config.json`` + weights),
a ``.gguf`` file (dequantised by transformers), a folder holding exactly one ``.gguf``, a training run folder
(``<run>/model`` is used), or a Hub id.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from .data.tokenizer import tokenizer_sha256
from .errors import UserError
from .gguf_cache import dequantised
from .model_source import PICKLE_SUFFIXES, check_weights, first_line, resolve_model_path, safetensors_header
from .perf import model_flops_per_token
from .sizes import SIZES

if TYPE_CHECKING:
    from .train_config import ModelConfig

# ModelConfig override field -> LlamaConfig field
_OVERRIDES = {
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "intermediate_size": "intermediate_size",
    "tie_embeddings": "tie_word_embeddings",
    "max_position_embeddings": "max_position_embeddings",
}


def llama_config(cfg: "ModelConfig", vocab_size: int):
    """The ``LlamaConfig`` of a named size with ``cfg``'s overrides applied."""
    if cfg.name not in SIZES:
        raise UserError(f"model.name={cfg.name!r} is not a known size; choose one of: {', '.join(SIZES)}")
    fields = dict(SIZES[cfg.name])
    for ours, theirs in _OVERRIDES.items():
        if getattr(cfg, ours) is not None:
            fields[theirs] = getattr(cfg, ours)
    if cfg.num_heads is not None and cfg.num_kv_heads is None:
        fields["num_key_value_heads"] = cfg.num_heads  # changing heads alone keeps plain multi-head attention
    rope_theta = fields.pop("rope_theta", 10000.0)
    heads, kv = fields["num_attention_heads"], fields["num_key_value_heads"]
    if fields["hidden_size"] % heads or heads % kv:
        raise UserError(
            f"model shape is inconsistent: hidden_size={fields['hidden_size']} must be divisible by "
            f"num_heads={heads}, and num_heads by num_kv_heads={kv}"
        )
    return LlamaConfig(
        vocab_size=vocab_size,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        bos_token_id=None,
        eos_token_id=None,
        **fields,
    )


MAX_PARAMETERS = 10**13  # a model to build: beyond this (10 T) no machine trains it; refused before building


def parameters_at_least(config) -> int:
    """A lower bound on the parameters of a decoder-only transformer with Hugging Face ``config``: the embedding
    (vocabulary x width, counted once for tied heads) and per layer a quarter of a width x width attention projection
    plus the MLP's up projection (width x intermediate). Exact Python integers: no overflow, whatever the config."""

    def value(name: str) -> int:
        v = getattr(config, name, None)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0

    width, layers = value("hidden_size"), value("num_hidden_layers")
    return value("vocab_size") * width // 2 + layers * (width * width // 4 + width * value("intermediate_size"))


def _stored_elements(folder: Path, safetensors: bool) -> int:
    """Elements in a model folder's weight files, from the safetensors headers (no tensor read); for pickle
    weights, their bytes (every element takes at least one)."""

    if not safetensors:
        return sum(f.stat().st_size for f in folder.iterdir() if f.suffix in PICKLE_SUFFIXES)
    return sum(math.prod(shape) for shape in _stored_shapes(folder).values())


def _stored_shapes(folder: Path) -> dict[str, list[int]]:
    """{tensor name: shape} of a folder's safetensors files, from their bounded headers (no tensor read)."""
    shapes: dict[str, list[int]] = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        shapes.update({k: v["shape"] for k, v in safetensors_header(file).items()})
    return shapes


def _listed(names: list[str], limit: int = 4) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def tensor_problems(config, stored: dict[str, list[int]]) -> list[str]:
    """What keeps checkpoint tensors ``stored`` ({name: shape}) from being the whole model ``config`` describes: the
    tensors missing (which transformers would initialise randomly, with only a log message), unexpected (which it
    would drop) and of another shape, each named; empty when they fit. The model is built on the meta device (no
    memory); a tied weight (the output head tied to the embedding) is present when any name of it is."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    if _converted_on_load(model, stored):
        return []  # transformers renames or fuses these keys as it loads: its own loading info is checked after
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    expected = {k: list(v.shape) for k, v in model.state_dict().items()}
    prefix = getattr(model, "base_model_prefix", "") + "."
    if prefix != "." and not any(k.startswith(prefix) for k in stored):  # a base model's checkpoint: no prefix
        stored = {(k if k in expected else prefix + k): v for k, v in stored.items()}
    ignored = [re.compile(p) for p in (getattr(model, "_keys_to_ignore_on_load_unexpected", None) or [])]
    missing = sorted(k for aliases in names.values() if not any(a in stored for a in aliases) for k in aliases[:1])
    missing += sorted(k for k in expected if k not in stored and not any(k in a for a in names.values()))
    unexpected = sorted(k for k in stored if k not in expected and not any(p.search(k) for p in ignored))
    shaped = _grouped_mismatches(stored, expected)
    if shaped:  # a config of another model: said as such, before what is missing
        raise UserError(_mismatch_line(shaped))
    return _worded(missing, unexpected)


def _worded(missing: list[str], unexpected: list[str], shaped: list[str] = ()) -> list[str]:
    """``["2 tensors are missing (a, b)", "1 tensor is not part of the model (c)", ...]``, the empty kinds left out."""

    def counted(names, what: str, limit: int = 4) -> list[str]:
        n = len(names)
        return [f"{n} tensor{'s are' if n > 1 else ' is'} {what} ({_listed(list(names), limit)})"] if n else []

    return (
        counted(missing, "missing")
        + counted(unexpected, "not part of the model")
        + counted(shaped, "of another shape", 2)
    )


def _converted_on_load(model, stored: dict) -> bool:
    """Whether transformers converts checkpoint keys of ``model``'s class as it loads (v5's weight conversions: a
    MoE's per-expert tensors fused, legacy names renamed) in a way that concerns ``stored``: names in the files are
    then not the state dict's, and only the loading report after the load can tell what is missing."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightRenaming

        conversions = get_model_conversion_mapping(model, None, None)
    except Exception:  # noqa: BLE001 - a transformers without conversions: the names are the state dict's
        return False
    for conversion in conversions:
        if not isinstance(conversion, WeightRenaming):
            return True
        if any(re.search(pattern, key) for pattern in conversion.source_patterns for key in stored):
            return True
    return False


def check_whole(problems: list[str], where: str) -> None:
    """Refuse (one line) a checkpoint that is not the whole model: :func:`tensor_problems`'s ``problems``."""
    if problems:
        raise UserError(
            f"{where}: its weights are not the whole model its config.json describes: "
            f"{'; '.join(problems)}; a model loaded from them would be partly random, so nothing is "
            f"evaluated or trained: restore the complete checkpoint (or the config that matches it)"
        )


def check_claimed_size(config, stored: int, where: str) -> None:
    """Refuse (one line) a config that describes more parameters than ``stored`` weight elements hold."""
    claimed = parameters_at_least(config)
    if claimed > stored * 1.01 + 4096:
        raise UserError(
            f"{where}: its config.json describes at least {claimed:.3g} parameters "
            f"({getattr(config, 'num_hidden_layers', '?')} layers of width "
            f"{getattr(config, 'hidden_size', '?')}) but its weights hold {stored:.3g}; the config and the "
            f"weights belong to different models (or the config was altered)"
        )


def build_model(cfg: "ModelConfig", vocab_size: int, seed: int, tokenizer=None) -> nn.Module:
    """A freshly initialised ``LlamaForCausalLM`` (fp32, on CPU), or the local model of ``cfg.path`` (checked against
    the data's ``tokenizer`` when given).

    Initialisation uses a private RNG stream seeded with ``seed``, so every rank of every world size builds the same
    weights and the global RNG state of the caller is untouched.
    """
    if cfg.path:
        return load_local_model(cfg.path, vocab_size, tokenizer)
    config = llama_config(cfg, vocab_size)
    if parameters_at_least(config) > MAX_PARAMETERS:
        raise UserError(
            f"model: {config.num_hidden_layers} layers of width {config.hidden_size} (MLP "
            f"{config.intermediate_size}) make at least {parameters_at_least(config):.3g} parameters, "
            f"beyond any machine ({MAX_PARAMETERS:.0e}); choose a smaller model.name or override"
        )
    config._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.float()


SPECIAL_IDS = (("eos_id", "eos_token_id"), ("bos_id", "bos_token_id"), ("pad_id", "pad_token_id"))


def set_special_ids(model: nn.Module, tokenizer: dict) -> nn.Module:
    """Give ``model`` (its config and generation config) the eos/bos/pad ids of the data's tokenizer (a prepared
    manifest's ``tokenizer`` record), so that generation stops and pads as the data was built."""
    for key, name in SPECIAL_IDS:
        if tokenizer.get(key) is not None:
            setattr(model.config, name, int(tokenizer[key]))
            if getattr(model, "generation_config", None) is not None:
                setattr(model.generation_config, name, int(tokenizer[key]))
    return model


class _Captured(logging.Handler):
    """Keeps transformers' log messages (e.g. its multi-line LOAD REPORT) instead of printing them."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _quiet_transformers():
    """Hide transformers' own "Loading weights" bar while loading (callers show their own) and its log messages
    unless ``TRANSFORMERS_VERBOSITY`` asks for them (they are kept: yields the list); restore both after."""
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    root = logging.getLogger("transformers")
    handlers = root.handlers
    captured = _Captured()
    if "TRANSFORMERS_VERBOSITY" not in os.environ:
        root.handlers = [captured]
    try:
        yield captured.messages
    finally:
        root.handlers = handlers
        if was_enabled:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def transformers_bars(show: bool):
    """transformers' own progress bars (``Writing model shards`` when saving) drawn only when ``show`` -- a caller
    passes whether it draws bars itself (on a terminal): a log file gets none; restored after."""
    was_enabled = hf_logging.is_progress_bar_enabled()
    if not show:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled and not show:
            hf_logging.enable_progress_bar()


# a row of transformers' LOAD REPORT: "<key> | MISMATCH | Reinit due to size mismatch - ckpt: torch.Size([..]) vs
# model:torch.Size([..])"
_MISMATCH = re.compile(
    r"^(.+?)\s*\|\s*MISMATCH\b.*?ckpt:\s*torch\.Size\((\[[^\]]*\])\)"
    r"\s*vs\s*model:\s*torch\.Size\((\[[^\]]*\])\)"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _shape_mismatches(folder: Path) -> list[tuple[str, str, str]]:
    """[(tensor name, checkpoint shape, config's shape)] of ``folder``'s safetensors against its ``config.json``, from
    the file headers and a model built on the meta device (no weights read); layers differing only in their index
    are one row, ``model.layers.{0, 1}.mlp.down_proj.weight``. Empty when it cannot tell."""

    try:
        with torch.device("meta"):
            config = AutoConfig.from_pretrained(folder, trust_remote_code=False, local_files_only=True)
            expected = {k: list(v.shape) for k, v in AutoModelForCausalLM.from_config(config).state_dict().items()}
        stored = _stored_shapes(Path(folder))
    except Exception:  # noqa: BLE001 - only a better message is at stake; the caller falls back to the exception
        return []
    return _grouped_mismatches(stored, expected)


def _mismatch_line(rows: list[tuple[str, str, str]]) -> str:
    key, ckpt, config = rows[0]
    more = f" (and {len(rows) - 1} more tensors)" if len(rows) > 1 else ""
    return (
        f"its weights do not fit its config.json: {key} is {ckpt} in the checkpoint but {config} by the "
        f"config{more}; the config and the weights belong to different models"
    )


def _grouped_mismatches(stored: dict[str, list[int]], expected: dict[str, list[int]]) -> list[tuple[str, str, str]]:
    """[(tensor name, checkpoint shape, config's shape)] of the tensors whose shapes differ; layers differing only
    in their index are one row, ``model.layers.{0, 1}.mlp.down_proj.weight``."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for key in sorted(set(stored) & set(expected)):
        if stored[key] != expected[key]:
            index = re.search(r"\.(\d+)\.", key)
            pattern = key[: index.start(1)] + "{}" + key[index.end(1) :] if index else key
            ids = groups.setdefault((pattern, str(stored[key]), str(expected[key])), [])
            ids.append(index.group(1) if index else "")
    return [
        (pattern.replace("{}", "{" + ", ".join(ids) + "}" if len(ids) > 1 else ids[0]), ckpt, config)
        for (pattern, ckpt, config), ids in groups.items()
    ]


def _load_failure(e: BaseException, messages: list[str], folder: Path | None = None) -> str:
    """What went wrong loading a model, in one line: a tensor shape mismatch named from transformers' report (which
    is not printed) or, where transformers names no tensor, from the file headers; else the exception's first
    line."""
    rows = [
        m.groups() for text in messages for line in _ANSI.sub("", text).splitlines() if (m := _MISMATCH.match(line))
    ]
    if not rows and folder is not None and "size mismatch" in str(e):
        rows = _shape_mismatches(folder)  # transformers 4.x names no tensor: "...state_dict for Linear: size mismatch"
    if not rows:
        return first_line(e)
    return _mismatch_line(rows)


def loading_problems(info: dict) -> list[str]:
    """The missing, unexpected and mis-shaped tensors of transformers' ``output_loading_info``, as
    :func:`tensor_problems` words them (transformers itself only logs them, and initialises the missing randomly)."""
    missing, unexpected = sorted(info.get("missing_keys") or ()), sorted(info.get("unexpected_keys") or ())
    shaped = sorted(
        f"{k[0]} is {list(k[1])} but {list(k[2])} by the config" if isinstance(k, tuple) and len(k) == 3 else str(k)
        for k in info.get("mismatched_keys") or ()
    )
    return _worded(missing, unexpected, shaped)


def load_pretrained(
    path: str | Path, dtype: torch.dtype | str = torch.float32, allow_pickle: bool = False, allow_partial: bool = False
) -> nn.Module:
    """Load a local causal LM on CPU under the safety policy of the module docstring -> ``PreTrainedModel``.

    ``dtype``: a torch dtype or ``"auto"`` (the checkpoint's). A GGUF is dequantised once into the cache of
    :mod:`goldfish.gguf_cache` and loaded from there as a plain model (no quantizer: it trains and saves as any
    other). A checkpoint that is not the whole model (tensors missing or not the model's) is refused, unless
    ``allow_partial`` (eval's ``model.allow_partial``): then it loads with a warning, its missing tensors as
    transformers initialises them, and the model's ``goldfish_partial`` lists what was not whole (results.json's
    ``model.partial``); tensors of another shape are refused always."""
    src = resolve_model_path(path)
    use_safetensors = check_weights(src, allow_pickle)
    # a GGUF is dequantised once into a cached safetensors folder (goldfish.gguf_cache), then loaded like any other
    folder = dequantised(src.folder / src.gguf_file) if src.gguf_file else src.folder
    safetensors = use_safetensors or bool(src.gguf_file)
    kwargs = dict(
        dtype=dtype, local_files_only=True, trust_remote_code=False, weights_only=True, use_safetensors=safetensors
    )
    where = f"could not load a causal LM from {src.describe()}"
    with _quiet_transformers() as messages:
        try:
            config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
            check_claimed_size(config, _stored_elements(Path(folder), safetensors), where)  # before building
            problems = tensor_problems(config, _stored_shapes(Path(folder))) if safetensors else []
            if not allow_partial:
                check_whole(problems, where)
            model, info = AutoModelForCausalLM.from_pretrained(
                folder, config=config, output_loading_info=True, **kwargs
            )
            reported = loading_problems(info)  # what transformers itself reports (also for pickles)
            if not allow_partial or info.get("mismatched_keys"):
                check_whole(reported, where)
            if reported or problems:
                model.goldfish_partial = reported or problems
                print(
                    f"warning: {src.describe()} is not the whole model its config.json describes "
                    f"({'; '.join(model.goldfish_partial)}); loaded anyway (model.allow_partial=true): its missing "
                    f"tensors are random, and every number computed from it says so",
                    file=sys.stderr,
                    flush=True,
                )
            return model
        except UserError as e:  # a damaged header, a partial checkpoint: said of this model
            raise UserError(str(e) if str(e).startswith(where) else f"{where}: {e}") from None
        except Exception as e:  # damaged files: SafetensorError, UnpicklingError, struct.error, ValueError, OSError...
            why = _load_failure(e, messages, folder)
            raise UserError(f"could not load a causal LM from {src.describe()}: {why}") from None


# files any saved Hugging Face tokenizer has at least one of
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "tokenizer.model")


def load_model_tokenizer(path: str | Path):
    """The tokenizer stored with a model (HF folder, GGUF, run folder) -> ``PreTrainedTokenizerBase``, or ``None``
    for a folder without tokenizer files. Tokenizer files that do not load (truncated, damaged) are an error, never
    silently replaced by another tokenizer."""

    src = resolve_model_path(path)
    folder = dequantised(src.folder / src.gguf_file) if src.gguf_file else src.folder  # goldfish.gguf_cache
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None
    try:
        with _quiet_transformers():
            return AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except Exception as e:  # truncated JSON, a foreign format, missing merges: various types
        raise UserError(
            f"the tokenizer stored with model {src.describe()} is damaged or unreadable "
            f"({first_line(e)[:200]}); restore its tokenizer files, or remove them to use the data's "
            f"tokenizer"
        ) from None


def check_same_tokenizer(own, tokenizer, path: str | Path, what: str) -> None:
    """Refuse (one line) when ``own``, the tokenizer stored with model ``path`` (:func:`load_model_tokenizer`), is
    not ``tokenizer`` (the one that made ``what``): same vocabulary and merges, not merely the same size. A model
    without a tokenizer (``own`` is None) passes."""
    if own is None:
        return
    if tokenizer_sha256(own) != tokenizer_sha256(tokenizer):
        raise UserError(
            f"the tokenizer of model {path} ({len(own)} tokens) is not the tokenizer of {what} "
            f"({len(tokenizer)} tokens): their vocabularies or merges differ, so token ids would mean "
            f"other text; prepare the data with the model's tokenizer (tokenizer.name={path})"
        )


def load_local_model(path: str | Path, vocab_size: int, tokenizer=None) -> nn.Module:
    """The model of ``model.path`` to fine-tune: :func:`load_pretrained` in fp32, checked against the data's
    vocabulary (a model padded to a multiple of 64 for GPUs is accepted) and, given the data's ``tokenizer``,
    against the tokenizer stored with the model."""
    model = load_pretrained(path, torch.float32)
    if tokenizer is not None:
        check_same_tokenizer(load_model_tokenizer(path), tokenizer, path, "the prepared data")
    model_vocab = model.get_input_embeddings().num_embeddings
    padded = model_vocab > vocab_size and model_vocab % 64 == 0 and model_vocab - vocab_size < 128  # GPU padding
    if model_vocab != vocab_size and not padded:
        raise UserError(
            f"vocabulary mismatch: model {path} has {model_vocab} token embeddings but the prepared "
            f"data's tokenizer has {vocab_size} tokens; prepare the data with this model's tokenizer"
        )
    return model  # already fp32 (dtype=); GGUF weights are dequantised on load and refuse .float()


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Unique parameters (tied weights counted once)."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def flops_per_token(model: nn.Module, seq_len: int) -> float:
    """Training FLOPs per token of a built model (:func:`goldfish.perf.model_flops_per_token`: 6·N + 12·L·H·T), N
    counting every parameter except an untied input embedding (a lookup, no FLOPs)."""
    config = model.config
    n = count_parameters(model)
    embedding = model.get_input_embeddings().weight
    output = model.get_output_embeddings()
    if output is None or output.weight is not embedding:
        n -= embedding.numel()
    return model_flops_per_token(n, config.num_hidden_layers, config.hidden_size, seq_len)
