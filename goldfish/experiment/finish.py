"""The end of every run of an experiment -- a full run, a shard, ``--report-only``: the finished cells that count
become ``results.json``, ``results.csv``, ``summary.json``, the plots, ``experiment.yaml`` and ``report.md``.

One function for all of them, so ``--report-only`` writes exactly what a full run writes: the cells that count are
:func:`goldfish.experiment.tune.active`'s (with ``tune``, the tuning cells and those at a chosen value), the tuning
choice is :func:`goldfish.experiment.tune.summary`'s, and nothing depends on the run that calls it.
"""

from __future__ import annotations

import json

from ..config import save_config
from ..io import atomic_write_json, atomic_write_text, strict_json
from .aggregate import aggregate, summary_of, to_csv
from .config import ExperimentConfig
from .html_report import write_html
from .plan import CellPlan, StudyFiles
from .report import write_report
from .tune import active
from .tune import summary as tune_summary


def finish(cfg: ExperimentConfig, plans: list[CellPlan]) -> dict:
    """Aggregate every cell of ``plans`` that counts and write the study's files; returns the results."""
    files = StudyFiles(cfg.out_dir)
    # as results.json holds them (strict JSON: a non-finite number is null), which is all the report reads
    results = json.loads(strict_json(aggregate(cfg, active(cfg, plans), tune_summary(cfg, plans))))
    atomic_write_json(files.results, results)
    atomic_write_text(files.table, to_csv(results["rows"]))
    atomic_write_json(files.summary, summary_of(results))
    save_config(cfg, files.config)  # with the report: the config of these results
    write_report(results, files.report)
    write_html(results, files.report.parent)  # report.html beside report.md, from the same results
    return results
