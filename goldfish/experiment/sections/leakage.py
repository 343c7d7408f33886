"""The dropped-token leakage audit: each cell against the control of its grid point, on the member positions the
Goldfish mask drops / keeps and on held-out text, as a difference in differences (attacks.json ``leakage``), with
its validity beside it -- the placebo (the mask applied to nonmembers: ~0 unless the held-out text is no valid
reference for the mask's positions, then the reading is "inconclusive"), the minimum detectable leak at the design's
size, and positive controls of a known supervised fraction (a standard arm: 1; another arm's mask,
``leakage_by_mask``: e.g. ~3/4 for a Goldfish mask of another seed) -- and a line for each grid point without a
control."""

from __future__ import annotations

from goldfish.eval.tables import did_text, fmt, markdown_table

from ..config import CONTROL
from ..summary import CellSummary, Study, cells_of, one_per_arm


def compute(study: Study) -> dict:
    return {}


def _mask_label(own: str, audit: dict) -> str:
    """``goldfish (trained on 0 %)``: whose mask's positions, and the share of them the cell trained on."""
    f = audit.get("supervised_fraction")
    return own + ("" if f is None else f" (trained on {fmt(f, 'pct')})")


def _leakage_rows(label: str, mask: str, leakage: dict, kept: bool = True) -> list[list[str]]:
    """Per position set (dropped, and kept when asked): the DiD in accuracy and loss, with the placebo, the minimum
    detectable leak and the reading on the dropped positions."""
    rows = []
    for positions in ("dropped", "kept") if kept else ("dropped",):
        did = (leakage.get("did") or {}).get(positions) or {}
        dacc, dloss = did.get("accuracy") or {}, did.get("loss") or {}
        docs = (f"{fmt(dloss.get('n_member_documents'), 'int')} / {fmt(dloss.get('n_heldout_documents'), 'int')}"
                if dloss else "-")
        placebo, mde, reading = (leakage.get(k) or {} for k in ("placebo", "mde", "reading"))
        dropped = positions == "dropped"
        rows.append([label, _mask_label(mask, leakage) if dropped else "", positions, docs, did_text(dacc, "pct"),
                     did_text(placebo.get("accuracy"), "pct") if dropped else "", did_text(dloss),
                     did_text(placebo.get("loss")) if dropped else "",
                     (f"{fmt(mde.get('accuracy'), 'pct')} / {fmt(mde.get('loss'))}" if mde else "-") if dropped else "",
                     (" / ".join(reading.get(m, "-") for m in ("accuracy", "loss")) if reading else "-") if dropped
                     else ""])
    return rows


def _mask_of(c: CellSummary, cells: list[CellSummary], point: tuple, axes: list[str]) -> str:
    """Whose mask a cell's own audit reads: its own (a Goldfish cell) or the first Goldfish arm's of its point."""
    if c.k_baseline:
        return c.arm
    return next((o.arm for o in cells if o.k_baseline and tuple(o.values.get(a) for a in axes) == point), "Goldfish")


def leakage_lines(results: dict) -> list[str]:
    """The dropped-token leakage audit: each cell against the control of its grid point (a table with the audit's
    placebo, minimum detectable leak and reading, positive controls on other arms' masks below their cell), and a
    line for each grid point without a control; empty when no cell has an attacks.json."""
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
        rows += _leakage_rows(label, _mask_of(c, cells, point(c), axes), c.leakage)
        for mask, audit in (c.leakage_by_mask or {}).items():
            rows += _leakage_rows(label, mask, audit, kept=False)
    for values in dict.fromkeys(point(c) for c in arms if point(c) not in controls):
        where = " ".join(f"{a}={v}" for a, v in zip(axes, values))
        notes.append(f"No control cell {f'at {where}' if where else 'in this experiment'} (`control: false`): "
                     "no leakage audit there.")
    lines = ["## Dropped-token leakage audit (difference in differences)", ""]
    if rows:
        lines += [markdown_table(["cell", "positions of the mask of (share the cell trained on)", "positions",
                                  "documents members / held-out", "accuracy DiD", "placebo: accuracy DiD on nonmembers",
                                  "loss DiD", "placebo: loss DiD on nonmembers",
                                  "minimum detectable DiD accuracy / loss", "reading accuracy / loss"], rows), "",
                  "Top-1 accuracy and loss (-log p, nats) of the cell minus the control of its grid point (a model "
                  "that never saw the text) on the member positions a Goldfish mask drops / keeps, minus the same "
                  "difference on every held-out (nonmember) target: training moves a model on text it never saw "
                  "as well, and only the excess on the dropped positions is leakage (95 % bootstrap CI and p, "
                  "resampling member and held-out documents; arm - control on the members alone is in results.json). "
                  "A DiD in accuracy above 0 (in loss below 0) whose CI excludes 0 is a leak: the dropped tokens "
                  "predicted better than the shift explains. Validity: the placebo is the same audit with the mask "
                  "applied to nonmembers (half of them on the positions it would drop, against the other half), "
                  "where no document was trained on: it must be ~0; where its CI excludes 0 the held-out text is no "
                  "valid reference for these positions and the reading is 'inconclusive'. The minimum detectable DiD "
                  "is 2.80 standard errors (a two-sided 5 % test with 80 % power at this design's size): 'none "
                  "detected' means no leak of that size or larger, not no leak. Positive controls: the share of the "
                  "audited positions the cell's own loss trained on is a known leak -- 0 % for a Goldfish arm on its "
                  "own mask (the audit proper), 100 % for a standard arm (memorisation), ~(1 - 1/k) for a Goldfish "
                  "arm of another mask seed on this mask's positions; the audit must detect those.", ""]
    return lines + [line for note in notes for line in (note, "")]


def render(results: dict) -> str:
    return "\n".join(leakage_lines(results))
