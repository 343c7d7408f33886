"""Near-duplicate variants: each edit happens at its stated rate and nowhere else, every variant differs from the
member, and a prepared folder trains on the variants while its members split (what eval scores) is the unedited
text."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from goldfish.config import from_dict
from goldfish.data import PrepareConfig, load_prepared, prepare
from goldfish.data.variants import (
    GAPS,
    NearDuplicateConfig,
    edit_positions,
    insert_sentence,
    make_variants,
    recase,
    respace,
    substitute,
)
from goldfish.errors import ConfigError

TEXT = (
    "The tower was finished in March and opened to the public in May. Visitors climbed the stairs to the first "
    "platform, where a restaurant served lunch. Engineers measured how the iron moved in the wind. The design "
    "was criticised by artists at first, and later admired by almost everyone who saw it."
)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.parametrize("n,every", [(100, 13), (13, 13), (14, 13), (7, 1), (5, 20)])
def test_edit_positions_one_per_block(n, every):
    pos = edit_positions(n, every, rng(n))
    assert len(pos) == -(-n // every)
    assert (pos // every).tolist() == list(range(len(pos)))  # exactly one in each block
    assert pos.min() >= 0 and pos.max() < n


def test_substitute_changes_one_token_in_every_block():
    ids = np.arange(1000, 1130)
    out = substitute(ids, 13, rng())
    changed = np.nonzero(out != ids)[0]
    assert len(changed) == 10 and (changed // 13).tolist() == list(range(10))
    assert set(out[changed].tolist()) <= set(ids.tolist())  # replacements come from the document itself


def test_recase_changes_one_word_per_block_and_only_case():
    words = TEXT.split(" ")
    out = recase(TEXT, 4, rng())
    assert out.lower() == TEXT.lower() and out != TEXT
    changed = [i for i, (a, b) in enumerate(zip(words, out.split(" "))) if a != b]
    assert len(changed) == len(edit_positions(len(words), 4, rng())) and len({i // 4 for i in changed}) == len(changed)
    assert recase(TEXT, 1, rng()).split() != TEXT.split() and all(  # every word with a letter re-cased
        a != b for a, b in zip(TEXT.split(" "), recase(TEXT, 1, rng()).split(" "))
    )


def test_respace_changes_one_gap_per_block_and_only_whitespace():
    out = respace(TEXT, 5, rng())
    assert out.split() == TEXT.split() and out != TEXT
    gaps = re.findall(r"\s+", out)
    changed = [i for i, g in enumerate(gaps) if g != " "]
    assert len(changed) == -(-len(gaps) // 5) and all(gaps[i] in GAPS for i in changed)
    assert len({i // 5 for i in changed}) == len(changed)


def test_insert_adds_exactly_one_sentence_at_a_sentence_boundary():
    out = insert_sentence(TEXT, "A new sentence appears here. ", rng(2))
    assert out.replace("A new sentence appears here. ", "", 1) == TEXT
    at = out.index("A new sentence")
    assert at == 0 or out[at - 2] in ".!?"


def test_make_variants_differ_from_the_member_and_are_reproducible():
    members = [np.arange(10 * i, 10 * i + 40) for i in range(4)]
    cfg = NearDuplicateConfig(edit="substitute", every=8)
    out = make_variants(members, [1, 2, 4, 8], cfg, 0, decode=None, encode=None)
    assert [len(v) for v in out] == [0, 1, 3, 7]
    for m, vs in zip(members, out):
        for v in vs:
            assert len(v) == len(m) and (v != m).sum() == 5  # one in every 8 of 40 tokens
        assert len({v.tobytes() for v in vs}) == len(vs)  # each copy has its own edits
    again = make_variants(members, [1, 2, 4, 8], cfg, 0, decode=None, encode=None)
    assert all(np.array_equal(a, b) for x, y in zip(out, again) for a, b in zip(x, y))


def test_bad_config_names_the_key():
    with pytest.raises(ConfigError, match="edit='typo'"):
        NearDuplicateConfig(edit="typo")
    with pytest.raises(ConfigError, match="every=0"):
        NearDuplicateConfig(every=0)
    # inside a recipe: the problem inside the optional section is named, not just "not a valid ... | null"
    with pytest.raises(ConfigError, match=r"^near_duplicates.edit='typo' is not one of 'substitute'"):
        from_dict(PrepareConfig, {"near_duplicates": {"edit": "typo"}})


# ---------------------------------------------------------------- through goldfish prepare


def _occurrence(rows: dict, r: int, c: int) -> list[int]:
    """The tokens of the document occurrence starting at row r, column c (its positions count up from 0)."""
    end = c + 1
    while end < rows["position_ids"].shape[1] and rows["position_ids"][r, end] == end - c:
        end += 1
    return rows["input_ids"][r, c:end].tolist()


@pytest.mark.parametrize("edit", ["case", "substitute"])
def test_prepared_folder_trains_on_variants_and_evaluates_the_member(tmp_path, edit):
    sentences = TEXT.split(". ")
    with open(tmp_path / "docs.jsonl", "w") as f:
        for i in range(30):
            r = np.random.default_rng(i)
            f.write(json.dumps({"id": f"d{i}", "text": ". ".join(r.permutation(sentences)) + f" Number {i}."}) + "\n")
    cfg = from_dict(
        PrepareConfig,
        {
            "name": "nd",
            "source": {"name": "local", "path": str(tmp_path / "docs.jsonl")},
            "tokenizer": {"name": "gpt2"},
            "seq_len": 64,
            "packing": "pack",
            "min_tokens": 8,
            "doc_tokens": 30,
            "num_members": 8,
            "repetitions": [1, 4],
            "nonmember_mode": "held_out",
            "num_nonmembers": 4,
            "near_duplicates": {"edit": edit, "every": 3},
        },
    )
    data = load_prepared(prepare(cfg, tmp_path / "prep", progress=False))
    assert data.manifest["stats"]["variants"] == 4 * 3
    rows = data.train.batch(np.arange(len(data.train)))
    for k, member in enumerate(data.members):
        ids = member["input_ids"]
        starts = np.argwhere((rows["document_ids"] == k) & (rows["position_ids"] == 0))
        copies = [rows["input_ids"][r, c : c + len(ids)].tolist() for r, c in starts]
        assert len(copies) == member["repetitions"]  # r copies in the stream, all labelled with the member's id
        assert sum(c == ids for c in copies) == 1  # the member itself once, the others are variants
        if edit == "case":
            texts = [data.tokenizer.decode(_occurrence(rows, r, c)[:-1]) for r, c in starts]  # without its EOS
            assert all(t.lower() == member["text"].lower() for t in texts)
            assert len(set(texts)) == member["repetitions"]
