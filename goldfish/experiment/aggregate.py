"""Finished cells -> the study's results: ``results.json`` (schema ``goldfish-experiment/1``,
goldfish/experiment/SCHEMA.md), the rows of ``results.csv`` and ``summary.json``.

The results are the experiment's settings, one typed summary per finished cell
(:func:`goldfish.experiment.collect.summarize_cell`) and what each report section computes beyond them
(``compute(study)`` of every module in :data:`goldfish.experiment.sections.SECTIONS`, in report order: the blind
baseline, the size sweep's scaling block, the paired tests, the plots' file names, the example windows).
"""

from __future__ import annotations

import csv
import io
from typing import Any

from ..config import to_dict
from .collect import summarize_cell
from .config import ExperimentConfig
from .plan import CellPlan
from .sections import SECTIONS
from .sections.readings import derive as derive_readings
from .summary import CellSummary, Study, csv_keys, summary_keys

RESULTS_SCHEMA = "goldfish-experiment/1"
# per cell in every row of results.csv (the fields declared with summary_key(..., csv=n)), then the stratum's own
# columns (prefix_len, repetitions, n_windows, metrics)
ROW_CELL_KEYS = csv_keys()
# the headline numbers of a cell in summary.json: the summary fields declared with summary_key, by their places, then
# the analyses' summary_keys
SUMMARY_KEYS = summary_keys()


def rows_of(cells: list[dict], axes: list[str]) -> list[dict]:
    """Flatten cell summaries (``results.json`` entries) into the results.csv rows (cell x prefix length x
    repetition stratum)."""
    rows = []
    for c in cells:
        base = {"cell": c["cell"], "arm": c["arm"], **{a: c.get(a) for a in axes}}
        base.update({k: c.get(k) for k in ROW_CELL_KEYS})
        for s in c["strata"]:
            rows.append({**base, **s})
    return rows


def to_csv(rows: list[dict]) -> str:
    """The rows as CSV: the columns of the first row, then any new ones in order of appearance."""
    if not rows:
        return ""
    columns = list(rows[0])
    for r in rows[1:]:
        columns += [k for k in r if k not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    return buf.getvalue()


def summary_of(results: dict) -> dict[str, Any]:
    """summary.json: one entry per arm when each arm has a single cell (the demo), else one per cell; the blind
    baseline and the paired tests beside them."""
    cells = results["cells"]
    arms = [c["arm"] for c in cells]
    one_per_arm = len(set(arms)) == len(arms)
    summary: dict[str, Any] = {
        (c["arm"] if one_per_arm else c["cell"]): {k: c.get(k) for k in SUMMARY_KEYS} for c in cells
    }
    if results.get("blind_auc") is not None:
        summary.update(blind_auc=results["blind_auc"], blind_auc_ci=results["blind_auc_ci"])
    summary["paired"] = results["paired"]
    summary["readings"] = derive_readings(results)
    return summary


def aggregate(cfg: ExperimentConfig, plans: list[CellPlan], tune: dict | None = None) -> dict:
    """The results of the cells that count (``plans``: with ``tune``, the tuning cells and those at a chosen value;
    ``tune``: results.json's ``tune`` block), computed from their files; plots are drawn into the output folder."""
    done = [p for p in plans if p.done]
    cells: list[CellSummary] = [summarize_cell(p, cfg.mia_attack) for p in done]
    axes = list(plans[0].cell.values) if plans else []
    entries = [c.to_json() for c in cells]
    results: dict[str, Any] = {
        "schema": RESULTS_SCHEMA,
        "experiment": cfg.name,
        "description": cfg.description,
        "config": to_dict(cfg),
        "axes": axes,
        "arms": list(dict.fromkeys(p.cell.arm for p in plans)),
        "n_cells": len(plans),
        "n_done": len(done),
        "mia_attack": cfg.mia_attack,
        "cells": entries,
        "rows": rows_of(entries, axes),
        "missing": [p.cell.id for p in plans if not p.done],
        "start_model": next((p.start_model for p in plans if p.start_model), None),
        "control_mode": cfg.control_mode,
        "tune": tune,
    }
    study = Study(cfg, plans, done, cells, tune, results)
    for section in SECTIONS:
        results.update(section.compute(study))
    return results
