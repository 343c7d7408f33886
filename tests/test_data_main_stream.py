"""The main source as background, streamed: the split drawn from a streaming pass (counts, lengths and chunk digests)
equals the in-memory split over the loaded documents (:func:`goldfish.data.splits.plan_splits`, the brute-force
reference), the background is every unused document's chunks in source order, and the split pass holds no
document's text or tokens (tracemalloc, on a corpus ten times larger)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from train_helpers import WORDS

from goldfish.config import from_dict
from goldfish.data import PrepareConfig, load_documents, load_prepared, prepare
from goldfish.data.prepare_targets import _scan
from goldfish.data.prepared import load_saved_tokenizer
from goldfish.data.splits import background_items, plan_splits
from goldfish.data.tokenizer import load_tokenizer


def write_corpus(path: Path, n: int, seed: int) -> None:
    """``n`` documents of 3-200 words, every 11th one a copy of the previous one's text under another id (an exact
    duplicate of its chunks), every 13th one a single word (below ``min_words``)."""
    rng = np.random.default_rng(seed)
    rows, last = [], ""
    for i in range(n):
        text = " ".join(rng.choice(WORDS, int(rng.integers(3, 200))))
        if i % 11 == 10:
            text = last
        elif i % 13 == 12:
            text = "river"
        rows.append({"id": f"d{i}", "text": text})
        last = text
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("main") / "main.jsonl"
    write_corpus(path, 90, 0)
    return path


def recipe(corpus: Path, **over) -> dict:
    base = {
        "name": "main",
        "source": {"name": "local", "path": str(corpus), "id_field": "id", "min_words": 2},
        "tokenizer": {"name": "gpt2"},
        "seq_len": 64,
        "packing": "pack",
        "min_tokens": 16,
        "doc_tokens": 24,
        "num_members": 10,
        "repetitions": [1, 3],
        "nonmember_mode": "random_split",
        "num_nonmembers": 8,
        "num_validation": 3,
        "num_background": None,
        "background_chunk_tokens": 63,
        "shard_documents": 16,
        "background_dedup": {"ngram": 8, "overlap": 0.2},
    }
    base.update(over)
    return base


def rows(split) -> list[tuple]:
    return [] if split is None else [(r["id"], tuple(r["input_ids"]), r["repetitions"]) for r in split.to_list()]


def items(its) -> list[tuple]:
    return [(it.id, tuple(it.ids.tolist()), it.repetitions) for it in its]


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"nonmember_mode": "later_chunk", "num_nonmembers": 6, "num_validation": 0},
        {"num_background": 25, "seed": 3},
        {"source": {"max_documents": 60}},
    ],
)
def test_the_streamed_split_and_background_are_the_in_memory_ones(corpus, tmp_path, over):
    raw = recipe(corpus, **over)
    if "source" in over:
        raw["source"] = {**recipe(corpus)["source"], **over["source"]}
    cfg = from_dict(PrepareConfig, raw)
    data = load_prepared(prepare(cfg, tmp_path / "p", progress=False, num_proc=1))
    # brute force: every document in memory, tokenized whole, split by plan_splits, background from its pool
    docs = load_documents(cfg.source)
    tok = load_saved_tokenizer(data.path / "tokenizer")
    tokens = [
        np.asarray(ids, dtype=np.int64)
        for ids in tok([d.text for d in docs], add_special_tokens=False, split_special_tokens=True)["input_ids"]
    ]
    plan = plan_splits(cfg, docs, tokens)
    assert plan.stats["duplicates"] > 0 and plan.stats["below_min_tokens"] > 0  # the corpus exercises both
    assert rows(data.members) == items(plan.members)
    assert rows(data.nonmembers) == items(plan.nonmembers)
    assert rows(data.validation) == items(plan.validation)
    pool = sorted(plan.pool)  # the stream reads the unused documents in source order
    want = background_items(cfg, plan, [docs[i] for i in pool], [tokens[i] for i in pool])
    got = [data.background[i].tolist() for i in range(len(data.background))]
    assert got == [it.ids.tolist() for it in want] and len(got) > 0
    assert data.manifest["stats"]["background_near_duplicates"] == plan.stats["background_near_duplicates"]
    if cfg.num_background is not None:
        assert len(got) == cfg.num_background
    # same recipe, another folder, two workers: the same bytes
    again = prepare(cfg, tmp_path / "q", progress=False, num_proc=2)
    for p in sorted(data.path.rglob("*")):
        rel = p.relative_to(data.path)
        if p.is_file() and rel.name not in ("manifest.json", ".goldfish-owner.json", ".verified.json"):
            assert (again / rel).read_bytes() == p.read_bytes(), rel


def test_the_split_pass_holds_no_documents(tmp_path):
    """Peak traced memory of the split pass over 4,000 documents (~2.7 MB of text) exceeds that over 400 documents by
    less than 200 bytes a document; holding the texts or their tokens would add ~650 and ~800."""
    tok = load_tokenizer("gpt2")
    peaks, sizes = {}, {}
    for n in (400, 4000):
        path = tmp_path / f"c{n}.jsonl"
        write_corpus(path, n, 1)
        sizes[n] = path.stat().st_size
        cfg = from_dict(PrepareConfig, recipe(path))
        tracemalloc.start()
        scan = _scan(cfg, tok, progress=False)
        peaks[n] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(scan.positions) == len(load_documents(cfg.source)) < n  # one-word documents: below min_words
    assert sizes[4000] > 2.5e6
    per_document = (peaks[4000] - peaks[400]) / 3600
    # measured ~0-20 bytes; a document's text is ~650 bytes, its tokens (int64) ~800
    assert per_document < 200, per_document
    # ten times the text, the same peak (measured: 1.56 MB both, one batch and the tokenizer's check): holding the
    # texts would add at least the 2.4 MB of text more
    assert peaks[4000] - peaks[400] < (sizes[4000] - sizes[400]) / 4, (peaks, sizes)
