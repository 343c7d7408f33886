"""Near-duplicate removal of the targets from the background: shingles against a brute-force set implementation,
containment under edits at several densities, and ``goldfish prepare`` leaving edited copies of members and
nonmembers out of the background (exact matching alone keeps them)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tolerances import U64, rounding

from goldfish.config import from_dict
from goldfish.data import PrepareConfig, load_prepared, prepare
from goldfish.data.dedup import DedupConfig, ShingleIndex, shingles
from goldfish.errors import ConfigError


def _brute_contained(targets, doc, n):
    """Containment by Python sets of n-gram tuples: the documented rule, written independently."""

    def grams(x):
        x = list(x)
        return {tuple(x)} if len(x) < n else {tuple(x[i : i + n]) for i in range(len(x) - n + 1)}

    d = grams(doc)
    return np.array([len(grams(t) & d) / len(grams(t)) for t in targets])


def test_shingles_by_hand():
    assert len(shingles([1, 2, 3, 4], 2)) == 3  # (1,2) (2,3) (3,4)
    assert len(shingles([5, 5, 5, 5], 2)) == 1  # one distinct bigram
    assert len(shingles([1, 2], 13)) == 1  # shorter than n: the sequence itself
    assert len(shingles([], 13)) == 0
    assert not np.array_equal(shingles([1, 2, 3], 3), shingles([3, 2, 1], 3))  # order-sensitive
    assert len(shingles([0, 1, 0, 1, 0], 2)) == 2  # (0,1) and (1,0): id 0 is a token like any other


def test_containment_equals_a_set_implementation():
    rng = np.random.default_rng(0)
    targets = [rng.integers(0, 30, size=rng.integers(1, 60)) for _ in range(12)]
    index = ShingleIndex(targets, DedupConfig(ngram=3, overlap=0.5))
    for _ in range(20):
        doc = np.concatenate([targets[rng.integers(0, 12)][: rng.integers(0, 40)], rng.integers(0, 30, size=50)])
        # a count over a count on both sides: one correctly rounded float64 division, exact
        assert index.contained(doc).tolist() == _brute_contained(targets, doc, 3).tolist()


@pytest.mark.parametrize("every", [13, 26, 52])
def test_an_edited_copy_is_found_at_every_edit_density(every):
    rng = np.random.default_rng(every)
    target = rng.integers(0, 50_000, size=520)
    copy = target.copy()
    copy[np.arange(every // 2, 520, every)] = 50_001  # one substituted token per block of `every`
    web = np.concatenate([rng.integers(0, 50_000, 300), copy, rng.integers(0, 50_000, 300)])  # inside a page
    unrelated = rng.integers(0, 50_000, size=2000)
    index = ShingleIndex([target, rng.integers(0, 50_000, 520)], DedupConfig())
    share = index.contained(web)[0]
    # each edit spoils the 13 shingles covering it: about 1 - 13/every of them survive (0 for every = 13)
    assert share == _brute_contained([target], web, 13)[0]  # counts over counts: exact
    # the rule of thumb's error is the ends of the copy, not chance: with m edits splitting it into blocks of >= 12
    # tokens, exactly 508 - 13m of its 508 shingles survive, 13·|m/508 - 1/every| from 1 - 13/every (0.012 at
    # every = 26, 0.006 at 52; at 13 no shingle survives either way, 0 <= that bound), plus float64 rounding
    m = len(range(every // 2, 520, every))
    edge = 13 * abs(m / 508 - 1 / every) + rounding(4, U64)
    assert share == pytest.approx(max(0.0, 1 - 13 / every), abs=edge)
    assert index.near_duplicate(web) == (share >= 0.2)
    assert index.near_duplicate(np.concatenate([unrelated, target])) and not index.near_duplicate(unrelated)
    # one edit per 13 tokens (= h) leaves no 13-gram: only a shorter shingle finds that copy
    if every == 13:
        assert ShingleIndex([target], DedupConfig(ngram=5)).near_duplicate(web)


def test_config_checks():
    with pytest.raises(ConfigError, match="overlap=0"):
        DedupConfig(overlap=0)
    with pytest.raises(ConfigError, match="ngram=0"):
        DedupConfig(ngram=0)


def _corpus(tmp_path):
    """20 main documents and a background of an edited copy of each (one word in 26 replaced) plus 15 others."""
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(400)]
    docs = [" ".join(rng.choice(words, size=120)) for _ in range(20)]
    main = tmp_path / "main.jsonl"
    main.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(docs)))
    edited = []
    for t in docs:
        ws = t.split()
        for j in range(13, len(ws), 26):
            ws[j] = "edited"
        edited.append(" ".join(ws))
    others = [" ".join(rng.choice(words, size=120)) for _ in range(15)]
    bg = tmp_path / "bg.jsonl"
    bg.write_text(
        "".join(json.dumps({"id": f"copy{i}", "text": t}) + "\n" for i, t in enumerate(edited))
        + "".join(json.dumps({"id": f"other{i}", "text": t}) + "\n" for i, t in enumerate(others))
    )
    return main, bg


def test_prepare_leaves_edited_copies_of_targets_out_of_the_background(tmp_path):
    main, bg = _corpus(tmp_path)
    base = {
        "source": {"name": "local", "path": str(main), "id_field": "id"},
        "background_source": {"name": "local", "path": str(bg), "id_field": "id"},
        "tokenizer": {"name": "gpt2"},
        "seq_len": 256,
        "min_tokens": 40,
        "doc_tokens": 100,
        "num_members": 10,
        "num_nonmembers": 10,
        "nonmember_mode": "random_split",
        "num_background": None,
        "packing": "pack",
    }
    on = load_prepared(prepare(from_dict(PrepareConfig, base), tmp_path / "on", progress=False))
    kept = np.load(on.path / "background" / "00000.tag.npy")  # the source position each chunk was cut from
    assert kept.tolist() == list(range(20, 35))  # every copy of a member or nonmember (positions 0..19) left out
    assert on.manifest["stats"]["background_near_duplicates"] == 20
    off = load_prepared(
        prepare(from_dict(PrepareConfig, {**base, "background_dedup": None}), tmp_path / "off", progress=False)
    )
    assert len(off.background) == 35  # exact matching alone keeps all 20 edited copies
