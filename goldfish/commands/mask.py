"""``goldfish mask``: see which tokens of a text the Goldfish mask drops."""

from __future__ import annotations

import argparse
import json
import sys

from ..config import from_dict
from ..errors import UserError
from ..masks import GoldfishConfig, config_mask

DESCRIPTION = """\
Tokenize a text and print it with the tokens that Goldfish Loss drops from the loss marked [like this],
plus the drop fraction. The same text always gets the same mask.

examples:
  goldfish mask --text "The quick brown fox jumps over the lazy dog." --k 4 --h 13
  goldfish mask --file README.md --k 3 --strategy hash-table
  goldfish mask --text "The Quick  brown fox." --strategy canonical   # case/whitespace variants share drops
  goldfish mask --text "..." --tokenizer data/prepared/wikipedia_demo/tokenizer --json
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="the text to mask")
    src.add_argument("--file", help="read the text from this UTF-8 file ('-' = standard input)")
    p.add_argument("--k", type=int, default=4, help="drop 1 in k target tokens (default 4)")
    p.add_argument("--h", type=int, default=13, help="context width hashed per target (default 13)")
    p.add_argument(
        "--strategy", default="hash", help="hash (default) | hash-table | canonical | hash-preceding | static"
    )
    p.add_argument("--seed", type=int, default=0, help="salt of the hash strategies")
    p.add_argument(
        "--tokenizer",
        default="gpt2",
        help="gpt2 (offline GPT-2 BPE, default), a local HF tokenizer folder, or a .gguf file",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of marked text")


def _read_text(args: argparse.Namespace) -> str:
    if args.text is not None:
        return args.text
    name = "standard input" if args.file == "-" else args.file
    if args.file == "-":
        data = sys.stdin.buffer.read()
    else:
        with open(args.file, "rb") as f:
            data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{name} is not UTF-8 text (invalid byte at offset {e.start}); convert it (e.g. iconv -t utf-8) and retry"
        ) from None


def run(args: argparse.Namespace) -> int:
    import torch

    from ..data import load_tokenizer
    from ..fold import token_fold

    cfg = from_dict(GoldfishConfig, {"k": args.k, "h": args.h, "strategy": args.strategy, "seed": args.seed})
    text = _read_text(args)
    if not text.strip():
        raise UserError('the text is empty; pass --text "..." or a non-empty --file')
    tokenizer = load_tokenizer(args.tokenizer)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    cfg.special_ids = sorted({int(i) for i in tokenizer.all_special_ids if i is not None})
    if cfg.strategy == "canonical":
        cfg.fold = token_fold(tokenizer)
    mask = config_mask(torch.tensor(ids), cfg).tolist()
    pieces = [tokenizer.decode([i]) for i in ids]
    frac = sum(mask) / len(mask)
    if args.json:
        print(
            json.dumps(
                {
                    "k": cfg.k,
                    "h": cfg.h,
                    "strategy": cfg.strategy,
                    "tokens": ids,
                    "pieces": pieces,
                    "dropped": mask,
                    "drop_fraction": frac,
                }
            )
        )
        return 0
    marked = "".join(f"[{p}]" if m else p for p, m in zip(pieces, mask))
    print(marked)
    print(
        f"\n{sum(mask)} of {len(mask)} tokens dropped ({frac:.1%}; expected about {1 / cfg.k:.1%} for k={cfg.k}, "
        f"h={cfg.h}, strategy={cfg.strategy})"
    )
    return 0
