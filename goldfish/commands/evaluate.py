"""``goldfish eval``: extraction and membership inference on any checkpoint (see :mod:`eval`)."""

from __future__ import annotations

import argparse

from ..config import describe, from_dict, merge_override, parse_override, read_yaml
from ..errors import UserError

DESCRIPTION = """\
Measure memorization of a causal LM: for each document, give the model a prefix of P tokens, decode S tokens
greedily (batched, KV-cached) and compare them with the true continuation (exact match, token match, ROUGE-L,
edit distance ...), plus one-pass measures (suffix log-prob, (n,p)-extraction chance) and membership inference
(members vs nonmembers: LOSS, zlib, Min-K%, Min-K%++ ...). Results go to OUT incrementally; rerunning the same
command resumes. Precedence: defaults < CONFIG.yaml < key=value overrides < flags.

examples:
  goldfish eval --model runs/demo/cells/standard/train --data data/prepared/wikipedia_demo --out /tmp/ev_standard
  goldfish eval --model runs/demo/cells/goldfish/train/model --data data/prepared/wikipedia_demo --out /tmp/ev \\
      --prefix-len 32,78 --window start --window end --suffix-len 50
  goldfish eval --model SmolLM2-135M-Instruct.Q4_1.gguf --data docs.jsonl --out /tmp/ev --prefix-len all
  goldfish eval eval.yaml --model runs/x --data texts.jsonl --nonmembers heldout.jsonl --out /tmp/ev beam=4
"""

# flag -> (EvalConfig field, argparse kwargs)
FLAGS: dict[str, tuple[str, dict]] = {
    "--model": ("model", dict(help="HF model folder, .gguf file, or training run folder")),
    "--data": ("data", dict(help="prepared folder (goldfish prepare) or JSONL with {\"id\", \"text\"} per line")),
    "--out": ("out", dict(help="output folder (results.json, results.csv, report.md, plots)")),
    "--nonmembers": ("nonmembers", dict(help="nonmember documents for membership inference (JSONL or prepared)")),
    "--reference": ("reference", dict(help="reference model for the reference-calibrated membership attack")),
    "--prefix-len": ("prefix_lens", dict(action="append", help="prefix length(s) P: repeat or comma-separate; "
                                                               "'all' = all but the last S tokens")),
    "--suffix-len": ("suffix_len", dict(type=int, help="suffix length S (default 50)")),
    "--window": ("window", dict(action="append", choices=["end", "start", "stride"],
                                help="window placement (repeatable; default end)")),
    "--stride": ("stride", dict(type=int, help="step of --window stride (default: suffix length)")),
    "--batch-size": ("batch_size", dict(help="windows per batch or 'auto' (default)")),
    "--max-docs": ("max_docs", dict(type=int, help="evaluate only the first N documents")),
    "--beam": ("beam", dict(type=int, help="beam width for an extra beam-search extraction (default 1 = off)")),
    "--samples": ("samples", dict(type=int, help="sampled extraction: samples per window (default 0 = off)")),
    "--dtype": ("dtype", dict(choices=["float32", "bfloat16", "float16", "auto"], help="weights dtype")),
    "--device": ("device", dict(help="auto (default), cpu, cuda, cuda:N")),
    "--seed": ("seed", dict(type=int, help="seed for sampling and bootstrap")),
}
SWITCHES = {  # store_true flag -> (field, value)
    "--allow-pickle": ("allow_pickle", True, "allow pickle weights (loaded with torch.load(weights_only=True))"),
    "--no-resume": ("resume", False, "recompute every window even if OUT holds finished ones"),
    "--no-report": ("report", False, "skip report.md and plots"),
    "--no-progress": ("progress", False, "no progress bars"),
    "--no-membership": ("membership", False, "skip membership inference"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from goldfish.eval.config import EvalConfig

    p.add_argument("args", nargs="*", metavar="[CONFIG.yaml] [key=value ...]",
                   help="optional YAML config, then key=value overrides of any config key")
    for flag, (field, kwargs) in FLAGS.items():
        p.add_argument(flag, dest=field, default=None, **kwargs)
    for flag, (field, value, text) in SWITCHES.items():
        p.add_argument(flag, dest=field, action="store_const", const=value, default=None, help=text)
    p.epilog = "config keys:\n" + "\n".join(describe(EvalConfig))


def _int_or_auto(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise UserError(f"--batch-size {value!r} must be a positive integer or 'auto'") from None


def build_config(args: argparse.Namespace):
    """Defaults < YAML < key=value overrides < flags -> a validated :class:`goldfish.eval.EvalConfig`."""
    from goldfish.eval.config import EvalConfig

    positional = list(args.args)
    path = positional.pop(0) if positional and "=" not in positional[0] else None
    data = read_yaml(path) if path else {}
    for text in positional:
        keys, value = parse_override(text)
        merge_override(data, keys, value)
    for field, _ in list(FLAGS.values()) + [(f, v) for f, v, _ in SWITCHES.values()]:
        value = getattr(args, field, None)
        if value is None:
            continue
        if field == "batch_size":
            value = _int_or_auto(value)
        data[field] = value
    return from_dict(EvalConfig, data)


def run(args: argparse.Namespace) -> int:
    from goldfish.eval import run_eval
    from goldfish.eval.report import format_summary_table

    cfg = build_config(args)
    results = run_eval(cfg)
    print(format_summary_table(results))
    print(f"\nresults: {cfg.out}/results.json, {cfg.out}/results.csv" + (f", {cfg.out}/report.md" if cfg.report else ""))
    return 0
