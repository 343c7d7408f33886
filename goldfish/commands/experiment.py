"""``goldfish experiment``: run a grid of prepare -> train -> eval cells and aggregate them into one report."""

from __future__ import annotations

import argparse
import fnmatch
import sys
import time

DESCRIPTION = """\
Run an experiment: every cell (arm x grid point) prepares its data (shared between cells with the same data
config), trains, evaluates, and writes <out>/cells/<cell>/DONE. Rerunning skips finished cells, so a killed run
redoes only the cell it was in; a cell started with another config is refused (--rerun-stale reruns it and
replaces the old cell when the new one is done). Shards (--only) of one experiment may run at once into one
folder: each cell runs in one of them, the others wait for it.
Then <out>/results.csv, results.json, summary.json and report.md (+ plots).

examples:
  goldfish experiment experiments/default.yaml                 # the demo: standard vs Goldfish vs control
  goldfish experiment experiments/default.yaml out=runs/demo2 train.schedule.epochs=6
  goldfish experiment experiments/k_sweep.yaml --list          # cells and their state
  goldfish experiment k_sweep --list                           # the same shipped config by name, from any folder
  goldfish experiment experiments/size_sweep.yaml --only '*size=1M*'   # one size: tuning cells first
  goldfish experiment experiments/paper/axonn_size_sweep.yaml --dry-run
  goldfish experiment experiments/paper/tinyllama_1b_pretrain.yaml --dry-run --world-size 64

config keys (YAML or key=value):
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..config import describe
    from ..experiment import ExperimentConfig

    parser.description = DESCRIPTION + "\n".join(describe(ExperimentConfig))
    parser.add_argument(
        "config",
        help="experiment YAML (e.g. experiments/default.yaml), or a shipped experiment's "
        "name (default, k_sweep, paper/llama2_7b_extreme: from any folder)",
    )
    parser.add_argument("overrides", nargs="*", help="key=value overrides (e.g. out=runs/x train.seed=1)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate every cell, the parallel layout and print memory/time estimates; train nothing",
    )
    parser.add_argument(
        "--world-size",
        type=int,
        default=None,
        help="devices per cell for --dry-run (default: hardware.gpus of each cell)",
    )
    parser.add_argument("--list", action="store_true", help="list the cells and their state, then exit")
    parser.add_argument("--only", default=None, help="run only cells whose id matches this glob (e.g. 'goldfish*')")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="aggregate the finished cells and rewrite results and report as a full run does at its "
        "end, without running anything",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--rerun-stale",
        action="store_true",
        help="rerun cells started with a different config from scratch, each replacing its old "
        "cell only when done (default: refuse to run)",
    )


def run(args: argparse.Namespace) -> int:
    from ..config import find_config
    from ..errors import ConfigError, UserError
    from ..experiment import default_pipeline, load_experiment, plan_cells, run_experiment
    from ..experiment.plan import StudyFiles
    from ..experiment.runner import describe_plans, report_only
    from ..experiment.sections.headline import headline_table, regime
    from ..experiment.sections.paper import paper_table
    from ..hardware import apply_threads
    from ..io import read_json

    cfg = load_experiment(find_config(args.config, "experiments"), args.overrides)
    if args.world_size is not None and args.world_size < 1:
        raise UserError(f"--world-size={args.world_size} must be >= 1")
    pipeline = default_pipeline()
    every = plan_cells(cfg, pipeline)
    plans = every
    if args.only:
        plans = [p for p in plans if fnmatch.fnmatch(p.cell.id, args.only)]
        if not plans:
            raise UserError(f"--only {args.only!r} matches no cell; see the cell ids with --list")
    if args.list:
        print(describe_plans(plans))
        return 0
    if args.dry_run:
        return _dry_run(cfg, plans, args.world_size)
    files = StudyFiles(cfg.out_dir)
    if args.report_only:  # what a full run writes at its end, from the cells finished so far (--only runs nothing)
        results = report_only(cfg, every, pipeline)
    else:
        start = time.perf_counter()
        apply_threads(cfg.threads)  # unset: physical cores (torch's default oversubscribes shared cores)
        only = (lambda cid: fnmatch.fnmatch(cid, args.only)) if args.only else None
        run_experiment(cfg, pipeline, progress=not args.no_progress, only=only, rerun_stale=args.rerun_stale)
        print(f"experiment {cfg.name}: {len(plans)} cells in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        results = read_json(files.results)
    if not results["cells"]:
        raise ConfigError(f"no finished cells in {cfg.out_dir}; run the experiment first")
    print(regime(results))
    print(headline_table(results, markdown=False))
    paper = paper_table(results, markdown=False) if cfg.paper_numbers else None
    if paper:
        print("\nbeside the paper (Hans et al. 2024, Fig. 1: Llama-2-7B, 100 articles x 100 epochs):")
        print(paper)
    print(f"\nreport: {files.report}   summary: {files.summary}   table: {files.table}")
    return 0


def _dry_run(cfg, plans, world_size: int | None) -> int:
    from ..errors import ConfigError
    from ..experiment.dryrun import dry_run, format_estimates, preparation_needs, study_time

    rows, problems = dry_run(cfg, plans, world_size)
    print(f"experiment {cfg.name}: {len(plans)} cells, every config valid")
    if rows:
        print(format_estimates(rows))
    for line in preparation_needs(cfg, plans) + study_time(cfg, plans):
        print(line)
    if problems:
        raise ConfigError("; ".join(problems))
    return 0
