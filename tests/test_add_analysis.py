"""ARCHITECTURE.md's "Where to add ... a per-cell analysis", done: one module defining an ``Analysis`` and its line in
``ANALYSES``, nothing else. In a fresh interpreter (the phases, the cell summary, summary.json's keys and the report
sections are built from the registry when the experiment package is imported) a toy analysis joins the registry, then
an experiment of fake phases (``tests/test_experiment_runner.py``) runs it after evaluation, and its number reaches the
cell summary, ``results.json``, ``summary.json`` and its report section, right after the one it names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# the "module": an analysis writing the length of its cell's id, read back and rendered
SCRIPT = r"""
import dataclasses, sys
sys.path.insert(0, sys.argv[1])
import goldfish.experiment.analyses as registry
from goldfish.experiment.analyses import Analysis, Section
from goldfish.io import atomic_write_json, read_json


def toy_file(folder):
    return folder.dir / "toy.json"


def write_toy(plan, model):
    atomic_write_json(toy_file(plan), {"letters": len(plan.cell.id)})


@dataclasses.dataclass
class ToySummary:
    toy_letters: int | None = None


def collect(plan):
    found = toy_file(plan)
    return ToySummary(read_json(found)["letters"] if found.is_file() else None)


def render(results, cells):
    return "## Toy letters\n\n" + "".join(f"- {c.cell}: {c.toy_letters}\n" for c in cells)


TOY = Analysis(name="toy", output=toy_file, applies=lambda plan: True, run=write_toy, part=ToySummary,
               collect=collect, summary_keys=("toy_letters",), sections=(Section(after="repetition1", render=render),))
registry.ANALYSES = (*registry.ANALYSES, TOY)  # its line in ANALYSES
# the experiment package as a new process imports it after that line (the registry, the config and the plan kept)
for name in [m for m in sys.modules if m.startswith("goldfish.experiment") and not m.startswith(
        ("goldfish.experiment.analyses", "goldfish.experiment.config", "goldfish.experiment.plan"))]:
    del sys.modules[name]

from pathlib import Path
from goldfish.experiment import run_experiment
from goldfish.experiment.phases import PHASES
from test_experiment_runner import Calls, experiment, make_pipeline

names = [p.name for p in PHASES]
assert names.index("eval") < names.index("toy") < names.index("attacks"), names
cfg = experiment(Path(sys.argv[2]), grid={"train.model": ["tiny"]})
pipeline = dataclasses.replace(make_pipeline(Calls()), analyses=(TOY,))  # the fakes run only this analysis
print(run_experiment(cfg, pipeline, progress=False))
"""


@pytest.mark.integration  # a subprocess: a fresh interpreter, the experiment package imported after the line
def test_an_analysis_is_one_module_and_its_registry_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(TESTS), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=TESTS.parent,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = Path(done.stdout.strip().splitlines()[-1])
    cells = {"standard__model=tiny": 20, "goldfish__model=tiny": 20}  # len() of each cell id
    for cell, letters in cells.items():
        assert json.loads((out / "cells" / cell / "toy.json").read_text()) == {"letters": letters}  # its phase ran
    results = json.loads((out / "results.json").read_text())
    assert {c["cell"]: c["toy_letters"] for c in results["cells"]} == cells  # its part of the cell summary
    summary = json.loads((out / "summary.json").read_text())
    assert {arm: summary[arm]["toy_letters"] for arm in ("standard", "goldfish")} == {"standard": 20, "goldfish": 20}
    report = (out / "report.md").read_text()
    assert "## Toy letters\n\n- standard__model=tiny: 20\n- goldfish__model=tiny: 20\n" in report
