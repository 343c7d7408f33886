"""Split planning on synthetic token lists: sizes, eligibility, duplicates, strata and the background pool."""

from __future__ import annotations

import numpy as np
import pytest

from goldfish.data import PrepareConfig
from goldfish.data.sources import Document
from goldfish.data.splits import background_items, plan_splits
from goldfish.errors import ConfigError, UserError


def corpus(lengths: list[int], seed: int = 0) -> tuple[list[Document], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    tokens = [rng.integers(1, 1000, size=n) for n in lengths]
    docs = [Document(f"d{i}", f"T{i}", f"text {i}", "local") for i in range(len(lengths))]
    return docs, tokens


def cfg(**kw) -> PrepareConfig:
    base = dict(min_tokens=4, doc_tokens=8, num_members=None, nonmember_mode="held_out")
    return PrepareConfig(**{**base, **kw})


def seqs(items) -> set[tuple[int, ...]]:
    return {tuple(it.ids.tolist()) for it in items}


def test_held_out_sizes_and_disjointness():
    docs, tokens = corpus([20] * 30)
    plan = plan_splits(cfg(), docs, tokens)  # both null: half and half
    assert (len(plan.members), len(plan.nonmembers)) == (15, 15)
    assert not {m.id for m in plan.members} & {n.id for n in plan.nonmembers}
    assert all(len(it.ids) == 8 for it in plan.members + plan.nonmembers)
    plan = plan_splits(cfg(num_members=10), docs, tokens)  # nonmembers default to as many as members
    assert (len(plan.members), len(plan.nonmembers), len(plan.pool)) == (10, 10, 10)
    plan = plan_splits(cfg(num_members=25), docs, tokens)  # ... or to what is left
    assert (len(plan.members), len(plan.nonmembers)) == (25, 5)
    with pytest.raises(UserError, match="do not fit the 30 eligible documents"):
        plan_splits(cfg(num_members=20, num_nonmembers=11), docs, tokens)
    with pytest.raises(UserError, match="num_nonmembers=30 leaves no members among the 30 eligible documents"):
        plan_splits(cfg(num_nonmembers=30), docs, tokens)  # members null: all that the nonmembers leave


def test_repetition_strata_are_balanced_and_seeded():
    docs, tokens = corpus([20] * 30)
    a = plan_splits(cfg(num_members=12, repetitions=[1, 2, 4, 8]), docs, tokens)
    assert sorted(m.repetitions for m in a.members) == [1, 1, 1, 2, 2, 2, 4, 4, 4, 8, 8, 8]
    assert all(n.repetitions == 0 for n in a.nonmembers)
    b = plan_splits(cfg(num_members=12, repetitions=[1, 2, 4, 8], seed=1), docs, tokens)
    assert [m.id for m in a.members] != [m.id for m in b.members]
    again = plan_splits(cfg(num_members=12, repetitions=[1, 2, 4, 8]), docs, tokens)
    assert [(m.id, m.repetitions) for m in a.members] == [(m.id, m.repetitions) for m in again.members]


def test_later_chunk_pairs_and_short_documents():
    docs, tokens = corpus([20, 15, 16, 30, 3, 40])  # doc 1 (15 < 16) has no full later chunk; doc 4 < min_tokens
    plan = plan_splits(cfg(nonmember_mode="later_chunk"), docs, tokens)
    assert plan.stats["too_short_for_later_chunk"] == 1 and plan.stats["below_min_tokens"] == 1
    assert sorted(m.id for m in plan.members) == ["d0", "d2", "d3", "d5"]
    for m, n in zip(plan.members, plan.nonmembers):
        full = tokens[int(m.doc.id[1:])]
        assert n.id == m.id + "#later" and m.ids.tolist() == full[:8].tolist() and n.ids.tolist() == full[8:16].tolist()
    assert sorted(plan.pool) == [1]  # the short one may still serve as background; the tiny one may not
    with pytest.raises(UserError, match="num_nonmembers=5 exceeds num_members=4"):
        plan_splits(cfg(nonmember_mode="later_chunk", num_members=4, num_nonmembers=5), docs, tokens)


def test_duplicates_never_cross_the_membership_line():
    docs, tokens = corpus([20] * 12)
    dup_docs = [Document(f"copy{i}", "", f"copy {i}", "local") for i in range(4)]
    dup_tokens = [tokens[i].copy() for i in range(4)]  # exact copies of documents 0..3
    docs, tokens = docs + dup_docs, tokens + dup_tokens
    plan = plan_splits(cfg(num_members=6), docs, tokens)
    assert plan.stats["duplicates"] == 4
    assert not seqs(plan.members) & seqs(plan.nonmembers)
    c = cfg(num_members=6, num_background=None)
    background = background_items(c, plan, [docs[i] for i in plan.pool], [tokens[i] for i in plan.pool])
    trained_or_held = {tuple(t[:8].tolist()) for t in (it.ids for it in background)}
    assert not trained_or_held & seqs(plan.nonmembers)
    assert len(background) == 16 - 4 - 6 - 6


def test_background_chunks_and_cap():
    docs, tokens = corpus([20] * 6)
    plan = plan_splits(cfg(num_members=3, num_nonmembers=3), docs, tokens)
    _, extra_tokens = corpus([50, 23], seed=1)  # another source
    extra_docs = [Document(f"e{i}", "", f"extra {i}", "other") for i in range(2)]
    c = cfg(num_members=3, num_nonmembers=3, num_background=None, background_chunk_tokens=10)
    items = background_items(c, plan, extra_docs, extra_tokens)
    # 50 tokens -> 5 chunks of 10; 23 -> 10, 10 and a 3-token tail below min_tokens=4 (dropped)
    assert [it.id for it in items] == [f"e0#chunk{j}" for j in range(5)] + ["e1#chunk0", "e1#chunk1"]
    assert all(len(it.ids) == 10 and it.repetitions == 1 for it in items)
    assert items[6].ids.tolist() == extra_tokens[1][10:20].tolist()
    capped = background_items(
        cfg(num_members=3, num_nonmembers=3, num_background=2, background_chunk_tokens=10),
        plan,
        extra_docs,
        extra_tokens,
    )
    assert [it.id for it in capped] == ["e0#chunk0", "e0#chunk1"]
    assert background_items(cfg(num_members=3, num_nonmembers=3), plan, extra_docs, extra_tokens) == []
    # a background document carrying a member's id or text is skipped
    member = plan.members[0].doc
    clash = background_items(c, plan, [member, Document("x", "", member.text, "other")], tokens[:2])
    assert clash == []


def test_random_split_is_disjoint_same_position_and_whole_documents():
    lengths = [5, 6, 7] + [8 + i for i in range(27)]  # three documents shorter than doc_tokens=8
    docs, tokens = corpus(lengths)
    config = cfg(nonmember_mode="random_split", num_members=10, num_nonmembers=12)
    plan = plan_splits(config, docs, tokens)
    members, nonmembers = {m.id for m in plan.members}, {n.id for n in plan.nonmembers}
    assert (len(members), len(nonmembers)) == (10, 12) and not members & nonmembers
    index = {d.id: i for i, d in enumerate(docs)}
    for item in plan.members + plan.nonmembers:  # tokens [0, 8) of its own document, nothing else
        assert item.suffix == "" and item.ids.tolist() == tokens[index[item.id]][:8].tolist()
    assert not (members | nonmembers) & {"d0", "d1", "d2"}  # too short for a whole doc_tokens chunk
    # a random split: which documents are members is a seeded draw over the pool, not the source order
    other = plan_splits(cfg(nonmember_mode="random_split", num_members=10, num_nonmembers=12, seed=1), docs, tokens)
    assert {m.id for m in other.members} != members
    assert sorted(index[i] for i in members) != list(range(3, 13))


def test_random_split_needs_doc_tokens():
    with pytest.raises(ConfigError, match="random_split needs doc_tokens"):
        cfg(nonmember_mode="random_split", doc_tokens=None)
