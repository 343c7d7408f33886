"""Faults of issue 39, family 4: bounded work per input.

* A long background document is tokenized a piece at a time (``goldfish.data.stream.pieces``: cut just after a
  non-space character that whitespace follows): for a byte-level BPE (GPT-2's) the ids are exactly the whole
  document's; only a stretch with no whitespace at all is cut blind. Its n-grams are hashed a block at a time, with
  the same keys as the whole.
* prepare's peak memory with one huge JSONL line grows by about the line (held once, its text decoded a piece at a
  time) and its ids, not by copies of the line or the tokenizer's per-token structures (measured in a subprocess,
  peak RSS from getrusage).
* ``--num-proc`` is capped by the CPUs and by the shards there are to write.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_data_stream import corpus, recipe  # noqa: F401 - the module-scoped corpus fixture
from train_helpers import REPO, cli_env

from goldfish.config import from_dict
from goldfish.data import PrepareConfig
from goldfish.data.dedup import BLOCK_TOKENS, DedupConfig, ShingleIndex, block_keys, window_keys
from goldfish.data.prepare import worker_count
from goldfish.data.stream import PIECE_CHARS, Encoder, has_words, pieces
from goldfish.data.tokenizer import gpt2_tokenizer

WORDS = (
    "the of river city king war north people was built stone light market garden winter letter silver engine "
    "harbor forest paper window morning voice island bridge valley castle don't 1999 é 日本 -- ..."
).split()


def long_text(chars: int, seed: int) -> str:
    """Prose with spaces, newlines, runs of whitespace, digits, punctuation and non-Latin words."""
    rng = random.Random(seed)
    out, size = [], 0
    while size < chars:
        word = rng.choice(WORDS) + rng.choice([" ", " ", " ", "\n", "  ", "\n\n", "\t", ", ", ". "])
        out.append(word)
        size += len(word)
    return "".join(out)


def test_pieces_cover_the_text_and_respect_the_bound():
    text = long_text(5 * PIECE_CHARS + 123, seed=1)
    parts = list(pieces(text))
    assert "".join(parts) == text and len(parts) > 5
    assert all(len(p) <= PIECE_CHARS for p in parts) and all(len(p) >= PIECE_CHARS // 2 for p in parts[:-1])
    assert all(not p[-1].isspace() and text[sum(map(len, parts[: i + 1]))].isspace() for i, p in enumerate(parts[:-1]))
    blind = "x" * (3 * PIECE_CHARS)  # no whitespace at all: cut at the bound
    assert [len(p) for p in pieces(blind)] == [PIECE_CHARS] * 3


def test_a_long_document_tokenized_in_pieces_has_exactly_the_whole_documents_ids():
    tok = gpt2_tokenizer()
    encoder = Encoder(tok, "uint16")
    text = long_text(4 * PIECE_CHARS + 999, seed=2)
    short = long_text(500, seed=3)
    whole = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    got = encoder([short, text, short])
    assert isinstance(got[1], np.ndarray) and got[1].dtype == np.uint16
    assert got[1].tolist() == whole
    assert list(got[0]) == list(got[2]) == tok(short, add_special_tokens=False)["input_ids"]
    # special-token text stays text in a piece too
    special = text[:PIECE_CHARS] + " <|endoftext|> " + text[PIECE_CHARS:]
    assert (
        encoder([special])[0].tolist() == tok(special, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    )
    assert 50256 not in encoder([special])[0].tolist()


def test_ngram_keys_of_a_long_document_come_in_blocks_equal_to_the_whole():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50000, size=3 * BLOCK_TOKENS + 77)
    assert np.array_equal(np.concatenate(list(block_keys(ids, 13))), window_keys(ids, 13))
    target = ids[BLOCK_TOKENS - 20 : BLOCK_TOKENS + 40]  # straddles a block boundary
    index = ShingleIndex([target, rng.integers(0, 50000, size=60)], DedupConfig(ngram=13, overlap=0.8))
    assert index.near_duplicate(ids) and list(index.contained(ids)) == [1.0, 0.0]
    assert not index.near_duplicate(rng.integers(0, 50000, size=2 * BLOCK_TOKENS))


def test_words_are_counted_without_splitting_the_text():
    assert has_words("a b  c\nd", 4) and not has_words("a b  c\nd", 5) and has_words(" x ", 1)
    assert not has_words("   \n", 1)


def test_num_proc_is_capped_by_the_cpus_and_the_shards(corpus):  # noqa: F811
    cpus = len(os.sched_getaffinity(0))
    cfg = from_dict(PrepareConfig, recipe(corpus))
    assert worker_count(cfg, 40, (0, 6)) == min(6, cpus)
    assert worker_count(cfg, 40, None) == cpus
    assert worker_count(cfg, 1, (0, 6)) == 1
    capped = recipe(corpus)
    capped["background_source"] = dict(capped["background_source"], max_documents=20)  # 2 shards of 16
    assert worker_count(from_dict(PrepareConfig, capped), 40, None) == min(2, cpus)


MEASURE = r"""
import json, resource, subprocess, sys
p = subprocess.run([sys.executable, "-m", "goldfish", "prepare", sys.argv[1], "--out", sys.argv[2], "--quiet",
                    "--num-proc", "1"], capture_output=True, text=True)
print(json.dumps({"rc": p.returncode, "err": p.stderr[-500:],
                  "peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def _peak(tmp_path: Path, name: str, corpus: Path, line_mb: int) -> float:  # noqa: F811
    bg = tmp_path / f"bg_{name}"
    bg.mkdir()
    rng = random.Random(4)
    lines = [json.dumps({"text": " ".join(rng.choice(WORDS[:28]) for _ in range(300))}) for _ in range(120)]
    if line_mb:
        lines.insert(60, json.dumps({"text": long_text(line_mb * 10**6, seed=5)}))
    (bg / "part.jsonl").write_text("\n".join(lines) + "\n")
    rec = tmp_path / f"{name}.json"
    rec.write_text(json.dumps(recipe(corpus, background_source={"name": "local", "path": str(bg)}, shard_documents=64)))
    run = subprocess.run(
        [sys.executable, "-c", MEASURE, str(rec), str(tmp_path / name)],
        env=cli_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result = json.loads(run.stdout)
    assert result["rc"] == 0, result["err"]
    return result["peak_mib"]


@pytest.mark.slow  # two prepares in subprocesses, one with a 20 MB line (~30 s on two loaded cores)
def test_one_huge_line_raises_peak_memory_by_a_small_multiple_of_the_line_only(corpus, tmp_path):  # noqa: F811
    without = _peak(tmp_path, "without", corpus, 0)
    with_line = _peak(tmp_path, "with", corpus, 20)
    text_mib = sys.getsizeof(long_text(20 * 10**6, seed=5)) / 2**20  # the text in memory (2 bytes a character here)
    # the line is held once, as its raw bytes (goldfish.data.jsontext; ~1 byte a character, the text in memory ~2),
    # its ids written to the shard as they come, beside the tokenizer threads' pools; parsed whole it cost ~3.5x the
    # text (bytes, decoded line, string, and the ids joined from pieces), and before the tokenizer was given pieces
    # ~100 bytes per token (20 MB -> ~2.3 GB)
    assert with_line - without <= 1.5 * text_mib, (without, with_line, text_mib)
