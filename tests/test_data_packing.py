"""Training-row layout: hand-computed rows for both packings, exact recovery of every document occurrence, and the
rows :class:`goldfish.data.rows.TrainRows` derives from token shards + a layout equal to the in-memory builder of
format 1 (tests/reference_rows.py), column for column, with the read counts."""

from __future__ import annotations

import numpy as np
import pytest
from reference_rows import build_rows, document_reads

from goldfish.data.packing import training_order, variant_layout
from goldfish.data.rows import TrainRows, layout_stats, pack_starts, row_starts
from goldfish.data.tokens import file_sha256, token_dtype, write_file, write_shard

EOS, PAD, IGN = 9, 0, -100


def test_pack_by_hand():
    # [1 2 3 E] [4 5 E .] [1 2 3 E]: the second copy of doc 0 fits in a row but not in row 1's last slot, so that
    # slot is padded and the document starts row 2 whole.
    cols, stats = build_rows([np.array([1, 2, 3]), np.array([4, 5])], np.array([0, 1, 0]), 4, "pack", EOS, PAD)
    np.testing.assert_array_equal(cols["input_ids"], [[1, 2, 3, EOS], [4, 5, EOS, PAD], [1, 2, 3, EOS]])
    np.testing.assert_array_equal(cols["labels"], [[1, 2, 3, EOS], [4, 5, EOS, IGN], [1, 2, 3, EOS]])
    np.testing.assert_array_equal(cols["document_ids"], [[0, 0, 0, 0], [1, 1, 1, -1], [0, 0, 0, 0]])
    np.testing.assert_array_equal(cols["position_ids"], [[0, 1, 2, 3], [0, 1, 2, 0], [0, 1, 2, 3]])
    np.testing.assert_array_equal(cols["attention_mask"], [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]])
    assert stats == {"rows": 3, "tokens": 11, "padding": 1, "occurrences": 3, "split_occurrences": 0}


def test_pack_splits_only_documents_longer_than_a_row():
    # [1 2 E 4] [5 6 7 8] [E . . .]: doc 1 (5 tokens + EOS > 4) starts right after doc 0 and continues over two
    # more rows with positions 0..5.
    cols, stats = build_rows([np.array([1, 2]), np.array([4, 5, 6, 7, 8])], np.array([0, 1]), 4, "pack", EOS, PAD)
    np.testing.assert_array_equal(cols["input_ids"], [[1, 2, EOS, 4], [5, 6, 7, 8], [EOS, PAD, PAD, PAD]])
    np.testing.assert_array_equal(cols["document_ids"], [[0, 0, 0, 1], [1, 1, 1, 1], [1, -1, -1, -1]])
    np.testing.assert_array_equal(cols["position_ids"], [[0, 1, 2, 0], [1, 2, 3, 4], [5, 0, 0, 0]])
    np.testing.assert_array_equal(cols["labels"][2], [EOS, IGN, IGN, IGN])
    assert stats["split_occurrences"] == 1 and stats["padding"] == 3


def test_pack_background_fills_gaps():
    # Doc 0 is a member (whole=1), doc 1 background: [7 8 E 1] [2 3 E .] [7 8 E .]: background doc 1 is cut by the
    # row boundary; the second member copy does not fit in row 1's last slot, so it is padded.
    docs = [np.array([7, 8]), np.array([1, 2, 3])]
    cols, stats = build_rows(docs, np.array([0, 1, 0]), 4, "pack", EOS, PAD, whole=1)
    np.testing.assert_array_equal(cols["input_ids"], [[7, 8, EOS, 1], [2, 3, EOS, PAD], [7, 8, EOS, PAD]])
    np.testing.assert_array_equal(cols["position_ids"], [[0, 1, 2, 0], [1, 2, 3, 0], [0, 1, 2, 0]])
    assert stats["split_occurrences"] == 1
    cols, stats = build_rows(docs, np.array([0, 1, 0]), 4, "pack", EOS, PAD)  # all whole: doc 1 starts row 1
    np.testing.assert_array_equal(cols["input_ids"], [[7, 8, EOS, PAD], [1, 2, 3, EOS], [7, 8, EOS, PAD]])
    assert stats["split_occurrences"] == 0


def test_one_per_row_by_hand():
    # Doc 1 (5 tokens) takes two rows of 4 with positions 0..4; no EOS; each occurrence starts a new row.
    cols, stats = build_rows(
        [np.array([1, 2, 3]), np.array([4, 5, 6, 7, 8])], np.array([1, 0]), 4, "one_per_row", EOS, PAD
    )
    np.testing.assert_array_equal(cols["input_ids"], [[4, 5, 6, 7], [8, PAD, PAD, PAD], [1, 2, 3, PAD]])
    np.testing.assert_array_equal(cols["labels"], [[4, 5, 6, 7], [8, IGN, IGN, IGN], [1, 2, 3, IGN]])
    np.testing.assert_array_equal(cols["document_ids"], [[1, 1, 1, 1], [1, -1, -1, -1], [0, 0, 0, -1]])
    np.testing.assert_array_equal(cols["position_ids"], [[0, 1, 2, 3], [4, 0, 0, 0], [0, 1, 2, 0]])
    np.testing.assert_array_equal(cols["attention_mask"], [[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0]])
    assert stats["split_occurrences"] == 1 and stats["padding"] == 4


def recover(cols: dict[str, np.ndarray]) -> list[tuple[int, list[int]]]:
    """A second, loop-based reader: (document id, tokens) of each occurrence, in stream order.

    A new occurrence starts where position_ids is 0 on a real token; other tokens append to the open one.
    """
    out: list[tuple[int, list[int]]] = []
    for ids, docs, pos, mask in zip(
        cols["input_ids"], cols["document_ids"], cols["position_ids"], cols["attention_mask"]
    ):
        for t, d, p, m in zip(ids.tolist(), docs.tolist(), pos.tolist(), mask.tolist()):
            if not m:
                continue
            if p == 0:
                out.append((d, []))
            assert out[-1][0] == d and len(out[-1][1]) == p, "position_ids must continue inside a document"
            out[-1][1].append(t)
    return out


@pytest.mark.parametrize("packing", ["pack", "one_per_row"])
def test_every_occurrence_is_recovered(packing):
    rng = np.random.default_rng(0)
    docs = [rng.integers(10, 500, size=n) for n in rng.integers(1, 40, size=25)]  # many longer than a row
    reps = rng.integers(1, 5, size=15).tolist()  # docs 0..14 are members, 15..24 background
    order = training_order(reps, 10, seed=3)
    cols, stats = build_rows(docs, order, 16, packing, EOS, PAD, whole=15)
    assert cols["input_ids"].shape == (stats["rows"], 16)
    tail = [EOS] if packing == "pack" else []
    got = recover(cols)
    assert [d for d, _ in got] == order.tolist()
    for d, toks in got:
        assert toks == docs[d].tolist() + tail
    if packing == "pack":  # a document that fits in a row is never cut by a row boundary
        starts = (cols["position_ids"] == 0) & (cols["attention_mask"] == 1)
        row_first = cols["attention_mask"][:, 0] == 1
        continued = cols["document_ids"][row_first & (cols["position_ids"][:, 0] > 0), 0]
        assert all(d >= 15 or len(docs[d]) + 1 > 16 for d in continued.tolist()) and starts.sum() == len(order)
        assert (continued >= 15).any()  # background is cut to fill rows
    np.testing.assert_array_equal(cols["labels"], np.where(cols["attention_mask"] == 1, cols["input_ids"], IGN))


def test_training_order_counts_and_seed():
    order = training_order([1, 2, 4, 8], 3, seed=0)
    assert np.bincount(order).tolist() == [1, 2, 4, 8, 1, 1, 1]
    np.testing.assert_array_equal(order, training_order([1, 2, 4, 8], 3, seed=0))
    assert not np.array_equal(order, training_order([1, 2, 4, 8], 3, seed=1))


# ---------------------------------------------------------------- derived rows == the reference builder


def derived_rows(folder, docs, order, seq_len, packing, whole, owner=None, canaries=0, dtype="uint16"):
    """TrainRows over ``docs`` laid out in ``order``, written as prepare writes them: the first ``whole`` documents
    (minus ``canaries`` at the end) in train/targets (tagged with ``owner`` when given), the rest in two background
    shards and train/canaries."""
    d = np.dtype(token_dtype(2**16, dtype))
    m = whole - canaries
    variants = 0 if owner is None else m - int(np.max(owner[:m])) - 1
    middle = docs[m : len(docs) - canaries]
    half = len(middle) // 2
    write_shard(folder / "train", "targets", docs[:m], d, None if owner is None else owner[:m])
    write_shard(folder / "background", "00000", middle[:half], d)
    write_shard(folder / "background", "00001", middle[half:] + [np.array([7, 7])], d)  # an unused last document
    stores = [
        {"path": "train/targets", "documents": m},
        {"path": "background/00000", "documents": half},
        {"path": "background/00001", "documents": len(middle) - half},
    ]
    if canaries:
        write_shard(folder / "train", "canaries", docs[len(docs) - canaries :], d)
        stores.append({"path": "train/canaries", "documents": canaries})
    units = np.array([len(x) for x in docs])[order] + (packing == "pack")
    keep = np.zeros(len(docs), dtype=bool)
    keep[:m] = True
    keep[len(docs) - canaries :] = True
    starts = pack_starts(units, keep[order], seq_len) if packing == "pack" else row_starts(units, seq_len)
    write_file(folder / "train" / "order.npy", np.asarray(order, dtype=np.int64))
    write_file(folder / "train" / "starts.npy", starts)
    stats = layout_stats(starts, units, seq_len)
    spec = {
        "dtype": dtype,
        "seq_len": seq_len,
        "packing": packing,
        "eos_id": EOS,
        "pad_id": PAD,
        "rows": stats["rows"],
        "variants": variants,
        "stores": stores,
    }
    return TrainRows(folder, spec), stats


@pytest.mark.parametrize("packing", ["pack", "one_per_row"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_derived_rows_equal_the_reference_builder(tmp_path, packing, seed):
    rng = np.random.default_rng(seed)
    docs = [rng.integers(10, 60000, size=n) for n in rng.integers(1, 40, size=30)]  # many longer than a row
    reps = rng.integers(1, 5, size=12).tolist()  # 12 members, 15 background, 3 canaries
    order = training_order(reps, 15, seed=seed, extra=[1, 2, 3])
    whole = np.zeros(30, dtype=bool)
    whole[:12] = whole[27:] = True
    want, want_stats = build_rows(docs, order, 16, packing, EOS, PAD, whole=whole)
    rows, stats = derived_rows(tmp_path, docs, order, 16, packing, whole=15, canaries=3)
    assert stats == want_stats and len(rows) == want_stats["rows"]
    got = rows.batch(np.arange(len(rows)))
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    shuffled = rng.permutation(len(rows))[:7]  # any subset, any order
    for name in want:
        np.testing.assert_array_equal(rows.batch(shuffled)[name], want[name][shuffled])
    np.testing.assert_array_equal(rows[3]["input_ids"], want["input_ids"][3])
    consumed = np.concatenate([rng.permutation(len(rows)), rng.integers(0, len(rows), 9)])  # some rows twice
    for got_n, want_n in zip(rows.reads(consumed, 30), document_reads(want, consumed, 30)):
        np.testing.assert_array_equal(got_n, want_n)


def test_derived_rows_of_variants_carry_their_members_id(tmp_path):
    order, owner = variant_layout([1, 3, 2], num_background=2, seed=0)  # members 0..2, 3 variants, background
    docs = [np.arange(10 * d + 1, 10 * d + 5) for d in range(8)]
    want, _ = build_rows(docs, order, 8, "pack", EOS, PAD, whole=6, owner=owner)
    rows, _ = derived_rows(tmp_path, docs, order, 8, "pack", whole=6, owner=owner)
    got = rows.batch(np.arange(len(rows)))
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_array_equal(rows.reads(np.arange(len(rows)), 5)[0], [1, 3, 2, 1, 1])


def test_token_dtype_is_the_narrowest_that_holds_the_vocabulary():
    assert token_dtype(50257).name == "uint16" and token_dtype(65536).name == "uint16"
    assert token_dtype(65537).name == "uint32" and token_dtype(50257, "uint32").name == "uint32"
    from goldfish.errors import UserError

    with pytest.raises(UserError, match="token_dtype=uint16 holds ids below 65,536 but the tokenizer has 128,256"):
        token_dtype(128256, "uint16")


def test_a_shard_is_the_ids_back_to_back_with_offsets(tmp_path):
    docs = [np.array([1, 65535, 3]), np.array([], dtype=np.int64), np.array([9])]
    entry = write_shard(tmp_path, "s", docs, np.dtype("<u2"), tags=[5, 6, 7])
    raw = np.fromfile(tmp_path / "s.bin", dtype="<u2")
    np.testing.assert_array_equal(raw, [1, 65535, 3, 9])  # 2 bytes per id, nothing else
    np.testing.assert_array_equal(np.load(tmp_path / "s.idx.npy"), [0, 3, 3, 4])
    assert entry["documents"] == 3 and entry["tokens"] == 4
    assert entry["sha256"]["s.bin"] == file_sha256(tmp_path / "s.bin")
    with pytest.raises(Exception, match="does not fit the shard dtype uint16"):
        write_shard(tmp_path, "t", [np.array([70000])], np.dtype("<u2"))
    assert not list(tmp_path.glob("t.*")) and not list(tmp_path.glob(".t*"))  # nothing half-written
