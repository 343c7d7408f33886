"""Training-row layout: hand-computed rows for both packings, and exact recovery of every document occurrence."""

from __future__ import annotations

import numpy as np
import pytest

from goldfish.data.packing import build_rows, training_order

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
    cols, stats = build_rows([np.array([1, 2, 3]), np.array([4, 5, 6, 7, 8])], np.array([1, 0]), 4, "one_per_row",
                             EOS, PAD)
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
    for ids, docs, pos, mask in zip(cols["input_ids"], cols["document_ids"], cols["position_ids"],
                                    cols["attention_mask"]):
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
