"""``goldfish eval``: extraction and membership inference on any checkpoint (see :mod:`goldfish.eval`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import describe, from_dict, merged, parse_overrides, read_yaml, split_arguments
from ..errors import ConfigError

DESCRIPTION = """\
Measure memorization of a causal LM: for each document, give the model a prefix of P tokens, decode S tokens
greedily (batched, KV-cached) and compare them with the true continuation (exact match, token match, ROUGE-L,
edit distance ...), plus one-pass measures (top-1 accuracy, suffix log-prob, (n,p)-extraction chance) and membership
inference (members vs nonmembers: LOSS, zlib, Min-K%, Min-K%++ ...). Results go to OUT incrementally; rerunning the
same command resumes. Config: an optional YAML file, then key=value overrides (sections model., data., decoding.,
membership.); command line > file > defaults. The shorthand flags below each set one config key.

examples (after `make demo`: one prepared folder in runs/demo/prepared/, models in runs/demo/cells/<arm>/train):
  goldfish eval --model runs/demo/cells/standard/train --data runs/demo/prepared/* --out /tmp/ev
  goldfish eval --model runs/demo/cells/goldfish/train --data runs/demo/prepared/* --out /tmp/ev2 \\
      data.prefix_lens=[32,78] data.window=[start,end]
  goldfish eval --model SmolLM2-135M-Instruct.Q4_1.gguf --data docs.jsonl --nonmembers heldout.jsonl --out /tmp/ev3
  goldfish eval eval.yaml --model model.gguf --data docs.jsonl --out /tmp/ev4 tasks=[membership] --threads 2
  goldfish eval --model model.gguf --data docs.jsonl --out /tmp/ev5 --offsets 0,100,200 decoding.beam=4
  goldfish eval --model runs/demo/cells/goldfish/train/model --data runs/demo/prepared/* --out /tmp/ev6 --update-card
  goldfish eval series.checkpoints=runs/x/cells/standard/train --data runs/x/prepared/<hash> --out /tmp/series
  goldfish eval series.models=[runs/a/model,runs/b/model] series.labels=[1M,10M] --data prep --out /tmp/sizes
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from goldfish.eval.config import SHORTHANDS, EvalConfig

    p.add_argument(
        "args",
        nargs="*",
        metavar="[CONFIG.yaml] [key=value ...]",
        help="optional YAML config, then key=value overrides of any config key",
    )
    for flag, key in SHORTHANDS.items():
        spellings = [flag] + ([flag.replace("-", "_").replace("__", "--", 1)] if "-" in flag[2:] else [])
        p.add_argument(*spellings, dest=key, default=None, metavar="VALUE", help=f"= {key}=VALUE")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="= overwrite=true: replace an out folder that holds another evaluation (built beside it, "
        "swapped in when finished)",
    )
    p.add_argument(
        "--log-samples",
        "--log_samples",
        dest="log_samples",
        action="store_true",
        help="= log_samples=true: also write samples.jsonl, one line per extraction window",
    )
    p.add_argument(
        "--update-card",
        action="store_true",
        help="append the headline numbers (extraction per window placement, membership AUCs) to the model "
        "folder's README.md model card, in model-index form (a Hugging Face folder or a training run "
        "folder; the card is created if absent)",
    )
    p.epilog = "config keys:\n" + "\n".join(describe(EvalConfig))


def build_config(args: argparse.Namespace):
    """Defaults < YAML < command line (key=value overrides and shorthand flags) -> a validated EvalConfig."""
    from goldfish.eval.config import SHORTHANDS, EvalConfig

    path, overrides = split_arguments(args.args)
    given = parse_overrides(overrides)
    for flag, key in SHORTHANDS.items():
        value = getattr(args, key, None)
        if value is None:
            continue
        if key in given:
            raise ConfigError(f"{flag} and {key}= both given; keep one")
        given.update(parse_overrides([f"{key}={value}"]))  # a YAML scalar, as key=value would read it
    if args.overwrite:
        if "overwrite" in given:
            raise ConfigError("--overwrite and overwrite= both given; keep one")
        given["overwrite"] = True
    if getattr(args, "log_samples", False):
        given["log_samples"] = True
    return from_dict(EvalConfig, merged(read_yaml(path) if path else {}, given))


def run(args: argparse.Namespace) -> int:
    from goldfish.eval.report import format_summary_table
    from goldfish.eval.run import run_eval
    from goldfish.eval.shard import process_group, splitting

    from ..hardware import apply_threads
    from ..modelcard import add_eval_results, eval_results

    cfg = build_config(args)
    apply_threads(cfg.model.threads)  # unset: physical cores per process (torch's default oversubscribes)
    # torchrun / accelerate launch: every process evaluates its share of the same batches; rank 0 writes and prints
    with process_group(cfg.model.device) as shard, splitting(shard):
        if cfg.series.active:  # a size family or a run's checkpoints, into one folder
            from goldfish.eval.series import run_series
            from goldfish.eval.series_report import model_table

            analysis = run_series(cfg)
            if shard.main:
                print(model_table(analysis))
                print(
                    f"\nresults: {cfg.out}/series.json, {cfg.out}/series.csv, {cfg.out}/trajectories.csv"
                    + (f", {cfg.out}/report.md" if cfg.report else "")
                )
            return 0
        # a wrong target fails before the work; a model of the Hugging Face cache gets its card in the eval folder
        folder, card_out = card_folder(cfg.model.path, cfg.out) if args.update_card else (None, None)
        results = run_eval(cfg)
    if not shard.main:
        return 0
    print(format_summary_table(results))
    report = f", {cfg.out}/report.md" if cfg.report else ""
    page = Path(str(cfg.out)) / "report.html"
    report += f", {page} (open it in a browser)" if cfg.report and page.is_file() else ""
    print(f"\nresults: {cfg.out}/results.json, {cfg.out}/results.csv{report}")
    if folder is not None:
        weights = (results.get("model") or {}).get("weights")  # the weights the numbers are of
        print(
            f"model card: {add_eval_results(folder, eval_results(results), weights=weights, out=card_out)}"
            + (" (the model is read-only in the Hugging Face cache: its card there is unchanged)" if card_out else "")
        )
    return 0


def card_folder(model_path: str | None, out: str | Path) -> tuple[Path, Path | None]:
    """The model folder whose card ``--update-card`` updates: the Hugging Face folder ``--model`` names (a training
    run folder: its ``model/``), and where the card goes when not there (None: into that folder). A Hub id, or any
    folder of the Hugging Face cache, is read-only: its card goes to ``<out>/model_card/README.md``. A GGUF file or
    folder, and a card that is a link, are refused in one line."""
    from ..modelcard import CARD, check_card_path
    from ..model_source import in_hub_cache, is_hub_id, resolve_model_path

    if not model_path:
        raise ConfigError("--update-card needs --model (the model folder whose card gets the results)")
    src = resolve_model_path(model_path)
    if src.gguf_file:
        raise ConfigError(
            f"--update-card writes a Hugging Face model folder's README.md; {src.describe()} is a GGUF "
            f"file (export it to a folder first, or leave --update-card out)"
        )
    folder = Path(src.folder)
    if is_hub_id(model_path) or in_hub_cache(folder):
        return folder, Path(out) / "model_card"
    check_card_path(folder / CARD)
    return folder, None
