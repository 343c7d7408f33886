"""Shared fixtures of the eval tests: tiny random causal LMs, a tiny tokenizer, model folders and JSONL files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

TEXTS = [
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the warm afternoon sun.",
    "We hold these truths to be self-evident, that all men are created equal, that they are endowed.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.",
    "In the beginning God created the heaven and the earth. And the earth was without form, and void.",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse.",
    "All happy families are alike; each unhappy family is unhappy in its own way. Everything was in confusion.",
]


def tiny_tokenizer(vocab_size: int = 300):
    """A byte-level BPE trained on :data:`TEXTS` (deterministic, offline) with an eos/pad token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TEXTS * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def tiny_llama(vocab_size: int = 300, seed: int = 0, hidden: int = 32, layers: int = 2, init: float = 0.2):
    """A random Llama; a large init std makes next-token distributions peaked (diverse greedy outputs, few ties)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=init,
        bos_token_id=None,
        eos_token_id=0,
        pad_token_id=0,
    )
    return LlamaForCausalLM(cfg).eval()


def save_model_folder(path: Path, model, tokenizer=None) -> Path:
    """``save_pretrained`` (safetensors) the model and optionally its tokenizer into ``path``."""
    model.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


def write_jsonl(path: Path, texts, prefix: str = "doc") -> Path:
    path.write_text("".join(json.dumps({"id": f"{prefix}{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


def schema_fields(path: Path) -> dict[str, set[str]]:
    """A results schema (eval/SCHEMA.md, goldfish/experiment/SCHEMA.md): section title -> the field names its table
    lists (rows ``| `field` | meaning |``)."""
    out: dict[str, set[str]] = {}
    for block in re.split(r"^## ", Path(path).read_text(encoding="utf-8"), flags=re.M)[1:]:
        title, _, body = block.partition("\n")
        out[title.strip()] = set(re.findall(r"^\| `([^`]+)` \|", body, flags=re.M))
    return out
