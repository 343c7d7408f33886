"""Training rows from documents, vectorised with numpy (no per-token Python loops).

Input: the unique training documents (members first, then background: document id k is its index) and ``order``,
the sequence of document ids to train on (members repeated by their counts, shuffled). Output: (R, seq_len) int64
arrays ``input_ids, labels, document_ids, position_ids, attention_mask``.

* ``pack``: occurrences, each followed by EOS, are laid back to back. A *member* (the first ``whole`` documents)
  that fits in a row (length + 1 <= seq_len) never straddles two rows: when it does not fit in the rest of the
  current row, that rest is padded and it starts the next row -- so a canary is always seen whole, with its own
  prefix in context. Background filler, and members longer than a row, start where the previous occurrence ended
  and continue over the next rows, their ``position_ids`` continuing (counted as ``split_occurrences``). The EOS
  belongs to the document before it (same ``document_ids``, next position, and it is a label: the model learns to
  end a document).
* ``one_per_row``: each occurrence starts a new row and is right-padded; a document longer than ``seq_len`` takes
  several rows, its ``position_ids`` continuing. No EOS (the paper's setting: rows are exactly the documents).

Padding: ``input_ids`` = pad id, ``labels`` = -100, ``document_ids`` = -1, ``position_ids`` = 0, mask 0.
"""

from __future__ import annotations

import numpy as np

IGNORE_INDEX = -100


def _pack_starts(lengths: np.ndarray, keep_whole: np.ndarray, seq_len: int) -> np.ndarray:
    """(O,) first output slot of each occurrence under the ``pack`` rule (one step per document, not per token)."""
    starts = np.empty(len(lengths), dtype=np.int64)
    slot = 0
    for i, (n, whole) in enumerate(zip(lengths.tolist(), keep_whole.tolist())):
        used = slot % seq_len
        if whole and n <= seq_len and used + n > seq_len:  # fits in a row, not in this one's rest: start a new row
            slot += seq_len - used
        starts[i] = slot
        slot += n
    return starts


def _row_starts(lengths: np.ndarray, seq_len: int) -> np.ndarray:
    """(O,) first output slot of each occurrence under ``one_per_row``: each padded to whole rows."""
    stride = -(-lengths // seq_len) * seq_len
    return np.concatenate([[0], np.cumsum(stride)[:-1]]).astype(np.int64)


def build_rows(docs: list[np.ndarray], order: np.ndarray, seq_len: int, packing: str, eos_id: int, pad_id: int,
               whole: int | np.ndarray | None = None,
               owner: np.ndarray | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """Lay out ``order`` (document ids) into training rows; returns (columns, stats). See the module docstring.

    ``whole``: documents ``0 .. whole-1`` (the members), or those where a (D,) bool array is True (members and
    canaries), are never cut by a row boundary when they fit in a row (``pack`` only; None = every document).
    ``owner`` (D,): the ``document_ids`` value written for each document (a near-duplicate variant carries its
    member's id; None = the document's own index).
    """
    order = np.asarray(order, dtype=np.int64)
    doc_len = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))  # (D,)
    with_eos = packing == "pack"
    # All unique documents back to back (each followed by EOS when packing): the source of every gather below.
    flat = np.concatenate([np.append(d, eos_id) if with_eos else np.asarray(d) for d in docs]).astype(np.int64)
    unit = doc_len + int(with_eos)  # (D,) tokens one occurrence contributes
    src_start = np.concatenate([[0], np.cumsum(unit)[:-1]]).astype(np.int64)  # (D,)
    lengths = unit[order]  # (O,)
    if isinstance(whole, np.ndarray):
        keep_whole = whole[order]  # (O,)
    else:
        keep_whole = order < (len(docs) if whole is None else whole)  # (O,)
    starts = _pack_starts(lengths, keep_whole, seq_len) if with_eos else _row_starts(lengths, seq_len)  # (O,)
    occ = np.repeat(np.arange(len(order)), lengths)  # (N,) occurrence of each stream token
    first_token = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)  # (O,)
    pos = np.arange(int(lengths.sum())) - first_token[occ]  # (N,) position inside its document
    dest = starts[occ] + pos  # (N,) output slot
    n_rows = -(-int(starts[-1] + lengths[-1]) // seq_len)
    size = n_rows * seq_len
    input_ids = np.full(size, pad_id, dtype=np.int64)
    labels = np.full(size, IGNORE_INDEX, dtype=np.int64)
    document_ids = np.full(size, -1, dtype=np.int64)
    position_ids = np.zeros(size, dtype=np.int64)
    tokens = flat[src_start[order][occ] + pos]
    input_ids[dest], labels[dest] = tokens, tokens
    document_ids[dest] = (order if owner is None else np.asarray(owner, dtype=np.int64)[order])[occ]
    position_ids[dest] = pos
    attention_mask = (document_ids >= 0).astype(np.int64)
    cols = {"input_ids": input_ids, "labels": labels, "document_ids": document_ids,
            "position_ids": position_ids, "attention_mask": attention_mask}
    cols = {k: v.reshape(n_rows, seq_len) for k, v in cols.items()}
    split = (starts // seq_len) != ((starts + lengths - 1) // seq_len)  # (O,) occurrence spans more than one row
    real = int(attention_mask.sum())
    stats = {"rows": n_rows, "tokens": real, "padding": size - real, "occurrences": len(order),
             "split_occurrences": int(split.sum())}
    return cols, stats


def training_order(repetitions: list[int], num_background: int, seed: int,
                   extra: list[int] | tuple[int, ...] = ()) -> np.ndarray:
    """Document ids to train on: member k repeated ``repetitions[k]`` times, background M+k once, then document
    M+B+c (a canary) repeated ``extra[c]`` times, shuffled by seed (without ``extra``, the order of older data)."""
    m = len(repetitions)
    ids = np.concatenate([np.repeat(np.arange(m, dtype=np.int64), np.asarray(repetitions, dtype=np.int64)),
                          np.arange(m, m + num_background, dtype=np.int64),
                          np.repeat(np.arange(m + num_background, m + num_background + len(extra), dtype=np.int64),
                                    np.asarray(extra, dtype=np.int64))])
    # A separate stream from the split's permutation, so changing num_background does not reshuffle members.
    return np.random.default_rng([seed, 1]).permutation(ids)


def variant_layout(counts: list[int], num_background: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, owner) for members whose r copies are distinct documents (the member, then its r-1 variants).

    Documents are laid out as: M members, then the variants grouped by member (``counts[i] - 1`` each), then the
    background. Each document is trained once per epoch, shuffled by seed; ``owner`` maps a variant to its member's
    id and background document b to ``M + b``, so ``document_ids`` mean the same as without variants.
    """
    m = len(counts)
    extra = np.asarray(counts, dtype=np.int64) - 1
    owner = np.concatenate([np.arange(m), np.repeat(np.arange(m), extra), m + np.arange(num_background)])
    return training_order([1] * (m + int(extra.sum())), num_background, seed), owner.astype(np.int64)


def occurrences(document_ids: np.ndarray, position_ids: np.ndarray, num_documents: int) -> np.ndarray:
    """(num_documents,) how many times each document id starts in the given rows: its positions with
    ``position_ids == 0`` (a document cut over two rows continues its positions, so it starts once)."""
    ids = np.asarray(document_ids)
    starts = ids[(np.asarray(position_ids) == 0) & (ids >= 0)]
    return np.bincount(starts, minlength=num_documents)[:num_documents]


def document_reads(train, consumed: np.ndarray, num_documents: int,
                   block: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """(copies read (D,), tokens read (D,)) of each document id over the row indices ``consumed`` (in training
    order; a row read twice counts twice) of ``train``, a prepared train split (a ``datasets.Dataset``). A copy
    is read when its first token is (``position_ids == 0``); EOS counts with the document it ends."""
    rows = train.with_format("numpy", columns=["document_ids", "position_ids"])
    times = np.bincount(np.asarray(consumed, dtype=np.int64), minlength=len(rows))  # (R,) reads of each row
    starts = np.zeros(num_documents, dtype=np.int64)
    tokens = np.zeros(num_documents, dtype=np.int64)
    for lo in range(0, len(rows), block):
        part = rows[lo:lo + block]
        docs = part["document_ids"]  # (b, T)
        weight = np.broadcast_to(times[lo:lo + len(docs)][:, None], docs.shape)  # (b, T) reads of each token
        real = (docs >= 0) & (docs < num_documents)
        np.add.at(tokens, docs[real], weight[real])
        first = real & (part["position_ids"] == 0)
        np.add.at(starts, docs[first], weight[first])
    return starts, tokens
