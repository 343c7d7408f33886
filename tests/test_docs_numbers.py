"""The README's quick-start numbers are the committed results of `make demo` (experiments/results/default/), so a
number the docs quote can never drift from the run that made it: each "ours" cell of the table, the paired test and
the leakage audit quoted under it, formatted from `summary.json` the way the README writes them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "experiments" / "results" / "default"


@pytest.fixture(scope="module")
def summary() -> dict:
    return json.loads((RESULTS / "summary.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def quick_start() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Quick start"):text.index("## Goldfish Loss in your code")]
    return "\n".join(" ".join(line.split()) for line in section.splitlines())  # one space between words


def _pct(x: float, digits: int = 0) -> str:
    return f"{100 * x:.{digits}f} %"


def _signed(x: float, digits: int = 1) -> str:
    return f"{x:+.{digits}f}".replace("-", "−")


def _row(quick_start: str, label: str) -> list[str]:
    line = next(line for line in quick_start.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


@pytest.mark.parametrize("arm, label", [("standard", "standard"), ("goldfish", "Goldfish k=4, h=13"),
                                        ("control", "control (untouched SmolLM2)")])
def test_every_table_cell_is_the_committed_run(summary, quick_start, arm, label):
    s = summary[arm]
    exact, rouge, loss, accuracy, auc = _row(quick_start, label)
    k = round(s["exact_match_rate"] * s["n_windows"])
    assert exact.startswith(f"{_pct(s['exact_match_rate'])} ({k}/{s['n_windows']})")
    assert rouge.startswith(f"{s['rouge_l_paper']:.3f} /")
    assert loss == f"{s['heldout_loss']:.3f}"
    assert accuracy == f"{_pct(s['tf_kept_accuracy'], 1)} / {_pct(s['tf_dropped_accuracy'], 1)}"
    assert auc.startswith(f"{s['mia_auc']:.3f}")


def test_the_quoted_tests_are_the_committed_run(summary, quick_start):
    quick_start = " ".join(quick_start.split())  # the prose wraps anywhere
    pair = next(p for p in summary["paired"] if {p["a"], p["b"]} == {"standard", "goldfish"})
    p = pair["exact_match"]["p_value"]
    mantissa, exponent = f"{p:.1e}".split("e")
    assert f"p = {mantissa}e−{int(exponent[1:])}" in quick_start
    audit = summary["goldfish"]["leakage"]
    did = audit["did"]["dropped"]["accuracy"]
    assert (f"{_signed(100 * did['did'])} points [{_signed(100 * did['ci_low'])}, {_signed(100 * did['ci_high'])}]"
            in quick_start)
    assert f"it would see {100 * audit['mde']['accuracy']:.1f}" in quick_start
    assert f"its placebo {_signed(100 * audit['placebo']['accuracy']['did'])}" in quick_start


def test_the_committed_run_says_where_it_came_from(summary):
    """Precision and device are in the committed summary, and the README quotes the same resolved precisions."""
    s = summary["standard"]
    assert s["precision"] in ("bf16", "fp32") and s["eval_precision"] == "fp32"
    assert re.search(r"`precision: auto` → " + s["precision"], (REPO / "README.md").read_text(encoding="utf-8"))
