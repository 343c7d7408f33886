"""Memorisation vs model size (Carlini et al. 2022), for experiments with a ``size`` grid axis: the data and tuning,
then per (arm, size) exact match per exposure stratum with Wilson intervals, the loss gap against the control of the
same size (also split by the positions the Goldfish mask keeps / drops), held-out loss, and the log-linear fits over
the sizes off the floor. Computed by :mod:`goldfish.experiment.scaling` into ``results.json``'s ``scaling`` block.

The size effect is read with the training run as the unit (issue 38), in ``scaling.size_runs``
(:func:`goldfish.eval.stats.size_effect_over_runs`): each run's logit of exact match (one per seed and size),
each seed's slope over log10 params, the t interval of their mean over seeds with the between-seed SD, the same slope
with the runs as units and the between-run SD, and the log-linearity test (size as a factor vs log-linear) reported
before the slope. The Wilson intervals, the loss gaps' bootstrap and the joint model's cluster bootstrap
(``size_model``) resample targets inside fixed models: within-run detail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import math

from goldfish.eval.stats import size_effect_over_runs
from goldfish.eval.tables import markdown_section, markdown_table, pct

from ...data import load_prepared
from ..plan import CellPlan
from ..scaling import MIN_FIT_POINTS, SIZE_AXIS, _reads, first_prefix_windows, size_analysis, size_model
from ..summary import CellSummary, Study
from ..tune import ARM


def tuning_only(cell: CellSummary, tune: dict | None) -> bool:
    """A tuning cell at a value that was not chosen: it informs the choice, not the comparison of the arms (a
    control's, or any arm's where ``tune.per`` names ``arm``)."""
    if not tune or (cell.arm != "control" and ARM not in tune["per"]):
        return False
    for group in tune["groups"]:
        if all(str(cell.arm if a == ARM else cell.values.get(a)) == str(v) for a, v in group["per"].items()):
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
    cells at values that were not chosen), the targets' share of each prepared folder and the joint model of the
    size effect (:func:`goldfish.experiment.scaling.size_model`); None without a size axis."""
    counted = [(p, c) for p, c in zip(study.done, study.cells) if not tuning_only(c, study.tune)]
    scaling = size_analysis([c for _, c in counted], study.axes)
    if scaling is not None:
        scaling["data"] = {str(d): target_share(d) for d in dict.fromkeys(p.data_dir for p in study.done)}
        scaling["size_model"] = size_model([p for p, _ in counted], [c for _, c in counted])
        scaling["size_runs"] = size_runs(counted, study.axes, (study.tune or {}).get("axis"))
    return {"scaling": scaling}


def replicate_of(cell: CellSummary, axes: list[str], tuned: str | None) -> str:
    """The replicate (seed) a cell belongs to: its values on the axes other than the size and the tuned one
    (``seed=1``); ``-`` without such an axis (a single series of runs)."""
    rest = [f"{a}={cell.values.get(a)}" for a in axes if a not in (SIZE_AXIS, tuned)]
    return ", ".join(rest) or "-"


def size_runs(counted: list[tuple[CellPlan, CellSummary]], axes: list[str], tuned: str | None) -> list[dict]:
    """Per arm (not the control): :func:`goldfish.eval.stats.size_effect_over_runs` of its from-scratch cells'
    target windows (first prefix length; exposures as read in training), a cell being one run and its replicate
    (:func:`replicate_of`) its seed; ``{arm, why_not}`` with fewer than two sizes or no extraction at all."""
    out = []
    for arm in dict.fromkeys(c.arm for _, c in counted if c.arm != "control"):
        exact, reads, params, seeds = [], [], [], []
        for plan, cell in counted:
            if cell.arm != arm or cell.start_model or not cell.params:
                continue
            for w in first_prefix_windows(plan):
                read = _reads(cell, str(w.get("repetitions")))
                if read:
                    exact.append(float(bool(w.get("exact_match"))))
                    reads.append(math.log2(read))
                    params.append(math.log10(cell.params))
                    seeds.append(replicate_of(cell, axes, tuned))
        if len(set(params)) < 2 or not sum(exact):
            out.append(
                {
                    "arm": arm,
                    "why_not": f"{len(set(params))} from-scratch size(s)"
                    if len(set(params)) < 2
                    else f"0 of {len(exact)} target windows extracted: no run-level slope to read",
                }
            )
            continue
        out.append({"arm": arm, **size_effect_over_runs(exact, reads, params, seeds)})
    return out


def _interval(d: dict | None, key: str = "mean") -> str:
    if not d or d.get(key) is None:
        return "-"
    if d.get("ci_low") is None:
        return f"{d[key]:+.2f} (no interval: one seed)"
    return f"{d[key]:+.2f} [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]"


def size_runs_markdown(models: list[dict]) -> list[str]:
    """The size effect read across training runs: per arm the log-linearity test, then the two-stage slope (the
    reading) and the runs-as-units slope with the between-run SD; the per-seed slopes and the per-run logits."""
    if not models:
        return []
    rows, run_rows = [], []
    for m in models:
        if "why_not" in m:
            rows.append([m["arm"], m["why_not"], "-", "-", "-", "-", "-"])
            continue
        lin = m.get("linearity")
        lin_text = "-" if not lin else f"F {lin['F']:.2f} ({lin['df1']}, {lin['df2']} df), p {lin['p_value']:.3g}"
        within = m.get("linearity_within_runs") or {}
        if within.get("LR") is not None:
            lin_text += f"; within runs LR {within['LR']:.1f} ({within['df']} df), p {within['p_value']:.3g}"
        two, run = m["two_stage"], m.get("run_level") or {}
        sd = "-" if two.get("sd") is None else f"{two['sd']:.2f}"
        run_text = (
            "-"
            if not run
            else _interval(run, "slope")
            + ("" if run.get("between_run_sd") is None else f"; between-run SD {run['between_run_sd']:.2f}")
        )
        per_seed = ", ".join(
            f"{s['seed']}: " + ("-" if s["slope"] is None else f"{s['slope']:+.2f}") for s in m["per_seed"]
        )
        effect = _interval(two) + f" (t, {two['df'] if two.get('df') is not None else 0} df)"
        if lin and lin["p_value"] < 0.05:
            effect += " -- log-linearity rejected: read the per-size table, not the slope"
        rows.append([m["arm"], f"{m['n_seeds']} seed(s), {m['n_runs']} runs", lin_text, effect, sd, per_seed, run_text])
        for r in m["runs"]:
            run_rows.append(
                [
                    m["arm"],
                    r["seed"],
                    f"{10 ** r['log10_params'] / 1e6:.2f} M",
                    f"{r['exact']}/{r['windows']}",
                    f"{r['logit']:+.2f} +- {r['se']:.2f}",
                ]
            )
    lines = [
        "The size effect with the training run as the unit (the reading; issue 38). Per seed, one "
        "Firth-penalised logistic regression of exact match on log2 exposures read with one intercept per size "
        "gives each run's logit (at one exposure); each seed's least-squares slope of those logits on log10 "
        "params is one observation, and the size effect is their mean with a 95 % t interval over seeds, the "
        "between-seed SD beside it. Read the slope only where log-linearity holds: the F test of size as a "
        "factor vs log-linear (seed effects in both) against the between-run error (the likelihood-ratio test "
        "within runs beside it uses the binomial error alone, so a run's own shift is enough to reject it: "
        "within-run detail). The runs-as-units slope "
        "(seed as a fixed effect, every run one observation) assumes one slope for every seed; the between-run "
        "SD is how far a run's logit sits from its seed's and its size's (the run's own shift plus its "
        "estimation error). The Wilson intervals above and the joint model's cluster bootstrap below resample "
        "targets inside fixed models: within-run detail, not the reading.",
        "",
        markdown_table(
            [
                "arm",
                "runs",
                "log-linearity (factor vs log-linear)",
                "size effect: logit per 10x params [95 % t over seeds]",
                "between-seed SD",
                "per-seed slopes",
                "runs as units [95 %]",
            ],
            rows,
        ),
    ]
    if run_rows:
        lines += [
            "",
            "Per run (seed x size): extracted / target windows and the run's logit of exact match at one "
            "exposure (+- its within-run standard error):",
            "",
            markdown_table(["arm", "seed", "params", "extracted", "run logit"], run_rows),
        ]
    return lines


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
            table.append(
                [r["arm"], r["size"], *(f"{gap(v, 'loss_gap_kept')} / {gap(v, 'loss_gap_dropped')}" for v in cells)]
            )
    if not table:
        return []
    return [
        "",
        "Loss gap split by the positions the experiment's Goldfish mask keeps / drops (every arm on the same "
        "positions; the nonmember side over every target, as in the leakage audit). A Goldfish arm never "
        "trains on its dropped positions: a dropped gap near 0 with a positive kept gap is the mask working; "
        "a dropped gap above 0 is what it learnt of those tokens from their context.",
        "",
        markdown_table(["arm", "size"] + [f"x{s}: kept / dropped" for s in strata], table),
    ]


def per_cell(row: dict, stratum: int) -> str:
    """``: 3+5`` -- each cell's (seed's) extracted targets in a stratum, where the row pools several cells."""
    counts = [(c["strata"].get(str(stratum)) or [None])[0] for c in row.get("by_cell") or []]
    return f": {'+'.join('-' if k is None else str(k) for k in counts)}" if len(counts) > 1 else ""


def tune_lines(tune: dict | None) -> list[str]:
    """The tuning table of results.json's ``tune`` block: each group's loss per value (bold: chosen), whose loss
    (the control's, or each arm's own), and the groups whose choice sits at the grid's edge; [] without tuning."""
    if not tune:
        return []
    lines: list[str] = []
    values = list(dict.fromkeys(v for g in tune["groups"] for v in g["losses"]))
    rows = [
        [", ".join(f"{k}={v}" for k, v in g["per"].items())]
        + [
            ("**" if str(g["chosen"]) == v else "")
            + (f"{g['losses'][v]:.3f}" if g["losses"].get(v) is not None else "-")
            + ("**" if str(g["chosen"]) == v else "")
            for v in values
        ]
        for g in tune["groups"]
    ]
    metric = (
        "validation loss (documents never trained on and never reported)"
        if tune.get("by") == "validation_loss"
        else "held-out loss (the nonmembers)"
    )
    edge = [", ".join(f"{k}={v}" for k, v in g["per"].items()) for g in tune["groups"] if g.get("interior") is False]
    whose = "each arm's own" if ARM in tune["per"] else "the control's"
    runs = (
        "further seeds run at each arm's chosen value only"
        if ARM in tune["per"]
        else "the arms and further seeds run at the chosen value only"
    )
    lines += [
        "",
        f"Tuning: {whose} {metric} per {tune['axis']} (bold: chosen, lowest); {runs}."
        + (
            f" At the grid's edge (no value tried beyond it, so the optimum may lie outside): {'; '.join(edge)}."
            if edge
            else " Every choice has a value tried on each side."
            if all(g.get("interior") for g in tune["groups"])
            else ""
        ),
        "",
        markdown_table([" ".join(tune["per"]) or "group"] + [f"{tune['axis']}={v}" for v in values], rows),
    ]
    return lines


def scaling_markdown(results: dict) -> str | None:
    """The report's size-sweep section: data, tuning, per-size table, fits (None without a ``scaling`` block)."""
    scaling = results.get("scaling")
    if not scaling or not scaling.get("rows"):
        return None
    lines = []
    for folder, d in (scaling.get("data") or {}).items():
        lines.append(
            f"Targets: {d['target_tokens']:,} of {d['train_tokens']:,} training tokens "
            f"({pct(d['target_share'])} %) in `{folder.rsplit('/', 1)[-1]}`."
        )
    exposures = {
        json.dumps(r["exposures"], sort_keys=True)
        for r in scaling["rows"]
        if r["arm"] != "control" and r.get("exposures")
    }
    agree = all(r.get("exposures_agree") is not False for r in scaling["rows"])
    if exposures:
        lines.append(
            "Exposures read in training, {labelled copies: [fewest, most] reads}: "
            + "; ".join(sorted(exposures))
            + (" (every cell agrees)." if agree else " (cells differ!).")
        )
    control_exp = {
        json.dumps(r["exposures"], sort_keys=True)
        for r in scaling["rows"]
        if r["arm"] == "control" and r.get("exposures")
    }
    if control_exp:
        lines.append("The control's reads of the same targets: " + "; ".join(sorted(control_exp)) + ".")
    lines += tune_lines(results.get("tune"))
    strata = sorted({int(s) for r in scaling["rows"] for s in r["strata"]})
    header = (
        ["arm", "size", "params", "cells", "held-out loss"]
        + [f"x{s}: exact % [95 % CI]" for s in strata]
        + [f"x{s}: loss gap vs control" for s in strata]
    )
    rows = []
    for r in sorted(scaling["rows"], key=lambda r: (r["arm"] != "control", r["arm"], r["params"] or 0)):
        held = (
            "-"
            if r["heldout_loss"] is None
            else f"{r['heldout_loss']:.3f}"
            + (f" +- {r['heldout_loss_sd']:.3f}" if r.get("heldout_loss_sd") is not None else "")
        )
        cols = [r["arm"], r["size"], f"{(r['params'] or 0) / 1e6:.2f} M", str(r["cells"]), held]
        for s in strata:
            v = r["strata"].get(str(s)) or {}
            cols.append(
                f"{pct(v.get('rate'))} [{pct(v.get('low'))}, {pct(v.get('high'))}] ({v.get('exact')}/"
                f"{v.get('n')}{per_cell(r, s)})"
                if v.get("n")
                else "-"
            )
        for s in strata:
            g = (r["strata"].get(str(s)) or {}).get("loss_gap")
            cols.append(f"{g['gap']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}]" if g else "-")
        rows.append(cols)
    lines += [
        "",
        markdown_table(header, rows),
        "",
        "Exact match pooled over each row's cells (seeds), Wilson 95 % interval, with each cell's count after "
        "the colon in grid order (k/n: a+b = the first cell + the second, e.g. seed 0 + seed 1). Loss gap: per "
        "target, the control's NLL minus the arm's (nats/token), less the same difference on the nonmembers, "
        "paired with "
        "the control of the same size and seed that trained on the background alone; > 0 = the arm learnt "
        "these texts beyond what training teaches about unseen text of the same kind (95 % bootstrap "
        "interval over targets). Held-out loss: nonmember NLL, mean +- sd "
        "over cells; compare across sizes to see which sizes are under-trained.",
    ]
    lines += _split_gap_table(scaling["rows"], strata)
    fit_rows = []
    for f in scaling["fits"]:
        if "slope" in f:
            fit_rows.append(
                [
                    f["arm"],
                    f"x{f['repetitions']}",
                    str(f["off_floor"]),
                    f"{100 * f['slope']:+.1f} +- {100 * f['slope_se']:.1f} points per 10x params",
                ]
            )
        else:
            fit_rows.append([f["arm"], f"x{f['repetitions']}", str(f["off_floor"]), f["why_not"]])
    lines += [
        "",
        f"Log-linear fits of exact match vs parameters, only over sizes off the floor (Wilson lower bound "
        f"above the control's rate) and only with >= {MIN_FIT_POINTS} such sizes; slope +- standard error:",
        "",
        markdown_table(["arm", "stratum", "sizes off floor", "fit"], fit_rows),
    ]
    return "\n".join(lines)


def render(results: dict) -> str:
    scaling = scaling_markdown(results)
    if not scaling:
        return ""
    runs = size_runs_markdown((results.get("scaling") or {}).get("size_runs") or [])
    sections = [markdown_section("Memorisation vs model size (Carlini et al. 2022)", scaling)]
    if runs:
        sections.append(markdown_section("Size effect across training runs", "\n".join(runs)))
    return "\n".join(sections)
