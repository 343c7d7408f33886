"""Training rows from documents, vectorised with numpy (no per-token Python loops).

Input: the unique training documents (members first, then background: document id k is its index) and ``order``,
the sequence of document ids to train on (members repeated by their counts, shuffled). Output: (R, seq_len) int64
arrays ``input_ids, labels, document_ids, position_ids, attention_mask``.

* ``pack``: every occurrence is followed by EOS and the stream is cut into rows of ``seq_len``; a document crossing
  a row boundary continues in the next row with its ``position_ids`` continuing (the split is counted in the stats).
  The EOS belongs to the document before it (its ``document_ids``/next position, and it is a label: the model
  learns to end a document). Only the last row is padded.
* ``one_per_row``: each occurrence starts a new row and is right-padded; a document longer than ``seq_len`` takes
  several rows, its ``position_ids`` continuing. No EOS (the paper's setting: rows are exactly the documents).

Padding: ``input_ids`` = pad id, ``labels`` = -100, ``document_ids`` = -1, ``position_ids`` = 0, mask 0.
"""

from __future__ import annotations

import numpy as np

IGNORE_INDEX = -100


def _occurrences(lengths: np.ndarray, order: np.ndarray, stride: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each stream token: (occurrence index, offset inside the occurrence), occurrences laid ``stride`` apart.

    ``lengths``: (O,) tokens per occurrence; ``stride``: (O,) slots each occurrence occupies in the output.
    Returns ``dest`` (N,) output slot of every token and ``pos`` (N,) its position inside its document.
    """
    starts = np.concatenate([[0], np.cumsum(stride)[:-1]])  # (O,) first output slot of each occurrence
    token_occ = np.repeat(np.arange(len(order)), lengths)  # (N,)
    first_token = np.concatenate([[0], np.cumsum(lengths)[:-1]])  # (O,) index of each occurrence's first token
    pos = np.arange(int(lengths.sum())) - first_token[token_occ]  # (N,)
    return starts[token_occ] + pos, pos


def build_rows(docs: list[np.ndarray], order: np.ndarray, seq_len: int, packing: str, eos_id: int,
               pad_id: int) -> tuple[dict[str, np.ndarray], dict]:
    """Lay out ``order`` (document ids) into training rows; returns (columns, stats). See the module docstring."""
    order = np.asarray(order, dtype=np.int64)
    doc_len = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))  # (D,)
    with_eos = packing == "pack"
    # All unique documents back to back (each followed by EOS when packing): the source of every gather below.
    flat = np.concatenate([np.append(d, eos_id) if with_eos else np.asarray(d) for d in docs]).astype(np.int64)
    unit = doc_len + int(with_eos)  # (D,) tokens one occurrence contributes
    src_start = np.concatenate([[0], np.cumsum(unit)[:-1]])  # (D,)
    lengths = unit[order]  # (O,)
    if with_eos:
        stride = lengths  # back to back
    else:
        stride = -(-lengths // seq_len) * seq_len  # each occurrence padded to whole rows
    dest, pos = _occurrences(lengths, order, stride)
    total = int(stride.sum())
    n_rows = -(-total // seq_len)
    size = n_rows * seq_len
    occ = np.repeat(np.arange(len(order)), lengths)  # (N,) occurrence of each token
    input_ids = np.full(size, pad_id, dtype=np.int64)
    labels = np.full(size, IGNORE_INDEX, dtype=np.int64)
    document_ids = np.full(size, -1, dtype=np.int64)
    position_ids = np.zeros(size, dtype=np.int64)
    tokens = flat[src_start[order][occ] + pos]
    input_ids[dest], labels[dest] = tokens, tokens
    document_ids[dest] = order[occ]
    position_ids[dest] = pos
    attention_mask = (document_ids >= 0).astype(np.int64)
    cols = {"input_ids": input_ids, "labels": labels, "document_ids": document_ids,
            "position_ids": position_ids, "attention_mask": attention_mask}
    cols = {k: v.reshape(n_rows, seq_len) for k, v in cols.items()}
    first_slot = np.concatenate([[0], np.cumsum(stride)[:-1]])
    split = (first_slot // seq_len) != ((first_slot + lengths - 1) // seq_len)  # (O,) occurrence spans >1 row
    stats = {"rows": n_rows, "tokens": int(attention_mask.sum()), "padding": size - int(attention_mask.sum()),
             "occurrences": len(order), "split_occurrences": int(split.sum())}
    return cols, stats


def training_order(repetitions: list[int], num_background: int, seed: int) -> np.ndarray:
    """Document ids to train on: member k repeated ``repetitions[k]`` times, background M+k once, shuffled by seed."""
    m = len(repetitions)
    ids = np.concatenate([np.repeat(np.arange(m, dtype=np.int64), np.asarray(repetitions, dtype=np.int64)),
                          np.arange(m, m + num_background, dtype=np.int64)])
    # A separate stream from the split's permutation, so changing num_background does not reshuffle members.
    return np.random.default_rng([seed, 1]).permutation(ids)
