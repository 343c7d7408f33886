"""The training-row builder of the prepared format 1 (goldfish <= 0.1 stored these five int64 columns per token),
kept as the second implementation that :class:`goldfish.data.rows.TrainRows` is checked against: the rows it
derives from token shards and a layout must equal, column for column, what this builder lays out in memory."""

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


def build_rows(
    docs: list[np.ndarray],
    order: np.ndarray,
    seq_len: int,
    packing: str,
    eos_id: int,
    pad_id: int,
    whole: int | np.ndarray | None = None,
    owner: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], dict]:
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
    cols = {
        "input_ids": input_ids,
        "labels": labels,
        "document_ids": document_ids,
        "position_ids": position_ids,
        "attention_mask": attention_mask,
    }
    cols = {k: v.reshape(n_rows, seq_len) for k, v in cols.items()}
    split = (starts // seq_len) != ((starts + lengths - 1) // seq_len)  # (O,) occurrence spans more than one row
    real = int(attention_mask.sum())
    stats = {
        "rows": n_rows,
        "tokens": real,
        "padding": size - real,
        "occurrences": len(order),
        "split_occurrences": int(split.sum()),
    }
    return cols, stats


def occurrences(document_ids: np.ndarray, position_ids: np.ndarray, num_documents: int) -> np.ndarray:
    """(num_documents,) how many times each document id starts in the given rows: its positions with
    ``position_ids == 0`` (a document cut over two rows continues its positions, so it starts once)."""
    ids = np.asarray(document_ids)
    starts = ids[(np.asarray(position_ids) == 0) & (ids >= 0)]
    return np.bincount(starts, minlength=num_documents)[:num_documents]


def document_reads(
    cols: dict[str, np.ndarray], consumed: np.ndarray, num_documents: int
) -> tuple[np.ndarray, np.ndarray]:
    """(copies read, tokens read) per document id over the rows ``consumed`` of the columns ``cols`` (format 1's
    counting: a copy starts where ``position_ids == 0``; EOS counts with the document it ends)."""
    times = np.bincount(np.asarray(consumed, dtype=np.int64), minlength=len(cols["document_ids"]))
    docs = cols["document_ids"]
    weight = np.broadcast_to(times[:, None], docs.shape)
    real = (docs >= 0) & (docs < num_documents)
    starts = np.zeros(num_documents, dtype=np.int64)
    tokens = np.zeros(num_documents, dtype=np.int64)
    np.add.at(tokens, docs[real], weight[real])
    first = real & (cols["position_ids"] == 0)
    np.add.at(starts, docs[first], weight[first])
    return starts, tokens
