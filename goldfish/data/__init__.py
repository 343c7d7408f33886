"""The data layer: real text offline, tokenizers, and memorization splits (``goldfish prepare``).

Public API::

    from goldfish.data import PrepareConfig, prepare, load_prepared, load_tokenizer, load_documents

    path = prepare(PrepareConfig(), out="data/prepared/wikipedia_demo")   # the demo recipe's defaults
    data = load_prepared(path)          # .manifest, .members, .nonmembers, .background, .train, .tokenizer

The folder format is described in :mod:`goldfish.data.prepared` and ``data/README.md``.
"""

from __future__ import annotations

from .config import PrepareConfig, SourceConfig, TokenizerConfig
from .prepare import prepare, summary
from .prepared import FORMAT, Prepared, load_prepared
from .sources import Document, load_documents
from .tokenizer import load_tokenizer

__all__ = [
    "FORMAT",
    "Document",
    "PrepareConfig",
    "Prepared",
    "SourceConfig",
    "TokenizerConfig",
    "load_documents",
    "load_prepared",
    "load_tokenizer",
    "prepare",
    "summary",
]
