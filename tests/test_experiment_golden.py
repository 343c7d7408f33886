"""The study outputs of three tiny sweeps, recomputed from their cells' files, against the pinned ones.

``tests/golden/experiments`` holds, per sweep (``demo``, ``extreme``, ``size_sweep``: see ``experiment_goldens.py``),
what its report, results and summary are computed from (the cells' files and the prepared data of a real run, without
weights) and the outputs the code wrote then. Recomputing them must give the same report, byte for byte, and the same
results: a refactor of how the study is computed and rendered changes no table and no number.
"""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from experiment_goldens import GOLDEN, SWEEPS, normalised, outputs, unpack
from tolerances import U64, rounding

# the results are recomputed by numpy reductions that may add in another order on another machine (SIMD width):
# each value accumulates at most a bootstrap's 1000 rounded terms
REL = rounding(1000, U64)


def same(a, b, where: str = "") -> list[str]:
    """Where two JSON values differ (numbers: beyond ``REL``); [] when they agree."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = list(dict.fromkeys([*a, *b]))
        return [d for k in keys for d in (same(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{where}.{k}"))]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f"{where}[{i}]")]
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


@pytest.mark.parametrize("sweep", SWEEPS)
def test_the_study_outputs_are_the_pinned_ones(sweep, tmp_path):
    folder = unpack(GOLDEN / f"{sweep}.tar.xz", tmp_path / "exp")
    found = {name: normalised(text, folder) for name, text in outputs(folder).items()}
    pinned = {name: (GOLDEN / sweep / name).read_text(encoding="utf-8") for name in found}
    assert found["report.md"] == pinned["report.md"]  # every table, byte for byte
    assert list(csv.reader(io.StringIO(found["results.csv"])))[0] == \
        list(csv.reader(io.StringIO(pinned["results.csv"])))[0]  # the same columns in the same order
    assert same(_csv(found["results.csv"]), _csv(pinned["results.csv"])) == []
    for name in ("results.json", "summary.json"):
        assert same(json.loads(found[name]), json.loads(pinned[name]), name) == []
