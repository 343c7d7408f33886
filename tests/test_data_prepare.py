"""End to end on real Wikipedia: the prepared-folder contract, splits, repetition counts, recovery, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from goldfish.data import PrepareConfig, SourceConfig, load_documents, load_prepared, prepare
from goldfish.errors import UserError

# 30 articles: 12 canaries, their 12 later chunks, background chunks from the other 18 (quick to prepare).
CANARIES = dict(
    source=SourceConfig(max_documents=30),
    seq_len=64,
    packing="pack",
    doc_tokens=48,
    num_members=12,
    repetitions=[1, 2, 4, 8],
    num_background=40,
    background_chunk_tokens=100,
    name="canaries",
)


def columns(rows) -> dict[str, np.ndarray]:
    """Every column of every training row (derived from the token shards and the layout)."""
    return rows.batch(np.arange(len(rows)))


def background_ids(data) -> list[list[int]]:
    return [data.background[i].tolist() for i in range(len(data.background))]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return load_prepared(prepare(PrepareConfig(), tmp_path_factory.mktemp("d") / "demo", progress=False))


@pytest.fixture(scope="module")
def canaries(tmp_path_factory):
    return load_prepared(prepare(PrepareConfig(**CANARIES), tmp_path_factory.mktemp("c") / "can", progress=False))


def test_manifest_contract(demo):
    m = demo.manifest
    assert m["format"] == "goldfish-prepared/2" and m["name"] == "wikipedia_demo" and m["source"] == "wikipedia"
    assert m["tokenizer"] == {"name": "bpe", "vocab_size": 4096, "eos_id": 0, "bos_id": 0, "pad_id": 0}
    assert (m["seed"], m["seq_len"], m["packing"]) == (0, 128, "one_per_row")
    # the defaults (data/wikipedia_demo.yaml): a random split of the articles, 50 members and 50 nonmembers
    assert m["counts"] == {"members": 50, "nonmembers": 50, "train": 50}
    assert m["tokens"] == {"members": 6400, "nonmembers": 6400, "train": 6400}
    assert set(m["sha256"]) == {"members", "nonmembers", "train"} and m["config"]["doc_tokens"] == 128
    assert {"created", "versions"} <= set(m) and m["versions"]["gensim"] == "4.4.0"
    # the rows: a 4,096-id vocabulary stored as uint16, each member once, the layout beside it
    assert m["train"]["dtype"] == "uint16" and m["train"]["stores"] == [{"path": "train/targets", "documents": 50}]
    assert set(m["files"]) == {"train/targets.bin", "train/targets.idx.npy", "train/order.npy", "train/starts.npy"} | {
        f"tokenizer/{p.name}" for p in (demo.path / "tokenizer").iterdir()
    }
    assert (demo.path / "train" / "targets.bin").stat().st_size == 2 * 6400  # 50 members x 128 tokens x 2 bytes
    assert demo.background is None
    assert demo.tokenizer.eos_token_id == 0 and len(demo.tokenizer) == 4096
    assert demo.members.column_names == ["id", "title", "source", "text", "input_ids", "repetitions", "split"]
    assert set(demo.members["split"]) == {"members"} and set(demo.members["repetitions"]) == {1}
    assert set(demo.nonmembers["repetitions"]) == {0}


def test_random_split_takes_the_same_stretch_of_other_articles(demo):
    """The default nonmembers: tokens [0, 128) of articles that are not members (re-tokenized independently)."""
    articles = {d.id: d.text for d in load_documents(SourceConfig())}
    tok = demo.tokenizer
    members, nonmembers = demo.members.to_list(), demo.nonmembers.to_list()
    assert not {m["id"] for m in members} & {n["id"] for n in nonmembers} and len(nonmembers) == 50
    for doc in members + nonmembers:
        ids = tok(articles[doc["id"]], add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert doc["input_ids"] == ids[:128]


def test_later_chunk_is_the_next_tokens_of_the_same_article(tmp_path):
    """Re-tokenize each article independently and check member = tokens[:128], nonmember = tokens[128:256]."""
    later = load_prepared(
        prepare(
            PrepareConfig(source=SourceConfig(max_documents=30), num_members=20, nonmember_mode="later_chunk"),
            tmp_path / "later",
            progress=False,
        )
    )
    articles = {d.id: d.text for d in load_documents(SourceConfig(max_documents=30))}
    tok = later.tokenizer
    members, nonmembers = later.members.to_list(), later.nonmembers.to_list()
    assert [n["id"] for n in nonmembers] == [m["id"] + "#later" for m in members]
    for mem, non in zip(members, nonmembers):
        ids = tok(articles[mem["id"]], add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert mem["input_ids"] == ids[:128] and non["input_ids"] == ids[128:256]
        assert mem["title"] == non["title"] and mem["text"] == tok.decode(mem["input_ids"])
    assert mem["text"] and articles[mem["id"]].startswith(mem["text"][:40])


def test_members_nonmembers_disjoint(demo, canaries):
    for data in (demo, canaries):
        mem, non = data.members.to_list(), data.nonmembers.to_list()
        assert not {r["id"] for r in mem} & {r["id"] for r in non}
        assert not {tuple(r["input_ids"]) for r in mem} & {tuple(r["input_ids"]) for r in non}
    # the background never holds a member's or nonmember's article: no chunk starts like one (its first chunk would)
    heads = {tuple(r["input_ids"][:8]) for r in canaries.members.to_list() + canaries.nonmembers.to_list()}
    assert not {tuple(ids[:8]) for ids in background_ids(canaries)} & heads


def test_one_per_row_rows(demo):
    c = columns(demo.train)
    assert c["input_ids"].shape == (50, 128)
    np.testing.assert_array_equal(c["labels"], np.where(c["attention_mask"] == 1, c["input_ids"], -100))
    # each row is exactly one member (document_ids k -> members row k), positions 0..127, no padding here
    members = demo.members.to_list()
    assert sorted(c["document_ids"][:, 0].tolist()) == list(range(50))
    for row in range(50):
        k = int(c["document_ids"][row, 0])
        assert (c["document_ids"][row] == k).all() and c["position_ids"][row].tolist() == list(range(128))
        assert c["input_ids"][row].tolist() == members[k]["input_ids"]


def test_one_per_row_padding(tmp_path):
    cfg = PrepareConfig(source=SourceConfig(max_documents=8), doc_tokens=40, seq_len=48, num_members=5, name="pad")
    data = load_prepared(prepare(cfg, tmp_path / "p", progress=False))
    c = columns(data.train)
    assert c["attention_mask"].sum(axis=1).tolist() == [40] * 5
    assert (c["input_ids"][:, 40:] == 0).all() and (c["labels"][:, 40:] == -100).all()
    assert (c["document_ids"][:, 40:] == -1).all() and (c["position_ids"][:, 40:] == 0).all()


def test_repetitions_appear_exactly(canaries):
    c = columns(canaries.train)
    members, background = canaries.members.to_list(), background_ids(canaries)
    starts = (c["position_ids"] == 0) & (c["attention_mask"] == 1)  # one per occurrence of a document
    counts = np.bincount(c["document_ids"][starts], minlength=len(members) + len(background))
    assert counts[:12].tolist() == [m["repetitions"] for m in members]
    assert sorted(m["repetitions"] for m in members) == [1] * 3 + [2] * 3 + [4] * 3 + [8] * 3
    assert counts[12:].tolist() == [1] * 40 and len(background) == 40
    assert canaries.manifest["stats"]["repetition_strata"] == {"1": 3, "2": 3, "4": 3, "8": 3}


def test_documents_recoverable_from_packed_rows(canaries):
    """Walk the flattened stream: each document's tokens (+ EOS) come back, also when split across rows."""
    c = columns(canaries.train)
    docs = [r["input_ids"] for r in canaries.members.to_list()] + background_ids(canaries)
    doc_ids, pos, ids = (c[k].reshape(-1) for k in ("document_ids", "position_ids", "input_ids"))
    slot = np.flatnonzero(doc_ids >= 0)  # (N,) row * 64 + column of each real token
    doc_ids, pos, ids = doc_ids[slot], pos[slot], ids[slot]
    starts = np.flatnonzero(pos == 0).tolist() + [len(ids)]
    split = 0
    for a, b in zip(starts[:-1], starts[1:]):
        k = int(doc_ids[a])
        assert (doc_ids[a:b] == k).all() and pos[a:b].tolist() == list(range(b - a))
        assert ids[a:b].tolist() == docs[k] + [0]  # EOS (id 0) closes every packed document
        split += slot[a] // 64 != slot[b - 1] // 64
        if k < 12:  # a member (48 tokens + EOS) is never cut by a row boundary
            assert slot[a] // 64 == slot[b - 1] // 64
    assert len(starts) - 1 == sum(m["repetitions"] for m in canaries.members.to_list()) + len(docs) - 12
    assert split > 0  # 100-token background chunks in 64-token rows must split
    assert canaries.manifest["stats"]["split_occurrences"] == split


def test_deterministic(canaries, tmp_path):
    again = load_prepared(prepare(PrepareConfig(**CANARIES), tmp_path / "again", progress=False))
    assert again.manifest["sha256"] == canaries.manifest["sha256"]
    for split in ("members", "nonmembers"):
        (a,), (b,) = sorted((canaries.path / split).glob("*.arrow")), sorted((again.path / split).glob("*.arrow"))
        assert a.read_bytes() == b.read_bytes()
    assert again.manifest["files"] == canaries.manifest["files"]  # every token, layout and tokenizer file
    for rel in canaries.manifest["files"]:
        assert (canaries.path / rel).read_bytes() == (again.path / rel).read_bytes()
    assert (canaries.path / "tokenizer" / "tokenizer.json").read_bytes() == (
        again.path / "tokenizer" / "tokenizer.json"
    ).read_bytes()


def test_seed_changes_the_split(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rng = np.random.default_rng(0)
    words = "river stone light quiet north garden signal paper window orbit".split()
    for i in range(30):
        (corpus / f"{i:02d}.txt").write_text(" ".join(rng.choice(words, size=60)), encoding="utf-8")
    base = dict(
        source=SourceConfig(name="local", path=str(corpus)),
        doc_tokens=None,
        min_tokens=8,
        seq_len=128,
        num_members=10,
        nonmember_mode="held_out",
        tokenizer={"name": "bpe", "vocab_size": 300},
    )
    from goldfish.config import from_dict

    a = load_prepared(
        prepare(
            from_dict(PrepareConfig, {**base, "source": {"name": "local", "path": str(corpus)}}),
            tmp_path / "a",
            progress=False,
        )
    )
    b = load_prepared(
        prepare(
            from_dict(PrepareConfig, {**base, "seed": 1, "source": {"name": "local", "path": str(corpus)}}),
            tmp_path / "b",
            progress=False,
        )
    )
    assert a.manifest["counts"] == b.manifest["counts"] == {"members": 10, "nonmembers": 10, "train": 10}
    assert a.members["id"] != b.members["id"] and a.manifest["sha256"]["train"] != b.manifest["sha256"]["train"]


def test_load_prepared_errors(demo, tmp_path):
    with pytest.raises(UserError, match="not found.*goldfish prepare"):
        load_prepared(tmp_path / "nothing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(UserError, match="not a prepared folder"):
        load_prepared(tmp_path / "plain")
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(demo.path, broken)
    (arrow,) = (broken / "members").glob("*.arrow")
    arrow.write_bytes(arrow.read_bytes()[:1000])
    with pytest.raises(UserError, match=r"members is corrupt.*goldfish prepare"):
        load_prepared(broken)
    shutil.rmtree(broken / "members")
    shutil.copytree(demo.path / "members", broken / "members")
    shutil.rmtree(broken / "nonmembers")
    with pytest.raises(UserError, match="missing its 'nonmembers' split"):
        load_prepared(broken)


def test_verify_detects_changed_bytes(demo, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(demo.path, copy)
    assert load_prepared(copy, verify=True).manifest == demo.manifest
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["sha256"]["members"] = "0" * 64
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="does not match the sha256"):
        load_prepared(copy, verify=True)


def test_not_enough_documents(tmp_path):
    cfg = PrepareConfig(source=SourceConfig(max_documents=6), num_members=10, nonmember_mode="later_chunk")
    with pytest.raises(UserError, match="num_members=10 but only 6 documents have 2\\*doc_tokens=256 tokens"):
        prepare(cfg, tmp_path / "x", progress=False)
    with pytest.raises(UserError, match="num_members=10 and num_nonmembers=0 do not fit the 6 eligible documents"):
        prepare(PrepareConfig(source=SourceConfig(max_documents=6), num_members=10), tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()


def test_recipes_load():
    from goldfish.commands.prepare import load_recipe

    root = Path(__file__).resolve().parents[1] / "data"
    recipes = sorted(root.glob("*.yaml"))
    assert {"wikipedia_demo.yaml", "wikipedia_canaries.yaml"} <= {p.name for p in recipes}
    for path in recipes:
        cfg = load_recipe(str(path))
        assert cfg.name == path.stem
    assert load_recipe(str(root / "wikipedia_demo.yaml")) == PrepareConfig()  # the embedded default
    canaries = load_recipe("wikipedia_canaries")
    assert (canaries.packing, canaries.seq_len, canaries.repetitions) == ("pack", 256, [1, 2, 4, 8, 16, 32])
