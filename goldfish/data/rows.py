"""The training rows of a prepared folder: token shards + a layout, read by memory map; every column a batch needs is
derived when the batch is built, never stored per token.

What is stored (``goldfish.data.prepare`` writes it; the manifest's ``train`` block lists it):

* the *documents* of the rows, each once, in token shards (:mod:`goldfish.data.tokens`): ``train/targets`` (the
  members, then their near-duplicate variants, whose tag is the member they copy), the background shards
  ``background/NNNNN`` (possibly only the first documents of the last one), ``train/canaries``. Document ``d`` is
  the ``d``-th over the stores in that order;
* the *layout*: ``train/order.npy`` (O,) the document of each occurrence in training order (a member labelled x r
  occurs r times) and ``train/starts.npy`` (O,) its first slot in the row stream, where row ``r`` is slots
  ``[r*T, (r+1)*T)``.

An occurrence fills ``len(document) (+1 EOS when packed)`` slots from its start; slots no occurrence covers are
padding. From that, for each row of a batch: ``input_ids`` (the pad id on padding), ``labels`` (= input_ids, -100 on
padding), ``document_ids`` (members 0..M-1, a variant its member's id, background b -> M + b, canary c -> M + B + c;
-1 on padding), ``position_ids`` (the slot's offset in its occurrence: a document cut by a row boundary continues its
positions in the next row; 0 on padding) and ``attention_mask`` (1 on real tokens). These are exactly the columns
the in-memory row builder of format 1 stored (tests/reference_rows.py holds it as the second implementation).

Reading a batch costs O(rows x documents per row) memory-map slices, whatever the corpus size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .tokens import DTYPES, TokenShard

IGNORE_INDEX = -100
COLUMNS = ("input_ids", "labels", "document_ids", "position_ids", "attention_mask")


# ------------------------------------------------------------------------------------------------ layout


def pack_starts(units: np.ndarray, keep_whole: np.ndarray, seq_len: int, block: int = 1 << 20) -> np.ndarray:
    """(O,) first slot of each occurrence under ``pack``: back to back, except that an occurrence to keep whole which
    fits in a row but not in the current row's rest starts the next row (the rest is padding). One step per
    occurrence, a block of occurrences at a time (memory: the output plus one block)."""
    starts = np.empty(len(units), dtype=np.int64)
    slot = 0
    for lo in range(0, len(units), block):
        part = starts[lo : lo + block]
        for i, (n, whole) in enumerate(zip(units[lo : lo + block].tolist(), keep_whole[lo : lo + block].tolist())):
            used = slot % seq_len
            if whole and n <= seq_len and used + n > seq_len:
                slot += seq_len - used
            part[i] = slot
            slot += n
    return starts


def row_starts(units: np.ndarray, seq_len: int) -> np.ndarray:
    """(O,) first slot of each occurrence under ``one_per_row``: each starts a row and is padded to whole rows."""
    stride = -(-np.asarray(units, dtype=np.int64) // seq_len) * seq_len
    return np.concatenate([[0], np.cumsum(stride)[:-1]]).astype(np.int64)


def layout_stats(starts: np.ndarray, units: np.ndarray, seq_len: int) -> dict:
    """Rows, real tokens, padding and occurrences cut by a row boundary of a layout."""
    if len(units) == 0:
        return {"rows": 0, "tokens": 0, "padding": 0, "occurrences": 0, "split_occurrences": 0}
    rows = -(-int(starts[-1] + units[-1]) // seq_len)
    tokens = int(np.sum(units, dtype=np.int64))
    split = (starts // seq_len) != ((starts + units - 1) // seq_len)
    return {
        "rows": rows,
        "tokens": tokens,
        "padding": rows * seq_len - tokens,
        "occurrences": len(units),
        "split_occurrences": int(split.sum()),
    }


# ------------------------------------------------------------------------------------------------ reading


class TrainRows:
    """The training rows of a prepared folder (format 2), by memory map.

    ``len(rows)``: number of rows; ``rows.seq_len``; ``rows.batch(index)``: the (B, T) int64 columns of the rows
    ``index`` (:data:`COLUMNS`); ``rows[i]``: one row's (T,) columns; ``rows.reads(consumed)``: how often each document
    was read over the rows ``consumed``; ``rows.document(d)``: the ids of document ``d``.
    """

    def __init__(self, folder: Path, spec: dict):
        self.folder = Path(folder)
        self.seq_len = int(spec["seq_len"])
        self.packing = spec["packing"]
        self.eos = int(spec["eos_id"]) if self.packing == "pack" else None
        self.pad_id = int(spec["pad_id"])
        self.rows = int(spec["rows"])
        self.variants = int(spec.get("variants", 0))
        dtype = DTYPES[spec["dtype"]]
        self._stores = [
            TokenShard(self.folder / Path(s["path"]).parent, Path(s["path"]).name, dtype) for s in spec["stores"]
        ]
        used = [int(s["documents"]) for s in spec["stores"]]
        self._first = np.concatenate([[0], np.cumsum(used)[:-1]]).astype(np.int64)  # (S,) first document of each
        self.documents = int(sum(used))
        self.order = np.load(self.folder / "train" / "order.npy", mmap_mode="r", allow_pickle=False)  # (O,)
        self.starts = np.load(self.folder / "train" / "starts.npy", mmap_mode="r", allow_pickle=False)  # (O,)
        # (M + V,) the document_ids value of each target: a member its own index, a variant its member's
        self._owner = np.asarray(self._stores[0].tags) if self.variants else None

    def __len__(self) -> int:
        return self.rows

    def layout_problems(self, spec: dict) -> list[str]:
        """What in the manifest's ``train`` section ``spec`` the stored layout and shards contradict -- ``rows`` and
        ``seq_len`` (the rows the occurrences fill), ``occurrences``, ``tokens``, a document past the stores -- so an
        edited manifest is refused before a step reads a row that is not there. Vectorised over the occurrences (the
        stores' indexes and the layout, memory-mapped)."""
        order, starts = np.asarray(self.order), np.asarray(self.starts)
        if order.ndim != 1 or starts.shape != order.shape:
            return [f"train/order.npy and train/starts.npy hold {order.shape} and {starts.shape} occurrences"]
        if len(order) and (int(order.min()) < 0 or int(order.max()) >= self.documents):
            return [f"its layout reads document {int(order.max())} but its stores hold {self.documents} documents"]
        units = self.units()
        stats = layout_stats(starts, units, self.seq_len)
        return [
            f"train.{key}={spec[key]!r} but its layout and shards give {stats[key]} (at train.seq_len={self.seq_len})"
            for key in ("rows", "occurrences", "tokens")
            if key in spec and spec[key] != stats[key]
        ]

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        """Row ``i`` as (T,) int64 columns: ``TrainRows`` is a map-style dataset (a ``torch`` DataLoader or an HF
        ``Trainer`` with ``default_data_collator`` read it as it is)."""
        return {k: v[0] for k, v in self.batch(np.array([int(i)])).items()}

    def document(self, d: int) -> np.ndarray:
        """The ids of document ``d`` (a read-only memory-map view)."""
        s = int(np.searchsorted(self._first, d, side="right")) - 1
        return self._stores[s][int(d - self._first[s])]

    def document_ids(self, docs: np.ndarray) -> np.ndarray:
        """The ``document_ids`` value of documents ``docs`` (see the module docstring)."""
        docs = np.asarray(docs, dtype=np.int64)
        if not self.variants:
            return docs.copy()
        out = docs - self.variants  # background and canaries come after the M members and V variants
        inside = docs < len(self._owner)
        out[inside] = self._owner[docs[inside]]
        return out

    def lengths(self) -> np.ndarray:
        """(D,) token count of every document (no EOS)."""
        parts = [np.asarray(store.lengths)[:n] for store, n in zip(self._stores, self._counts())]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _counts(self) -> list[int]:
        ends = list(self._first[1:]) + [self.documents]
        return [int(e - f) for f, e in zip(self._first, ends)]

    def batch(self, index) -> dict[str, np.ndarray]:
        """The (B, T) int64 columns of rows ``index`` (:data:`COLUMNS`), derived from the layout."""
        index = np.asarray(index, dtype=np.int64)
        T, B = self.seq_len, len(index)
        cols = {
            "input_ids": np.full((B, T), self.pad_id, dtype=np.int64),
            "labels": np.full((B, T), IGNORE_INDEX, dtype=np.int64),
            "document_ids": np.full((B, T), -1, dtype=np.int64),
            "position_ids": np.zeros((B, T), dtype=np.int64),
        }
        if B:
            if int(index.min()) < 0 or int(index.max()) >= self.rows:
                raise IndexError(f"row index out of range 0..{self.rows - 1}")
            lo = index * T
            first = np.maximum(np.searchsorted(self.starts, lo, side="right") - 1, 0)  # (B,) may end before the row
            last = np.searchsorted(self.starts, lo + T, side="left")  # (B,) exclusive
            for b in range(B):
                self._fill(cols, b, int(lo[b]), int(first[b]), int(last[b]))
        cols["attention_mask"] = (cols["document_ids"] >= 0).astype(np.int64)
        return cols

    def _fill(self, cols: dict, b: int, lo: int, first: int, last: int) -> None:
        T, extra = self.seq_len, int(self.eos is not None)
        for i in range(first, last):
            d, start = int(self.order[i]), int(self.starts[i])
            ids = self.document(d)
            end = start + len(ids) + extra  # exclusive slot
            a, e = max(start, lo), min(end, lo + T)
            if e <= a:
                continue
            dst = slice(a - lo, e - lo)
            k0, k1 = a - start, e - start  # offsets inside the occurrence
            tokens = np.asarray(ids[k0 : min(k1, len(ids))], dtype=np.int64)
            if k1 > len(ids):  # the EOS slot is inside this row
                tokens = np.append(tokens, self.eos)
            cols["input_ids"][b, dst] = tokens
            cols["labels"][b, dst] = tokens
            cols["document_ids"][b, dst] = (
                int(self._owner[d]) if self._owner is not None and d < len(self._owner) else d - self.variants
            )
            cols["position_ids"][b, dst] = np.arange(k0, k1)

    def units(self) -> np.ndarray:
        """(O,) slots each occurrence fills (its document's tokens, + 1 EOS when packed)."""
        return self.lengths()[np.asarray(self.order)] + int(self.eos is not None)

    def reads(self, consumed: np.ndarray, num_documents: int) -> tuple[np.ndarray, np.ndarray]:
        """(copies read (N,), tokens read (N,)) per ``document_ids`` value ``0 .. num_documents - 1`` over the row
        indices ``consumed`` (in training order; a row read twice counts twice). A copy is read when the row holding
        its first token is; EOS counts with the document it ends."""
        T = self.seq_len
        times = np.bincount(np.asarray(consumed, dtype=np.int64), minlength=self.rows)  # (R,) reads of each row
        starts = np.asarray(self.starts)
        units = self.units()
        value = self.document_ids(np.asarray(self.order))  # (O,)
        r0, r1 = starts // T, (starts + units - 1) // T
        copies = times[r0]
        tokens = units * times[r0]
        for i in np.nonzero(r1 > r0)[0]:  # occurrences cut by row boundaries: count each row's part
            rows = np.arange(r0[i], r1[i] + 1)
            part = np.minimum((rows + 1) * T, starts[i] + units[i]) - np.maximum(rows * T, starts[i])
            tokens[i] = int((part * times[rows]).sum())
        keep = (value >= 0) & (value < num_documents)
        copies_by = np.zeros(num_documents, dtype=np.int64)
        tokens_by = np.zeros(num_documents, dtype=np.int64)
        np.add.at(copies_by, value[keep], copies[keep])
        np.add.at(tokens_by, value[keep], tokens[keep])
        return copies_by, tokens_by
