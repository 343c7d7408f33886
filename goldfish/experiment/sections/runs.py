"""The headlines with the training run as the unit (issue 38, item 1): for an experiment with replicate axes
(``ExperimentConfig.replicate_axes``: ``equivalence.pool``, else ``compare.pool``, else the grid's ``seed`` axis;
each replicate its own split, order and model), per grid point (the other axes' values) and arm a per-run table of
the headlines -- exact match, ROUGE-L (rouge-score and tokens), the headline attack's AUC, TPR at 1 % and at 0.1 %
FPR, held-out loss, the leakage audit's DiD on the dropped positions (accuracy and loss; a Goldfish arm on its own
mask, a standard arm or a positive control on the mask it audits), and each per-cell analysis's per-run numbers
(``Analysis.headlines``: the utility corpora's held-out loss) -- with their mean over runs, 95 % t interval and
between-run SD (:func:`goldfish.eval.stats.t_over_runs`); then paired by replicate, each later arm minus each earlier
one and each arm minus the control, a t interval over the replicates' differences
(:func:`goldfish.eval.stats.replicate_tost`, with the two one-sided tests where the config states a margin:
``Analysis.margins``) and a reading in words made from that interval. A replicate one of the two arms lacks (or a
value one of them lacks) drops that pair and is listed; it never shifts the others. The window- and document-level
intervals of the other sections resample inside one trained model: within-run detail."""

from __future__ import annotations

from typing import Any

from goldfish.eval.stats import replicate_tost, t_over_runs
from goldfish.eval.tables import fmt, markdown_section, markdown_table
from goldfish.eval.verdicts import verdict

from ..analyses import ANALYSES
from ..grid import CONTROL
from ..summary import CellSummary, Study
from .leakage import dropped_did
from .size import tuning_only

# the core headlines of a cell summary: (field, label, kind: "pct" for a rate)
HEADLINES = (
    ("exact_match_rate", "exact match", "pct"),
    ("rouge_l_paper", "ROUGE-L (rouge-score)", ""),
    ("rouge_l", "ROUGE-L (tokens)", ""),
    ("mia_auc", "MIA AUC", ""),
    ("mia_tpr_at_1pct_fpr", "TPR at 1 % FPR", "pct"),
    ("mia_tpr_at_0_1pct_fpr", "TPR at 0.1 % FPR", "pct"),
    ("heldout_loss", "held-out loss", ""),
)
# the leakage audit's DiD on the dropped positions (sections.leakage): (name, label, kind, measure)
LEAKAGE = (
    ("leak_did_accuracy", "leak DiD accuracy (dropped)", "pct", "accuracy"),
    ("leak_did_loss", "leak DiD loss (dropped)", "", "loss"),
)
TITLE = "Across training runs"


def run_values(cell: CellSummary) -> dict[str, tuple[Any, str | None]]:
    """A cell's per-run numbers ``{name: (value, match)}``: the core headlines, the leakage DiDs, then every
    analysis's."""
    out: dict[str, tuple[Any, str | None]] = {key: (getattr(cell, key), None) for key, _, _ in HEADLINES}
    out.update({key: (dropped_did(cell, measure), None) for key, _, _, measure in LEAKAGE})
    for analysis in ANALYSES:
        if analysis.headlines:
            out.update(analysis.headlines(cell))
    return out


def reading(d: dict, a: str, b: str, kind: str) -> str:
    """The reading of a paired difference ``a - b`` from its interval over runs (``replicate_tost``'s dict): the
    verdict word by the rule of :mod:`goldfish.eval.verdicts`, then the interval it was read from."""
    word = verdict(
        "difference",
        d.get("ci_low"),
        d.get("ci_high"),
        d.get("n"),
        margin=d.get("margin") or None,
        ci90_low=d.get("ci90_low"),
        ci90_high=d.get("ci90_high"),
    )
    return f"**{word}**: {_sentence(d, a, b, kind)}"


def _sentence(d: dict, a: str, b: str, kind: str) -> str:
    n = d["n"]
    if n < 2:
        return f"{n} paired run(s): no interval over runs from fewer than two"
    mean, low, high = (_diff(d[k], kind) for k in ("mean", "ci_low", "ci_high"))
    if d["sd"] == 0:
        return f"every one of the {n} runs gives {mean}: no spread between runs"
    excludes = d["ci_low"] > 0 or d["ci_high"] < 0
    if d.get("margin"):
        m = _diff(d["margin"], kind).lstrip("+")
        within = f"[{_diff(d['ci90_low'], kind)}, {_diff(d['ci90_high'], kind)}]"
        if d["equivalent"]:
            return (
                f"no difference beyond +-{m}: the 90 % t interval {within} over {n} runs lies inside the margin "
                f"stated before the run (TOST p {d['tost_p']:.2g})"
            )
        return f"not shown within +-{m}: the 90 % t interval {within} over {n} runs reaches beyond the margin" + (
            f"; {a} {'above' if d['mean'] > 0 else 'below'} {b} ({mean} [{low}, {high}] excludes 0)" if excludes else ""
        )
    if excludes:
        return f"{a} {'above' if d['mean'] > 0 else 'below'} {b}: {mean} [{low}, {high}] over {n} runs excludes 0"
    reach = _diff(max(abs(d["ci_low"]), abs(d["ci_high"])), kind).lstrip("+")
    return f"no difference detected over {n} runs: [{low}, {high}] includes 0; one up to {reach} is not excluded"


def _diff(v: float | None, kind: str) -> str:
    if v is None:
        return "-"
    return f"{100 * v:+.1f} pts" if kind == "pct" else f"{v:+.4f}"


def paired(a: str, b: str, key: str, kind: str, runs_a: dict, runs_b: dict, margin: float | None) -> dict:
    """``a - b`` of headline ``key`` per replicate both arms ran (``runs_*``: replicate -> ``{name: (value,
    match)}``), its interval over the replicates and the reading; ``dropped``: the replicates left out, and why."""
    pairs, dropped = [], []
    for r in dict.fromkeys([*runs_a, *runs_b]):
        if r not in runs_a or r not in runs_b:
            dropped.append({"replicate": r, "why": f"no {b if r in runs_a else a} run"})
            continue
        (va, ma), (vb, mb) = runs_a[r].get(key, (None, None)), runs_b[r].get(key, (None, None))
        if va is None or vb is None:
            missing = " and ".join(x for x, v in ((a, va), (b, vb)) if v is None)
            dropped.append({"replicate": r, "why": f"no value for {missing}"})
        elif ma != mb:
            dropped.append({"replicate": r, "why": "not the same documents"})
        else:
            pairs.append({"replicate": r, "diff": va - vb})
    over = replicate_tost([p["diff"] for p in pairs], margin)
    return {
        "a": a,
        "b": b,
        "headline": key,
        "pairs": pairs,
        "dropped": dropped,
        "over_runs": over,
        "reading": reading(over, a, b, kind),
    }


def group(arms: dict[str, dict[str, CellSummary]], headlines: list[dict], margins: dict[str, float]) -> dict:
    """One grid point: per arm its runs and the headlines over them, then the paired differences."""
    values = {arm: {r: run_values(c) for r, c in runs.items()} for arm, runs in arms.items()}
    out_arms = []
    for arm, runs in arms.items():
        rows = [
            {
                "replicate": r,
                "cell": c.cell,
                "values": {h["key"]: values[arm][r].get(h["key"], (None,))[0] for h in headlines},
            }
            for r, c in runs.items()
        ]
        out_arms.append(
            {
                "arm": arm,
                "runs": rows,
                "over_runs": {h["key"]: t_over_runs([row["values"][h["key"]] for row in rows]) for h in headlines},
            }
        )
    names = [a for a in arms if a != CONTROL]
    pairs = [(a, b) for j, a in enumerate(names) for b in names[:j]]
    pairs += [(a, CONTROL) for a in names if CONTROL in arms]
    return {
        "arms": out_arms,
        "paired": [
            paired(a, b, h["key"], h["kind"], values[a], values[b], margins.get(h["key"]))
            for a, b in pairs
            for h in headlines
        ],
    }


def compute(study: Study) -> dict:
    """``runs`` (SCHEMA.md): the per-run tables, the intervals over runs and the paired differences per grid point;
    ``{replicate_axes, why_not}`` where every arm has one run per grid point."""
    if not study.cells:
        return {}
    replicates = [a for a in study.cfg.replicate_axes if a in study.axes]
    tuned = (study.tune or {}).get("axis")
    points: dict[tuple, dict[str, dict[str, CellSummary]]] = {}
    for c in study.cells:
        if tuning_only(c, study.tune):
            continue
        point = tuple((a, str(c.values.get(a))) for a in study.axes if a not in replicates and a != tuned)
        replicate = ", ".join(f"{a}={c.values.get(a)}" for a in replicates) or "-"
        points.setdefault(point, {}).setdefault(c.arm, {})[replicate] = c
    if not points:
        return {}
    if max(len(runs) for arms in points.values() for runs in arms.values()) < 2:
        return {
            "runs": {
                "replicate_axes": replicates,
                "why_not": "one training run per arm and grid point: no "
                "interval over runs from one run (add a replicate axis, e.g. grid.seed)",
            }
        }
    margins = {k: v for a in ANALYSES if a.margins for k, v in a.margins(study.cfg).items()}
    core = [*HEADLINES, *((k, label, kind) for k, label, kind, _ in LEAKAGE)]
    extra = dict.fromkeys(k for c in study.cells for k in run_values(c) if k not in {h[0] for h in core})
    headlines = [{"key": k, "label": label, "kind": kind} for k, label, kind in core]
    headlines += [{"key": k, "label": k.replace("_", " "), "kind": ""} for k in extra]
    return {
        "runs": {
            "replicate_axes": replicates,
            "headlines": headlines,
            "margins": margins,
            "groups": [{"point": dict(point), **group(arms, headlines, margins)} for point, arms in points.items()],
        }
    }


def _mean_cell(d: dict, kind: str) -> str:
    """``12.5 % [8.1, 16.9] (sd 2.0, 3 runs)``: the mean over runs, its 95 % t interval and the between-run SD."""
    if d["mean"] is None:
        return "-"
    if d["ci_low"] is None:
        return f"{fmt(d['mean'], kind)} (1 run: no interval)"
    scale = 100 if kind == "pct" else 1
    digits = 1 if kind == "pct" else 3
    return (
        f"{fmt(d['mean'], kind)} [{scale * d['ci_low']:.{digits}f}, {scale * d['ci_high']:.{digits}f}] "
        f"(sd {scale * d['sd']:.{digits}f}, {d['n']} runs)"
    )


def render(results: dict) -> str:
    runs = results.get("runs")
    if not runs:
        return ""
    if runs.get("why_not"):
        return markdown_section(TITLE, f"{runs['why_not'][0].upper()}{runs['why_not'][1:]}.")
    blocks = [
        "The training run is the unit (issue 38): each replicate ("
        + ", ".join(runs["replicate_axes"])
        + ") is its own split, training order and model, so a reading is "
        "made from the interval over runs below: the mean over runs with its 95 % Student t interval and the "
        "between-run SD. The intervals of the other tables (windows, documents, bootstrap of targets) "
        "resample inside one trained model: within-run detail. A headline no run of a grid point has is left "
        "out."
    ]
    for g in runs["groups"]:
        where = ", ".join(f"{a}={v}" for a, v in g["point"].items())
        heads = [h for h in runs["headlines"] if any(arm["over_runs"][h["key"]]["n"] for arm in g["arms"])]
        rows = []
        for arm in g["arms"]:
            for r in arm["runs"]:
                rows.append([arm["arm"], r["replicate"], *(fmt(r["values"][h["key"]], h["kind"]) for h in heads)])
            rows.append(
                [
                    f"**{arm['arm']}**",
                    "mean [95 % t] (sd)",
                    *(_mean_cell(arm["over_runs"][h["key"]], h["kind"]) for h in heads),
                ]
            )
        blocks += [
            f"Per run{' at ' + where if where else ''}:",
            markdown_table(["arm", "run", *(h["label"] for h in heads)], rows),
        ]
        kinds = {h["key"]: h for h in heads}
        prow = []
        for p in g["paired"]:
            if p["headline"] not in kinds or (
                not p["pairs"] and all(x["why"].startswith("no value for") for x in p["dropped"])
            ):
                continue  # a headline one of the arms never has (e.g. the leakage DiD of the control)
            d, kind = p["over_runs"], kinds[p["headline"]]["kind"]
            interval = (
                "-"
                if d["ci_low"] is None
                else f"{_diff(d['mean'], kind)} [{_diff(d['ci_low'], kind)}, {_diff(d['ci_high'], kind)}]"
            )
            left = "; ".join(f"{x['replicate']}: {x['why']}" for x in p["dropped"])
            prow.append(
                [
                    f"{p['a']} - {p['b']}",
                    kinds[p["headline"]]["label"],
                    f"{d['n']}" + (f" (dropped {left})" if left else ""),
                    interval,
                    "-" if d["sd"] is None else _diff(d["sd"], kind).lstrip("+"),
                    reading(d, p["a"], p["b"], kind),
                ]
            )
        blocks += [
            f"Paired by run{' at ' + where if where else ''} (the same replicate's cells; a replicate one "
            "side lacks is dropped, never shifted):",
            markdown_table(
                ["a - b", "headline", "paired runs", "mean difference [95 % t over runs]", "between-run SD", "reading"],
                prow,
            ),
        ]
    if runs.get("margins"):
        blocks.append(
            "Margins stated in the config before the run (two one-sided t tests over the runs, 90 % t "
            "interval inside the margin): " + ", ".join(f"{k} +-{v}" for k, v in runs["margins"].items()) + "."
        )
    return markdown_section(TITLE, *blocks)
