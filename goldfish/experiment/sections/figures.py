"""The study's plots, drawn when the results are computed (``goldfish.experiment.plots`` adapts the cells to
``goldfish.eval.plots``' primitives) and listed in the report: bars per cell with their 95 % intervals, ROC per cell,
the training loss on kept vs dropped tokens, memorisation vs model size / repetitions / prefix length where the grid
varies them (intervals over documents), E50 (the joint model's, with its band) and canary exposure of a size sweep.
Their file names go into ``results.json`` (``plots``), so the report lists them from the results alone."""

from __future__ import annotations

from pathlib import Path

from goldfish.eval.metrics import METRICS, ROUGE
from goldfish.eval.tables import markdown_section

from ...io import read_json, read_jsonl
from ..grid import CONTROL
from ..plots import bar_chart, loss_curves, metric_vs_x, roc_curves, threshold_plots
from ..summary import CellSummary, Study, one_per_arm

LABEL = {m.summary_key: m.label for m in METRICS.values()}  # a summary column -> its words in a plot


def mia_attack_name(cells: list[CellSummary]) -> str:
    """The headline attack of these cells for a title: its name, or the names joined when cells differ (e.g. a grid
    mixing fine-tunes and from-scratch cells under ``mia_attack: auto``)."""
    return " / ".join(dict.fromkeys(str(c.mia_attack) for c in cells))


def self_referenced(cell: CellSummary) -> bool:
    """The control scored by a reference attack: its reference is itself, so every score is 0 and its AUC 0.500 by
    construction (goldfish.experiment.analyses.attacks), not a measurement."""
    return cell.arm == CONTROL and str(cell.mia_attack) in ("reference", "kept_reference")


def draw(study: Study, out: Path) -> list[Path]:
    """Every plot the grid supports, drawn into ``out``."""
    cells, axes = study.cells, study.axes
    one = one_per_arm(cells)
    label = {c.cell: c.label(axes, one) for c in cells}
    paths: list[Path | None] = []
    if len(cells) <= 16:
        names = {m.summary_key: m.name for m in METRICS.values()}
        for name in ("exact_match", *(names[key] for key in ROUGE)):  # the paper's ROUGE-L first
            m = METRICS[name].summary_key
            ci = {label[c.cell]: ((c.extraction_ci or {}).get(name) or {}) for c in cells}
            paths.append(
                bar_chart(
                    {label[c.cell]: getattr(c, m) for c in cells},
                    LABEL[m] + " per arm (95 % CI)",
                    LABEL[m],
                    out / f"{m}_by_arm.png",
                    errors={k: (v.get("ci_low"), v.get("ci_high")) for k, v in ci.items()},
                )
            )
        attack = mia_attack_name(cells)
        paths.append(
            bar_chart(
                {label[c.cell]: c.mia_auc for c in cells},
                f"membership inference AUC ({attack} attack, 95 % CI)",
                "ROC-AUC (0.5 = chance)",
                out / "mia_auc_by_arm.png",
                errors={label[c.cell]: (c.mia_auc_ci_low, c.mia_auc_ci_high) for c in cells},
                by_construction=tuple(label[c.cell] for c in cells if self_referenced(c)),
            )
        )
        paths.append(
            bar_chart(
                {label[c.cell]: c.heldout_loss for c in cells},
                "held-out (nonmember) loss per arm (95 % CI)",
                "mean NLL (nats/token)",
                out / "heldout_loss_by_arm.png",
                errors={label[c.cell]: tuple(c.heldout_loss_ci or (None, None)) for c in cells},
            )
        )
        roc = {label[c.cell]: c.mia_roc for c in cells if c.mia_roc}
        if roc:
            paths.append(roc_curves(roc, attack, out / "roc_by_arm.png"))
        curves = {
            label[c.cell]: read_jsonl(p.metrics_file) for p, c in zip(study.done, cells) if p.metrics_file.is_file()
        }  # not an untrained control
        paths.append(loss_curves(curves, out / "loss_curves.png"))
    windows = [
        [w for w in read_json(p.results_file).get("windows") or [] if w.get("split") in (None, "members")]
        if p.results_file.is_file()
        else []
        for p in study.done
    ]
    for m in dict.fromkeys((study.cfg.headline_metric, *ROUGE)):  # exact match is all-or-nothing; ROUGE-L: partial
        paths += metric_vs_x(cells, windows, m, LABEL[m], out)
    paths += threshold_plots(study.results, out)
    return [p for p in paths if p is not None]


def compute(study: Study) -> dict:
    return {"plots": [p.name for p in draw(study, Path(study.cfg.out_dir))]}


def render(results: dict) -> str:
    plots = results.get("plots") or []
    if not plots:
        return ""
    return markdown_section("Plots", "\n".join(f"![{Path(p).stem}]({p})" for p in plots))
