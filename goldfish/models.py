"""Model construction from the size table (:mod:`goldfish.sizes`) and loading of local models to fine-tune.

Models are plain Hugging Face ``LlamaForCausalLM``: the engines parallelise them, the evaluation package loads the
exported folders with ``AutoModelForCausalLM``. Nothing is downloaded and no remote code runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .errors import UserError
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
    from transformers import LlamaConfig

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
        raise UserError(f"model shape is inconsistent: hidden_size={fields['hidden_size']} must be divisible by "
                        f"num_heads={heads}, and num_heads by num_kv_heads={kv}")
    return LlamaConfig(vocab_size=vocab_size, rms_norm_eps=1e-5, rope_parameters={"rope_type": "default",
                       "rope_theta": rope_theta}, bos_token_id=None, eos_token_id=None, **fields)


def build_model(cfg: "ModelConfig", vocab_size: int, seed: int) -> nn.Module:
    """A freshly initialised ``LlamaForCausalLM`` (fp32, on CPU), or the local model of ``cfg.path``.

    Initialisation uses a private RNG stream seeded with ``seed``, so every rank of every world size builds the same
    weights and the global RNG state of the caller is untouched.
    """
    if cfg.path:
        return load_local_model(cfg.path, vocab_size)
    from transformers import LlamaForCausalLM

    config = llama_config(cfg, vocab_size)
    config._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.float()


def load_local_model(path: str | Path, vocab_size: int) -> nn.Module:
    """Load a local Hugging Face folder or ``.gguf`` file (no remote code) and check its vocabulary."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if not path.exists():
        raise UserError(f"model.path={str(path)!r} does not exist (give a local Hugging Face folder or .gguf file)")
    kwargs: dict[str, Any] = {"trust_remote_code": False, "dtype": torch.float32}
    if path.is_file() and path.suffix != ".gguf":
        raise UserError(f"model.path={str(path)!r} is a file but not a .gguf; give a folder or a .gguf file")
    try:
        if path.is_file():
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, **kwargs)
        else:
            model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, **kwargs)
    except Exception as e:  # damaged files raise SafetensorError, UnpicklingError, ValueError, OSError, ...
        raise UserError(f"model.path={str(path)!r} cannot be loaded ({type(e).__name__}: "
                        f"{(str(e).splitlines() or [''])[0][:160]}); give a Hugging Face folder with intact "
                        f"safetensors weights, or a valid .gguf file") from None
    if path.is_file():
        # GGUF weights are dequantised to fp32 on load; drop the quantizer so the model trains and saves as a plain one
        model.hf_quantizer = None
        if getattr(model, "is_quantized", False):
            model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    model_vocab = model.get_input_embeddings().num_embeddings
    padded = model_vocab > vocab_size and model_vocab % 64 == 0 and model_vocab - vocab_size < 128  # GPU padding
    if model_vocab != vocab_size and not padded:
        raise UserError(f"vocabulary mismatch: model {path} has {model_vocab} token embeddings but the prepared "
                        f"data's tokenizer has {vocab_size} tokens; prepare the data with this model's tokenizer")
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
    """Training FLOPs per token: 6·N + 12·L·H·T (PaLM appendix B; nanoGPT's ``estimate_mfu``).

    N counts the weights used in matmuls: every parameter except an untied input embedding (a lookup, no
    FLOPs); the output head is counted. L layers, H hidden size, T sequence length (the attention-score term).
    """
    config = model.config
    n = count_parameters(model)
    embedding = model.get_input_embeddings().weight
    output = model.get_output_embeddings()
    if output is None or output.weight is not embedding:
        n -= embedding.numel()
    return 6.0 * n + 12.0 * config.num_hidden_layers * config.hidden_size * seq_len
