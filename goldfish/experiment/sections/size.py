"""Memorisation vs model size (Carlini et al. 2022), for experiments with a ``size`` grid axis: the data and tuning,
then per (arm, size) exact match per exposure stratum with Wilson intervals, the loss gap against the control of the
same size (also split by the positions the Goldfish mask keeps / drops), held-out loss, and the log-linear fits over
the sizes off the floor. Computed by :mod:`goldfish.experiment.scaling` into ``results.json``'s ``scaling`` block.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from goldfish.eval.tables import markdown_section, markdown_table, pct

from ...data import load_prepared
from ..scaling import MIN_FIT_POINTS, size_analysis
from ..summary import CellSummary, Study


def _tuning_only(cell: CellSummary, tune: dict | None) -> bool:
    """A tuning cell at a value that was not chosen: it informs the choice, not the comparison of the arms."""
    if not tune or cell.arm != "control":
        return False
    for group in tune["groups"]:
        if all(str(cell.values.get(a)) == str(v) for a, v in group["per"].items()):
            return group["chosen"] is not None and str(cell.values.get(tune["axis"])) != str(group["chosen"])
    return False


def target_share(data_dir: Path) -> dict[str, Any]:
    """How much of the training stream the targets are: member tokens x copies / training tokens (manifest)."""
    prepared = load_prepared(data_dir, verify=False)
    copies = sum(len(ids) * int(r) for ids, r in zip(prepared.members["input_ids"], prepared.members["repetitions"]))
    train = int(prepared.manifest["tokens"]["train"])
    return {"target_tokens": copies, "train_tokens": train, "target_share": copies / train if train else None}


def compute(study: Study) -> dict:
    """``scaling``: :func:`goldfish.experiment.scaling.size_analysis` of the cells that count (without the tuning
    cells at values that were not chosen) and the targets' share of each prepared folder; None without a size
    axis."""
    scaling = size_analysis([c for c in study.cells if not _tuning_only(c, study.tune)], study.axes)
    if scaling is not None:
        scaling["data"] = {str(d): target_share(d) for d in dict.fromkeys(p.data_dir for p in study.done)}
    return {"scaling": scaling}


def _split_gap_table(rows: list[dict], strata: list[int]) -> list[str]:
    """The loss gap on the positions the Goldfish mask keeps vs drops, per arm, size and stratum (report lines; none
    without a Goldfish mask on the data)."""
    def gap(v: dict, key: str) -> str:
        g = v.get(key)
        return f"{g['gap']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}]" if g else "-"

    table = []
    for r in sorted(rows, key=lambda r: (r["arm"], r["params"] or 0)):
        cells = [r["strata"].get(str(s)) or {} for s in strata]
        if r["arm"] != "control" and any(v.get("loss_gap_kept") for v in cells):
            table.append([r["arm"], r["size"], *(f"{gap(v, 'loss_gap_kept')} / {gap(v, 'loss_gap_dropped')}"
                                                 for v in cells)])
    if not table:
        return []
    return ["", "Loss gap split by the positions the experiment's Goldfish mask keeps / drops (every arm on the same "
            "positions; the nonmember side over every target, as in the leakage audit). A Goldfish arm never "
            "trains on its dropped positions: a dropped gap near 0 with a positive kept gap is the mask working; "
            "a dropped gap above 0 is what it learnt of those tokens from their context.", "",
            markdown_table(["arm", "size"] + [f"x{s}: kept / dropped" for s in strata], table)]


def scaling_markdown(results: dict) -> str | None:
    """The report's size-sweep section: data, tuning, per-size table, fits (None without a ``scaling`` block)."""
    scaling = results.get("scaling")
    if not scaling or not scaling.get("rows"):
        return None
    lines = []
    for folder, d in (scaling.get("data") or {}).items():
        lines.append(f"Targets: {d['target_tokens']:,} of {d['train_tokens']:,} training tokens "
                     f"({pct(d['target_share'])} %) in `{folder.rsplit('/', 1)[-1]}`.")
    exposures = {json.dumps(r["exposures"], sort_keys=True) for r in scaling["rows"]
                 if r["arm"] != "control" and r.get("exposures")}
    agree = all(r.get("exposures_agree") is not False for r in scaling["rows"])
    if exposures:
        lines.append("Exposures read in training, {labelled copies: [fewest, most] reads}: "
                     + "; ".join(sorted(exposures)) + (" (every cell agrees)." if agree else " (cells differ!)."))
    control_exp = {json.dumps(r["exposures"], sort_keys=True) for r in scaling["rows"]
                   if r["arm"] == "control" and r.get("exposures")}
    if control_exp:
        lines.append("The control's reads of the same targets: " + "; ".join(sorted(control_exp)) + ".")
    tune = results.get("tune")
    if tune:
        values = list(dict.fromkeys(v for g in tune["groups"] for v in g["losses"]))
        rows = [[", ".join(f"{k}={v}" for k, v in g["per"].items())]
                + [("**" if str(g["chosen"]) == v else "") + (f"{g['losses'][v]:.3f}" if g["losses"].get(v)
                   is not None else "-") + ("**" if str(g["chosen"]) == v else "") for v in values]
                for g in tune["groups"]]
        metric = "validation loss (documents never trained on and never reported)" \
            if tune.get("by") == "validation_loss" else "held-out loss (the nonmembers)"
        lines += ["", f"Tuning: the control's {metric} per {tune['axis']} (bold: chosen, lowest); the arms and "
                  "further seeds run at the chosen value only.", "",
                  markdown_table([" ".join(tune["per"]) or "group"] + [f"{tune['axis']}={v}" for v in values], rows)]
    strata = sorted({int(s) for r in scaling["rows"] for s in r["strata"]})
    header = ["arm", "size", "params", "cells", "held-out loss"] + [f"x{s}: exact % [95 % CI]" for s in strata] \
        + [f"x{s}: loss gap vs control" for s in strata]
    rows = []
    for r in sorted(scaling["rows"], key=lambda r: (r["arm"] != "control", r["arm"], r["params"] or 0)):
        held = "-" if r["heldout_loss"] is None else f"{r['heldout_loss']:.3f}" + (
            f" +- {r['heldout_loss_sd']:.3f}" if r.get("heldout_loss_sd") is not None else "")
        cols = [r["arm"], r["size"], f"{(r['params'] or 0) / 1e6:.2f} M", str(r["cells"]), held]
        for s in strata:
            v = r["strata"].get(str(s)) or {}
            cols.append(f"{pct(v.get('rate'))} [{pct(v.get('low'))}, {pct(v.get('high'))}] ({v.get('exact')}/"
                        f"{v.get('n')})" if v.get("n") else "-")
        for s in strata:
            g = (r["strata"].get(str(s)) or {}).get("loss_gap")
            cols.append(f"{g['gap']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}]" if g else "-")
        rows.append(cols)
    lines += ["", markdown_table(header, rows), "",
              "Exact match pooled over each row's cells (seeds), Wilson 95 % interval. Loss gap: per target, the "
              "control's NLL minus the arm's (nats/token), less the same difference on the nonmembers, paired with "
              "the control of the same size and seed that trained on the background alone; > 0 = the arm learnt "
              "these texts beyond what training teaches about unseen text of the same kind (95 % bootstrap "
              "interval over targets). Held-out loss: nonmember NLL, mean +- sd "
              "over cells; compare across sizes to see which sizes are under-trained."]
    lines += _split_gap_table(scaling["rows"], strata)
    fit_rows = []
    for f in scaling["fits"]:
        if "slope" in f:
            fit_rows.append([f["arm"], f"x{f['repetitions']}", str(f["off_floor"]),
                             f"{100 * f['slope']:+.1f} +- {100 * f['slope_se']:.1f} points per 10x params"])
        else:
            fit_rows.append([f["arm"], f"x{f['repetitions']}", str(f["off_floor"]), f["why_not"]])
    lines += ["", f"Log-linear fits of exact match vs parameters, only over sizes off the floor (Wilson lower bound "
              f"above the control's rate) and only with >= {MIN_FIT_POINTS} such sizes; slope +- standard error:", "",
              markdown_table(["arm", "stratum", "sizes off floor", "fit"], fit_rows)]
    return "\n".join(lines)


def render(results: dict) -> str:
    scaling = scaling_markdown(results)
    return markdown_section("Memorisation vs model size (Carlini et al. 2022)", scaling) if scaling else ""
