"""The Llama size table: named shapes for ``model.name`` (data only; no torch, no transformers).

Tiny sizes are named by their parameter count *without* the vocabulary-dependent embedding (the vocabulary comes
from the prepared data); ``llama-demo`` is the toolkit's demo shape (about 0.9 M parameters in total with a
4096-token vocabulary). Paper-scale shapes copy the published configurations (TinyLlama-1.1B, Llama-2-7B/13B/70B,
Llama-3.1-405B; the 405B's long-context RoPE scaling is omitted). It sits in the base layer so that the config
(:class:`goldfish.train_config.ModelConfig`) can validate a name without importing the model code.
"""

from __future__ import annotations

from typing import Any

# name -> LlamaConfig fields (vocab_size is added from the data)
SIZES: dict[str, dict[str, Any]] = {
    "llama-demo": dict(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=320,
        tie_word_embeddings=True,
        max_position_embeddings=2048,
    ),
    "llama-1M": dict(
        hidden_size=128,
        num_hidden_layers=5,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=352,
        tie_word_embeddings=True,
        max_position_embeddings=2048,
    ),
    "llama-3M": dict(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=688,
        tie_word_embeddings=True,
        max_position_embeddings=2048,
    ),
    "llama-10M": dict(
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=6,
        num_key_value_heads=6,
        intermediate_size=1024,
        tie_word_embeddings=True,
        max_position_embeddings=2048,
    ),
    "llama-40M": dict(
        hidden_size=640,
        num_hidden_layers=8,
        num_attention_heads=10,
        num_key_value_heads=10,
        intermediate_size=1728,
        tie_word_embeddings=False,
        max_position_embeddings=2048,
    ),
    "tinyllama-1.1B": dict(
        hidden_size=2048,
        num_hidden_layers=22,
        num_attention_heads=32,
        num_key_value_heads=4,
        intermediate_size=5632,
        tie_word_embeddings=False,
        max_position_embeddings=2048,
    ),
    "llama2-7B": dict(
        hidden_size=4096,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        intermediate_size=11008,
        tie_word_embeddings=False,
        max_position_embeddings=4096,
    ),
    "llama2-13B": dict(
        hidden_size=5120,
        num_hidden_layers=40,
        num_attention_heads=40,
        num_key_value_heads=40,
        intermediate_size=13824,
        tie_word_embeddings=False,
        max_position_embeddings=4096,
    ),
    "llama2-70B": dict(
        hidden_size=8192,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        intermediate_size=28672,
        tie_word_embeddings=False,
        max_position_embeddings=4096,
    ),
    "llama3.1-405B": dict(
        hidden_size=16384,
        num_hidden_layers=126,
        num_attention_heads=128,
        num_key_value_heads=8,
        intermediate_size=53248,
        tie_word_embeddings=False,
        max_position_embeddings=131072,
        rope_theta=500000.0,
    ),
}
