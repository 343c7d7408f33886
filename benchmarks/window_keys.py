"""How long building a document's default stride windows takes, before and after the keys stopped hashing the whole
document for every window (issue 56).

    python benchmarks/window_keys.py [--tokens 10000 20000 40000 1000000] [--old-max 40000] [--prefix 50]
                                     [--suffix 50]

The default windows of a JSONL audit (``placement=stride``, stride = S) tile each document; every window has a key
(:func:`goldfish.eval.windows.window_key`). The code before hashed the document's whole token list (8 bytes a token)
into every key: ~n/S windows x 8n bytes, quadratic in the length n. Now a document over
:data:`~goldfish.eval.windows.KEY_TOKEN_BYTES` bytes is hashed once and each key hashes its digest. This prints, per
length, the seconds :func:`~goldfish.eval.windows.build_windows` takes and (up to ``--old-max`` tokens, above which
it runs for minutes) the seconds of the old construction, written out below as it was, on the same random tokens.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import struct
import time

from goldfish.eval.windows import EvalDocument, build_windows, starts


def old_windows(doc: EvalDocument, prefix_len: int, suffix_len: int) -> list[tuple]:
    """The construction before issue 56: every key hashes the whole document (stride windows, stride = S)."""
    toks, out = doc.tokens, []
    offs, p = starts(len(toks), prefix_len, suffix_len, "stride", suffix_len)
    for s in offs:
        h = hashlib.sha256()
        h.update(f"goldfish-window/1|{prefix_len}|{suffix_len}|stride|{s}|".encode())
        h.update(struct.pack(f"<{len(toks)}q", *toks))
        out.append((toks[s : s + p], toks[s + p : s + p + suffix_len], h.hexdigest()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[10_000, 20_000, 40_000, 1_000_000])
    ap.add_argument("--old-max", type=int, default=40_000, help="longest document the old construction is timed on")
    ap.add_argument("--prefix", type=int, default=50)
    ap.add_argument("--suffix", type=int, default=50)
    args = ap.parse_args()
    rng = random.Random(0)
    print(f"{'tokens':>10} {'windows':>8} {'new s':>8} {'old s':>8}")
    for n in args.tokens:
        doc = EvalDocument(id="d", tokens=tuple(rng.randrange(50_000) for _ in range(n)))
        t0 = time.perf_counter()
        windows, _ = build_windows([doc], [args.prefix], args.suffix, ["stride"])
        new = time.perf_counter() - t0
        old = "-"
        if n <= args.old_max:
            t0 = time.perf_counter()
            old_windows(doc, args.prefix, args.suffix)
            old = f"{time.perf_counter() - t0:.3f}"
        print(f"{n:>10} {len(windows):>8} {new:>8.3f} {old:>8}")


if __name__ == "__main__":
    main()
