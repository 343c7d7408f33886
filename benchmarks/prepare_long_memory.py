"""Peak memory of ``goldfish prepare`` with one long background line, against the same prepare without it (issue 56).

    python benchmarks/prepare_long_memory.py [--tokenizer gpt2|bpe] [--case none|text|metadata|arrays|array-text]
                                             [--mb 30] [--where bg|main] [--keep DIR]

A small recipe (a 30-document main source, a background of 120 documents of ~300 words in one JSONL file, as
``tests/test_data_stream.py``'s corpus) is prepared in a subprocess, and its peak RSS read from ``getrusage``
(children); with ``--where main`` the background documents are in the main source (no ``background_source``: the
background is what the split leaves). ``--case`` inserts one line in the middle of the background:

* ``text``: a ``--mb`` MB text (prose with spaces, newlines, digits, non-Latin words);
* ``metadata``: a short text beside an unused field holding a ``--mb`` MB string;
* ``arrays``: a short text beside an unused field holding ``--mb`` MB of empty arrays (``[[],[],...]``);
* ``array-text``: a ``--mb`` MB line whose text field is an array of strings (refused: exit 2, one line).

Prints one JSON line: the case, the tokenizer, the exit status and the peak in MiB. Run ``--case none`` with the same
tokenizer for the baseline; the numbers are in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

WORDS = (
    "the of river city king war north people was built stone light market garden winter letter silver engine "
    "harbor forest paper window morning voice island bridge valley castle don't 1999 é 日本 -- ..."
).split()


def prose(chars: int, seed: int) -> str:
    rng = random.Random(seed)
    out, size = [], 0
    while size < chars:
        word = rng.choice(WORDS) + rng.choice([" ", " ", " ", "\n", "  ", "\n\n", "\t", ", ", ". "])
        out.append(word)
        size += len(word)
    return "".join(out)


def long_line(case: str, mb: int) -> str | None:
    size = mb * 10**6
    if case == "text":
        return json.dumps({"text": prose(size, 5)})
    if case == "metadata":
        return json.dumps({"text": prose(2000, 6), "meta": "x" * size})
    if case == "arrays":
        return json.dumps({"text": prose(2000, 6), "meta": [[]] * (size // 3)}, separators=(",", ":"))
    if case == "array-text":
        return json.dumps({"text": [prose(1000, i) for i in range(size // 1000)]})
    return None


def write_corpus(root: Path, case: str, mb: int, tokenizer: str, where: str) -> Path:
    rng = random.Random(0)
    main = [json.dumps({"id": f"m{i}", "text": " ".join(rng.choice(WORDS) for _ in range(60))}) for i in range(30)]
    bg = [json.dumps({"id": f"b{i}", "text": " ".join(rng.choice(WORDS) for _ in range(300))}) for i in range(120)]
    line = long_line(case, mb)
    if line is not None:
        bg.insert(60, json.dumps({"id": "long", **json.loads(line)}) if where == "main" else line)
    if where == "main":  # one source: the split's documents and the background's
        main += bg
    else:
        (root / "bg").mkdir()
        (root / "bg" / "part.jsonl").write_text("\n".join(bg) + "\n", encoding="utf-8")
    (root / "main.jsonl").write_text("\n".join(main) + "\n", encoding="utf-8")
    recipe = {
        "name": "mem",
        "source": {"name": "local", "path": str(root / "main.jsonl"), "id_field": "id"},
        "tokenizer": {"name": tokenizer, **({"vocab_size": 512} if tokenizer == "bpe" else {})},
        "seq_len": 64,
        "packing": "pack",
        "min_tokens": 16,
        "doc_tokens": 24,
        "num_members": 8,
        "repetitions": [1, 3],
        "nonmember_mode": "random_split",
        "num_nonmembers": 8,
        "num_background": None,
        "background_chunk_tokens": 63,
        "shard_documents": 64,
    }
    if where == "bg":
        recipe["background_source"] = {"name": "local", "path": str(root / "bg")}
    (root / "recipe.json").write_text(json.dumps(recipe))
    return root / "recipe.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default="gpt2", choices=["gpt2", "bpe"])
    ap.add_argument("--case", default="none", choices=["none", "text", "metadata", "arrays", "array-text"])
    ap.add_argument("--mb", type=int, default=30)
    ap.add_argument(
        "--where",
        default="bg",
        choices=["bg", "main"],
        help="the background in its own source (background_source) or in the main source",
    )
    ap.add_argument("--keep", help="write the corpus and the prepared folder here (default: a temporary folder)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        recipe = write_corpus(root, args.case, args.mb, args.tokenizer, args.where)
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "goldfish",
                "prepare",
                str(recipe),
                "--out",
                str(root / "out"),
                "--quiet",
                "--num-proc",
                "1",
            ],
            capture_output=True,
            text=True,
        )
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(
            json.dumps(
                {
                    "case": args.case,
                    "where": args.where,
                    "mb": args.mb,
                    "tokenizer": args.tokenizer,
                    "rc": p.returncode,
                    "peak_mib": round(peak, 1),
                    "err": p.stderr.strip().splitlines()[-1:] if p.returncode else [],
                }
            )
        )


if __name__ == "__main__":
    main()
