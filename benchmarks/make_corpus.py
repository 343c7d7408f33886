"""Write a large local corpus of English-like text as JSONL or parquet shards, offline and seeded: the background of
the data-path benchmark (benchmarks/prepare_scale.py) and of the scaled-down paper setting
(experiments/tinyllama_scaled.yaml). No download: a word-bigram model is fitted on the real text the toolkit
ships (the 106 Wikipedia articles of the gensim wheel and, when Debian's bible-kjv is installed, the King James
Bible) and sampled, many documents at a time, with document lengths drawn from a log-normal (median ~600 words, as
web pages). The text is not meaningful, but it has English's word and bigram frequencies, so tokenizer speed,
token counts per byte and n-gram de-duplication behave as on real web text.

    python benchmarks/make_corpus.py data/corpus/bg200m --tokens 200e6            # ~200 M GPT-2 tokens, jsonl
    python benchmarks/make_corpus.py data/corpus/bg20m --tokens 20e6 --format parquet

Documents: ``{"id": "synth-<seed>-<n>", "text": ...}``; shards of ``--shard-documents`` documents each, written
under a temporary name and renamed. GPT-2 gives ~1.3 tokens per word on this text; ``--tokens`` is converted to
words with that ratio and the count reached is printed (measure it exactly with goldfish prepare).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

TOKENS_PER_WORD = 1.3  # GPT-2 BPE on this text (measured: 1.27-1.33)
_WORD = re.compile(r"[A-Za-z']+|[.,;:!?]")


def corpus_words() -> list[str]:
    """The words (and punctuation marks) of the shipped real text, in order."""
    from goldfish.data import SourceConfig, load_documents
    from goldfish.errors import UserError

    texts = [d.text for d in load_documents(SourceConfig(name="wikipedia"))]
    try:
        texts += [d.text for d in load_documents(SourceConfig(name="kjv"))]
    except UserError:
        print("note: bible-kjv is not installed; the bigrams come from Wikipedia alone", file=sys.stderr)
    return [w for t in texts for w in _WORD.findall(t)]


class Bigrams:
    """A word-bigram model as cumulative counts over CSR rows, sampled for many chains at once."""

    def __init__(self, words: list[str]):
        vocab, ids = np.unique(np.array(words), return_inverse=True)
        self.vocab = vocab
        pairs = ids[:-1].astype(np.int64) * len(vocab) + ids[1:]
        keys, counts = np.unique(pairs, return_counts=True)
        self.rows = keys // len(vocab)  # (P,) sorted by row
        self.next = keys % len(vocab)
        self.cum = np.cumsum(counts).astype(np.float64)  # (P,) global cumulative counts
        starts = np.searchsorted(self.rows, np.arange(len(vocab)))
        ends = np.searchsorted(self.rows, np.arange(len(vocab)), side="right")
        self.lo = np.where(starts > 0, self.cum[np.maximum(starts - 1, 0)], 0.0)  # (V,) cum before the row
        self.hi = np.where(ends > starts, self.cum[np.maximum(ends - 1, 0)], self.lo)
        self.dead = ends == starts  # words never followed by another: restart from a random word
        self.sentence_start = np.flatnonzero(np.char.isupper(np.char.ljust(vocab, 1).astype("U1")))

    def sample(self, lengths: np.ndarray, rng: np.random.Generator) -> list[str]:
        """One text of ``lengths[i]`` words per chain."""
        n, steps = len(lengths), int(lengths.max())
        out = np.empty((steps, n), dtype=np.int64)
        cur = rng.choice(self.sentence_start, size=n)
        for t in range(steps):
            out[t] = cur
            u = self.lo[cur] + rng.random(n) * (self.hi[cur] - self.lo[cur])
            nxt = self.next[np.minimum(np.searchsorted(self.cum, u, side="right"), len(self.cum) - 1)]
            cur = np.where(self.dead[cur], rng.choice(self.sentence_start, size=n), nxt)
        texts = []
        for i in range(n):
            words = self.vocab[out[: lengths[i], i]].tolist()
            texts.append(re.sub(r" ([.,;:!?])", r"\1", " ".join(words)))
        return texts


def write_shard(path: Path, docs: list[dict], fmt: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    if fmt == "jsonl":
        with open(tmp, "w", encoding="utf-8") as fh:
            for d in docs:
                fh.write(json.dumps(d, ensure_ascii=False) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(docs), tmp, row_group_size=1024)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="folder to write the shards into (created)")
    ap.add_argument("--tokens", type=float, required=True, help="approximate GPT-2 tokens to write (e.g. 200e6)")
    ap.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    ap.add_argument("--shard-documents", type=int, default=20_000, help="documents per shard file")
    ap.add_argument("--median-words", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    model = Bigrams(corpus_words())
    rng = np.random.default_rng(args.seed)
    target_words = int(args.tokens / TOKENS_PER_WORD)
    args.out.mkdir(parents=True, exist_ok=True)
    written = shard = n = 0
    suffix = ".jsonl" if args.format == "jsonl" else ".parquet"
    while written < target_words:
        lengths = np.clip(rng.lognormal(np.log(args.median_words), 0.8, args.shard_documents), 20, 20_000)
        lengths = lengths.astype(np.int64)
        lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), target_words - written)) + 1]  # stop at the target
        docs = []
        for lo in range(0, len(lengths), 2_000):
            for text in model.sample(lengths[lo : lo + 2_000], rng):
                docs.append({"id": f"synth-{args.seed}-{n}", "text": text})
                n += 1
        written += int(lengths.sum())
        write_shard(args.out / f"shard-{shard:05d}{suffix}", docs, args.format)
        shard += 1
        print(
            f"{shard} shards, {written:,} words (~{written * TOKENS_PER_WORD / 1e6:,.1f} M tokens), "
            f"{time.perf_counter() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    print(
        json.dumps(
            {
                "out": str(args.out),
                "shards": shard,
                "documents": n,
                "words": written,
                "approx_tokens": int(written * TOKENS_PER_WORD),
                "seconds": round(time.perf_counter() - started, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
