"""The dropped-token leakage audit: each cell against the control of its grid point, on the member positions the
Goldfish mask drops / keeps and on held-out text, as a difference in differences (attacks.json ``leakage``), with
its validity beside it -- the placebo (the mask applied to nonmembers: ~0 unless the held-out text is no valid
reference for the mask's positions, then the reading is "inconclusive"), the minimum detectable leak at the design's
size, and positive controls of a known supervised fraction (a standard arm: 1; another arm's mask,
``leakage_by_mask``: e.g. ~3/4 for a Goldfish mask of another seed) -- and a line for each grid point without a
control.

Calibrated on members (``leakage_calibration`` in results.json, where a Goldfish arm has a no-leak twin or
low-supervision positive controls: arms with its mask and ``replace_dropped`` / ``supervised_fraction``), with the
training run (grid point, i.e. seed) as the unit (issue 38): per run and across runs (mean, t interval over runs,
between-run SD) the Goldfish arm's own DiD, the twin's (the null measured where the audit looks), Goldfish minus twin
paired by run (the leak estimate calibrated on members), each positive control's DiD at its supervised fraction, the
slope of DiD on supervised fraction (each run's line through the Goldfish arm at 0 and its positive controls), and
the minimum detectable leak as a supervised fraction: the across-run MDE of Goldfish minus twin over that slope."""

from __future__ import annotations

from typing import Any, Sequence

from goldfish.eval.stats import mde_range, minimum_detectable_effect, slope_over_runs, t_over_runs
from goldfish.eval.tables import did_text, fmt, markdown_table, with_ci
from goldfish.eval.verdicts import verdict

from ...masks import GoldfishConfig
from ..grid import CONTROL
from ..glossary import define
from ..plan import CellPlan
from ..summary import CellSummary, Study, cells_of, one_per_arm

MEASURES = ("accuracy", "loss")
LEAK_SIGN = {"accuracy": 1.0, "loss": -1.0}  # the direction of a leak: accuracy up, loss down


def compute(study: Study) -> dict:
    """``leakage_calibration``: :func:`calibration` of the finished cells; None where no Goldfish arm has a no-leak
    twin or a positive control."""
    return {"leakage_calibration": calibration(study.done, study.cells, study.axes)}


AUDIT_TERMS = define(
    "leakage audit",
    (
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
        "arm of another mask seed on this mask's positions; the audit must detect those."
    ),
)


def _controls_of(plan: CellPlan) -> tuple[str, Any] | None:
    """``(role, mask)`` of a Goldfish cell: ``goldfish`` (no audit control), ``twin`` (``replace_dropped``) or
    ``positive`` (``supervised_fraction`` > 0); None for the standard loss (or a pipeline without a Goldfish
    config, e.g. a test's fake)."""
    loss = getattr(plan.train_cfg, "loss", None)
    g = getattr(loss, "goldfish", None)
    if getattr(loss, "type", None) != "goldfish" or not isinstance(g, GoldfishConfig):
        return None
    return ("twin" if g.replace_dropped else "positive" if g.supervised_fraction else "goldfish"), g


def dropped_did(cell: CellSummary | None, measure: str) -> float | None:
    """The cell's own DiD on the dropped positions of its (base) mask, None where it has none."""
    did = (((cell.leakage or {}).get("did") or {}).get("dropped") or {}).get(measure) if cell else None
    return (did or {}).get("did")


def calibration(plans: Sequence[CellPlan], cells: Sequence[CellSummary], axes: Sequence[str]) -> list[dict] | None:
    """Per Goldfish arm with audit controls (arms whose ``base`` mask is its own): ``{goldfish, twin, positive:
    {arm: supervised_fraction set}, runs: [per run], accuracy | loss: across runs}`` (:func:`_runs`,
    :func:`_across`); None where there is none."""
    roles = {c.arm: r for p, c in zip(plans, cells) if (r := _controls_of(p)) is not None}
    out = []
    for arm, (role, mask) in roles.items():
        if role != "goldfish":
            continue
        family = {a: r for a, r in roles.items() if r[0] != "goldfish" and r[1].base == mask}
        if not family:
            continue
        twin = next((a for a, (r, _) in family.items() if r == "twin"), None)
        positive = {a: g.supervised_fraction for a, (r, g) in family.items() if r == "positive"}
        runs = _runs(arm, twin, list(positive), cells, axes)
        out.append(
            {
                "goldfish": arm,
                "twin": twin,
                "positive": positive,
                "runs": runs,
                **{m: _across(runs, m, list(positive)) for m in MEASURES},
            }
        )
    return out or None


def _runs(
    arm: str, twin: str | None, positive: list[str], cells: Sequence[CellSummary], axes: Sequence[str]
) -> list[dict]:
    """One row per run (grid point) of the Goldfish arm: ``{run, goldfish | twin | difference: {measure: DiD},
    positive: {arm: {supervised_fraction, accuracy, loss}}}`` (difference = Goldfish - twin; None where a cell or
    its audit is missing)."""
    by = {(c.arm, tuple(c.values.get(a) for a in axes)): c for c in cells}
    rows = []
    for point in dict.fromkeys(k for a, k in by if a == arm):
        gold, tw = by[(arm, point)], by.get((twin, point))
        row: dict[str, Any] = {
            "run": ", ".join(f"{a}={v}" for a, v in zip(axes, point)) or "-",
            "goldfish": {m: dropped_did(gold, m) for m in MEASURES},
            "twin": {m: dropped_did(tw, m) for m in MEASURES},
        }
        row["difference"] = {
            m: None if None in (row["goldfish"][m], row["twin"][m]) else row["goldfish"][m] - row["twin"][m]
            for m in MEASURES
        }
        row["positive"] = {}
        for p in positive:
            c = by.get((p, point))
            row["positive"][p] = {
                "supervised_fraction": (c.leakage or {}).get("supervised_fraction") if c else None,
                **{m: dropped_did(c, m) for m in MEASURES},
            }
        rows.append(row)
    return rows


def _across(runs: list[dict], measure: str, positive: list[str]) -> dict:
    """One measure across runs: ``goldfish``, ``twin``, ``difference`` (:func:`t_over_runs` of the per-run DiDs;
    the difference paired by run), ``difference_mde`` (its minimum detectable effect over runs, Student's
    quantiles), ``positive`` ({arm: {supervised_fraction (mean over runs), did (t over runs)}}), ``slope``
    (:func:`slope_over_runs`: DiD per unit of supervised fraction, each run's line through the Goldfish arm at its
    measured fraction 0 and its positive controls), ``detectable_fraction`` (``difference_mde`` over the slope in the
    leak's direction: the supervised fraction whose expected DiD equals the MDE; None without a slope that way) and
    ``reading`` of the difference (:func:`_reading`)."""
    diff = t_over_runs([r["difference"][measure] for r in runs])
    mde = minimum_detectable_effect(diff["se"], df=diff["df"])
    x = [[0.0] + [r["positive"][p]["supervised_fraction"] for p in positive] for r in runs]
    y = [[r["goldfish"][measure]] + [r["positive"][p][measure] for p in positive] for r in runs]
    keep = [[(a, b) for a, b in zip(xs, ys) if a is not None] for xs, ys in zip(x, y)]
    slope = slope_over_runs([[a for a, _ in k] for k in keep], [[b for _, b in k] for k in keep])
    toward = None if slope["mean"] is None else LEAK_SIGN[measure] * slope["mean"]
    fractions = {p: [r["positive"][p]["supervised_fraction"] for r in runs] for p in positive}
    return {
        "goldfish": t_over_runs([r["goldfish"][measure] for r in runs]),
        "twin": t_over_runs([r["twin"][measure] for r in runs]),
        "difference": diff,
        "difference_mde": mde,
        "positive": {
            p: {
                "supervised_fraction": _mean(fractions[p]),
                "did": t_over_runs([r["positive"][p][measure] for r in runs]),
            }
            for p in positive
        },
        "slope": slope,
        "detectable_fraction": mde / toward if mde is not None and toward and toward > 0 else None,
        "reading": _reading(measure, diff),
    }


def _mean(values: list[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return sum(found) / len(found) if found else None


def _reading(measure: str, diff: dict) -> str | None:
    """Goldfish - twin across runs: the verdict word by the rule of :mod:`goldfish.eval.verdicts` (the leak's
    direction first: accuracy up, loss down); None with fewer than two runs."""
    if diff["ci_low"] is None:
        return None
    sign = LEAK_SIGN[measure]
    low, high = sorted((sign * diff["ci_low"], sign * diff["ci_high"]))
    return verdict("leak", low, high, diff["n"])


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
        docs = (
            f"{fmt(dloss.get('n_member_documents'), 'int')} / {fmt(dloss.get('n_heldout_documents'), 'int')}"
            if dloss
            else "-"
        )
        placebo, mde, reading = (leakage.get(k) or {} for k in ("placebo", "mde", "reading"))
        dropped = positions == "dropped"
        rows.append(
            [
                label,
                _mask_label(mask, leakage) if dropped else "",
                positions,
                docs,
                did_text(dacc, "pct"),
                did_text(placebo.get("accuracy"), "pct") if dropped else "",
                did_text(dloss),
                did_text(placebo.get("loss")) if dropped else "",
                (f"{fmt(mde.get('accuracy'), 'pct')} / {fmt(mde.get('loss'))}" if mde else "-") if dropped else "",
                (" / ".join(reading.get(m, "-") for m in ("accuracy", "loss")) if reading else "-") if dropped else "",
            ]
        )
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
        notes.append(
            f"No control cell {f'at {where}' if where else 'in this experiment'} (`control: false`): "
            "no leakage audit there."
        )
    lines = ["## Dropped-token leakage audit (difference in differences)", ""]
    if rows:
        lines += [
            markdown_table(
                [
                    "cell",
                    "mask of (share trained)",
                    "positions",
                    "docs members / held-out",
                    "accuracy DiD",
                    "placebo accuracy DiD",
                    "loss DiD",
                    "placebo loss DiD",
                    "MDE accuracy / loss",
                    "reading accuracy / loss",
                ],
                rows,
            ),
            "",
            AUDIT_TERMS,
            "",
        ]
    return lines + [line for note in notes for line in (note, "")]


def _pair(values: dict | None) -> str:
    """``accuracy DiD / loss DiD`` of one cell or difference (accuracy in percentage points)."""
    values = values or {}
    return f"{fmt(values.get('accuracy'), 'pct')} / {fmt(values.get('loss'))}"


def _run_rows(family: dict) -> list[list[str]]:
    rows = []
    for r in family["runs"]:
        rows.append(
            [r["run"], _pair(r["goldfish"]), _pair(r["twin"]), _pair(r["difference"])]
            + [f"{fmt(v['supervised_fraction'], 'pct')}: {_pair(v)}" for v in r["positive"].values()]
        )
    return rows


def _over_runs(t: dict | None, kind: str = "") -> list[str]:
    """``mean [t interval]`` and the between-run SD of a :func:`t_over_runs` dict."""
    t = t or {}
    return [with_ci(t.get("mean"), t.get("ci_low"), t.get("ci_high"), kind), fmt(t.get("sd"), kind)]


def _across_rows(family: dict) -> list[list[str]]:
    acc, loss = family["accuracy"], family["loss"]
    rows = [
        [
            f"{family['goldfish']}: DiD on its own mask (trained on 0 %)",
            *_over_runs(acc["goldfish"], "pct"),
            *_over_runs(loss["goldfish"]),
            fmt(acc["goldfish"]["n"]),
        ],
        [
            f"{family['twin'] or 'no twin'}: no-leak twin DiD (the null on members)",
            *_over_runs(acc["twin"], "pct"),
            *_over_runs(loss["twin"]),
            fmt(acc["twin"]["n"]),
        ],
        [
            "Goldfish - twin, paired by run (the leak, calibrated on members)",
            *_over_runs(acc["difference"], "pct"),
            *_over_runs(loss["difference"]),
            fmt(acc["difference"]["n"]),
        ],
    ]
    for p in family["positive"]:
        a, b = acc["positive"][p], loss["positive"][p]
        rows.append(
            [
                f"{p}: positive control DiD (trained on {fmt(a['supervised_fraction'], 'pct')})",
                *_over_runs(a["did"], "pct"),
                *_over_runs(b["did"]),
                fmt(a["did"]["n"]),
            ]
        )
    rows.append(
        [
            "slope: DiD per unit of supervised fraction (Goldfish at 0 and its positive controls)",
            *_over_runs(acc["slope"], "pct"),
            *_over_runs(loss["slope"]),
            fmt(acc["slope"]["n"]),
        ]
    )
    rows.append(
        [
            "minimum detectable Goldfish - twin (5 % two-sided, 80 % power, t over runs)",
            fmt(acc["difference_mde"], "pct"),
            "",
            fmt(loss["difference_mde"]),
            "",
            "",
        ]
    )
    rows.append(
        [
            "minimum detectable leak, as a supervised fraction of the dropped positions",
            fmt(acc["detectable_fraction"], "pct"),
            "",
            fmt(loss["detectable_fraction"], "pct"),
            "",
            "",
        ]
    )
    return rows


def _reading_line(family: dict, measure: str) -> str:
    """One sentence: what Goldfish - twin shows across runs, its verdict word by the rule, and the sensitivity read
    against the same null (the twin), with the range of the MDE itself (an SD from few runs)."""
    m = family[measure]
    kind = "pct" if measure == "accuracy" else ""
    d = m["difference"]
    if m["reading"] is None:
        return f"{measure}: fewer than two runs with both the Goldfish arm and its twin audited: no reading."
    found = (
        f"{measure}: Goldfish - twin {with_ci(d['mean'], d['ci_low'], d['ci_high'], kind)} over {d['n']} runs: "
        f"**{m['reading']}**"
    )
    rng = mde_range(d.get("se"), d.get("df"))
    mde = (
        f"its minimum detectable effect (5 % two-sided, 80 % power) is {fmt(m['difference_mde'], kind)}, 95 % "
        f"range {fmt(rng[0], kind)} to {fmt(rng[1], kind)} (the SD from {d.get('df')} df)"
        if rng
        else "no minimum detectable effect (fewer than two runs)"
    )
    if m["detectable_fraction"] is None:
        return found + f"; {mde}; the positive controls give no slope in the leak's direction."
    return (
        found + f"; {mde}, which the slope of the positive controls' DiD on their supervised fraction "
        f"({fmt(m['slope']['mean'], kind)} per unit) turns into {fmt(m['detectable_fraction'], 'pct')} of the "
        "dropped positions -- a plug-in estimate, as uncertain as the MDE; each positive control read against "
        "the same twin is in the Readings section."
    )


def calibration_lines(results: dict) -> list[str]:
    """The audit calibrated on members (``leakage_calibration``): per run and across runs; empty where none."""
    lines = []
    for family in results.get("leakage_calibration") or []:
        positive = [
            f"{p} (set {fmt(f, 'pct')}): trained on: DiD accuracy / loss" for p, f in family["positive"].items()
        ]
        lines += [
            f"### Calibrated on members: {family['goldfish']}, its no-leak twin and low-supervision positive controls",
            "",
            markdown_table(
                [
                    "run",
                    "Goldfish DiD accuracy / loss",
                    "twin DiD accuracy / loss",
                    "Goldfish - twin accuracy / loss",
                    *positive,
                ],
                _run_rows(family),
            ),
            "",
            markdown_table(
                [
                    "across runs",
                    "accuracy: mean [95 % t interval]",
                    "SD between runs",
                    "loss: mean [95 % t interval]",
                    "SD between runs",
                    "runs",
                ],
                _across_rows(family),
            ),
            "",
            *(f"Reading, {_reading_line(family, m)}" for m in MEASURES),
            "",
            "The training run (grid point) is the unit: each value is one DiD per run (the audit above, on "
            f"the dropped positions of {family['goldfish']}'s mask), with its mean, Student t interval and SD "
            "over runs. The no-leak twin trains like the Goldfish arm with the dropped tokens also replaced "
            "in its input by pseudo-random ids: it has seen none of them, so its DiD is the audit's null "
            "measured on members, and Goldfish - twin (paired by run) is the leak calibrated on members. "
            "A positive control trains on a known share of the dropped positions; the slope of DiD on that "
            "share (each run's line through the Goldfish arm at 0 and its positive controls) turns the "
            "minimum detectable Goldfish - twin into the smallest supervised fraction the design detects. "
            "Read the twin's kept-position DiD (the audit table above) beside the Goldfish arm's: the twin's "
            "input differs from the text at the dropped positions, so it may learn the members' kept tokens "
            "less as well, and Goldfish - twin then mixes a leak with that difference.",
            "",
        ]
    return lines


def render(results: dict) -> str:
    lines = leakage_lines(results)
    return "\n".join(lines + calibration_lines(results) if lines else lines)
