"""Every membership attack over each arm's runs: its mean AUC and TPR at 1 % and 0.1 % FPR with the 95 % t interval
over runs, per grid point, where the cells store every attack's TPRs (``mia_tprs``) and there are two or more runs.
The readings use each arm's strongest attack by mean AUC (the rule stated before the run); this table shows whether
another attack is stronger where an adversary needs few false positives (low FPR, Carlini et al. 2022). A TPR at an
FPR that the nonmembers cannot resolve (fewer than 1 / FPR) is left out."""

from __future__ import annotations

from goldfish.eval.stats import t_over_runs
from goldfish.eval.tables import fmt, markdown_section, markdown_table

from ..summary import CellSummary, Study
from .readings.comparison import NONMEMBERS_FOR, strongest
from .readings.rule import groups

TITLE = "Every membership attack over runs (mean AUC and TPR at low FPR)"
COLUMNS = (("auc", "AUC"), ("tpr_at_1pct_fpr", "TPR at 1 % FPR"), ("tpr_at_0_1pct_fpr", "TPR at 0.1 % FPR"))


def compute(study: Study) -> dict:
    return {}


def _value(c: CellSummary, attack: str, key: str) -> float | None:
    if key == "auc":
        return (c.mia_aucs or {}).get(attack)
    if int(c.nonmembers or 0) < NONMEMBERS_FOR[key]:
        return None
    return ((c.mia_tprs or {}).get(attack) or {}).get(key)


def _entry(d: dict, key: str, best: bool) -> str:
    if d["mean"] is None or d["ci_low"] is None:
        return "-"
    kind = "" if key == "auc" else "pct"
    scale, digits = (1, 3) if key == "auc" else (100, 1)
    text = f"{fmt(d['mean'], kind)} [{scale * d['ci_low']:.{digits}f}, {scale * d['ci_high']:.{digits}f}]"
    return f"**{text}**" if best else text


def arm_rows(point: dict, arm: str, runs: dict[str, CellSummary]) -> list[list[str]]:
    """One row per attack every run of the arm scored; the highest mean of each column in bold."""
    cells = list(runs.values())
    if len(cells) < 2 or not all(c.mia_tprs for c in cells):
        return []
    names = [n for n in cells[0].mia_aucs or {} if all((c.mia_aucs or {}).get(n) is not None for c in cells)]
    stats = {n: {k: t_over_runs([_value(c, n, k) for c in cells]) for k, _ in COLUMNS} for n in names}
    top = {k: strongest(runs, k) for k, _ in COLUMNS}
    read = strongest(runs)
    where = ", ".join(f"{a}={v}" for a, v in point.items()) or "-"
    return [
        [
            where,
            arm,
            f"{n} (read)" if n == read else n,
            str(len(cells)),
            *(_entry(stats[n][k], k, n == top[k]) for k, _ in COLUMNS),
        ]
        for n in names
    ]


def render(results: dict) -> str:
    rows = [r for point, arms in groups(results) for arm, runs in arms.items() for r in arm_rows(point, arm, runs)]
    if not rows:
        return ""
    head = ["grid point", "arm", "attack", "runs", *(label for _, label in COLUMNS)]
    keep = [i for i in range(len(head)) if i < 4 or any(r[i] != "-" for r in rows)]  # a column no run resolves: out
    return markdown_section(
        TITLE,
        markdown_table([head[i] for i in keep], [[r[i] for i in keep] for r in rows]),
        "Mean over each arm's runs with its 95 % Student t interval over runs; the highest mean of each column "
        "per arm in bold. (read): the attack the readings use, the arm's strongest by mean AUC (the rule stated "
        "before the run). A TPR the nonmembers cannot resolve (fewer than 1 / FPR of them) is left out (-; the "
        "column, where no arm has it).",
    )
