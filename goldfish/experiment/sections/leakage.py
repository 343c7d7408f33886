"""The dropped-token leakage audit: each cell against the control of its grid point, on the member positions the
Goldfish mask drops / keeps and on held-out text, as a difference in differences (attacks.json ``leakage``), and a
line for each grid point without a control."""

from __future__ import annotations

from goldfish.eval.tables import did_text, fmt, markdown_table, with_ci

from ..config import CONTROL
from ..summary import CellSummary, Study, cells_of, one_per_arm


def compute(study: Study) -> dict:
    return {}


def _leakage_rows(label: str, leakage: dict) -> list[list[str]]:
    """Per position set (dropped, kept): the members-only arm - control beside the held-out one and their
    difference in differences, for top-1 accuracy and loss."""
    rows = []
    for positions in ("dropped", "kept"):
        plain, did = leakage[positions], (leakage.get("did") or {}).get(positions) or {}
        acc, loss = plain.get("accuracy") or {}, plain["loss"]
        dacc, dloss = did.get("accuracy") or {}, did.get("loss") or {}
        held = f"{fmt(dloss.get('n_heldout_documents'), 'int')}" if dloss else "-"
        rows.append([label, positions, f"{fmt(loss['n_documents'], 'int')} / {held}",
                     f"{fmt(acc.get('arm'), 'pct')} / {fmt(acc.get('control'), 'pct')}",
                     with_ci(acc.get("diff"), acc.get("diff_ci_low"), acc.get("diff_ci_high"), "pct"),
                     fmt(dacc.get("heldout_diff"), "pct"), did_text(dacc, "pct"),
                     with_ci(loss["diff"], loss["diff_ci_low"], loss["diff_ci_high"]),
                     fmt(dloss.get("heldout_diff")), did_text(dloss)])
    return rows


def leakage_lines(results: dict) -> list[str]:
    """The dropped-token leakage audit: each cell against the control of its grid point, on the member positions
    the Goldfish mask drops / keeps and on held-out text, as a difference in differences (a table), and a line for
    each grid point without a control; empty when no cell has an attacks.json."""
    cells, axes = cells_of(results), results["axes"]
    arms = [c for c in cells if c.arm != CONTROL]
    if not any(c.tf_accuracy is not None for c in arms):  # no cell has an attacks.json
        return []

    def point(c: CellSummary) -> tuple:
        return tuple(c.values.get(a) for a in axes)

    controls = {point(c) for c in cells if c.arm == CONTROL}
    one = one_per_arm(cells)
    rows, notes = [], []
    for c in arms:
        label = c.label(axes, one)
        if point(c) not in controls:
            continue
        if not c.leakage:
            notes.append(f"{label}: no Goldfish mask on its data, so no dropped positions to audit.")
            continue
        rows += _leakage_rows(label, c.leakage)
    for values in dict.fromkeys(point(c) for c in arms if point(c) not in controls):
        where = " ".join(f"{a}={v}" for a, v in zip(axes, values))
        notes.append(f"No control cell {f'at {where}' if where else 'in this experiment'} (`control: false`): "
                     "no leakage audit there.")
    lines = ["## Dropped-token leakage audit (difference in differences)", ""]
    if rows:
        lines += [markdown_table(["cell", "positions", "documents members / held-out", "accuracy arm / control",
                                  "accuracy arm - control, members (old reading)", "accuracy arm - control, held-out",
                                  "accuracy DiD", "loss arm - control, members (old reading)",
                                  "loss arm - control, held-out", "loss DiD"], rows), "",
                  "Top-1 accuracy and loss (-log p, nats) of the cell and of the control of its grid point (a model "
                  "that never saw the text), token-weighted, on the member positions the Goldfish mask drops / "
                  "keeps (the same positions in every arm) and on every held-out (nonmember) target. Training moves "
                  "a model on text it never saw as well, so arm - control on the members alone (the old reading, "
                  "kept for comparison) mixes leakage with that shift. The audit is the difference in differences: "
                  "(arm - control on the member positions) - (arm - control on held-out text), with a 95 % "
                  "bootstrap CI and two-sided p-value resampling member and held-out documents. On dropped "
                  "positions a DiD in accuracy above 0 (in loss below 0) with a CI excluding 0 means the model "
                  "predicts the tokens it was never trained on better than its general shift explains: leakage "
                  "through the context (or, for a standard arm, plain memorisation).", ""]
    return lines + [line for note in notes for line in (note, "")]


def render(results: dict) -> str:
    return "\n".join(leakage_lines(results))
