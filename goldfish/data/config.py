"""``PrepareConfig``: everything ``goldfish prepare`` needs to turn a corpus into a memorization dataset.

The dataclass defaults ARE the demo recipe (``data/wikipedia_demo.yaml``): the offline Wikipedia articles shipped in
the gensim wheel, a 4096-token byte-level BPE trained on them, and a seeded random split of the articles into 50
members and 50 nonmembers, each cut to its first 128 tokens (``random_split``: the two sets differ only in
membership). So ``PrepareConfig()`` runs anywhere without a file.

Layout of a recipe (every key optional; see ``data/README.md`` for each one)::

    name: wikipedia_demo
    source: {name: wikipedia}
    tokenizer: {name: bpe, vocab_size: 4096}
    seed: 0
    seq_len: 128
    packing: one_per_row
    min_tokens: 32
    doc_tokens: 128
    num_members: 50
    repetitions: [1]
    nonmember_mode: random_split
    num_nonmembers: null
    num_background: 0
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from ..config import check, check_at_most, check_seed, find_config, option, raise_problems, shown
from .canaries import CanaryConfig
from .dedup import DedupConfig
from .variants import NearDuplicateConfig

SOURCE_NAMES = ("wikipedia", "kjv", "local", "hub")
Packing = Literal["pack", "one_per_row"]
NonmemberMode = Literal["random_split", "held_out", "later_chunk"]
TokenDtype = Literal["auto", "uint16", "uint32"]


@dataclasses.dataclass
class SourceConfig:
    """Where the documents come from (the ``source:`` section, and ``background_source:``)."""

    name: str = option(
        "wikipedia",
        "wikipedia (offline, gensim wheel) | kjv (Debian bible-kjv) | local (a .txt "
        "folder, .jsonl/.json, .parquet, or a save_to_disk folder: set path) | hub "
        "(datasets.load_dataset(path), online only)",
    )
    path: str | None = option(
        None,
        "local: file or folder; hub: dataset name; wikipedia: a .xml.bz2 dump "
        "(null = the one in the gensim wheel); kjv: folder of bible.data (null = /usr/lib)",
    )
    text_field: str = option("text", "jsonl/parquet/datasets/hub: column holding the document text")
    id_field: str | None = option(None, "column holding a document id (null = file name / row number)")
    title_field: str | None = option(None, "column holding a title (null = no title, or the file name for .txt)")
    split: str = option("train", "datasets/hub: which split to read when the folder or dataset has several")
    subset: str | None = option(None, "hub: the dataset configuration name (second argument of load_dataset)")
    min_words: int | None = option(
        None,
        "drop documents with fewer whitespace-separated words (stubs, "
        "disambiguation pages); null = 50 for wikipedia, 1 otherwise",
    )
    max_documents: int | None = option(
        None,
        "read at most this many documents, in source order (null = all): the "
        "first N that pass min_words; for a streamed background_source, the "
        "first N documents of the source",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(
            self.name in SOURCE_NAMES,
            problems,
            f"name={shown(self.name)} is unknown; choose one of: {', '.join(SOURCE_NAMES)}",
        )
        check(
            self.name not in ("local", "hub") or bool(self.path),
            problems,
            f"name={shown(self.name)} needs path (a file/folder for local, a dataset name for hub)",
        )
        check(
            self.min_words is None or self.min_words >= 0,
            problems,
            f"min_words={self.min_words} must be >= 0 (or null for the source's default)",
        )
        check(
            self.max_documents is None or self.max_documents >= 1,
            problems,
            f"max_documents={self.max_documents} must be >= 1 (or null for all)",
        )
        raise_problems(problems)

    @property
    def word_floor(self) -> int:
        """The effective ``min_words``: 50 for Wikipedia (drops stubs), 1 elsewhere (drops empty documents)."""
        if self.min_words is not None:
            return self.min_words
        return 50 if self.name == "wikipedia" else 1


@dataclasses.dataclass
class TokenizerConfig:
    """Which tokenizer turns text into ids (the ``tokenizer:`` section)."""

    name: str = option(
        "bpe",
        "gpt2 (offline GPT-2 BPE, 50257 ids) | bpe (byte-level BPE trained on the corpus) | "
        "a local Hugging Face tokenizer folder | a .gguf file",
    )
    vocab_size: int = option(4096, "bpe only: vocabulary size of the trained tokenizer (>= 300)")
    source: SourceConfig | None = option(
        None,
        "bpe only: the corpus the tokenizer is trained on (null = the "
        "recipe's own documents and background, nonmembers included; set "
        "another corpus so the tokenizer never sees a nonmember)",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(bool(self.name), problems, "name is empty; use gpt2, bpe, a tokenizer folder or a .gguf file")
        check(
            self.vocab_size >= 300,
            problems,
            f"vocab_size={self.vocab_size} is too small: a byte-level BPE needs >= 300 (256 bytes + merges)",
        )
        check_at_most(self.vocab_size, 2**20, problems, "vocab_size", "the merges a BPE learns and its id range")
        check(
            self.source is None or self.name == "bpe",
            problems,
            f"source is set but name={shown(self.name)}: only a trained tokenizer (name: bpe) has a training corpus",
        )
        raise_problems(problems)


@dataclasses.dataclass
class PrepareConfig:
    """A memorization dataset: members (trained on, with repetition counts), nonmembers (never trained on), rows."""

    name: str = option("wikipedia_demo", "recipe name; the default output folder is data/prepared/<name>")
    source: SourceConfig = option(factory=SourceConfig, help="where the documents come from")
    tokenizer: TokenizerConfig = option(factory=TokenizerConfig, help="how text becomes token ids")
    seed: int = option(0, "seed of every random choice (member selection, repetition strata, training order)")
    seq_len: int = option(128, "tokens per training row")
    packing: Packing = option(
        "one_per_row",
        "pack: documents + EOS concatenated into full rows | one_per_row: one "
        "document per row, right-padded (the paper's setting)",
    )
    min_tokens: int = option(32, "documents with fewer tokens are skipped (and counted); if all are, it is an error")
    doc_tokens: int | None = option(128, "cut each document to its first N tokens (null = the whole document)")
    num_members: int | None = option(50, "how many member (target) documents (null = all remaining documents)")
    repetitions: list[int] = option(
        factory=lambda: [1],
        help="repetition counts assigned round-robin to the "
        "(shuffled) members, e.g. [1, 2, 4, 8, 16, 32] for duplication strata",
    )
    nonmember_mode: NonmemberMode = option(
        "random_split",
        "random_split: a seeded random split of whole documents, "
        "members and nonmembers both tokens [0, doc_tokens) (the sound design) | "
        "held_out: other documents of the corpus, any length >= min_tokens | "
        "later_chunk: tokens [doc_tokens, 2*doc_tokens) of each member document "
        "(openings vs bodies: a distribution-shift example)",
    )
    num_nonmembers: int | None = option(None, "how many nonmembers (null = as many as members, or all available)")
    num_validation: int = option(
        0,
        "held-out validation documents from the same pool (random_split / held_out), "
        "never trained on and never reported as nonmembers: what a learning rate is "
        "tuned on (tune.by: validation_loss), so the choice does not peek at the "
        "membership test's nonmembers",
    )
    num_background: int | None = option(
        0, "filler documents mixed into training, one copy each per epoch (0 = none, null = all available)"
    )
    background_source: SourceConfig | None = option(
        None, "where background comes from (null = the main source's documents not used as members or nonmembers)"
    )
    background_chunk_tokens: int | None = option(
        None, "cut background documents into chunks of N tokens, each a background document (null = whole documents)"
    )
    background_dedup: DedupConfig | None = option(
        factory=DedupConfig,
        help="near-duplicate removal: a background "
        "document holding >= overlap of the distinct n-grams of a member or "
        "nonmember is left out (goldfish.data.dedup); null = exact id and "
        "text matches only",
    )
    train_members: bool = option(
        True,
        "false: the training rows hold the background only, members and nonmembers "
        "are kept for evaluation (the control of a sweep: the same model trained on "
        "the same background, never on the targets)",
    )
    near_duplicates: NearDuplicateConfig | None = option(
        None,
        "null = a member's r copies are identical; set: the "
        "first copy is the member, the r-1 others are edited "
        "variants (see data/README.md)",
    )
    canaries: CanaryConfig | None = option(
        None,
        "null = none; set: random token sequences inserted into the "
        "training rows like members, in the members' strata (the "
        "Secret Sharer's canaries; see data/README.md)",
    )
    token_dtype: TokenDtype = option(
        "auto",
        "how token ids are stored: auto (uint16 when the vocabulary has at "
        "most 65,536 ids, else uint32) | uint16 | uint32",
    )
    shard_documents: int = option(
        10_000,
        "background documents per shard: a streamed background_source is read, "
        "tokenized and written in shards of this many source documents (the "
        "unit of parallel workers, of resuming and of --shards jobs); the main "
        "source's background in shards of this many chunks",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(
            bool(self.name) and "/" not in self.name and self.name not in (".", ".."),
            problems,
            f"name={shown(self.name)} must be a plain folder name (no '/')",
        )
        check(self.seq_len >= 2, problems, f"seq_len={self.seq_len} must be >= 2")
        check_at_most(self.seq_len, 2**20, problems, "seq_len", "every packed row is held in memory")
        check(self.min_tokens >= 1, problems, f"min_tokens={self.min_tokens} must be >= 1")
        check(
            self.doc_tokens is None or self.doc_tokens >= 1,
            problems,
            f"doc_tokens={self.doc_tokens} must be >= 1 (or null for whole documents)",
        )
        check(
            self.doc_tokens is None or self.doc_tokens >= self.min_tokens,
            problems,
            f"doc_tokens={self.doc_tokens} is below min_tokens={self.min_tokens}; every cut document would be "
            "too short",
        )
        check(
            self.num_members is None or self.num_members >= 1,
            problems,
            f"num_members={self.num_members} must be >= 1 (or null for all remaining documents)",
        )
        check(
            len(self.repetitions) >= 1 and all(r >= 1 for r in self.repetitions),
            problems,
            f"repetitions={self.repetitions} must be a non-empty list of counts >= 1",
        )
        check_at_most(
            max(self.repetitions, default=1), 2**20, problems, "repetitions", "each copy of a member is a training row"
        )
        check(
            self.nonmember_mode != "later_chunk" or self.doc_tokens is not None,
            problems,
            "nonmember_mode=later_chunk needs doc_tokens (the later chunk is tokens [doc_tokens, 2*doc_tokens))",
        )
        check(
            self.nonmember_mode != "random_split" or self.doc_tokens is not None,
            problems,
            "nonmember_mode=random_split needs doc_tokens (members and nonmembers are tokens [0, doc_tokens))",
        )
        check(
            self.num_nonmembers is None or self.num_nonmembers >= 0,
            problems,
            f"num_nonmembers={self.num_nonmembers} must be >= 0 (or null)",
        )
        check(
            self.num_background is None or self.num_background >= 0,
            problems,
            f"num_background={self.num_background} must be >= 0 (or null for all available)",
        )
        check(
            self.background_chunk_tokens is None or self.background_chunk_tokens >= 1,
            problems,
            f"background_chunk_tokens={self.background_chunk_tokens} must be >= 1 (or null)",
        )
        check(self.num_validation >= 0, problems, f"num_validation={self.num_validation} must be >= 0")
        check(
            self.num_validation == 0 or self.nonmember_mode != "later_chunk",
            problems,
            "num_validation needs nonmember_mode random_split or held_out (a later chunk has no document of its "
            "own to hold out)",
        )
        check(
            not (self.canaries and self.canaries.count and self.near_duplicates),
            problems,
            "canaries and near_duplicates cannot be combined (variants and canaries both add documents after the "
            "members); prepare them as two datasets",
        )
        check(self.shard_documents >= 1, problems, f"shard_documents={self.shard_documents} must be >= 1")
        check_seed(self.seed, problems)
        raise_problems(problems)

    def default_out(self) -> Path:
        """``data/prepared/<name>`` relative to the working directory (git-ignored)."""
        return Path("data") / "prepared" / self.name


def resolve_recipe(spec: str) -> Path:
    """A recipe file by path or by name (``wikipedia_demo`` -> ``data/wikipedia_demo.yaml``), found from any folder,
    also from an installed wheel (:func:`goldfish.config.find_config`)."""
    return find_config(spec, "data")
