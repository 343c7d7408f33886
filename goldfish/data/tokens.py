"""Token shards: documents' token ids at the narrowest dtype, back to back in a flat binary file with an offsets
index, written once and read by memory map (nanoGPT's uint16 ``.bin``, Megatron-LM's ``.bin`` + ``.idx``,
datatrove's ``.ds`` files).

A shard ``<stem>`` is two or three files in one folder::

    <stem>.bin        the ids of its documents back to back (little-endian uint16 or uint32), no separators
    <stem>.idx.npy    (n + 1,) int64 offsets: document i is bin[offsets[i]:offsets[i + 1]]
    <stem>.tag.npy    optional (n,) int64, one number per document (what it is depends on the shard: the source
                      document a background chunk came from, the member a near-duplicate variant copies)

Every file is written under a temporary name, flushed to disk and renamed into place, so a killed writer leaves
either the whole shard or no shard. Writing the same documents gives the same bytes (``.npy`` headers hold no
timestamp), and :func:`file_sha256` of each file goes into the shard's entry and the manifest.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..io import atomic_write_bytes, fsync_dir

DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}


def token_dtype(vocab_size: int, requested: str = "auto") -> np.dtype:
    """The dtype that stores ids ``0 .. vocab_size - 1``: uint16 up to 65,536 ids, else uint32 (``requested='auto'``);
    an explicit dtype too narrow for the vocabulary is one :class:`UserError`."""
    if requested == "auto":
        requested = "uint16" if vocab_size <= 2**16 else "uint32"
    dtype = DTYPES[requested]
    limit = 2 ** (8 * dtype.itemsize)
    if vocab_size > limit:
        raise UserError(
            f"token_dtype={requested} holds ids below {limit:,} but the tokenizer has {vocab_size:,} ids; "
            f"set token_dtype: uint32 (or auto)"
        )
    return dtype


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def write_file(path: Path, data: bytes | np.ndarray) -> str:
    """Write ``data`` (bytes, or an array saved as ``.npy``) to ``path`` atomically; returns its sha256."""
    if isinstance(data, np.ndarray):
        data = _npy_bytes(data)
    atomic_write_bytes(path, data)
    return hashlib.sha256(data).hexdigest()


class ShardWriter:
    """Append documents to a new shard ``folder/<stem>``; :meth:`close` publishes it and returns its entry.

    The ``.bin`` grows on disk as documents are added (memory stays that of one document batch); the index is kept
    in memory (8 bytes per document) and written at the end.
    """

    def __init__(self, folder: Path, stem: str, dtype: np.dtype):
        self.folder, self.stem, self.dtype = Path(folder), stem, np.dtype(dtype)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._tmp = self.folder / f".{stem}.bin.{os.getpid()}.tmp"
        self._fh = open(self._tmp, "wb")
        self._digest = hashlib.sha256()
        self._lengths: list[int] = []
        self._tags: list[int] = []
        self._limit = 2 ** (8 * self.dtype.itemsize)

    def add(self, ids: np.ndarray, tag: int | None = None) -> None:
        """Append one document (its ids; no BOS/EOS) with an optional tag."""
        data = self._bytes(ids)
        self._fh.write(data)
        self._digest.update(data)
        self._lengths.append(len(ids))
        if tag is not None:
            self._tags.append(int(tag))

    def _bytes(self, ids: np.ndarray) -> bytes:
        ids = np.asarray(ids)
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self._limit):
            raise UserError(
                f"token id {int(ids.max())} does not fit the shard dtype {self.dtype.name}; set token_dtype: uint32"
            )
        return ids.astype(self.dtype, copy=False).tobytes()

    def extend(self, ids: np.ndarray) -> None:
        """Append ``ids`` to the last document added (a long document written a part at a time)."""
        data = self._bytes(ids)
        self._fh.write(data)
        self._digest.update(data)
        self._lengths[-1] += len(ids)

    def mark(self) -> tuple:
        """Where the shard stands now, for :meth:`rollback`."""
        return self._fh.tell(), self._digest.copy(), len(self._lengths), len(self._tags)

    def rollback(self, mark: tuple) -> None:
        """Forget every document added since ``mark`` (its bytes truncated away, the digest as it was)."""
        at, digest, documents, tags = mark
        self._fh.seek(at)
        self._fh.truncate()
        self._digest = digest.copy()
        del self._lengths[documents:], self._tags[tags:]

    def close(self) -> dict:
        """Flush, publish the files under their final names and return ``{documents, tokens, sha256: {file: hex}}``."""
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        if self._tags and len(self._tags) != len(self._lengths):
            raise ValueError("bug: tag every document of a shard or none")
        offsets = np.concatenate([[0], np.cumsum(self._lengths, dtype=np.int64)]).astype(np.int64)
        sha = {f"{self.stem}.idx.npy": write_file(self.folder / f"{self.stem}.idx.npy", offsets)}
        if self._tags:
            sha[f"{self.stem}.tag.npy"] = write_file(
                self.folder / f"{self.stem}.tag.npy", np.asarray(self._tags, dtype=np.int64)
            )
        os.replace(self._tmp, self.folder / f"{self.stem}.bin")
        fsync_dir(self.folder)
        sha[f"{self.stem}.bin"] = self._digest.hexdigest()
        return {"documents": len(self._lengths), "tokens": int(offsets[-1]), "sha256": dict(sorted(sha.items()))}

    def abort(self) -> None:
        self._fh.close()
        self._tmp.unlink(missing_ok=True)


def write_shard(
    folder: Path, stem: str, docs: list[np.ndarray], dtype: np.dtype, tags: list[int] | np.ndarray | None = None
) -> dict:
    """Write ``docs`` (with optional per-document ``tags``) as one shard; returns its entry (see
    :meth:`ShardWriter.close`)."""
    writer = ShardWriter(folder, stem, dtype)
    try:
        for i, ids in enumerate(docs):
            writer.add(ids, None if tags is None else int(tags[i]))
    except BaseException:
        writer.abort()
        raise
    return writer.close()


class TokenShard:
    """A shard opened read-only by memory map: ``len(shard)`` documents, ``shard[i]`` the ids of document ``i`` (a view,
    no copy), ``shard.lengths`` the (n,) token counts, ``shard.tags`` the (n,) tags or ``None``."""

    def __init__(self, folder: Path, stem: str, dtype: np.dtype):
        self.path = Path(folder) / stem
        self.offsets = np.load(f"{self.path}.idx.npy", mmap_mode="r", allow_pickle=False)  # (n + 1,)
        size = os.path.getsize(f"{self.path}.bin")
        itemsize = np.dtype(dtype).itemsize
        if size % itemsize or size // itemsize != int(self.offsets[-1]):
            raise ValueError(
                f"{self.path}.bin holds {size} bytes, its index {int(self.offsets[-1])} ids of {itemsize} bytes"
            )
        # np.memmap cannot map an empty file
        self.ids = np.memmap(f"{self.path}.bin", dtype=dtype, mode="r") if size else np.zeros(0, dtype=dtype)
        tag = Path(f"{self.path}.tag.npy")
        self.tags = np.load(tag, mmap_mode="r", allow_pickle=False) if tag.exists() else None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[int(self.offsets[i]) : int(self.offsets[i + 1])]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(np.asarray(self.offsets))
