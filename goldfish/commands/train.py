"""``goldfish train``: train a Llama with the standard or Goldfish loss, on one CPU or many GPUs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..config import describe
from ..errors import UserError
from ..ownership import is_main_process

DESCRIPTION = """\
Train a Llama-architecture model on prepared data (goldfish prepare) with the standard or Goldfish loss.
Config: a YAML file (experiments/train_*.yaml) plus key=value overrides, which win over the file. The run folder
(out=) receives config.yaml, metrics.jsonl (one line per step), checkpoints/, model/ (Hugging Face format with the
tokenizer and a README.md model card), summary.json and fingerprint.json; with logging.tensorboard=true also
tensorboard/ (event files), with logging.wandb=true wandb/ (an offline W&B run unless logging.wandb_mode=online).
A killed run continues exactly where its last checkpoint left off (checkpoint.resume=auto); a rerun into a run
folder with a different data, model, loss, optimizer, schedule, precision, seed or code version is refused (--fresh
trains in a new folder, --overwrite replaces the old run).

examples:
  goldfish train experiments/train_tiny.yaml
  goldfish train train_tiny                                              # the same shipped config, from any folder
  goldfish train experiments/train_tiny.yaml loss.type=goldfish loss.goldfish.k=4 out=runs/tiny_goldfish
  goldfish train experiments/train_tiny.yaml optim.lr=1e-3 --fresh      # runs/train_tiny_2 (keeps runs/train_tiny)
  goldfish train experiments/train_tiny.yaml model.name=llama-10M precision=bf16 schedule.max_steps=200
  goldfish train data.path=data/prepared/wikipedia_demo model.path=/models/smollm2 optim.lr=1e-4
  torchrun --nproc_per_node 2 -m goldfish train experiments/train_tiny.yaml parallel.fsdp=true
  accelerate launch --num_processes 2 -m goldfish train experiments/train_tiny.yaml    # GPUs (CPUs: add --multi_gpu)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..train_config import TrainConfig

    parser.add_argument(
        "config",
        nargs="?",
        default=None,
        help="training config: a YAML file, or a shipped config's name (train_tiny = "
        "experiments/train_tiny.yaml, from any folder); optional: a key=value-only run starts "
        "from the defaults",
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="override config keys (e.g. optim.lr=3e-4)")
    fresh = parser.add_mutually_exclusive_group()
    fresh.add_argument(
        "--fresh",
        action="store_true",
        help="if out= already holds a run, train in a new folder beside it (out_2, out_3, ...)",
    )
    fresh.add_argument(
        "--overwrite",
        action="store_true",
        help="if out= already holds a training run, replace it by a new one (built beside it and "
        "swapped in at its first checkpoint; any other folder is refused)",
    )
    parser.epilog = "config keys:\n" + "\n".join(describe(TrainConfig))


def run(args: argparse.Namespace) -> int:
    from ..config import find_config, load_config, split_arguments
    from ..hardware import apply_threads
    from ..run_folder import TrainRun
    from ..train import train
    from ..train_config import TrainConfig

    path, overrides = split_arguments([args.config, *args.overrides] if args.config else args.overrides)
    cfg = load_config(TrainConfig, find_config(path, "experiments") if path else None, overrides)
    check_accelerate_launch(cfg.precision)
    apply_threads(cfg.threads)  # unset: physical cores per process (torch's default oversubscribes shared cores)
    if args.fresh:
        cfg.out = str(fresh_folder(Path(cfg.out)))
    done = TrainRun(train(cfg, replace=args.overwrite))
    if done.summary.is_file() and is_main_process():  # one line per run, not one per torchrun/accelerate process
        print(f"trained: {done.model}  (summary: {done.summary})")
    return 0


def check_accelerate_launch(precision: str) -> None:
    """Under ``accelerate launch`` (it sets ``ACCELERATE_MIXED_PRECISION``), refuse what it was asked for but would
    not happen: several processes from its one-process launcher (``--num_processes 2`` on a machine without GPUs and
    without ``--multi_gpu``: it sets ``MASTER_ADDR`` but starts one process), or a ``--mixed_precision`` other than
    the config's ``precision`` (the config decides the precision, as under torchrun)."""
    mixed = os.environ.get("ACCELERATE_MIXED_PRECISION")
    if mixed is None:
        return
    if "MASTER_ADDR" in os.environ and "WORLD_SIZE" not in os.environ:
        raise UserError(
            "accelerate launch started one process although --num_processes asked for several (its "
            "one-process launcher, chosen on machines without GPUs); add --multi_gpu, which starts them "
            "with torchrun (gloo on CPUs): accelerate launch --multi_gpu --num_processes 2 -m goldfish "
            "train ..."
        )
    if mixed not in ("no", precision):
        raise UserError(
            f"accelerate launch --mixed_precision {mixed} does not set goldfish train's precision "
            f"(now {precision}); set precision=bf16 or precision=fp32 in the config or as an override, "
            f"and leave --mixed_precision out"
        )


def fresh_folder(out: Path) -> Path:
    """The folder a ``--fresh`` run trains in: ``out`` itself when it holds nothing, else the first free ``out_2``,
    ``out_3``, ..."""
    from ..ownership import check_target

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UserError(
            "--fresh chooses the run folder in one process only; under torchrun give a new out= folder instead"
        )
    out = check_target(out)
    if not out.exists() or not any(out.iterdir()):
        return out
    n = 2
    while out.with_name(f"{out.name}_{n}").exists():
        n += 1
    fresh = out.with_name(f"{out.name}_{n}")
    print(f"{out} holds a run; training in {fresh}", file=sys.stderr)
    return fresh
