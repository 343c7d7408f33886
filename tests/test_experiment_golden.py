"""The study outputs of three tiny sweeps, recomputed from their cells' files, against the pinned ones.

``tests/golden/experiments`` holds, per sweep (``demo``, ``extreme``, ``size_sweep``: see ``experiment_goldens.py``),
what its report, results and summary are computed from (the cells' files and the prepared data of a real run, without
weights) and the outputs the code wrote before the experiment became one pipe of sections. Recomputing them must give
the same report, byte for byte, the same table and summary, and the same results -- which since then also hold the
experiment's config, the plots' names and the example windows (the report renders from results.json alone), name
every field of a cell summary (``null`` where the cell did not compute it, where it used to be left out) and no longer
hold the session's wall time (``--report-only`` writes what a full run writes).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from pathlib import Path

import pytest
from eval_fixtures import schema_fields
from experiment_goldens import GOLDEN, SWEEPS, normalised, outputs, unpack
from tolerances import U64, rounding

import goldfish.experiment
from goldfish.experiment.report import render
from goldfish.experiment.summary import CellSummary

# the results are recomputed by numpy reductions that may add in another order on another machine (SIMD width):
# each value accumulates at most a bootstrap's 1000 rounded terms
REL = rounding(1000, U64)


ADDED = {"results.json.config", "results.json.plots", "results.json.examples"}  # new top-level blocks
REMOVED = {"results.json.wall_time_s"}
ABSENT = "<absent>"


def same(a, b, where: str = "") -> list[str]:
    """Where a recomputed JSON value ``a`` differs from the pinned ``b`` (numbers: beyond ``REL``); [] when they
    agree. A key only ``a`` has is a difference unless it is null or in :data:`ADDED`; one only ``b`` has unless it
    is in :data:`REMOVED`."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in dict.fromkeys([*a, *b]):
            here = f"{where}.{k}"
            if k not in b and (a[k] is None or here in ADDED) or k not in a and here in REMOVED:
                continue
            out += same(a.get(k, ABSENT), b.get(k, ABSENT), here)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, where)]
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return [] if a == b or math.isclose(a, b, rel_tol=REL, abs_tol=0.0) else [f"{where}: {a!r} vs {b!r}"]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


def _csv(text: str) -> list[dict]:
    def value(v: str):
        try:
            return float(v)
        except ValueError:
            return v

    return [{k: value(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(text))]


@pytest.fixture(scope="module", params=SWEEPS)
def recomputed(request, tmp_path_factory) -> tuple[str, dict[str, str]]:
    """(sweep, {output file: text with the folder as ROOT}) recomputed from the sweep's archive by today's code."""
    folder = unpack(GOLDEN / f"{request.param}.tar.xz", tmp_path_factory.mktemp(request.param) / "exp")
    return request.param, {name: normalised(text, folder) for name, text in outputs(folder).items()}


def test_the_study_outputs_are_the_pinned_ones(recomputed):
    sweep, found = recomputed
    pinned = {name: (GOLDEN / sweep / name).read_text(encoding="utf-8") for name in found}
    assert found["report.md"] == pinned["report.md"]  # every table, byte for byte
    assert (
        list(csv.reader(io.StringIO(found["results.csv"])))[0]
        == list(csv.reader(io.StringIO(pinned["results.csv"])))[0]
    )  # the same columns in the same order
    assert same(_csv(found["results.csv"]), _csv(pinned["results.csv"])) == []
    for name in ("results.json", "summary.json"):
        assert same(json.loads(found[name]), json.loads(pinned[name]), name) == []


def test_the_report_renders_from_results_json_alone(recomputed):
    _, found = recomputed
    assert render(json.loads(found["results.json"])) == found["report.md"]


def _documented() -> dict[str, set[str]]:
    """goldfish/experiment/SCHEMA.md: section title -> field names listed in its table."""
    return schema_fields(Path(goldfish.experiment.__file__).parent / "SCHEMA.md")


def test_results_follow_the_schema(recomputed):
    """Every field a real run's results.json, results.csv and summary.json hold is documented in
    goldfish/experiment/SCHEMA.md, and the schema's cell fields are exactly the typed summary's."""
    _, found = recomputed
    doc, results = _documented(), json.loads(found["results.json"])
    axes = set(results["axes"])
    assert results["schema"] == "goldfish-experiment/1"
    assert set(results) <= doc["top level"]
    summary_fields = {f.name for f in dataclasses.fields(CellSummary)} - {"values"}
    assert summary_fields == doc["cells"]  # the typed summary and its documentation agree
    for cell in results["cells"]:
        assert set(cell) - axes == summary_fields
    assert set(csv.DictReader(io.StringIO(found["results.csv"])).fieldnames) - axes <= doc["rows"]
    if results["tune"]:
        assert set(results["tune"]) <= doc["tune"]
    if results["scaling"]:
        assert set(results["scaling"]) <= doc["scaling"]
        assert set().union(*map(set, results["scaling"]["rows"])) <= doc["scaling.rows"]
    assert set().union(set(), *map(set, results["paired"])) - axes <= doc["paired"]
    assert set().union(set(), *map(set, results["paired_axis"])) - axes <= doc["paired_axis"]
    assert set().union(set(), *map(set, results["examples"])) <= doc["examples"]
    assert set(results["runs"]) <= doc["runs"]
    summary = json.loads(found["summary.json"])
    entries = [v for k, v in summary.items() if k not in ("blind_auc", "blind_auc_ci", "paired", "readings")]
    assert entries and all(set(e) == doc["summary.json"] for e in entries)
    assert summary["readings"] and set().union(*map(set, summary["readings"])) <= doc["summary.json readings"]
