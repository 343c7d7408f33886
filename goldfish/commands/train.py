"""``goldfish train``: train a Llama with the standard or Goldfish loss, on one CPU or many GPUs."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import describe

DESCRIPTION = """\
Train a Llama-architecture model on prepared data (goldfish prepare) with the standard or Goldfish loss.
Config: a YAML file (experiments/train_*.yaml) plus key=value overrides, which win over the file. The run folder
(out=) receives config.yaml, metrics.jsonl (one line per step), checkpoints/, model/ (Hugging Face format with the
tokenizer) and summary.json. A killed run continues exactly where its last checkpoint left off (checkpoint.resume=auto).

examples:
  goldfish train experiments/train_tiny.yaml
  goldfish train experiments/train_tiny.yaml loss.type=goldfish loss.goldfish.k=4 out=runs/tiny_goldfish
  goldfish train experiments/train_tiny.yaml model.name=llama-10M precision=bf16 schedule.max_steps=200
  goldfish train data.path=data/prepared/wikipedia_demo model.path=/models/smollm2 optim.lr=1e-4
  torchrun --nproc_per_node 2 -m goldfish train experiments/train_tiny.yaml parallel.fsdp=true
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..train_config import TrainConfig

    parser.add_argument("config", nargs="?", default=None,
                        help="training config YAML (optional: a key=value-only run starts from the defaults)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="override config keys (e.g. optim.lr=3e-4)")
    parser.epilog = "config keys:\n" + "\n".join(describe(TrainConfig))


def split_arguments(config: str | None, overrides: list[str]) -> tuple[str | None, list[str]]:
    """A first positional that looks like ``key=value`` is an override, not a file."""
    if config is not None and "=" in config and not Path(config).is_file():
        return None, [config, *overrides]
    return config, list(overrides)


def run(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..train import train
    from ..train_config import TrainConfig

    path, overrides = split_arguments(args.config, args.overrides)
    cfg = load_config(TrainConfig, path, overrides)
    out = train(cfg)
    summary = out / "summary.json"
    if summary.is_file():
        print(f"trained: {out / 'model'}  (summary: {summary})")
    return 0
