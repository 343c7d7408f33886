"""benchmarks/same_numbers.py --against: a run compared with a committed one over the values both hold -- equal
values counted, a changed value a difference, a field the newer code adds (absent or None in the committed run) listed
apart, and ``blind`` (keyed by the prepared folder's path) compared by content."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("same_numbers", REPO / "benchmarks" / "same_numbers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_values_both_runs_hold_are_compared_and_new_fields_listed_apart():
    m = _module()
    committed = {"a": 1.5, "cells": [{"auc": 0.6, "note": None}, {"auc": 1.0}], "time_s": 3.0}
    newer = {"a": 1.5, "cells": [{"auc": 0.6, "note": "n"}, {"auc": 1.0, "tprs": {"x": 0.1}}], "time_s": 9.0}
    assert m.shared_differences(m.numbers(committed), m.numbers(newer)) == (3, [], ["cells[0].note", "cells[1].tprs"])
    changed = {**newer, "cells": [{"auc": 0.61, "note": "n"}, {"auc": 1.0}]}
    assert m.shared_differences(m.numbers(committed), m.numbers(changed)) == (
        2,
        ["cells[0].auc: 0.6 != 0.61"],
        ["cells[0].note"],
    )
    blind = [m._blind_by_content({"blind": {path: {"auc": 0.613}}}) for path in ("runs/demo/p/1", "/x/p/2")]
    assert blind[0] == blind[1] == {"blind": {"<prepared>": {"auc": 0.613}}}
